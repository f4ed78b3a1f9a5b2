//! The log-structured cache: requests, the log, cleaning, FLUSH, failures.
//!
//! Every write to the cache device is an append to the open segment; the
//! map then points the block at its new slot (the old copy becomes dead
//! space). Durability follows FlashTier's rules (Table II, 4.2): a dirty
//! write is durable once a FLUSH (or its own FUA) completed, which flushes
//! the data, then writes the open segment's summary, then flushes again;
//! clean data (read fills, write-through copies) may be lost in a crash and
//! is dropped on recovery after an unclean shutdown, so a read never returns
//! a clean block older than the backing device's. A segment is reused only
//! after every summary that could supersede its blocks is durable and the
//! backing device was flushed, and its new life is announced by a journal
//! record before any data lands in it (see `checkpoint` and `recovery`).
//! Reusing a segment also forgets what its entries superseded: when a block
//! whose newest entry superseded an older one still in the log (the
//! checkpoint or a segment logged since) leaves the map (silent eviction,
//! write-back by segment cleaning, trim, ...), the next segment opened
//! checkpoints first, or recovery would bring back the older dirty copy
//! although the backing device holds newer data.
//!
//! Requests run one at a time under one lock, with synchronous device I/O.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Value};
use tiercache_io::BlockDev;

use crate::checkpoint::{Checkpoint, JournalRecord, NONE};
use crate::cleaning::{pick_victim, SegInfo, SegState, VictimPolicy};
use crate::layout::{Superblock, WritePolicy};
use crate::map::{Entry, SparseMap};
use crate::segment::{decode_entry, entry, Geometry, Summary, BLOCK, EMPTY};

/// A failed request (the NBD export answers EIO), with what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheError(pub String);

impl std::fmt::Display for CacheError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CacheError {}

type Res<T> = Result<T, CacheError>;

fn err(what: impl Into<String>) -> CacheError {
    CacheError(what.into())
}

/// Free segments kept ready; cleaning starts below this.
pub const RESERVE: usize = 2;
/// Cache device errors after which no new data is cached.
pub const ERROR_LIMIT: u64 = 8;

/// What recovery did when the cache was opened.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecoveryInfo {
    /// Time from opening the device to a serving cache (checkpoint written).
    pub duration: Duration,
    pub clean_shutdown: bool,
    /// Epoch of the checkpoint recovery started from.
    pub checkpoint_epoch: u64,
    pub checkpoint_entries: u64,
    /// Segments whose summaries were replayed, and the entries they gave.
    pub replayed_segments: u64,
    pub replayed_entries: u64,
    /// Clean blocks dropped because the shutdown was not clean.
    pub dropped_clean: u64,
    /// Blocks mapped after recovery, and how many of them are dirty.
    pub mapped_blocks: u64,
    pub dirty_blocks: u64,
}

/// Counters reported by `tiercache stats`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    pub fills: u64,
    pub appended_blocks: u64,
    pub segments_opened: u64,
    pub segments_cleaned: u64,
    /// Live clean blocks dropped by segment cleaning (FlashTier's silent eviction).
    pub silent_evictions: u64,
    /// Live dirty blocks moved by segment cleaning to the open segment.
    pub moved_dirty: u64,
    /// Live dirty blocks segment cleaning wrote back instead (no room to move).
    pub cleaning_written_back: u64,
    /// Dirty blocks written back by write-back cleaning (dirty-ratio target, flush, detach).
    pub written_back: u64,
    pub summary_writes: u64,
    pub checkpoints: u64,
    pub flushes: u64,
    /// Blocks written to the backing device around the cache (errors, degraded mode).
    pub bypassed: u64,
    pub cache_errors: u64,
    pub backing_errors: u64,
}

/// The segment being appended to.
#[derive(Clone, Debug)]
struct OpenSeg {
    seg: u32,
    seq: u64,
    /// Summary entries so far (index = data block in the segment).
    entries: Vec<u64>,
    /// Version of the newest summary written.
    version: u64,
    /// Entries covered by a durable summary.
    durable: usize,
}

/// Mutable state, under the cache's lock.
pub(crate) struct State {
    pub(crate) sb: Superblock,
    pub(crate) map: SparseMap,
    pub(crate) segs: Vec<SegInfo>,
    pub(crate) free: VecDeque<u32>,
    open: Option<OpenSeg>,
    pub(crate) next_seq: u64,
    pub(crate) epoch: u64,
    pub(crate) journal_next: u32,
    /// Backing writes not yet flushed.
    backing_dirty: bool,
    /// A block bypassed the cache: the next FLUSH checkpoints, so that no
    /// older dirty copy in the log outlives it in a crash.
    need_ckpt: bool,
    /// One bit per slot: the slot's entry superseded an older entry of its
    /// block that recovery could still replay (in the checkpoint or in a
    /// segment logged since). While the slot's segment lives, recovery
    /// replays this entry after the older one; once the entry is dropped
    /// from the log (silent eviction, write-back by segment cleaning) and
    /// its segment reused, only the older copy would be left. Cleared by a
    /// checkpoint, after which no older entry is replayed.
    shadows: Vec<u64>,
    /// An entry that superseded older ones left the map (see `shadows`),
    /// or recovery found superseded entries: the next segment opened
    /// checkpoints first, so that reusing a segment never lets recovery
    /// bring back a dirty copy older than the backing device's.
    pub(crate) ckpt_before_reuse: bool,
    clean_cursor: u64,
    degraded: Option<String>,
    closed: bool,
    pub(crate) stats: Counters,
}

impl State {
    pub(crate) fn new(
        sb: Superblock,
        map: SparseMap,
        segs: Vec<SegInfo>,
        next_seq: u64,
        epoch: u64,
    ) -> State {
        let free = segs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == SegState::Free)
            .map(|(i, _)| i as u32)
            .collect();
        let shadows = vec![0; (sb.slots() as usize).div_ceil(64)];
        State {
            sb,
            map,
            segs,
            free,
            open: None,
            next_seq,
            epoch,
            journal_next: 0,
            backing_dirty: false,
            need_ckpt: false,
            shadows,
            ckpt_before_reuse: false,
            clean_cursor: 0,
            degraded: None,
            closed: false,
            stats: Counters::default(),
        }
    }
}

fn shadows(st: &State, slot: u32) -> bool {
    st.shadows[slot as usize / 64] >> (slot % 64) & 1 != 0
}
fn set_shadows(st: &mut State, slot: u32, on: bool) {
    let (w, b) = (slot as usize / 64, slot % 64);
    st.shadows[w] = st.shadows[w] & !(1 << b) | (on as u64) << b;
}

/// A log-structured cache over a cache device and a backing device.
pub struct LogCache {
    geo: Geometry,
    data_blocks: u32,
    cache: Arc<dyn BlockDev>,
    backing: Arc<dyn BlockDev>,
    backing_path: PathBuf,
    size: u64,
    policy: WritePolicy,
    victim_policy: Mutex<VictimPolicy>,
    st: Mutex<State>,
    recovery: RecoveryInfo,
}

impl LogCache {
    pub(crate) fn new(
        cache: Arc<dyn BlockDev>,
        backing: Arc<dyn BlockDev>,
        backing_path: &Path,
        st: State,
        recovery: RecoveryInfo,
    ) -> LogCache {
        let geo = st.sb.geometry();
        LogCache {
            geo,
            data_blocks: geo.data_blocks(),
            size: st.sb.backing_size,
            policy: st.sb.write_policy,
            cache,
            backing,
            backing_path: backing_path.to_path_buf(),
            victim_policy: Mutex::new(VictimPolicy::CostBenefit),
            st: Mutex::new(st),
            recovery,
        }
    }

    /// Mark the superblock open, before any request.
    pub(crate) fn recovered(&self) -> Res<()> {
        let mut st = self.lock()?;
        let mut sb = st.sb.clone();
        sb.clean = false;
        sb.write(self.cache.as_ref())
            .map_err(|e| err(format!("cache device: writing the superblock: {e}")))?;
        st.sb = sb;
        Ok(())
    }

    pub(crate) fn with_recovery(mut self, info: RecoveryInfo) -> LogCache {
        self.recovery = info;
        self
    }

    /// Export size: the backing device's.
    pub fn size(&self) -> u64 {
        self.size
    }
    /// The backing device's path.
    pub fn backing_path(&self) -> &Path {
        &self.backing_path
    }
    /// The write policy chosen at format time.
    pub fn write_policy(&self) -> WritePolicy {
        self.policy
    }
    /// What recovery did at open.
    pub fn recovery(&self) -> &RecoveryInfo {
        &self.recovery
    }
    /// Choose how cleaning picks victims (cost-benefit by default).
    pub fn set_victim_policy(&self, p: VictimPolicy) {
        *self.victim_policy.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }

    fn lock(&self) -> Res<MutexGuard<'_, State>> {
        let g = self
            .st
            .lock()
            .map_err(|_| err("cache state poisoned by an earlier panic"))?;
        if g.closed {
            return Err(err("the cache is closed"));
        }
        Ok(g)
    }

    fn slot_offset(&self, st: &State, slot: u32) -> u64 {
        let (seg, k) = (slot / self.data_blocks, slot % self.data_blocks);
        st.sb.seg_off + seg as u64 * st.sb.seg_bytes + self.geo.data_offset(k)
    }
    fn seg_offset(&self, st: &State, seg: u32) -> u64 {
        st.sb.seg_off + seg as u64 * st.sb.seg_bytes
    }

    fn cache_error(&self, st: &mut State, what: &str, e: &std::io::Error) {
        st.stats.cache_errors += 1;
        tracing::warn!("cache device error: {what}: {e}");
        if st.stats.cache_errors >= ERROR_LIMIT && st.degraded.is_none() {
            let why = format!(
                "{} cache device errors (last: {what}: {e})",
                st.stats.cache_errors
            );
            eprintln!("tiercache: {why}; no new data is cached, dirty data is written back");
            st.degraded = Some(why);
        }
    }
    fn backing_error(&self, st: &mut State, what: &str, e: std::io::Error) -> CacheError {
        st.stats.backing_errors += 1;
        err(format!("backing device: {what}: {e}"))
    }

    /// Point `lba` at `slot` (a new entry of the log), keeping the
    /// segments' live counts and whether the entry supersedes another.
    fn map_to(&self, st: &mut State, lba: u64, slot: u32, dirty: bool) -> Res<()> {
        let old = st.map.insert(lba, Entry { slot, dirty }).map_err(err)?;
        if let Some(o) = old {
            st.segs[(o.slot / self.data_blocks) as usize].live -= 1;
        }
        st.segs[(slot / self.data_blocks) as usize].live += 1;
        set_shadows(st, slot, old.is_some());
        Ok(())
    }
    /// Unmap `lba` while its entry stays in the log (trim, bypass, errors,
    /// write-through): a later entry of the block supersedes this one
    /// without knowing it, so in write-back the next segment opened
    /// checkpoints first (see `State::ckpt_before_reuse`).
    fn unmap(&self, st: &mut State, lba: u64) -> Option<Entry> {
        let o = self.evict(st, lba)?;
        if self.policy == WritePolicy::WriteBack {
            st.ckpt_before_reuse = true;
        }
        Some(o)
    }
    /// Unmap `lba` because its segment is being cleaned (the segment is
    /// reused after every segment freed before it, free segments being
    /// reused in order). If its entry superseded older ones that recovery
    /// could replay, the next segment opened checkpoints first.
    fn evict(&self, st: &mut State, lba: u64) -> Option<Entry> {
        let o = st.map.remove(lba)?;
        st.segs[(o.slot / self.data_blocks) as usize].live -= 1;
        if shadows(st, o.slot) {
            st.ckpt_before_reuse = true;
        }
        Some(o)
    }

    // ----------------------------------------------------------------- log

    /// Flush the data, write the open segment's summary (into the older
    /// copy), flush again: afterwards every entry so far is durable.
    fn persist_summary(&self, st: &mut State) -> Res<()> {
        let Some(o) = st.open.as_ref() else {
            return Ok(());
        };
        if o.durable == o.entries.len() {
            return Ok(());
        }
        let s = Summary {
            seg: o.seg,
            seq: o.seq,
            version: o.version + 1,
            entries: o.entries.clone(),
        };
        let off = self.seg_offset(st, o.seg) + self.geo.summary_offset(s.copy());
        let r = self
            .cache
            .flush()
            .and_then(|_| self.cache.write_at(&s.encode(&self.geo), off))
            .and_then(|_| self.cache.flush());
        if let Err(e) = r {
            self.cache_error(st, "writing a segment summary", &e);
            return Err(err(format!("cache device: writing a segment summary: {e}")));
        }
        st.stats.summary_writes += 1;
        let o = st.open.as_mut().expect("open segment");
        o.version += 1;
        o.durable = o.entries.len();
        Ok(())
    }

    /// Seal the open segment and open a free one: the sealed summary and a
    /// backing flush are durable first; then the journal record naming the new
    /// segment, then its two summaries (a crash between them leaves a record
    /// that recovery skips); all of it before any data goes into the segment.
    fn roll(&self, st: &mut State) -> Res<()> {
        if st.open.is_some() {
            self.persist_summary(st)?;
            let o = st.open.take().expect("open segment");
            st.segs[o.seg as usize].state = SegState::Sealed;
        }
        if st.backing_dirty {
            if let Err(e) = self.backing.flush() {
                return Err(self.backing_error(st, "flush", e));
            }
            st.backing_dirty = false;
        }
        if st.journal_next >= st.sb.journal_records || st.ckpt_before_reuse {
            self.checkpoint(st)?;
        }
        // Free segments are reused in the order they were freed (`evict`).
        let Some(seg) = st.free.pop_front() else {
            return Err(err("no free segment (cleaning could not free one)"));
        };
        let seq = st.next_seq;
        st.next_seq += 1;
        let base = self.seg_offset(st, seg);
        let rec = JournalRecord {
            epoch: st.epoch,
            index: st.journal_next,
            seg,
            seq,
        };
        // The journal record first, flushed, then the new life's summaries:
        // a crash in between leaves a record whose segment still holds its
        // old summary (recovery skips it and drops the checkpoint's entries
        // into it), never a new summary that no record names while the
        // checkpoint still maps blocks into the old life.
        let mut r = self
            .cache
            .write_at(&rec.encode(), st.sb.journal_off + rec.index as u64 * BLOCK)
            .and_then(|_| self.cache.flush());
        for v in 0..2u64 {
            let s = Summary {
                seg,
                seq,
                version: v,
                entries: Vec::new(),
            };
            r = r.and_then(|_| {
                self.cache.write_at(
                    &s.encode(&self.geo),
                    base + self.geo.summary_offset(s.copy()),
                )
            });
        }
        let r = r.and_then(|_| self.cache.flush());
        st.journal_next += 1;
        st.segs[seg as usize] = SegInfo {
            state: SegState::Open,
            seq,
            live: 0,
        };
        if let Err(e) = r {
            // The segment's new life may or may not be on disk: it stays used, as a sealed empty segment.
            st.segs[seg as usize].state = SegState::Sealed;
            self.cache_error(st, "opening a segment", &e);
            return Err(err(format!("cache device: opening a segment: {e}")));
        }
        st.stats.segments_opened += 1;
        st.open = Some(OpenSeg {
            seg,
            seq,
            entries: Vec::new(),
            version: 1,
            durable: 0,
        });
        Ok(())
    }

    /// Room left in the open segment.
    fn room(&self, st: &State) -> usize {
        st.open
            .as_ref()
            .map_or(0, |o| self.data_blocks as usize - o.entries.len())
    }

    /// Append whole blocks `lbas` (data in `data`, 4 KiB each) to the log
    /// and map them. Returns how many were appended before a cache error
    /// (the rest were not).
    fn append(&self, st: &mut State, lbas: &[u64], data: &[u8], dirty: bool) -> Res<usize> {
        let mut done = 0;
        while done < lbas.len() {
            if st.free.len() < RESERVE {
                self.ensure_free(st)?;
            }
            if self.room(st) == 0 {
                if st.free.is_empty() {
                    self.ensure_free(st)?;
                }
                match self.roll(st) {
                    Ok(()) => {}
                    // The cache device failed: the caller goes around it.
                    Err(e) if e.0.starts_with("cache device") => return Ok(done),
                    Err(e) => return Err(e),
                }
            }
            let n = self.room(st).min(lbas.len() - done);
            if !self.append_into_open(
                st,
                &lbas[done..done + n],
                &data[done * BLOCK as usize..(done + n) * BLOCK as usize],
                dirty,
            )? {
                return Ok(done);
            }
            done += n;
        }
        Ok(done)
    }

    /// Write blocks that fit the open segment into it; `false` on a cache
    /// write error (the slots are burnt: summary entries EMPTY).
    fn append_into_open(
        &self,
        st: &mut State,
        lbas: &[u64],
        data: &[u8],
        dirty: bool,
    ) -> Res<bool> {
        let o = st.open.as_ref().expect("open segment");
        debug_assert!(lbas.len() <= self.data_blocks as usize - o.entries.len());
        let slot0 = o.seg * self.data_blocks + o.entries.len() as u32;
        let off = self.slot_offset(st, slot0);
        if let Err(e) = self.cache.write_at(data, off) {
            st.open
                .as_mut()
                .expect("open")
                .entries
                .extend(std::iter::repeat_n(EMPTY, lbas.len()));
            self.cache_error(st, "appending to a segment", &e);
            return Ok(false);
        }
        for (i, &lba) in lbas.iter().enumerate() {
            self.map_to(st, lba, slot0 + i as u32, dirty)?;
            st.open
                .as_mut()
                .expect("open")
                .entries
                .push(entry(lba, dirty));
        }
        st.stats.appended_blocks += lbas.len() as u64;
        Ok(true)
    }

    // ------------------------------------------------------------ cleaning

    /// Clean segments until `RESERVE` are free (or none is left to clean).
    fn ensure_free(&self, st: &mut State) -> Res<()> {
        let policy = *self.victim_policy.lock().unwrap_or_else(|e| e.into_inner());
        while st.free.len() < RESERVE {
            let Some(v) = pick_victim(&st.segs, self.data_blocks, st.next_seq, policy) else {
                break;
            };
            self.clean_segment(st, v)?;
        }
        Ok(())
    }

    /// Reclaim segment `v`: drop its live clean blocks, move its live dirty
    /// blocks into the open segment (or write them back if they do not fit).
    pub(crate) fn clean_segment(&self, st: &mut State, v: u32) -> Res<()> {
        let base = self.seg_offset(st, v);
        let mut head = vec![0u8; 2 * self.geo.summary_blocks as usize * BLOCK as usize];
        let summary = match self.cache.read_at(&mut head, base) {
            Ok(()) => {
                Summary::pick(&head, v, &self.geo).filter(|s| s.seq == st.segs[v as usize].seq)
            }
            Err(e) => {
                self.cache_error(st, "reading a segment summary", &e);
                None
            }
        };
        // (block, slot) of every live block; without a summary, scan the map.
        let mut live: Vec<(u64, u32)> = match &summary {
            Some(s) => s
                .entries
                .iter()
                .enumerate()
                .filter_map(|(k, &e)| {
                    let (lba, _) = decode_entry(e)?;
                    let slot = v * self.data_blocks + k as u32;
                    (st.map.get(lba)?.slot == slot).then_some((lba, slot))
                })
                .collect(),
            None => st
                .map
                .iter()
                .filter(|(_, e)| e.slot / self.data_blocks == v)
                .map(|(l, e)| (l, e.slot))
                .collect(),
        };
        if summary.is_some() && live.len() < st.segs[v as usize].live as usize {
            // The summary misses live blocks (it must not): never free a segment the map points into.
            tracing::warn!(
                "segment {v}: summary lists {} of {} live blocks; scanning the map",
                live.len(),
                st.segs[v as usize].live
            );
            live = st
                .map
                .iter()
                .filter(|(_, e)| e.slot / self.data_blocks == v)
                .map(|(l, e)| (l, e.slot))
                .collect();
        }
        let mut dirty = Vec::new();
        for (lba, slot) in live {
            if st.map.get(lba).is_some_and(|e| e.dirty) {
                dirty.push((lba, slot));
            } else {
                self.evict(st, lba);
                st.stats.silent_evictions += 1;
            }
        }
        if !dirty.is_empty() {
            let mut data = vec![0u8; dirty.len() * BLOCK as usize];
            for (i, &(_, slot)) in dirty.iter().enumerate() {
                let off = self.slot_offset(st, slot);
                if let Err(e) = self
                    .cache
                    .read_at(&mut data[i * BLOCK as usize..(i + 1) * BLOCK as usize], off)
                {
                    self.cache_error(st, "reading a dirty block to clean", &e);
                    return Err(err(format!(
                        "cache device: reading dirty block {} to move it: {e}",
                        dirty[i].0
                    )));
                }
            }
            let lbas: Vec<u64> = dirty.iter().map(|d| d.0).collect();
            let moved = st.degraded.is_none()
                && self.room(st) >= lbas.len()
                && self.append_into_open(st, &lbas, &data, true)?;
            if moved {
                // A moved copy supersedes what its old copy superseded, and
                // the old copy itself, which holds the same data.
                for &(lba, old) in &dirty {
                    let slot = st.map.get(lba).expect("moved block is mapped").slot;
                    let s = shadows(st, old);
                    set_shadows(st, slot, s);
                }
                st.stats.moved_dirty += lbas.len() as u64;
            } else {
                for (i, &lba) in lbas.iter().enumerate() {
                    if let Err(e) = self.backing.write_at(
                        &data[i * BLOCK as usize..(i + 1) * BLOCK as usize],
                        lba * BLOCK,
                    ) {
                        return Err(self.backing_error(st, "writing back a dirty block", e));
                    }
                    st.backing_dirty = true;
                    self.evict(st, lba);
                    st.stats.cleaning_written_back += 1;
                }
            }
        }
        debug_assert_eq!(
            st.segs[v as usize].live, 0,
            "segment {v} still has live blocks"
        );
        st.segs[v as usize].state = SegState::Free;
        st.free.push_back(v);
        st.stats.segments_cleaned += 1;
        Ok(())
    }

    /// Write back up to `max` dirty blocks in backing order from the
    /// cleaning cursor; they stay cached, clean. Returns how many.
    fn write_back_some(&self, st: &mut State, max: usize) -> Res<usize> {
        let mut lbas = st.map.dirty_from(st.clean_cursor, max);
        if lbas.is_empty() && st.clean_cursor > 0 {
            st.clean_cursor = 0;
            lbas = st.map.dirty_from(0, max);
        }
        let mut i = 0;
        while i < lbas.len() {
            // A run of consecutive blocks in consecutive slots of one segment.
            let first = st.map.get(lbas[i]).expect("dirty block is mapped");
            let mut n = 1;
            while i + n < lbas.len()
                && lbas[i + n] == lbas[i] + n as u64
                && st.map.get(lbas[i + n]).map(|e| e.slot) == Some(first.slot + n as u32)
                && !(first.slot + n as u32).is_multiple_of(self.data_blocks)
            {
                n += 1;
            }
            let mut buf = vec![0u8; n * BLOCK as usize];
            if let Err(e) = self
                .cache
                .read_at(&mut buf, self.slot_offset(st, first.slot))
            {
                self.cache_error(st, "reading dirty data to write back", &e);
                return Err(err(format!(
                    "cache device: reading dirty block {}: {e}",
                    lbas[i]
                )));
            }
            if let Err(e) = self.backing.write_at(&buf, lbas[i] * BLOCK) {
                return Err(self.backing_error(st, "writing back", e));
            }
            st.backing_dirty = true;
            for k in 0..n {
                let e = st.map.get(lbas[i + k]).expect("mapped");
                st.map
                    .insert(
                        lbas[i + k],
                        Entry {
                            slot: e.slot,
                            dirty: false,
                        },
                    )
                    .map_err(err)?;
            }
            st.stats.written_back += n as u64;
            i += n;
        }
        if let Some(&l) = lbas.last() {
            st.clean_cursor = l + 1;
        }
        Ok(lbas.len())
    }

    /// Keep dirty blocks under the target share of slots (all of them in degraded mode).
    fn clean_to_target(&self, st: &mut State) -> Res<()> {
        let target = if st.degraded.is_some() {
            0
        } else {
            (st.sb.dirty_target * st.sb.slots() as f64) as usize
        };
        while st.map.dirty() > target {
            if self.write_back_some(st, 256)? == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Write a checkpoint of the map (a new epoch; the journal starts over).
    pub(crate) fn checkpoint(&self, st: &mut State) -> Res<()> {
        if st.backing_dirty {
            if let Err(e) = self.backing.flush() {
                return Err(self.backing_error(st, "flush", e));
            }
            st.backing_dirty = false;
        }
        // The open segment's summary must cover what the checkpoint says it
        // covers: after a restart the segment is cleaned from its summary.
        self.persist_summary(st)?;
        let (open_seg, open_seq, open_count) = match &st.open {
            Some(o) => (o.seg, o.seq, o.entries.len() as u32),
            None => (NONE, 0, 0),
        };
        let ck = Checkpoint {
            epoch: st.epoch + 1,
            next_seq: st.next_seq,
            open_seg,
            open_seq,
            open_count,
            seg_seqs: st.segs.iter().map(|s| s.seq).collect(),
            entries: st.map.iter().map(|(l, e)| (l, e.dirty, e.slot)).collect(),
        };
        if let Err(e) = self
            .cache
            .flush()
            .and_then(|_| ck.write(self.cache.as_ref(), &st.sb))
        {
            self.cache_error(st, "writing a checkpoint", &e);
            return Err(err(format!("cache device: writing a checkpoint: {e}")));
        }
        st.epoch += 1;
        st.journal_next = 0;
        st.need_ckpt = false;
        st.shadows.fill(0);
        st.ckpt_before_reuse = false;
        st.stats.checkpoints += 1;
        Ok(())
    }

    // ------------------------------------------------------------ requests

    /// Read whole blocks `b0..b0 + n`; misses are cached (`fill`) unless degraded.
    fn read_blocks(
        &self,
        st: &mut State,
        b0: u64,
        n: usize,
        fill: bool,
        count: bool,
    ) -> Res<Vec<u8>> {
        let mut buf = vec![0u8; n * BLOCK as usize];
        let mut i = 0;
        let mut misses: Vec<(usize, usize)> = Vec::new();
        while i < n {
            let e = st.map.get(b0 + i as u64);
            let mut k = 1;
            match e {
                Some(e) => {
                    while i + k < n
                        && !(e.slot + k as u32).is_multiple_of(self.data_blocks)
                        && st.map.get(b0 + (i + k) as u64).map(|x| x.slot)
                            == Some(e.slot + k as u32)
                    {
                        k += 1;
                    }
                    let range = i * BLOCK as usize..(i + k) * BLOCK as usize;
                    if let Err(er) = self
                        .cache
                        .read_at(&mut buf[range], self.slot_offset(st, e.slot))
                    {
                        self.cache_error(st, "reading cached data", &er);
                        // Clean blocks come from the backing device; dirty ones are lost.
                        for j in i..i + k {
                            let lba = b0 + j as u64;
                            if st.map.get(lba).is_some_and(|x| x.dirty) {
                                return Err(err(format!(
                                    "cache device: reading dirty block {lba}: {er}"
                                )));
                            }
                            self.unmap(st, lba);
                            let r = &mut buf[j * BLOCK as usize..(j + 1) * BLOCK as usize];
                            if let Err(e) = self.backing.read_at(r, lba * BLOCK) {
                                return Err(self.backing_error(st, "read", e));
                            }
                        }
                    }
                    if count {
                        st.stats.read_hits += k as u64;
                    }
                }
                None => {
                    while i + k < n && st.map.get(b0 + (i + k) as u64).is_none() {
                        k += 1;
                    }
                    let range = i * BLOCK as usize..(i + k) * BLOCK as usize;
                    if let Err(e) = self
                        .backing
                        .read_at(&mut buf[range], (b0 + i as u64) * BLOCK)
                    {
                        return Err(self.backing_error(st, "read", e));
                    }
                    if count {
                        st.stats.read_misses += k as u64;
                    }
                    misses.push((i, k));
                }
            }
            i += k;
        }
        if fill && st.degraded.is_none() {
            for (i, k) in misses {
                let lbas: Vec<u64> = (b0 + i as u64..b0 + (i + k) as u64).collect();
                let done = self.append(
                    st,
                    &lbas,
                    &buf[i * BLOCK as usize..(i + k) * BLOCK as usize],
                    false,
                )?;
                st.stats.fills += done as u64;
            }
        }
        Ok(buf)
    }

    /// Bytes `offset..offset + len`.
    pub fn read(&self, offset: u64, len: usize) -> Res<Vec<u8>> {
        let mut st = self.lock()?;
        let (b0, b1) = (offset / BLOCK, (offset + len as u64).div_ceil(BLOCK));
        let buf = self.read_blocks(&mut st, b0, (b1 - b0) as usize, true, true)?;
        let s = (offset - b0 * BLOCK) as usize;
        Ok(buf[s..s + len].to_vec())
    }

    /// Store `data` at `offset`; with `fua`, durable on return.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Res<()> {
        if data.is_empty() {
            return if fua { self.flush() } else { Ok(()) };
        }
        let mut st = self.lock()?;
        let st = &mut *st;
        let (b0, b1) = (offset / BLOCK, (offset + data.len() as u64).div_ceil(BLOCK));
        let n = (b1 - b0) as usize;
        for b in b0..b1 {
            if st.map.get(b).is_some() {
                st.stats.write_hits += 1;
            } else {
                st.stats.write_misses += 1;
            }
        }
        match self.policy {
            WritePolicy::WriteBack => {
                let s = (offset - b0 * BLOCK) as usize;
                let full = if s == 0 && data.len() == n * BLOCK as usize {
                    data.to_vec()
                } else {
                    // Partial blocks: read-modify-write of the first and last block.
                    let mut buf = vec![0u8; n * BLOCK as usize];
                    let head = self.read_blocks(st, b0, 1, false, false)?;
                    buf[..BLOCK as usize].copy_from_slice(&head);
                    if n > 1 {
                        let tail = self.read_blocks(st, b1 - 1, 1, false, false)?;
                        buf[(n - 1) * BLOCK as usize..].copy_from_slice(&tail);
                    }
                    buf[s..s + data.len()].copy_from_slice(data);
                    buf
                };
                let lbas: Vec<u64> = (b0..b1).collect();
                let done = if st.degraded.is_none() {
                    self.append(st, &lbas, &full, true)?
                } else {
                    0
                };
                if done < n {
                    self.bypass(st, b0 + done as u64, &full[done * BLOCK as usize..])?;
                }
                self.clean_to_target(st)?;
                if fua {
                    self.flush_locked(st)?;
                }
            }
            WritePolicy::WriteThrough => {
                let r = if fua {
                    self.backing.write_at_fua(data, offset)
                } else {
                    self.backing.write_at(data, offset)
                };
                if let Err(e) = r {
                    // The old cached copies may be stale now.
                    for b in b0..b1 {
                        self.unmap(st, b);
                    }
                    return Err(self.backing_error(st, "write", e));
                }
                if !fua {
                    st.backing_dirty = true;
                }
                // Whole blocks get a clean cache copy; partial ones are dropped.
                let fb0 = offset.div_ceil(BLOCK);
                let fb1 = (offset + data.len() as u64) / BLOCK;
                for b in (b0..b1).filter(|&b| b < fb0 || b >= fb1) {
                    self.unmap(st, b);
                }
                if fb1 > fb0 {
                    let s = (fb0 * BLOCK - offset) as usize;
                    let lbas: Vec<u64> = (fb0..fb1).collect();
                    let bytes = &data[s..s + lbas.len() * BLOCK as usize];
                    let done = if st.degraded.is_none() {
                        self.append(st, &lbas, bytes, false)?
                    } else {
                        0
                    };
                    for &b in &lbas[done..] {
                        self.unmap(st, b);
                    }
                }
            }
        }
        Ok(())
    }

    /// Write whole blocks to the backing device around the cache.
    fn bypass(&self, st: &mut State, b0: u64, data: &[u8]) -> Res<()> {
        if let Err(e) = self.backing.write_at(data, b0 * BLOCK) {
            return Err(self.backing_error(st, "write", e));
        }
        let n = data.len() as u64 / BLOCK;
        for b in b0..b0 + n {
            self.unmap(st, b);
        }
        st.backing_dirty = true;
        st.need_ckpt = true;
        st.stats.bypassed += n;
        Ok(())
    }

    fn flush_locked(&self, st: &mut State) -> Res<()> {
        st.stats.flushes += 1;
        if self.policy == WritePolicy::WriteBack {
            self.persist_summary(st)?;
        }
        if st.need_ckpt {
            self.checkpoint(st)?;
        }
        if st.backing_dirty {
            if let Err(e) = self.backing.flush() {
                return Err(self.backing_error(st, "flush", e));
            }
            st.backing_dirty = false;
        }
        Ok(())
    }

    /// Make every completed write durable (NBD FLUSH).
    pub fn flush(&self) -> Res<()> {
        let mut st = self.lock()?;
        self.flush_locked(&mut st)
    }

    /// Discard whole blocks of `offset..offset + len` from the cache and the
    /// backing device (contents afterwards are unspecified, as NBD allows).
    pub fn trim(&self, offset: u64, len: u64) -> Res<()> {
        let mut st = self.lock()?;
        let (b0, b1) = (offset.div_ceil(BLOCK), (offset + len) / BLOCK);
        for b in b0..b1.max(b0) {
            self.unmap(&mut st, b);
        }
        if b1 > b0 {
            if let Err(e) = self.backing.trim(b0 * BLOCK, (b1 - b0) * BLOCK) {
                return Err(self.backing_error(&mut st, "trim", e));
            }
            st.backing_dirty = true;
        }
        Ok(())
    }

    /// Prefetch `offset..offset + len` into the cache (NBD CACHE).
    pub fn prefetch(&self, offset: u64, len: u64) -> Res<()> {
        let mut st = self.lock()?;
        let (b0, b1) = (offset / BLOCK, (offset + len).div_ceil(BLOCK));
        let mut b = b0;
        while b < b1 {
            let n = (b1 - b).min(256);
            self.read_blocks(&mut st, b, n as usize, true, false)?;
            b += n;
        }
        Ok(())
    }

    /// Write every dirty block back, flush the backing device and
    /// checkpoint (the `flush` control command). Returns how many.
    pub fn write_back_all(&self) -> Res<u64> {
        let mut st = self.lock()?;
        let before = st.stats.written_back;
        st.clean_cursor = 0;
        while st.map.dirty() > 0 {
            if self.write_back_some(&mut st, 1024)? == 0 {
                break;
            }
        }
        self.flush_locked(&mut st)?;
        self.checkpoint(&mut st)?;
        Ok(st.stats.written_back - before)
    }

    /// Clean shutdown: everything durable, a checkpoint, the superblock
    /// marked clean. With `detach`, every dirty block is written back first,
    /// so the backing device alone holds all data.
    pub fn shutdown(&self, detach: bool) -> Res<()> {
        if detach {
            self.write_back_all()?;
        }
        let mut st = self.lock()?;
        self.flush_locked(&mut st)?;
        self.checkpoint(&mut st)?;
        st.sb.clean = true;
        let mut sb = st.sb.clone();
        sb.write(self.cache.as_ref())
            .map_err(|e| err(format!("cache device: writing the superblock: {e}")))?;
        st.sb = sb;
        st.closed = true;
        Ok(())
    }

    /// Clean segments until `n` are free (tests and benchmarks).
    pub fn clean_segments(&self, n: usize) -> Res<()> {
        let mut st = self.lock()?;
        let policy = *self.victim_policy.lock().unwrap_or_else(|e| e.into_inner());
        while st.free.len() < n {
            let Some(v) = pick_victim(&st.segs, self.data_blocks, st.next_seq, policy) else {
                break;
            };
            self.clean_segment(&mut st, v)?;
        }
        Ok(())
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).stats
    }
    /// Blocks mapped and dirty blocks.
    pub fn occupancy(&self) -> (u64, u64) {
        let st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        (st.map.len() as u64, st.map.dirty() as u64)
    }
    /// Host memory of the map per mapped block (bytes), and at a full cache.
    pub fn map_bytes_per_block(&self) -> (f64, f64) {
        let st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let m = st.map.memory_bytes() as f64;
        (m / st.map.len().max(1) as f64, m / st.sb.slots() as f64)
    }

    /// `tiercache stats --json`.
    pub fn stats_json(&self) -> Value {
        let st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let c = st.stats;
        let count = |s: SegState| st.segs.iter().filter(|x| x.state == s).count();
        let (hits, misses) = (c.read_hits + c.write_hits, c.read_misses + c.write_misses);
        let r = &self.recovery;
        let m = st.map.memory_bytes() as f64;
        json!({
            "mode": "log-structured",
            "status": match (&st.degraded, st.closed) { (_, true) => "closed", (Some(_), _) => "degraded", _ => "ok" },
            "degraded_reason": st.degraded,
            "write_policy": self.policy.to_string(),
            "backing": self.backing_path.display().to_string(),
            "size": self.size,
            "slots": st.sb.slots(),
            "mapped_blocks": st.map.len(),
            "dirty_blocks": st.map.dirty(),
            "occupancy": st.map.len() as f64 / st.sb.slots() as f64,
            "hits": hits,
            "misses": misses,
            "hit_ratio": if hits + misses > 0 { hits as f64 / (hits + misses) as f64 } else { 0.0 },
            "read_hits": c.read_hits,
            "read_misses": c.read_misses,
            "write_hits": c.write_hits,
            "write_misses": c.write_misses,
            "fills": c.fills,
            "appended_blocks": c.appended_blocks,
            "bypassed_blocks": c.bypassed,
            "flushes": c.flushes,
            "segments": {
                "total": st.sb.nsegs,
                "bytes": st.sb.seg_bytes,
                "data_blocks": self.data_blocks,
                "free": count(SegState::Free),
                "open": count(SegState::Open),
                "sealed": count(SegState::Sealed),
                "opened": c.segments_opened,
            },
            "cleaning": {
                "segments_cleaned": c.segments_cleaned,
                "silent_evictions": c.silent_evictions,
                "moved_dirty_blocks": c.moved_dirty,
                "cleaning_written_back": c.cleaning_written_back,
                "written_back": c.written_back,
            },
            "metadata": {
                "summary_writes": c.summary_writes,
                "checkpoints": c.checkpoints,
                "epoch": st.epoch,
                "journal_records": st.journal_next,
            },
            "map": {
                "bytes": st.map.memory_bytes(),
                "entry_bytes": st.map.entry_bytes(),
                "capacity": st.map.capacity(),
                "bytes_per_cached_block": m / st.map.len().max(1) as f64,
                "bytes_per_block_full": m / st.sb.slots() as f64,
            },
            "errors": { "cache": c.cache_errors, "backing": c.backing_errors },
            "recovery": {
                "ms": r.duration.as_secs_f64() * 1000.0,
                "clean_shutdown": r.clean_shutdown,
                "checkpoint_epoch": r.checkpoint_epoch,
                "checkpoint_entries": r.checkpoint_entries,
                "replayed_segments": r.replayed_segments,
                "replayed_entries": r.replayed_entries,
                "dropped_clean": r.dropped_clean,
                "mapped_blocks": r.mapped_blocks,
                "dirty_blocks": r.dirty_blocks,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{format, FormatOptions};
    use crate::recovery::open_with_devices;
    use tiercache_io::{FileDev, FileDevOptions};

    fn dev(p: &Path) -> Arc<dyn BlockDev> {
        Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
    }

    /// Block `b` at version `v`.
    fn block(b: u64, v: u64) -> Vec<u8> {
        let mut d = vec![0u8; BLOCK as usize];
        for w in d.chunks_mut(16) {
            w[..8].copy_from_slice(&b.to_le_bytes());
            w[8..].copy_from_slice(&v.to_le_bytes());
        }
        d
    }
    fn version(b: u64, d: &[u8]) -> u64 {
        assert_eq!(&d[..8], &b.to_le_bytes(), "block {b} holds another block");
        u64::from_le_bytes(d[8..16].try_into().unwrap())
    }

    /// A write-back cache (64 KiB segments: 14 slots) over 1024 blocks at version 0.
    fn setup(dir: &Path) -> (PathBuf, PathBuf) {
        let backing = dir.join("backing.img");
        let data: Vec<u8> = (0..1024).flat_map(|b| block(b, 0)).collect();
        std::fs::write(&backing, data).unwrap();
        let cache = dir.join("cache.img");
        format(&FormatOptions {
            cache: cache.clone(),
            backing: backing.clone(),
            create_size: Some(1 << 20),
            write_policy: WritePolicy::WriteBack,
            dirty_target: 0.9,
            seg_bytes: 64 << 10,
            force: false,
        })
        .unwrap();
        (cache, backing)
    }

    fn write(c: &LogCache, first: u64, n: u64, v: u64) {
        let d: Vec<u8> = (first..first + n).flat_map(|b| block(b, v)).collect();
        c.write(first * BLOCK, &d, false).unwrap();
    }

    /// Block 32 is written (v1, segment A), overwritten and flushed (v2,
    /// segment B), written back by write-back cleaning; segment cleaning then
    /// drops its clean copy from B and B is reused. A crash must not bring
    /// back A's older dirty copy: the backing device holds v2. With
    /// `restart`, the cache is killed and recovered between the flush and
    /// the cleaning (recovery replays both copies, B's last); with
    /// `checkpoint`, A's copy is in the checkpoint rather than the journal.
    fn older_dirty_copy_stays_buried(restart: bool, checkpoint: bool) {
        let dir = tempfile::tempdir().unwrap();
        let (cache, backing) = setup(dir.path());
        let mut c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
        write(&c, 32, 1, 1); // segment A: 32 v1 ...
        write(&c, 100, 13, 1); // ... and 13 more: A is full
        if checkpoint {
            let mut st = c.lock().unwrap();
            c.checkpoint(&mut st).unwrap();
        }
        write(&c, 32, 1, 2); // segment B: 32 v2 ...
        write(&c, 200, 13, 1); // ... B is full
        write(&c, 300, 1, 1); // B sealed
        c.flush().unwrap();
        if restart {
            drop(c); // kill -9
            c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
            assert_eq!(version(32, &c.read(32 * BLOCK, BLOCK as usize).unwrap()), 2);
        }
        {
            let mut st = c.lock().unwrap();
            let st = &mut *st;
            let b = st.map.get(32).unwrap().slot / c.data_blocks;
            // Write-back cleaning: everything clean (no checkpoint).
            while c.write_back_some(st, 1024).unwrap() > 0 {}
            assert_eq!(st.map.dirty(), 0);
            // Segment cleaning of B drops its clean copy of block 32.
            c.clean_segment(st, b).unwrap();
            assert!(st.map.get(32).is_none());
            // Open segments until B's next life begins.
            while st.free.front() != Some(&b) {
                c.roll(st).unwrap();
            }
            c.roll(st).unwrap();
            assert_eq!(st.open.as_ref().unwrap().seg, b);
        }
        assert_eq!(version(32, &c.read(32 * BLOCK, BLOCK as usize).unwrap()), 2);
        drop(c); // kill -9
        let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
        let got = version(32, &c.read(32 * BLOCK, BLOCK as usize).unwrap());
        assert_eq!(got, 2, "block 32 after the crash: stale version {got}");
    }

    #[test]
    fn reusing_a_segment_never_resurrects_an_older_dirty_copy() {
        older_dirty_copy_stays_buried(false, false);
    }

    #[test]
    fn reusing_a_segment_never_resurrects_an_older_checkpointed_copy() {
        older_dirty_copy_stays_buried(false, true);
    }

    #[test]
    fn reusing_a_segment_after_a_restart_never_resurrects_an_older_dirty_copy() {
        older_dirty_copy_stays_buried(true, false);
    }
}
