//! Replay a trace through a cache manager over a flash device and report hit
//! rates, flash traffic, wear and memory.

pub use crate::device::FtlKind;
use crate::device::{Device, DeviceConfig, PersistStats};
use crate::flash::{EraseSnapshot, FlashStats};
use crate::ftl::hybrid::sparsehash::{DenseMap, SparseHash};
use crate::ftl::MapMemory;
use crate::manager::{self, CacheManager, ManagerKind, ManagerStats};
use crate::FlashError;
use serde::Serialize;
use std::fmt;
use tiercache_block::IoKind;
use tiercache_trace::Record;

/// What to simulate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlashSimConfig {
    pub device: DeviceConfig,
    pub manager: ManagerKind,
    /// Write-back: share of the cache capacity that may be dirty (FlashTier: 0.2).
    pub dirty_target: f64,
    /// Requests replayed before statistics are gathered (FlashTier: 15 %).
    pub warmup_requests: u64,
}

/// Flash-level results.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FtlReport {
    /// Flash page writes (host data + collection copies) per host page write.
    pub write_amplification: f64,
    /// The same including mapping log and checkpoint pages.
    pub write_amplification_with_metadata: f64,
    pub host_page_writes: u64,
    pub flash_page_writes: u64,
    pub gc_page_copies: u64,
    pub metadata_page_writes: u64,
    pub erases: u64,
    pub metadata_erases: u64,
    /// Largest difference of erase counts between two blocks (measured interval).
    pub max_wear_difference: u64,
    pub max_block_erases: u64,
    pub silent_evictions: u64,
    pub collections: u64,
    pub switch_merges: u64,
    pub partial_merges: u64,
    pub full_merges: u64,
    /// Time in collection (copies and erases, serialised), seconds.
    pub gc_time_s: f64,
    /// Log blocks in use at the end and the log limit (hybrid layers).
    pub log_blocks: u64,
    pub mapped_pages: u64,
}

/// Memory of the unified sparse map against dense maps, measured on the
/// blocks cached at the end of the run (page-level keys).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MapComparison {
    pub cached_blocks: u64,
    /// Sparse hash map keyed by disk block (Google's, as FlashTier 4.1 sizes
    /// it: [`SparseHash`]): bytes per cached block.
    pub sparse_bytes_per_block: f64,
    /// Dense table over the disk range spanned (min..=max block): bytes per cached block.
    pub dense_disk_range_bytes_per_block: f64,
    /// Dense table over the cache's own capacity (an SSD's map plus the host
    /// map's 8-byte disk block number): bytes per cached block.
    pub dense_cache_bytes_per_block: f64,
}

/// Result of a run.
#[derive(Clone, Debug, Serialize)]
pub struct FlashReport {
    pub mode: String,
    pub ftl_kind: String,
    pub write_policy: String,
    pub capacity_bytes: u64,
    pub flash_blocks: u32,
    /// Cached blocks the device can hold at most.
    pub cache_capacity_blocks: u64,
    pub warmup_requests: u64,
    pub requests: u64,
    pub block_accesses: u64,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    pub miss_rate: f64,
    pub read_hit_ratio: f64,
    pub read_miss_rate: f64,
    pub write_hit_ratio: f64,
    pub disk_reads: u64,
    pub disk_writes: u64,
    pub cleaned_blocks: u64,
    pub ftl: FtlReport,
    /// Device memory for translations (block map, log page map, dirty bitmaps).
    pub device_memory_bytes: u64,
    /// Peak host memory of the cache manager.
    pub host_memory_bytes: u64,
    pub device_bytes_per_block: f64,
    pub host_bytes_per_block: f64,
    pub map_memory: MapMemory,
    pub map_comparison: MapComparison,
    pub persistence: Option<PersistStats>,
    pub skipped_records: u64,
}

#[derive(Clone)]
struct Snapshot {
    flash: FlashStats,
    mgr: ManagerStats,
    erases: EraseSnapshot,
    accesses: u64,
}

/// Replay `records` (stopping at the first error) and report.
pub fn run<I, E>(records: I, cfg: &FlashSimConfig) -> Result<FlashReport, FlashError>
where
    I: IntoIterator<Item = Result<Record, E>>,
    E: fmt::Display,
{
    let mut dev = Device::new(cfg.device.clone())?;
    let mut mgr = manager::for_device(&dev, cfg.manager, cfg.dirty_target)?;
    let bs = cfg.device.geometry.page_bytes;
    let mut requests = 0u64;
    let mut accesses = 0u64;
    let mut snap: Option<Snapshot> = None;
    let take = |dev: &Device, mgr: &dyn CacheManager, accesses| Snapshot {
        flash: dev.flash().stats.clone(),
        mgr: mgr.stats().clone(),
        erases: dev.flash().erase_snapshot(),
        accesses,
    };
    if cfg.warmup_requests == 0 {
        snap = Some(take(&dev, mgr.as_ref(), 0));
    }
    for r in records {
        let r = r.map_err(|e| FlashError::Trace(e.to_string()))?;
        for b in r.blocks(bs) {
            match r.kind {
                IoKind::Read => {
                    mgr.read(&mut dev, b)?;
                }
                IoKind::Write => {
                    mgr.write(&mut dev, b)?;
                }
                IoKind::Trim => mgr.trim(&mut dev, b)?,
                IoKind::Flush => continue,
            }
            accesses += 1;
        }
        requests += 1;
        if snap.is_none() && requests >= cfg.warmup_requests {
            snap = Some(take(&dev, mgr.as_ref(), accesses));
        }
    }
    let snap = snap.unwrap_or_else(|| take(&dev, mgr.as_ref(), accesses));
    Ok(report(cfg, &dev, mgr.as_ref(), &snap, requests, accesses))
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn report(
    cfg: &FlashSimConfig,
    dev: &Device,
    mgr: &dyn CacheManager,
    snap: &Snapshot,
    requests: u64,
    accesses: u64,
) -> FlashReport {
    let f = &dev.flash().stats;
    let s0 = &snap.flash;
    let m = mgr.stats();
    let m0 = &snap.mgr;
    let host = f.host_page_writes - s0.host_page_writes;
    let copies = f.gc_page_copies - s0.gc_page_copies;
    let meta = f.metadata_page_writes - s0.metadata_page_writes;
    let wear = dev.flash().wear_since(&snap.erases);
    let ftl = FtlReport {
        write_amplification: ratio(host + copies, host),
        write_amplification_with_metadata: ratio(host + copies + meta, host),
        host_page_writes: host,
        flash_page_writes: host + copies + meta,
        gc_page_copies: copies,
        metadata_page_writes: meta,
        erases: f.erases - s0.erases,
        metadata_erases: f.metadata_erases - s0.metadata_erases,
        max_wear_difference: wear.max_difference,
        max_block_erases: wear.max_block_erases,
        silent_evictions: f.silent_evictions - s0.silent_evictions,
        collections: f.collections - s0.collections,
        switch_merges: f.switch_merges - s0.switch_merges,
        partial_merges: f.partial_merges - s0.partial_merges,
        full_merges: f.full_merges - s0.full_merges,
        gc_time_s: (f.gc_time_us - s0.gc_time_us) / 1e6,
        log_blocks: dev.ftl().log_blocks(),
        mapped_pages: dev.ftl().mapped(),
    };
    let rh = m.read_hits - m0.read_hits;
    let rm = m.read_misses - m0.read_misses;
    let wh = m.write_hits - m0.write_hits;
    let wm = m.write_misses - m0.write_misses;
    let hits = rh + wh;
    let measured = accesses - snap.accesses;
    let cap = dev.capacity_pages();
    let mem = dev.memory();
    let host_mem = mgr.peak_host_memory_bytes();
    FlashReport {
        mode: cfg.device.kind.to_string(),
        ftl_kind: cfg.device.ftl.to_string(),
        write_policy: cfg.manager.to_string(),
        capacity_bytes: cfg.device.geometry.capacity_bytes(),
        flash_blocks: cfg.device.geometry.blocks(),
        cache_capacity_blocks: cap,
        warmup_requests: cfg.warmup_requests.min(requests),
        requests,
        block_accesses: measured,
        hits,
        misses: measured - hits,
        hit_ratio: ratio(hits, measured),
        miss_rate: ratio(measured - hits, measured),
        read_hit_ratio: ratio(rh, rh + rm),
        read_miss_rate: ratio(rm, rh + rm),
        write_hit_ratio: ratio(wh, wh + wm),
        disk_reads: m.disk_reads - m0.disk_reads,
        disk_writes: m.disk_writes - m0.disk_writes,
        cleaned_blocks: m.cleaned_blocks - m0.cleaned_blocks,
        ftl,
        device_memory_bytes: mem.total(),
        host_memory_bytes: host_mem,
        device_bytes_per_block: ratio(mem.total(), cap),
        host_bytes_per_block: ratio(host_mem, cap),
        map_comparison: compare_maps(dev),
        map_memory: mem,
        persistence: dev.persist_stats(),
        skipped_records: 0,
    }
}

/// Measure the sparse map against dense maps on the blocks cached now.
pub fn compare_maps(dev: &Device) -> MapComparison {
    let keys = dev.flash().valid_owners();
    let n = keys.len() as u64;
    if n == 0 {
        return MapComparison::default();
    }
    let mut sparse = SparseHash::new();
    for (i, &k) in keys.iter().enumerate() {
        sparse.insert(k, i as u32);
    }
    let lo = *keys.iter().min().expect("non-empty");
    let hi = *keys.iter().max().expect("non-empty");
    // A dense table over the range would be 4 B per address; computed
    // rather than allocated (ranges reach terabytes).
    let dense_range = (hi - lo + 1) * 4 + std::mem::size_of::<DenseMap>() as u64;
    let cap = dev.capacity_pages().max(n);
    MapComparison {
        cached_blocks: n,
        sparse_bytes_per_block: sparse.memory_bytes() as f64 / n as f64,
        dense_disk_range_bytes_per_block: dense_range as f64 / n as f64,
        dense_cache_bytes_per_block: (cap * (4 + 8)) as f64 / n as f64,
    }
}
