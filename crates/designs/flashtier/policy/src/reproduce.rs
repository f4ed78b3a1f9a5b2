//! FlashTier's Table VI (memory) and Table VII (wear, write amplification,
//! miss rate) comparisons of SSD, SSC and SSC-V on a workload.
//!
//! Method as in Section 7.6: the cache holds 25 % of the workload's unique
//! blocks, the first 15 % of requests warm it, Table VII runs write-through
//! caching with logging and checkpoints off; Table VI runs write-back caching
//! with a 20 % dirty threshold and persistence on.

use crate::device::{DeviceConfig, DeviceKind, FtlKind};
use crate::manager::ManagerKind;
use crate::sim::{run, FlashReport, FlashSimConfig};
use crate::workload::{zipf_overwrites, ZipfParams};
use crate::FlashError;
use rustc_hash::FxHashSet;
use std::fmt::Write as _;
use tiercache_trace::Record;

/// Records of a workload, errors as text.
pub type RecordIter = Box<dyn Iterator<Item = Result<Record, String>>>;
type Opener = Box<dyn Fn() -> Result<RecordIter, String> + Sync>;

/// A replayable workload with its size.
pub struct Workload {
    pub name: String,
    open: Opener,
    /// Requests in the workload.
    pub requests: u64,
    /// Unique 4-KiB blocks touched.
    pub footprint_blocks: u64,
}

impl Workload {
    /// A workload read through `open` (called once here to measure it, then
    /// once per run).
    pub fn new(
        name: &str,
        open: impl Fn() -> Result<RecordIter, String> + Sync + 'static,
    ) -> Result<Self, FlashError> {
        let mut seen = FxHashSet::default();
        let mut requests = 0;
        for r in open().map_err(FlashError::Trace)? {
            let r = r.map_err(FlashError::Trace)?;
            requests += 1;
            seen.extend(r.blocks(4096));
        }
        Ok(Workload {
            name: name.to_string(),
            open: Box::new(open),
            requests,
            footprint_blocks: seen.len() as u64,
        })
    }

    /// The synthetic zipfian overwrite workload.
    pub fn zipf(p: ZipfParams) -> Result<Self, FlashError> {
        let name = format!("zipf-{}", p.theta);
        Workload::new(&name, move || {
            Ok(Box::new(zipf_overwrites(&p).map(Ok)) as RecordIter)
        })
    }

    /// Flash capacity for caching `share` of the footprint.
    pub fn capacity_for(&self, share: f64) -> u64 {
        ((self.footprint_blocks as f64 * share).ceil() as u64).max(1) * 4096
    }
}

/// One simulated configuration of a comparison.
pub fn simulate(
    w: &Workload,
    kind: DeviceKind,
    ftl: FtlKind,
    manager: ManagerKind,
    capacity: u64,
    persistence: bool,
) -> Result<FlashReport, FlashError> {
    let mut d = DeviceConfig::new(kind, capacity)?;
    d.ftl = ftl;
    d.persistence = persistence;
    let cfg = FlashSimConfig {
        device: d,
        manager,
        dirty_target: 0.2,
        warmup_requests: w.requests * 15 / 100,
    };
    run((w.open)().map_err(FlashError::Trace)?, &cfg)
}

/// Table VII rows for one workload and layer: ssd, ssc, ssc-v.
pub fn table_vii(w: &Workload, ftl: FtlKind, share: f64) -> Result<Vec<FlashReport>, FlashError> {
    let cap = w.capacity_for(share);
    [DeviceKind::Ssd, DeviceKind::Ssc, DeviceKind::SscV]
        .into_iter()
        .map(|k| simulate(w, k, ftl, ManagerKind::WriteThrough, cap, false))
        .collect()
}

/// Table VI rows for one workload: ssd (native manager), ssc, ssc-v
/// (FlashTier write-back manager), hybrid layer.
pub fn table_vi(w: &Workload, share: f64) -> Result<Vec<FlashReport>, FlashError> {
    let cap = w.capacity_for(share);
    [DeviceKind::Ssd, DeviceKind::Ssc, DeviceKind::SscV]
        .into_iter()
        .map(|k| simulate(w, k, FtlKind::Hybrid, ManagerKind::WriteBack, cap, true))
        .collect()
}

/// Text table of Table VII rows `(workload, report)`.
pub fn format_vii(rows: &[(String, FlashReport)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:<8} {:<6} {:>10} {:>10} {:>8} {:>9} {:>8} {:>10} {:>10}",
        "workload",
        "ftl",
        "device",
        "cache MiB",
        "erases",
        "wear",
        "write amp",
        "miss %",
        "copies",
        "silent ev"
    );
    for (w, r) in rows {
        let _ = writeln!(
            s,
            "{:<14} {:<8} {:<6} {:>10.1} {:>10} {:>8} {:>9.3} {:>8.2} {:>10} {:>10}",
            w,
            r.ftl_kind,
            r.mode,
            r.capacity_bytes as f64 / (1 << 20) as f64,
            r.ftl.erases,
            r.ftl.max_wear_difference,
            r.ftl.write_amplification,
            r.miss_rate * 100.0,
            r.ftl.gc_page_copies,
            r.ftl.silent_evictions
        );
    }
    s
}

/// Text table of Table VI rows `(workload, report)`.
pub fn format_vi(rows: &[(String, FlashReport)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:<6} {:>10} {:>12} {:>9} {:>12} {:>9} {:>10} {:>10} {:>11}",
        "workload",
        "device",
        "cache MiB",
        "device B",
        "dev B/blk",
        "host B",
        "host B/blk",
        "sparse B/b",
        "dense B/b",
        "recover ms"
    );
    for (w, r) in rows {
        let _ = writeln!(
            s,
            "{:<14} {:<6} {:>10.1} {:>12} {:>9.2} {:>12} {:>9.2} {:>10.2} {:>10.2} {:>11}",
            w,
            r.mode,
            r.capacity_bytes as f64 / (1 << 20) as f64,
            r.device_memory_bytes,
            r.device_bytes_per_block,
            r.host_memory_bytes,
            r.host_bytes_per_block,
            r.map_comparison.sparse_bytes_per_block,
            r.map_comparison.dense_disk_range_bytes_per_block,
            r.persistence
                .as_ref()
                .map_or("-".to_string(), |p| format!("{:.1}", p.recovery_ms))
        );
    }
    s
}

/// CSV of rows `(workload, report)` with the fields of both tables.
pub fn csv(rows: &[(String, FlashReport)]) -> String {
    let mut s = String::from(
        "workload,ftl,device,write_policy,capacity_bytes,requests,block_accesses,miss_rate,erases,max_wear_difference,write_amplification,write_amplification_with_metadata,gc_page_copies,silent_evictions,full_merges,partial_merges,switch_merges,gc_time_s,device_memory_bytes,host_memory_bytes,device_bytes_per_block,host_bytes_per_block,sparse_bytes_per_block,dense_disk_range_bytes_per_block,metadata_page_writes,recovery_ms\n",
    );
    for (w, r) in rows {
        let _ = writeln!(
            s,
            "{w},{},{},{},{},{},{},{:.6},{},{},{:.4},{:.4},{},{},{},{},{},{:.3},{},{},{:.3},{:.3},{:.3},{:.3},{},{}",
            r.ftl_kind,
            r.mode,
            r.write_policy,
            r.capacity_bytes,
            r.requests,
            r.block_accesses,
            r.miss_rate,
            r.ftl.erases,
            r.ftl.max_wear_difference,
            r.ftl.write_amplification,
            r.ftl.write_amplification_with_metadata,
            r.ftl.gc_page_copies,
            r.ftl.silent_evictions,
            r.ftl.full_merges,
            r.ftl.partial_merges,
            r.ftl.switch_merges,
            r.ftl.gc_time_s,
            r.device_memory_bytes,
            r.host_memory_bytes,
            r.device_bytes_per_block,
            r.host_bytes_per_block,
            r.map_comparison.sparse_bytes_per_block,
            r.map_comparison.dense_disk_range_bytes_per_block,
            r.ftl.metadata_page_writes,
            r.persistence
                .as_ref()
                .map_or(String::new(), |p| format!("{:.3}", p.recovery_ms))
        );
    }
    s
}
