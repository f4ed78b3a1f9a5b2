//! The live log-structured store's policy replayed on a trace, without
//! devices: `tiercache sim --mode ssc --ftl log`. Each request goes through
//! the same [`Log`] decisions as in the live store (`tiercache-log-structured`),
//! so its decision counters (blocks appended, silent evictions, dirty blocks
//! moved ...) equal the live store's on the same requests at queue depth 1;
//! the conformance test `crates/apps/cli/tests/conformance_ssc_tier.rs`
//! checks it. Only the I/O is left out: [`Counting`] is the driver that does
//! none.

use crate::gc::GcPolicy;
use crate::logstore::{data_blocks, Log, LogCounters, LogIo, SegInfo, SegState, BLOCK_BYTES};
use crate::manager::ManagerKind;
use crate::sparse::SparseMap;
use crate::FlashError;
use serde::Serialize;
use std::convert::Infallible;
use std::fmt;
use tiercache_core::IoKind;
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

/// The driver of a simulation: no I/O, nothing fails.
#[derive(Debug, Default)]
pub struct Counting;

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
        Ok(true)
    }

    fn append_open(
        log: &mut Log<Self>,
        _: &(),
        lbas: &[u64],
        _: &[u8],
        dirty: bool,
    ) -> Result<bool, Infallible> {
        Ok(log.place(lbas, dirty).is_ok())
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
    let d = data_blocks(cfg.seg_bytes).map_err(FlashError::Config)?;
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
    let mut log = Log::new(map, segs, 1, d, Counting);
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
    let slots = log.segs.len() as u64 * u64::from(log.data_blocks);
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
}
