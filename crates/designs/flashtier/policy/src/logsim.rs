//! The live log-structured store's policy replayed on a trace, without
//! devices: `tiercache sim --mode ssc --ftl log`. Each request goes through
//! the same [`Log`] decisions as in the live store (`tiercache-flashtier-live`),
//! so its decision counters (blocks appended, silent evictions, dirty blocks
//! moved ...) equal the live store's on the same requests at queue depth 1;
//! the conformance test `crates/apps/cli/tests/system/conformance_ssc_tier.rs`
//! checks it. Only the I/O is left out: [`Counting`] is the driver that does
//! none.
//!
//! With [`LogSimConfig::compress`] it replays the compressed layout
//! (`format --layout log-structured --compress`): segments of [`SLOT_RATIO`]
//! times more slots, each block a record of as many 512-byte units as the
//! compressibility model gives it, packed into the segment's data area by
//! the live store's rule (a segment is sealed when the next record does not
//! fit its remaining units).

use crate::gc::GcPolicy;
use crate::logstore::{data_blocks, Log, LogCounters, LogIo, SegInfo, SegState, BLOCK_BYTES};
use crate::manager::ManagerKind;
use crate::sizes::{compressed_segment, SizeModel, RAW_UNITS, SLOT_RATIO, UNIT};
use crate::sparse::SparseMap;
use crate::FlashError;
use serde::Serialize;
use std::convert::Infallible;
use std::fmt;
use tiercache_block::IoKind;
use tiercache_trace::Record;

/// What to simulate: the store as `format --design log-structured` makes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogSimConfig {
    /// Segments of the cache device's data area.
    pub segments: u32,
    /// Bytes per segment (the live store's `--segment-size`, 1 MiB by default).
    pub seg_bytes: u64,
    pub manager: ManagerKind,
    /// Write-back: share of the slots that may be dirty.
    pub dirty_target: f64,
    pub victim: GcPolicy,
    /// The compressed layout (`None`: the plain one).
    pub compress: Option<CompressSim>,
}

/// The compressed layout in a simulation: block sizes and CPU costs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompressSim {
    /// The codec's name (`lz4`, `zstd:3`), reported only: its effect is the
    /// model.
    pub codec: String,
    /// Stored size of each block.
    pub sizes: SizeModel,
    /// CPU microseconds to compress one block.
    pub compress_us: f64,
    /// CPU microseconds to decompress one block.
    pub decompress_us: f64,
}

/// Result of a run: the decision counters under the live store's names.
#[derive(Clone, Debug, Serialize)]
pub struct LogSimReport {
    pub mode: String,
    pub ftl_kind: String,
    pub write_policy: String,
    pub victim: GcPolicy,
    pub segments: u32,
    pub segment_bytes: u64,
    pub data_blocks: u32,
    /// Cache slots (segments x data blocks).
    pub slots: u64,
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    pub fills: u64,
    /// Blocks appended to the log (the live store's `appended_blocks`).
    pub appended_blocks: u64,
    pub segments_opened: u64,
    /// Segment cleaning, as the live store's `stats --json` `cleaning` object.
    pub cleaning: LogCleaning,
    /// All decision counters.
    #[serde(skip)]
    pub counters: LogCounters,
    pub mapped_blocks: u64,
    pub dirty_blocks: u64,
    /// Host memory of the unified sparse map per slot.
    pub map_bytes_per_block_full: f64,
    pub skipped_records: u64,
    /// The compressed layout's capacity, sizes and CPU cost model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionReport>,
}

/// What compression bought and cost in a run (`compression` in the JSON;
/// the stored-size names are the live store's `stats --json` ones).
#[derive(Clone, Debug, Serialize)]
pub struct CompressionReport {
    pub codec: String,
    /// The model, as `--compressibility` takes it inline.
    pub model: String,
    /// Mean 512-byte units per block under the model.
    pub mean_units: f64,
    /// Slots the plain layout of the same size has (blocks an uncompressed
    /// cache holds).
    pub plain_slots: u64,
    /// Blocks the data area holds at the model's mean size (at most the
    /// slots).
    pub capacity_blocks: f64,
    /// Effective capacity: `capacity_blocks / plain_slots`.
    pub capacity_factor: f64,
    /// Blocks held at the end over `plain_slots`.
    pub held_factor: f64,
    /// Records appended compressed (1-7 units) and raw (8 units).
    pub stored_compressed_blocks: u64,
    pub stored_compressed_bytes: u64,
    pub stored_raw_blocks: u64,
    /// Cached blocks' bytes at the end: raw, and as stored.
    pub cached_bytes: u64,
    pub cached_stored_bytes: u64,
    /// `cached_bytes / cached_stored_bytes`.
    pub ratio: f64,
    /// The CPU cost model: blocks compressed (every append) and
    /// decompressed (read hits, dirty blocks moved or written back).
    pub compress_us_per_block: f64,
    pub decompress_us_per_block: f64,
    pub compressions: u64,
    pub decompressions: u64,
    pub cpu_seconds: f64,
    pub cpu_us_per_request: f64,
}

/// Segment cleaning's counters, named as in the live store's `stats --json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogCleaning {
    pub segments_cleaned: u64,
    /// Live clean blocks dropped (FlashTier's silent eviction).
    pub silent_evictions: u64,
    /// Live dirty blocks moved to the open segment.
    pub moved_dirty_blocks: u64,
    /// Live dirty blocks written back by segment cleaning (no room to move).
    pub cleaning_written_back: u64,
    /// Dirty blocks written back by write-back cleaning.
    pub written_back: u64,
}

/// The driver of a simulation: no I/O, nothing fails. In a compressed
/// layout it keeps the open segment's used units, as the live store does.
#[derive(Debug, Default)]
pub struct Counting {
    /// Compressed layout: each block's size.
    pub sizes: Option<SizeModel>,
    /// Units of data area per segment (compressed layout).
    pub data_units: u32,
    /// Units of the open segment's data area used.
    pub open_units: u32,
    /// Records appended compressed and raw, and the compressed ones' bytes.
    pub stored_compressed: u64,
    pub stored_compressed_bytes: u64,
    pub stored_raw: u64,
}

impl LogIo for Counting {
    type Ctx = ();
    type Error = Infallible;

    fn roll(log: &mut Log<Self>, _: &()) -> Result<bool, Infallible> {
        log.seal_open();
        let Some((seg, _)) = log.begin_open() else {
            // The live store fails the request ("no free segment"); with
            // RESERVE segments kept free this does not happen.
            return Ok(false);
        };
        log.finish_open(seg, true);
        log.open_units = 0;
        Ok(true)
    }

    fn fits(log: &mut Log<Self>, _: &(), lbas: &[u64], _: &[u8], n: usize) -> usize {
        let Some(m) = &log.ext.sizes else {
            return n;
        };
        if log.open.is_none() {
            return n;
        }
        let mut free = log.data_units - log.open_units;
        let mut k = 0;
        while k < n && m.units(lbas[k]) <= free {
            free -= m.units(lbas[k]);
            k += 1;
        }
        if k == 0 {
            let room = log.room();
            log.burn(room);
        }
        k
    }

    fn append_open(
        log: &mut Log<Self>,
        _: &(),
        lbas: &[u64],
        _: &[u8],
        dirty: bool,
    ) -> Result<bool, Infallible> {
        let Some(m) = &log.ext.sizes else {
            return Ok(log.place(lbas, dirty).is_ok());
        };
        let units: Vec<u32> = lbas.iter().map(|&l| m.units(l)).collect();
        let total: u32 = units.iter().sum();
        if total > log.data_units - log.open_units {
            return Ok(false);
        }
        if log.place(lbas, dirty).is_err() {
            return Ok(false);
        }
        let x = &mut log.ext;
        x.open_units += total;
        for u in units {
            if u == RAW_UNITS {
                x.stored_raw += 1;
            } else {
                x.stored_compressed += 1;
                x.stored_compressed_bytes += u64::from(u * UNIT);
            }
        }
        Ok(true)
    }

    fn live_blocks(log: &mut Log<Self>, _: &(), seg: u32) -> Vec<(u64, u32)> {
        log.live_by_scan(seg)
    }

    fn read_slots(_: &mut Log<Self>, _: &(), _: &[(u64, u32)]) -> Result<Vec<u8>, Infallible> {
        Ok(Vec::new())
    }

    fn write_back_block(_: &mut Log<Self>, _: &(), _: u64, _: &[u8]) -> Result<(), Infallible> {
        Ok(())
    }

    fn write_back(_: &mut Log<Self>, _: &(), _: &[u64]) -> Result<(), Infallible> {
        Ok(())
    }

    fn degraded(_: &Log<Self>) -> bool {
        false
    }
}

/// A log store of `cfg`'s size, empty, as `format` leaves it.
pub fn new_log(cfg: &LogSimConfig) -> Result<Log<Counting>, FlashError> {
    let mut driver = Counting::default();
    let d = match &cfg.compress {
        None => data_blocks(cfg.seg_bytes).map_err(FlashError::Config)?,
        Some(c) => {
            let (slots, units) = compressed_segment(cfg.seg_bytes).map_err(FlashError::Config)?;
            driver.sizes = Some(c.sizes.clone());
            driver.data_units = units;
            slots
        }
    };
    if cfg.segments < 3 {
        return Err(FlashError::Config(format!(
            "{} segments (allowed: 3 or more: two are kept free)",
            cfg.segments
        )));
    }
    if !(0.0..=1.0).contains(&cfg.dirty_target) {
        return Err(FlashError::Config(format!(
            "dirty target {} (allowed: 0 to 1)",
            cfg.dirty_target
        )));
    }
    let slots = u64::from(cfg.segments) * u64::from(d);
    // Keys up to 2^40 blocks (4 PiB of backing device): decisions do not
    // depend on the entry width, only the map's memory does.
    let map = SparseMap::new(slots, 1 << 40, slots).map_err(FlashError::Config)?;
    let segs = vec![
        SegInfo {
            state: SegState::Free,
            seq: 0,
            live: 0,
        };
        cfg.segments as usize
    ];
    let mut log = Log::new(map, segs, 1, d, driver);
    log.victim = cfg.victim;
    Ok(log)
}

/// Run one request through the store's decisions, as the live store's
/// `read`, `write` and `trim` do (whole 4 KiB blocks; a write-back write of
/// part of a block is a read-modify-write that changes nothing cached).
pub fn request(log: &mut Log<Counting>, cfg: &LogSimConfig, r: &Record) {
    let bs = BLOCK_BYTES as u64;
    let (offset, len) = (r.offset, u64::from(r.len));
    let end = offset + len;
    let (b0, b1) = (offset / bs, end.div_ceil(bs));
    // The dirty target is a share of the data area's 4 KiB blocks (the
    // live store's rule: slots over the slot ratio in a compressed layout).
    let ratio = if cfg.compress.is_some() {
        SLOT_RATIO
    } else {
        1
    };
    let slots = log.segs.len() as u64 * u64::from(log.data_blocks / ratio);
    let nothing = |_: Infallible| -> usize { unreachable!() };
    match r.kind {
        IoKind::Read if len > 0 => {
            // Hits and misses first; then each run of misses is filled.
            let mut runs: Vec<Vec<u64>> = Vec::new();
            let mut prev_miss = false;
            for b in b0..b1 {
                let miss = !log.count(b, true);
                if miss {
                    if !prev_miss {
                        runs.push(Vec::new());
                    }
                    runs.last_mut().expect("a run").push(b);
                }
                prev_miss = miss;
            }
            for lbas in runs {
                log.fill(&(), &lbas, &[]).unwrap_or_else(nothing);
            }
        }
        IoKind::Write if len > 0 => {
            for b in b0..b1 {
                log.count(b, false);
            }
            match cfg.manager {
                ManagerKind::WriteBack => {
                    let lbas: Vec<u64> = (b0..b1).collect();
                    log.append(&(), &lbas, &[], true).unwrap_or_else(nothing);
                    let limit = Log::<Counting>::dirty_limit(cfg.dirty_target, slots);
                    log.clean_to(&(), limit).unwrap_or_else(|e| match e {});
                }
                ManagerKind::WriteThrough => {
                    // Whole blocks get a clean copy; partial ones are dropped.
                    let (f0, f1) = (offset.div_ceil(bs), end / bs);
                    for b in (b0..b1).filter(|&b| b < f0 || b >= f1) {
                        log.evict(b);
                    }
                    if f1 > f0 {
                        let lbas: Vec<u64> = (f0..f1).collect();
                        log.append(&(), &lbas, &[], false).unwrap_or_else(nothing);
                    }
                }
            }
        }
        IoKind::Trim => {
            let (f0, f1) = (offset.div_ceil(bs), end / bs);
            for b in f0..f1.max(f0) {
                log.evict(b);
            }
        }
        _ => {}
    }
}

/// Replay `records` (stopping at the first error) and report.
pub fn run<I, E>(records: I, cfg: &LogSimConfig) -> Result<LogSimReport, FlashError>
where
    I: IntoIterator<Item = Result<Record, E>>,
    E: fmt::Display,
{
    let mut log = new_log(cfg)?;
    let mut requests = 0u64;
    for r in records {
        let r = r.map_err(|e| FlashError::Trace(e.to_string()))?;
        request(&mut log, cfg, &r);
        requests += 1;
    }
    let c = log.counters;
    let hits = c.read_hits + c.write_hits;
    let misses = c.read_misses + c.write_misses;
    let slots = u64::from(cfg.segments) * u64::from(log.data_blocks);
    let compression = match &cfg.compress {
        None => None,
        Some(z) => Some(compression_report(&log, cfg, z, requests)?),
    };
    Ok(LogSimReport {
        mode: "ssc".into(),
        ftl_kind: "log".into(),
        write_policy: cfg.manager.to_string(),
        victim: cfg.victim,
        segments: cfg.segments,
        segment_bytes: cfg.seg_bytes,
        data_blocks: log.data_blocks,
        slots,
        requests,
        hits,
        misses,
        hit_ratio: if hits + misses > 0 {
            hits as f64 / (hits + misses) as f64
        } else {
            0.0
        },
        read_hits: c.read_hits,
        read_misses: c.read_misses,
        write_hits: c.write_hits,
        write_misses: c.write_misses,
        fills: c.fills,
        appended_blocks: c.appended_blocks,
        segments_opened: c.segments_opened,
        cleaning: LogCleaning {
            segments_cleaned: c.segments_cleaned,
            silent_evictions: c.silent_evictions,
            moved_dirty_blocks: c.moved_dirty,
            cleaning_written_back: c.cleaning_written_back,
            written_back: c.written_back,
        },
        counters: c,
        mapped_blocks: log.map.len() as u64,
        dirty_blocks: log.map.dirty() as u64,
        map_bytes_per_block_full: log.map.memory_bytes() as f64 / slots.max(1) as f64,
        skipped_records: 0,
        compression,
    })
}

fn compression_report(
    log: &Log<Counting>,
    cfg: &LogSimConfig,
    z: &CompressSim,
    requests: u64,
) -> Result<CompressionReport, FlashError> {
    let plain = data_blocks(cfg.seg_bytes).map_err(FlashError::Config)?;
    let plain_slots = u64::from(cfg.segments) * u64::from(plain);
    let slots = u64::from(cfg.segments) * u64::from(log.data_blocks);
    let units = u64::from(cfg.segments) * u64::from(log.data_units);
    let mean = z.sizes.mean_units();
    let capacity_blocks = (units as f64 / mean).min(slots as f64);
    let mut stored = 0u64;
    for (lba, _) in log.map.iter() {
        stored += u64::from(z.sizes.units(lba) * UNIT);
    }
    let cached = log.map.len() as u64 * BLOCK_BYTES as u64;
    let c = &log.counters;
    let compressions = c.appended_blocks;
    let decompressions = c.read_hits + c.moved_dirty + c.cleaning_written_back + c.written_back;
    let cpu_us = compressions as f64 * z.compress_us + decompressions as f64 * z.decompress_us;
    Ok(CompressionReport {
        codec: z.codec.clone(),
        model: z.sizes.spec(),
        mean_units: mean,
        plain_slots,
        capacity_blocks,
        capacity_factor: capacity_blocks / plain_slots as f64,
        held_factor: log.map.len() as f64 / plain_slots as f64,
        stored_compressed_blocks: log.stored_compressed,
        stored_compressed_bytes: log.stored_compressed_bytes,
        stored_raw_blocks: log.stored_raw,
        cached_bytes: cached,
        cached_stored_bytes: stored,
        ratio: if stored > 0 {
            cached as f64 / stored as f64
        } else {
            1.0
        },
        compress_us_per_block: z.compress_us,
        decompress_us_per_block: z.decompress_us,
        compressions,
        decompressions,
        cpu_seconds: cpu_us / 1e6,
        cpu_us_per_request: if requests > 0 {
            cpu_us / requests as f64
        } else {
            0.0
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: IoKind, block: u64, n: u32) -> Result<Record, String> {
        Ok(Record {
            time_ns: 0,
            offset: block * 4096,
            len: n * 4096,
            kind,
            class: None,
        })
    }

    #[test]
    fn cleaning_drops_clean_and_moves_dirty_by_hand() {
        // 64 KiB segments: 14 slots each; 4 segments, two kept free.
        let cfg = LogSimConfig {
            segments: 4,
            seg_bytes: 64 << 10,
            manager: ManagerKind::WriteBack,
            dirty_target: 1.0,
            victim: GcPolicy::Greedy,
            compress: None,
        };
        // Segment 0: 14 clean fills; segment 1: 14 dirty writes; segment 2:
        // 3 of them rewritten (segment 1 keeps 11 live, one segment free).
        // The next request cleans first: greedy takes segment 1 (11 live,
        // all dirty: moved into segment 2, which fills up), and a segment 3
        // opens for block 300. The last read cleans again: segments 0 and 2
        // both hold 14 live blocks, the older one (0) goes, its clean
        // blocks evicted silently.
        let trace = vec![
            rec(IoKind::Read, 100, 14),
            rec(IoKind::Write, 200, 14),
            rec(IoKind::Write, 200, 3),
            rec(IoKind::Read, 300, 1),
            rec(IoKind::Read, 400, 14),
        ];
        let r = run(trace, &cfg).unwrap();
        assert_eq!(r.data_blocks, 14);
        assert_eq!(r.counters.fills, 29);
        assert_eq!(r.counters.moved_dirty, 11);
        assert_eq!(r.counters.silent_evictions, 14);
        assert_eq!(r.counters.appended_blocks, 29 + 17 + 11);
        assert_eq!(r.counters.segments_cleaned, 2);
        assert_eq!(r.counters.segments_opened, 5);
        assert_eq!(r.mapped_blocks, 29);
        assert_eq!(r.dirty_blocks, 14);
        assert_eq!(r.counters.write_hits, 3);
    }

    fn two_passes(blocks: u64) -> Vec<Result<Record, String>> {
        (0..2)
            .flat_map(|_| (0..blocks).map(|b| rec(IoKind::Read, b, 1)))
            .collect()
    }

    fn small(compress: Option<SizeModel>) -> LogSimConfig {
        LogSimConfig {
            segments: 4,
            seg_bytes: 64 << 10,
            manager: ManagerKind::WriteThrough,
            dirty_target: 0.2,
            victim: GcPolicy::CostBenefit,
            compress: compress.map(|sizes| CompressSim {
                codec: "lz4".into(),
                sizes,
                compress_us: 2.0,
                decompress_us: 1.0,
            }),
        }
    }

    #[test]
    fn two_unit_blocks_give_four_times_the_capacity_by_hand() {
        // 64 KiB segments: 14 data blocks of 4 KiB (112 units), 56 slots in
        // the compressed layout. Blocks of 2 units fill a segment's 56
        // slots exactly. Two passes over 112 blocks: the plain store holds
        // at most 4 x 14 of them and cleans in FIFO order (equal live
        // counts, the older segment first), so the second pass misses
        // throughout; compressed, the 112 fill two segments and the second
        // pass hits all of them.
        let plain = run(two_passes(112), &small(None)).unwrap();
        assert_eq!(plain.read_hits, 0);
        assert_eq!(plain.read_misses, 224);
        assert!(plain.compression.is_none());
        let cfg = small(Some(SizeModel::constant(2).unwrap()));
        let r = run(two_passes(112), &cfg).unwrap();
        assert_eq!(r.data_blocks, 56);
        assert_eq!(r.slots, 224);
        assert_eq!(r.read_hits, 112);
        assert_eq!(r.read_misses, 112);
        assert_eq!(r.fills, 112);
        assert_eq!(r.segments_opened, 2);
        assert_eq!(r.cleaning.segments_cleaned, 0);
        let z = r.compression.unwrap();
        assert_eq!(z.plain_slots, 56);
        assert_eq!(z.capacity_factor, 4.0);
        assert_eq!(z.held_factor, 2.0);
        assert_eq!(z.ratio, 4.0);
        assert_eq!(z.stored_compressed_blocks, 112);
        assert_eq!(z.stored_raw_blocks, 0);
        assert_eq!(
            (z.cached_bytes, z.cached_stored_bytes),
            (112 * 4096, 112 * 1024)
        );
        // CPU: 112 compressions at 2 us, 112 decompressions (hits) at 1 us.
        assert_eq!((z.compressions, z.decompressions), (112, 112));
        assert!((z.cpu_seconds - 336e-6).abs() < 1e-12);
        assert!((z.cpu_us_per_request - 336.0 / 224.0).abs() < 1e-12);
    }

    #[test]
    fn raw_blocks_seal_segments_by_units() {
        // All raw: 14 records of 8 units fill a segment's 112 units, the
        // other 42 slots are given up; the capacity is the plain one.
        let cfg = small(Some(SizeModel::constant(8).unwrap()));
        let r = run(two_passes(112), &cfg).unwrap();
        let plain = run(two_passes(112), &small(None)).unwrap();
        let z = r.compression.unwrap();
        assert_eq!(z.capacity_factor, 1.0);
        assert_eq!(z.stored_raw_blocks, r.appended_blocks);
        assert_eq!(r.read_hits, plain.read_hits);
        assert_eq!(r.mapped_blocks, plain.mapped_blocks);
        assert_eq!(r.cleaning.silent_evictions, plain.cleaning.silent_evictions);
        // Mixed sizes: every segment holds at most 112 units of records.
        let cfg = small(Some(SizeModel::parse("1:0.3,3:0.3,8:0.4").unwrap()));
        let r = run(two_passes(40), &cfg).unwrap();
        let plain = run(two_passes(40), &small(None)).unwrap();
        assert_eq!(plain.read_hits, 0);
        let z = r.compression.unwrap();
        assert!(z.cached_stored_bytes <= 4 * 112 * 512, "{z:?}");
        assert!(r.read_hits > plain.read_hits, "{}", r.read_hits);
    }
}
