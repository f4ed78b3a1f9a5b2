//! The log-structured cache: requests, the log, cleaning, FLUSH, failures.
//!
//! Every write to the cache device is an append to the open segment; the
//! map then points the block at its new slot (the old copy becomes dead
//! space). Durability follows FlashTier's rules (Table II, 4.2): a dirty
//! write is durable once a FLUSH (or its own FUA) completed, which flushes
//! the data, then writes the summaries of the open segment and of the
//! segments sealed since the last commit (`log`), then flushes again;
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
//! Requests run one at a time under one lock, with synchronous device I/O;
//! all-hit reads read their slots after releasing it, guarded by per-segment
//! generations, and plain appends run on the caller's thread (`fast`).
//! Two things run beside them (`background`): FLUSHes and FUA writes that
//! arrive while a commit is running join the next one (group commit: one
//! summary write and its device flushes cover every write completed before
//! it started), and, when started ([`LogCache::start_cleaner`]), a cleaner
//! thread that keeps free segments ahead of the requests and writes dirty
//! blocks back towards the dirty target at a paced rate, one segment or one
//! write-back batch per lock hold; requests then clean only as a last
//! resort. Both run the same steps under the same
//! lock as the requests did, so the crash guarantees are those of the
//! request path.
//!
//! This file holds the cache's types, state and shared helpers (mapping and
//! eviction, offsets, error accounting); the rest is split: `log` (appends,
//! rolling segments), `clean` (segment cleaning, write-back, checkpoints),
//! `read`, `write` (writes, trims, FLUSH), `lifecycle` and `report`.

mod background;
mod clean;
mod fast;
mod lifecycle;
mod log;
mod read;
mod report;
mod resize;
mod write;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tiercache_io::BlockDev;

pub use self::fast::{fast_path_wanted, FAST_MAX};
use self::log::Staged;
pub use self::resize::STOP_AT_ENV as RESIZE_STOP_AT_ENV;
use crate::cleaning::{SegInfo, VictimPolicy};
use crate::compress::{Codec, RAW_UNITS, UNIT};
use crate::layout::{Superblock, WritePolicy};
use crate::map::{Entry, SparseMap};
use crate::segment::Geometry;
use tiercache_flashtier_policy::logstore::Log;

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

/// Free segments kept ready; cleaning starts below this (the policy's).
pub const RESERVE: usize = tiercache_flashtier_policy::logstore::RESERVE;
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
    /// Why the cache started cold (every cached block dropped at open): it
    /// was detached, or the backing device was modified while it was stopped.
    pub cold_start: Option<String>,
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
    /// Compressed layout: blocks appended as compressed records, and their bytes on the device.
    pub stored_compressed: u64,
    pub stored_compressed_bytes: u64,
    /// Compressed layout: blocks appended raw (they did not compress).
    pub stored_raw: u64,
    /// Compressed layout: records whose checksum or decompression failed on read.
    pub checksum_errors: u64,
}

/// How many blocks the cache holds ([`LogCache::occupancy`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Blocks mapped (cached).
    pub mapped: u64,
    /// Mapped blocks that are dirty.
    pub dirty: u64,
}

/// Host memory of the block map, in bytes per block ([`LogCache::map_bytes_per_block`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MapBytesPerBlock {
    /// Per block mapped now.
    pub mapped: f64,
    /// Per slot, as if the cache were full.
    pub full: f64,
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
    /// Compressed layout: units of the data area used so far.
    units: u32,
    /// Plain layout: blocks whose write-out to the device was started
    /// (`LogCache::start_write_out`).
    started: usize,
}

/// Mutable state, under the cache's lock: the FlashTier policy crate's
/// [`Log`] (map, segments, free list, open segment, victim rule, decision
/// counters) with the live store's own state ([`Ext`]) inside.
pub(crate) type State = Log<Ext>;

/// The live store's state around the policy's [`Log`]: metadata, the open
/// segment's summary, durability bookkeeping, errors.
pub(crate) struct Ext {
    pub(crate) sb: Superblock,
    /// The open segment's summary (the policy's `Log::open` names the segment).
    open_seg: Option<OpenSeg>,
    /// Sealed segments whose newest summary is not durable yet, oldest
    /// first: the next commit, checkpoint or announcement writes them
    /// (`log`), so a roll does not wait for a device flush.
    sealed: Vec<OpenSeg>,
    /// Segments announced ahead (`log`): their journal records are durable
    /// in this epoch, naming the next lives the free list will open, in
    /// order: `(segment, sequence number)`.
    announced: std::collections::VecDeque<(u32, u64)>,
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
    degraded: Option<String>,
    closed: bool,
    /// The counters the policy does not keep (metadata, errors).
    pub(crate) stats: Counters,
    /// Compressed layout: per slot, its record's place in its segment's
    /// data area, `first unit << 4 | units` (valid while the slot is mapped).
    pub(crate) loc: Vec<u32>,
    /// Compressed layout: records encoded by `fits` for the blocks of one
    /// buffer, taken by the append that follows.
    staged: Option<Staged>,
    /// Compressed layout: the records of a write's blocks, encoded before
    /// it took the lock; used by its appends, cleared before it unlocks.
    pub(super) prepared: Option<Staged>,
}

/// The state of a store opened over `map` and `segs`.
pub(crate) fn new_state(
    sb: Superblock,
    map: SparseMap,
    segs: Vec<SegInfo>,
    next_seq: u64,
    epoch: u64,
) -> State {
    let shadows = vec![0; (sb.slots() as usize).div_ceil(64)];
    let loc = if sb.compress.is_on() {
        vec![0; sb.slots() as usize]
    } else {
        Vec::new()
    };
    let data_blocks = sb.geometry().data_blocks();
    // The paced write-back asks for a few dirty blocks many times a second:
    // an ordered index answers without walking the whole map.
    let mut map = map;
    map.index_dirty();
    Log::new(
        map,
        segs,
        next_seq,
        data_blocks,
        Ext {
            sb,
            open_seg: None,
            sealed: Vec::new(),
            announced: Default::default(),
            epoch,
            journal_next: 0,
            backing_dirty: false,
            need_ckpt: false,
            shadows,
            ckpt_before_reuse: false,
            degraded: None,
            closed: false,
            stats: Counters::default(),
            loc,
            staged: None,
            prepared: None,
        },
    )
}

fn shadows(st: &State, slot: u32) -> bool {
    st.shadows[slot as usize / 64] >> (slot % 64) & 1 != 0
}
/// `e` left the map by cleaning or an unmap: if it superseded older entries
/// recovery could replay, the next segment opened checkpoints first.
fn evicted(st: &mut State, e: Entry) {
    if shadows(st, e.slot) {
        st.ckpt_before_reuse = true;
    }
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
    codec: Codec,
    st: Mutex<State>,
    recovery: RecoveryInfo,
    /// Group commit of FLUSH and FUA (`background`).
    commits: background::Commits,
    /// The background cleaner, when started (`background`).
    cleaner: background::Cleaner,
    /// Per segment, the sequence number of its life (`fast`).
    gens: fast::Generations,
    /// The fast path is on, and its counters (`fast`).
    fast_on: std::sync::atomic::AtomicBool,
    fast: fast::FastCounters,
    /// Failed reads and writes of the cache and backing devices (`stats`).
    device_errors: tiercache_io::DeviceErrors,
    /// Held by the one resize running (`resize`).
    resizing: Mutex<()>,
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
        let gens = fast::Generations::new(&st);
        let mut device_errors = tiercache_io::DeviceErrors::new();
        let cache = device_errors.count("cache", cache);
        let backing = device_errors.count("backing", backing);
        LogCache {
            geo,
            data_blocks: geo.data_blocks(),
            size: st.sb.backing_size,
            policy: st.sb.write_policy,
            codec: st.sb.compress,
            cache,
            backing,
            backing_path: backing_path.to_path_buf(),
            st: Mutex::new(st),
            recovery,
            commits: Default::default(),
            cleaner: Default::default(),
            gens,
            fast_on: std::sync::atomic::AtomicBool::new(true),
            fast: Default::default(),
            device_errors,
            resizing: Mutex::new(()),
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
        self.st.lock().unwrap_or_else(|e| e.into_inner()).victim = p;
    }

    fn lock(&self) -> Res<MutexGuard<'_, State>> {
        let mut g = self
            .st
            .lock()
            .map_err(|_| err("cache state poisoned by an earlier panic"))?;
        if g.closed {
            return Err(err("the cache is closed"));
        }
        // Records staged under an earlier holder belong to freed buffers.
        g.staged = None;
        g.prepared = None;
        Ok(g)
    }

    fn slot_offset(&self, st: &State, slot: u32) -> u64 {
        let (seg, k) = (slot / self.data_blocks, slot % self.data_blocks);
        if self.geo.is_compressed() {
            let unit = (st.loc[slot as usize] >> 4) as u64;
            return st.sb.seg_off
                + seg as u64 * st.sb.seg_bytes
                + self.geo.data_offset(0)
                + unit * UNIT as u64;
        }
        st.sb.seg_off + seg as u64 * st.sb.seg_bytes + self.geo.data_offset(k)
    }
    /// Units of the record in `slot` (a whole block in a plain layout).
    fn slot_units(&self, st: &State, slot: u32) -> u32 {
        if self.geo.is_compressed() {
            st.loc[slot as usize] & 15
        } else {
            RAW_UNITS
        }
    }
    /// The codec blocks are stored with.
    pub fn codec(&self) -> Codec {
        self.codec
    }
    /// Read the record of `lba` in `slot` (a compressed layout) from the
    /// cache device (the caller decodes it, off the lock where it can).
    fn read_record(&self, st: &State, slot: u32) -> std::io::Result<Vec<u8>> {
        let mut rec = vec![0u8; self.slot_units(st, slot) as usize * UNIT];
        self.cache.read_at(&mut rec, self.slot_offset(st, slot))?;
        Ok(rec)
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
    /// Flush the backing device if it took writes since its last flush.
    fn flush_backing(&self, st: &mut State) -> Res<()> {
        if st.backing_dirty {
            if let Err(e) = self.backing.flush() {
                return Err(self.backing_error(st, "flush", e));
            }
            st.backing_dirty = false;
        }
        Ok(())
    }
    fn backing_error(&self, st: &mut State, what: &str, e: std::io::Error) -> CacheError {
        st.stats.backing_errors += 1;
        err(format!("backing device: {what}: {e}"))
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
        let o = st.evict(lba)?;
        evicted(st, o);
        Some(o)
    }
}

#[cfg(test)]
mod tests;
