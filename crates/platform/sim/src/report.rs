//! The result of one simulation run: what `tiercache sim` prints and its
//! `--json` object. Field names are a contract with users' scripts.

use serde::Serialize;
use std::fmt;
use tiercache_azor_policy::Engine;

/// Response-time results of a timed replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Latency {
    pub requests: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// Simulated time from the first arrival to the last completion.
    pub elapsed_s: f64,
    pub hdd_utilization: f64,
    pub ssd_utilization: f64,
}

/// The HDD-only replay of the same trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Baseline {
    pub mean_response_us: f64,
    pub p50_response_us: f64,
    pub p99_response_us: f64,
    pub hdd_utilization: f64,
}

/// One configuration's results.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// The configuration, echoed so that a row of a sweep stands alone.
    pub cache_size_bytes: u64,
    pub cache_lines: u64,
    pub line_size: u32,
    pub sub_block_size: u32,
    pub assoc: String,
    pub eviction: String,
    pub write_policy: String,
    pub write_allocate: bool,
    pub admission: String,
    pub requests: u64,
    pub block_accesses: u64,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    pub read_hit_ratio: f64,
    pub write_hit_ratio: f64,
    pub metadata_hit_ratio: Option<f64>,
    pub fills: u64,
    pub evictions: u64,
    pub dirty_evictions: u64,
    pub writebacks: u64,
    pub admission_rejects: u64,
    pub hdd_ops: u64,
    /// Cache-device reads and writes in 512-byte blocks.
    pub ssd_reads: u64,
    pub ssd_writes: u64,
    pub ssd_read_ops: u64,
    pub ssd_write_ops: u64,
    pub hdd_read_bytes: u64,
    pub hdd_write_bytes: u64,
    /// Cache write amplification (TICA eq. 1): bytes written to the cache per byte the workload wrote.
    pub cwaf: f64,
    pub dirty_lines: u64,
    pub mean_response_us: Option<f64>,
    pub p50_response_us: Option<f64>,
    pub p99_response_us: Option<f64>,
    pub hdd_utilization: Option<f64>,
    pub ssd_utilization: Option<f64>,
    /// Line table and replacement metadata per GiB of cache (Azor's measure).
    pub metadata_bytes_per_gib: f64,
    /// All core metadata including admission state, in bytes.
    pub metadata_bytes: u64,
    pub baseline: Option<Baseline>,
    /// Baseline mean response time over the cached one.
    pub speedup: Option<f64>,
}

impl SimReport {
    /// Collect the results of a finished run.
    pub fn from_engine(e: &Engine, timed: Option<Latency>, base: Option<Latency>) -> Self {
        let s = e.stats();
        let c = e.config();
        let g = e.geometry();
        let baseline = base.map(|b| Baseline {
            mean_response_us: b.mean_us,
            p50_response_us: b.p50_us,
            p99_response_us: b.p99_us,
            hdd_utilization: b.hdd_utilization,
        });
        let speedup = match (&timed, &baseline) {
            (Some(t), Some(b)) if t.mean_us > 0.0 => Some(b.mean_response_us / t.mean_us),
            _ => None,
        };
        SimReport {
            cache_size_bytes: g.slots as u64 * g.line_bytes as u64,
            cache_lines: g.slots as u64,
            line_size: g.line_bytes,
            sub_block_size: g.sub_block_bytes,
            assoc: c.assoc.to_string(),
            eviction: c.eviction.to_string(),
            write_policy: c.write_policy.to_string(),
            write_allocate: c.write_allocate,
            admission: c.admission.kind.to_string(),
            requests: s.requests,
            block_accesses: s.block_accesses,
            hits: s.hits,
            misses: s.misses(),
            hit_ratio: s.hit_ratio(),
            read_hit_ratio: s.read_hit_ratio(),
            write_hit_ratio: s.write_hit_ratio(),
            metadata_hit_ratio: (s.metadata_accesses > 0)
                .then(|| s.metadata_hits as f64 / s.metadata_accesses as f64),
            fills: s.fills,
            evictions: s.evictions,
            dirty_evictions: s.dirty_evictions,
            writebacks: s.writebacks,
            admission_rejects: s.admission_rejects,
            hdd_ops: s.hdd_ops,
            ssd_reads: s.ssd_read_bytes / 512,
            ssd_writes: s.ssd_write_bytes / 512,
            ssd_read_ops: s.ssd_read_ops,
            ssd_write_ops: s.ssd_write_ops,
            hdd_read_bytes: s.hdd_read_bytes,
            hdd_write_bytes: s.hdd_write_bytes,
            cwaf: s.cwaf(),
            dirty_lines: e.dirty_lines() as u64,
            mean_response_us: timed.as_ref().map(|t| t.mean_us),
            p50_response_us: timed.as_ref().map(|t| t.p50_us),
            p99_response_us: timed.as_ref().map(|t| t.p99_us),
            hdd_utilization: timed.as_ref().map(|t| t.hdd_utilization),
            ssd_utilization: timed.as_ref().map(|t| t.ssd_utilization),
            metadata_bytes_per_gib: e.metadata_bytes_per_gib(),
            metadata_bytes: e.metadata_bytes() as u64,
            baseline,
            speedup,
        }
    }
}

fn pct(v: f64) -> String {
    format!("{:.2} %", v * 100.0)
}

fn us(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 10_000.0 => format!("{:.1} ms", v / 1000.0),
        Some(v) => format!("{v:.1} µs"),
    }
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self;
        writeln!(
            f,
            "cache {} ({} lines of {} B), {}, {}, {}, admission {}",
            crate::units::format_bytes(r.cache_size_bytes),
            r.cache_lines,
            r.line_size,
            r.assoc,
            r.eviction,
            r.write_policy,
            r.admission
        )?;
        writeln!(f, "  requests           {:>14}", r.requests)?;
        writeln!(
            f,
            "  block accesses     {:>14}   hits {} / misses {}",
            r.block_accesses, r.hits, r.misses
        )?;
        writeln!(
            f,
            "  hit ratio          {:>14}   read {} / write {}",
            pct(r.hit_ratio),
            pct(r.read_hit_ratio),
            pct(r.write_hit_ratio)
        )?;
        if let Some(m) = r.metadata_hit_ratio {
            writeln!(f, "  metadata hit ratio {:>14}", pct(m))?;
        }
        writeln!(
            f,
            "  fills {} / evictions {} / writebacks {} / admission rejects {}",
            r.fills, r.evictions, r.writebacks, r.admission_rejects
        )?;
        writeln!(
            f,
            "  HDD ops {} / SSD reads {} / SSD writes {} (512 B blocks) / CWAF {:.3}",
            r.hdd_ops, r.ssd_reads, r.ssd_writes, r.cwaf
        )?;
        if r.mean_response_us.is_some() {
            writeln!(
                f,
                "  response time      mean {} / p50 {} / p99 {}   HDD utilization {}",
                us(r.mean_response_us),
                us(r.p50_response_us),
                us(r.p99_response_us),
                pct(r.hdd_utilization.unwrap_or(0.0))
            )?;
        }
        if let (Some(b), Some(s)) = (&r.baseline, r.speedup) {
            writeln!(
                f,
                "  HDD only           mean {} / p99 {}   speedup {:.2}x",
                us(Some(b.mean_response_us)),
                us(Some(b.p99_response_us)),
                s
            )?;
        }
        write!(
            f,
            "  metadata           {:.2} MB per GiB of cache",
            r.metadata_bytes_per_gib / 1e6
        )
    }
}
