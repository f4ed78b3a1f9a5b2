//! The log-structured cache as a design of the live runtime: a
//! [`SyncStore`] served on request threads (the store does synchronous
//! device I/O under its lock).

use std::path::PathBuf;

use serde_json::Value;
use tiercache_runtime::{Error, OnBlockingPool, Result, SyncStore};

use crate::cache::{CacheError, LogCache};

/// A [`LogCache`] as the runtime serves it (`LogStructured::new(cache)`).
pub type LogStructured = OnBlockingPool<LogCache>;

fn conv(e: CacheError) -> Error {
    Error::io(e.0)
}

impl SyncStore for LogCache {
    fn name(&self) -> &'static str {
        "flashtier"
    }
    fn description(&self) -> String {
        format!("tiercache: log-structured {} cache", self.write_policy())
    }
    fn size(&self) -> u64 {
        LogCache::size(self)
    }
    fn backing_path(&self) -> PathBuf {
        LogCache::backing_path(self).to_path_buf()
    }
    fn unit(&self) -> &'static str {
        "blocks"
    }
    fn can_prefetch(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        LogCache::read(self, offset, len).map_err(conv)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        LogCache::write(self, offset, data, fua).map_err(conv)
    }
    fn read_inline(&self, offset: u64, buf: &mut [u8]) -> Option<Result<()>> {
        self.read_fast(offset, buf).then_some(Ok(()))
    }
    fn write_inline(&self, offset: u64, data: &[u8], fua: bool) -> Option<Result<()>> {
        self.write_fast(offset, data, fua).map(|r| r.map_err(conv))
    }
    fn batches_writes(&self) -> bool {
        self.takes_write_batches()
    }
    fn write_batch_inline(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        self.write_batch_fast(writes)
            .map(|rs| rs.into_iter().map(|r| r.map_err(conv)).collect())
    }
    fn flush(&self) -> Result<()> {
        LogCache::flush(self).map_err(conv)
    }
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        LogCache::trim(self, offset, len).map_err(conv)
    }
    fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        LogCache::prefetch(self, offset, len).map_err(conv)
    }
    fn stats(&self) -> Value {
        self.stats_json()
    }
    fn metrics(&self, stats: &Value, m: &mut tiercache_runtime::MetricSet) {
        metrics(stats, m)
    }
    fn dirty(&self) -> u64 {
        self.stats_json()["dirty_blocks"].as_u64().unwrap_or(0)
    }
    fn write_back_all(&self) -> Result<u64> {
        LogCache::write_back_all(self).map_err(conv)
    }
    fn close(&self, detach: bool) -> Result<()> {
        self.shutdown(detach).map_err(conv)
    }
}

/// `/metrics` of the log-structured cache, mapped from its `stats` JSON:
/// `hits_total{op}`/`misses_total{op}` from `read_hits`..`write_misses`
/// (requests are not classified), `dirty_lines` from `dirty_blocks`,
/// `bypasses_total{reason="no-room-or-degraded"}` from `bypassed_blocks`,
/// `silent_evictions_total` and `evictions_total{victim="clean"}` from
/// `cleaning.silent_evictions`, `cleaned_lines_total{path}` from
/// `cleaning.cleaning_written_back` (segment cleaning) and the rest of
/// `cleaning.written_back` (write-back), `device_errors_total{device}` from
/// `errors`. The unit is the 4 KiB block.
fn metrics(s: &Value, m: &mut tiercache_runtime::MetricSet) {
    let n = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    for (op, h, mi) in [
        ("read", "/read_hits", "/read_misses"),
        ("write", "/write_hits", "/write_misses"),
    ] {
        m.counter(
            "hits",
            "Block accesses served from the cache, by operation.",
            &[("op", op)],
            n(h),
        );
        m.counter(
            "misses",
            "Block accesses that needed the backing device, by operation.",
            &[("op", op)],
            n(mi),
        );
    }
    m.gauge_at(
        "dirty_lines",
        "Cached 4 KiB blocks the backing device lacks.",
        &[],
        s,
        "/dirty_blocks",
    );
    m.gauge_at(
        "occupied_lines",
        "Cached 4 KiB blocks.",
        &[],
        s,
        "/mapped_blocks",
    );
    m.gauge_at(
        "slots",
        "4 KiB blocks the cache can hold.",
        &[],
        s,
        "/slots",
    );
    m.counter(
        "bypasses",
        "Blocks written around the cache, by reason.",
        &[("reason", "no-room-or-degraded")],
        n("/bypassed_blocks"),
    );
    cleaning_metrics(s, m);
    let help = "Device I/O errors, by device.";
    m.counter(
        "device_errors",
        help,
        &[("device", "cache")],
        n("/errors/cache"),
    );
    m.counter(
        "device_errors",
        help,
        &[("device", "backing")],
        n("/errors/backing"),
    );
    m.gauge(
        "degraded",
        "1 when the cache stopped caching new data after device errors.",
        &[],
        (s["status"] == "degraded") as u8 as f64,
    );
}

/// The cleaning part of [`metrics`]: silent evictions, moved dirty blocks,
/// blocks written back by path.
fn cleaning_metrics(s: &Value, m: &mut tiercache_runtime::MetricSet) {
    let n = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let silent = n("/cleaning/silent_evictions");
    m.counter(
        "silent_evictions",
        "Clean blocks dropped by segment cleaning (the backing device has them).",
        &[],
        silent,
    );
    m.counter(
        "evictions",
        "Blocks evicted, by the victim's state.",
        &[("victim", "clean")],
        silent,
    );
    m.counter_at(
        "moved_dirty_blocks",
        "Dirty blocks segment cleaning moved to a new segment.",
        &[],
        s,
        "/cleaning/moved_dirty_blocks",
    );
    m.counter_at(
        "segments_cleaned",
        "Segments reclaimed by cleaning.",
        &[],
        s,
        "/cleaning/segments_cleaned",
    );
    let (seg, all) = (
        n("/cleaning/cleaning_written_back"),
        n("/cleaning/written_back"),
    );
    let help = "Dirty blocks written back, by path: segment-cleaning, or write-back (dirty target, flush, detach).";
    m.counter("cleaned_lines", help, &[("path", "segment-cleaning")], seg);
    m.counter(
        "cleaned_lines",
        help,
        &[("path", "write-back")],
        all.saturating_sub(seg),
    );
}
