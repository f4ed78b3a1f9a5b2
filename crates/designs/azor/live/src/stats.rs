//! Live counters: requests, device latencies, errors, cleaning and commits.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tiercache_azor_policy::{Dev, IoKind};

/// Counters updated by the live cache, read by `tiercache stats`.
pub struct LiveStats {
    started: Instant,
    pub(crate) recovery: Duration,
    reads: AtomicU64,
    writes: AtomicU64,
    trims: AtomicU64,
    flushes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    pub(crate) cache_errors: AtomicU64,
    pub(crate) backing_errors: AtomicU64,
    /// Failed reads and writes of the cache device and the backing device
    /// (`device_errors` in `stats`), counted per device op where its result
    /// comes back, whatever engine ran it.
    pub(crate) device_errors: tiercache_io::DeviceErrors,
    cache_io_errors: std::sync::Arc<tiercache_io::IoErrors>,
    backing_io_errors: std::sync::Arc<tiercache_io::IoErrors>,
    pub(crate) cleaned_lines: AtomicU64,
    /// Lines cleaned by requests under eviction pressure (part of `cleaned_lines`).
    pub(crate) pressure_cleaned_lines: AtomicU64,
    /// Lines cleaned at full speed because no request came for a tick (part of `cleaned_lines`).
    pub(crate) idle_cleaned_lines: AtomicU64,
    /// Lines cleaned at full speed by `flush`, `detach` and `set` (part of `cleaned_lines`).
    pub(crate) forced_cleaned_lines: AtomicU64,
    /// The cleaning controller's current rate, lines/s (`f64` bits).
    pub(crate) cleaning_target_rate: AtomicU64,
    pub(crate) checkpoints: AtomicU64,
    /// Lines whose valid clean sub-blocks recovery made dirty after an
    /// unclean shutdown (write-back: clean bits are not trusted then).
    pub(crate) recovery_dirtied_lines: AtomicU64,
    commits: AtomicU64,
    committed_records: AtomicU64,
    cache_lat: Mutex<Histogram<u64>>,
    backing_lat: Mutex<Histogram<u64>>,
    commit_lat: Mutex<Histogram<u64>>,
}

/// Latency percentiles of one device, in µs.
#[derive(Serialize, Debug, Clone)]
pub struct LatencySummary {
    pub ops: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

fn summary(h: &Histogram<u64>) -> LatencySummary {
    LatencySummary {
        ops: h.len(),
        p50_us: h.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: h.value_at_quantile(0.99) as f64 / 1000.0,
        max_us: h.max() as f64 / 1000.0,
    }
}

/// An HDR histogram of nanoseconds as Prometheus buckets in seconds.
fn hist_seconds(h: &Histogram<u64>) -> tiercache_runtime::HistogramData {
    let n = h.len();
    let sum = if n == 0 {
        0.0
    } else {
        h.mean() * n as f64 / 1e9
    };
    tiercache_runtime::HistogramData::from_cumulative(sum, n, |le| {
        h.count_between(0, (le * 1e9) as u64)
    })
}

/// A point-in-time copy of the live counters.
#[derive(Serialize, Debug, Clone)]
pub struct LiveSnapshot {
    pub uptime_s: f64,
    pub recovery_ms: f64,
    pub recovery_dirtied_lines: u64,
    pub reads: u64,
    pub writes: u64,
    pub trims: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub cache_errors: u64,
    pub backing_errors: u64,
    pub cleaned_lines: u64,
    pub cleaning_rate_lines_per_s: f64,
    /// Lines cleaned by requests after dirty evictions (part of `cleaned_lines`).
    pub pressure_cleaned_lines: u64,
    /// Lines cleaned at full speed while no request came (part of `cleaned_lines`);
    /// the rest was paced by the rate controller.
    pub idle_cleaned_lines: u64,
    /// Lines cleaned at full speed by `flush`, `detach` and `set` (part of `cleaned_lines`).
    pub forced_cleaned_lines: u64,
    /// The rate the write-back cleaning controller asks for now (0 at or
    /// below the dirty target), lines/s.
    pub cleaning_target_rate_lines_per_s: f64,
    pub commits: u64,
    pub committed_records: u64,
    pub checkpoints: u64,
    pub cache_latency: LatencySummary,
    pub backing_latency: LatencySummary,
    pub commit_latency: LatencySummary,
}

impl LiveStats {
    /// Count a failed op on `dev` in `device_errors` (a read, or a write,
    /// trim or flush).
    pub(crate) fn device_error(&self, dev: Dev, kind: IoKind) {
        let e = match dev {
            Dev::Cache => &self.cache_io_errors,
            Dev::Backing => &self.backing_io_errors,
        };
        e.record(kind != IoKind::Read);
    }

    pub fn new(recovery: Duration) -> Self {
        let h = || Mutex::new(Histogram::new(3).expect("histogram"));
        let (cache_io_errors, backing_io_errors) = <(
            std::sync::Arc<tiercache_io::IoErrors>,
            std::sync::Arc<tiercache_io::IoErrors>,
        )>::default();
        let mut device_errors = tiercache_io::DeviceErrors::new();
        device_errors.add("cache", std::sync::Arc::clone(&cache_io_errors));
        device_errors.add("backing", std::sync::Arc::clone(&backing_io_errors));
        LiveStats {
            device_errors,
            cache_io_errors,
            backing_io_errors,
            started: Instant::now(),
            recovery,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            trims: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            cache_errors: AtomicU64::new(0),
            backing_errors: AtomicU64::new(0),
            cleaned_lines: AtomicU64::new(0),
            cleaning_target_rate: AtomicU64::new(0f64.to_bits()),
            pressure_cleaned_lines: AtomicU64::new(0),
            idle_cleaned_lines: AtomicU64::new(0),
            forced_cleaned_lines: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            recovery_dirtied_lines: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            committed_records: AtomicU64::new(0),
            cache_lat: h(),
            backing_lat: h(),
            commit_lat: h(),
        }
    }

    pub(crate) fn count_request(&self, kind: IoKind, len: u64) {
        match kind {
            IoKind::Read => {
                self.reads.fetch_add(1, Ordering::Relaxed);
                self.bytes_read.fetch_add(len, Ordering::Relaxed);
            }
            IoKind::Write => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                self.bytes_written.fetch_add(len, Ordering::Relaxed);
            }
            IoKind::Trim => {
                self.trims.fetch_add(1, Ordering::Relaxed);
            }
            IoKind::Flush => {
                self.flushes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn record_op(&self, dev: Dev, d: Duration) {
        let h = match dev {
            Dev::Cache => &self.cache_lat,
            Dev::Backing => &self.backing_lat,
        };
        let _ = h
            .lock()
            .expect("histogram")
            .record((d.as_nanos() as u64).max(1));
    }

    pub(crate) fn record_commit(&self, records: usize, d: Duration) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.committed_records
            .fetch_add(records as u64, Ordering::Relaxed);
        let _ = self
            .commit_lat
            .lock()
            .expect("histogram")
            .record((d.as_nanos() as u64).max(1));
    }

    /// The latency histogram of `dev` for `/metrics`, in seconds.
    pub fn device_histogram(&self, dev: Dev) -> tiercache_runtime::HistogramData {
        let h = match dev {
            Dev::Cache => &self.cache_lat,
            Dev::Backing => &self.backing_lat,
        };
        hist_seconds(&h.lock().expect("histogram"))
    }

    /// The metadata commit latency histogram for `/metrics`, in seconds.
    pub fn commit_histogram(&self) -> tiercache_runtime::HistogramData {
        hist_seconds(&self.commit_lat.lock().expect("histogram"))
    }

    pub fn snapshot(&self) -> LiveSnapshot {
        let up = self.started.elapsed().as_secs_f64();
        let cleaned = self.cleaned_lines.load(Ordering::Relaxed);
        LiveSnapshot {
            uptime_s: up,
            recovery_ms: self.recovery.as_secs_f64() * 1000.0,
            recovery_dirtied_lines: self.recovery_dirtied_lines.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            trims: self.trims.load(Ordering::Relaxed),
            flushes: self.flushes.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            cache_errors: self.cache_errors.load(Ordering::Relaxed),
            backing_errors: self.backing_errors.load(Ordering::Relaxed),
            cleaned_lines: cleaned,
            cleaning_rate_lines_per_s: if up > 0.0 { cleaned as f64 / up } else { 0.0 },
            pressure_cleaned_lines: self.pressure_cleaned_lines.load(Ordering::Relaxed),
            idle_cleaned_lines: self.idle_cleaned_lines.load(Ordering::Relaxed),
            forced_cleaned_lines: self.forced_cleaned_lines.load(Ordering::Relaxed),
            cleaning_target_rate_lines_per_s: f64::from_bits(
                self.cleaning_target_rate.load(Ordering::Relaxed),
            ),
            commits: self.commits.load(Ordering::Relaxed),
            committed_records: self.committed_records.load(Ordering::Relaxed),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            cache_latency: summary(&self.cache_lat.lock().expect("histogram")),
            backing_latency: summary(&self.backing_lat.lock().expect("histogram")),
            commit_latency: summary(&self.commit_lat.lock().expect("histogram")),
        }
    }
}
