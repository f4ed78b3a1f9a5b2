//! The live cache: the policy core driving real devices.
//!
//! Every request is submitted to the core under one short lock; the ops it
//! returns run as tasks that wait for their dependencies, do their I/O on a
//! blocking thread, and report back. Nothing waits for the core but the core.
//!
//! Persistence (the crash rules of `tiercache-store`): the metadata log
//! describes what is durable, derived from op completions, not from the
//! core's eager state:
//! - a slot's `Valid`/`Dirty` record is appended only after the cache write
//!   it describes completed; a commit syncs the cache device before writing
//!   records, so data is durable before the record that claims it;
//! - a slot that held another line is `Unmap`ped, and the unmap committed,
//!   before any data of the new line is written into it (for a dirty victim,
//!   only after its writeback reached the backing device and that was
//!   flushed);
//! - a clean valid sub-block about to be overwritten in place is first
//!   invalidated and the invalidation committed, except for write-back
//!   writes of client data to their own line (rule 3b of `tiercache-store`,
//!   dm-cache's rule): while the superblock durably says "open" (set by
//!   `open` at attach, "clean" only by a clean shutdown's checkpoint, after
//!   these writes stopped and drained), they overwrite in place with no
//!   commit, and recovery after an unclean shutdown treats every valid
//!   sub-block as dirty, so the cleaner writes the slot's bytes back (they
//!   are always some version of the slot's own line: reuse for another line
//!   keeps the unmap-before-overwrite barrier). Every path on which the
//!   backing device gets data of a line the log may claim valid (a partial
//!   write of an invalid sub-block, TRIM, a failed cache write rerouted)
//!   invalidates the sub-block in the core at submission, and the record
//!   dropping it is appended in the same locked step, before the backing op
//!   exists: the FLUSH that acknowledges that data commits the drop, so no
//!   recovery writes older slot bytes over flushed data. Write-through,
//!   write-hdd-* and read-only keep the invalidate-first rule (there the
//!   backing device may hold newer flushed data than a clean slot);
//! - `Clean` records follow a flush of the backing device; a write-back write
//!   of client data is logged dirty even if cleaning already started behind it;
//! - right before any cache write starts, the log is checked once more: every
//!   record withdrawing a claim on the bytes it overwrites (an unmap, dropped
//!   valid sub-blocks) must be durable (`guard_overwrite`), since records of
//!   older ops may have been appended after this write was submitted;
//! - a failed cache write is never logged; in write-back its bytes are
//!   rerouted to the backing device through the core, and reads queued behind
//!   it are served from its payload;
//! - FLUSH and FUA flush the backing device and commit the log;
//! - a writeback's read (of the cache) and write (to the backing device) are
//!   retried after an error: an evicted dirty line's only copy is its old
//!   slot, already given to the new line. If the writeback fails for good,
//!   the slot is stranded (`failure`): never overwritten nor unmapped in the
//!   log, requests on its old line fail with EIO (the backing device holds
//!   older data), the cache degrades, and a restart recovers the line from
//!   the log and writes it back.
//!
//! This file holds the shared state ([`LiveCache`], the core and the log
//! view) and its construction; the work is split by responsibility:
//! `intake` (request submission), `journal` (log records and commits),
//! `barriers` (slot barriers, `guard_overwrite`), `policy` (online
//! policy changes, `tiercache set`), `exec` (running ops on the
//! devices), `failure` (device errors, degraded mode), `cleaner` (background
//! tasks), `lifecycle` (`flush_all`, shutdown), `resize` (`tiercache resize`) and
//! `debug` (debug state).

mod barriers;
mod cleaner;
mod debug;
mod exec;
mod failure;
mod intake;
mod journal;
mod lifecycle;
mod policy;
mod resize;
pub use policy::PolicyChange;
pub use resize::STOP_AT_ENV as RESIZE_STOP_AT_ENV;

use crate::stats::LiveStats;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tiercache_azor_policy::eviction::Slot;
use tiercache_azor_policy::SlotBits;
use tiercache_azor_policy::{Engine, Op, OpId, WritePolicy};
use tiercache_io::BlockDev;
use tiercache_store::{Record, SlotTable, Store, SubBlocks};
use tokio::sync::watch;

/// Consecutive device errors on the cache after which it stops caching new data.
const DEGRADE_AFTER: u64 = 8;

/// Retries of a writeback's read or write after an error (with a backoff of
/// 2, 4, ... ms): an evicted dirty line's only copy is its old slot.
const WRITEBACK_RETRIES: u32 = 6;

/// Interval of the background cleaner: the scheduler's tick.
const CLEAN_TICK: std::time::Duration =
    std::time::Duration::from_nanos(tiercache_azor_policy::cleaning::TICK_NS);

/// Records buffered after which a background commit starts.
const PENDING_COMMIT: usize = 16384;

/// Buffered records are committed at least this often with no FLUSH (like
/// dm-cache's commit every second): a commit syncs the cache file, so
/// committing by count alone under a write load would sync it many times a second.
const COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Buffer of one request, shared by its op tasks.
struct ReqBuf {
    /// Backing offset of `data[0]`: the request's offset, or for a read the
    /// start of its first sub-block ([`tiercache_azor_policy::buffer_span`]).
    offset: u64,
    data: Mutex<Vec<u8>>,
    /// A WRITE_ZEROES: `data` is zeros, and backing writes of it are sent as
    /// the device's zeroing command ([`BlockDev::write_zeroes`]).
    zeroes: bool,
}

/// What the log says about one slot, plus the core under one lock.
pub(crate) struct Core {
    pub(crate) engine: Engine,
    /// The hit ratio at other sizes, fed every request (`None`: switched off).
    pub(crate) whatif: Option<Box<crate::whatif::WhatIf>>,
    /// The slot table as the appended log records describe it.
    pub(crate) view: SlotTable,
    /// Records appended since the last commit.
    pending: Vec<Record>,
    /// Generation of the newest appended record (a commit makes everything up to it durable).
    appended_gen: u64,
    needs_backing_flush: bool,
    /// Log generations of the `Unmap` records appended since the last backing
    /// flush that need it (of lines whose writeback just completed).
    flushed_unmaps: std::collections::BTreeSet<u64>,
    /// Completion signal of every op in flight.
    /// Ops in flight; the channel is made when the first waiter comes (most ops have none).
    signals: FxHashMap<OpId, Option<watch::Sender<bool>>>,
    /// Cache writes in flight per slot: (op, first sub-block, last sub-block).
    inflight_writes: FxHashMap<Slot, Vec<(OpId, u32, u32)>>,
    /// Commit generation that must be durable before cache writes on a slot.
    slot_gen: FxHashMap<Slot, Vec<(u64, OpId)>>,
    /// Slots whose old dirty line is being written back before its unmap: one
    /// barrier per batch that reused the slot meanwhile, oldest first, each the
    /// writeback writes it still waits for and the first op id it binds. A
    /// barrier binds only its own batch and later ones (never an older write,
    /// which a later batch's writeback may read after), and they are released
    /// in order.
    pending_unmap: FxHashMap<Slot, Vec<(Vec<OpId>, OpId)>>,
    /// Writeback reads: their slot and data, for the writes that use it.
    wb_reads: FxHashMap<OpId, (Slot, Option<Vec<u8>>)>,
    /// Consecutive cache device errors.
    cache_errors: u64,
    /// Backing reads of read misses that failed: the fills they feed must not run.
    failed_reads: rustc_hash::FxHashSet<OpId>,
    /// Fills dropped because their backing read failed, and cache reads
    /// queued behind them on the slot: the slot does not hold their data, so
    /// a read that waits on one of them fails instead of returning its bytes.
    failed_fills: rustc_hash::FxHashSet<OpId>,
    /// Sub-blocks a dropped fill left without data, by the fill's id, until a
    /// cache write covering the whole sub-block succeeds. A read hit queued
    /// behind the fill through other ops of the slot (a fill of another
    /// sub-block, say) does not wait on the fill itself, yet must not read
    /// these bytes either.
    dropped_subs: FxHashMap<(Slot, u32), OpId>,
    /// Writebacks in flight per slot they read: (the read, the backing write).
    /// An unmap of the slot's old line waits for those whose read precedes the
    /// new line's first write there; keyed by slot, not by line, because the
    /// old line may be cached again in another slot by now, and waiting for
    /// *that* slot's writeback (which may read this slot after the new write)
    /// would close a cycle.
    wb_slots: FxHashMap<Slot, Vec<(OpId, OpId)>>,
    /// The slots each writeback write in flight reads.
    wb_write_slots: FxHashMap<OpId, Vec<Slot>>,
    /// Sub-blocks whose cache write failed, until a later write of the slot
    /// succeeds: reads queued behind the failed write must not read the slot.
    poisoned: FxHashMap<(Slot, u32), Vec<Poison>>,
    /// Per slot, the newest record that withdrew a claim on its bytes (an
    /// unmap, or valid sub-blocks dropped): it must be durable before the
    /// slot's bytes are overwritten.
    withdrawn: FxHashMap<Slot, u64>,
    /// Write-back writes of client data may overwrite clean valid sub-blocks
    /// of their own line in place without a commit first (rule 3b of
    /// `tiercache-store`): on while the superblock durably says "open", so
    /// that a crash makes recovery treat every valid sub-block as dirty.
    /// Turned off for good when a clean shutdown starts.
    fast_overwrite: bool,
    /// When to clean: the scheduler the simulator runs too, here on the
    /// wall clock (pressure cleaning in `submit`, ticks in the cleaner task).
    sched: tiercache_azor_policy::cleaning::CleaningScheduler,
    /// New requests wait (a write policy change is switching): see `policy`.
    paused: bool,
    /// Rerouted writes of failed cache writes over dirty sub-blocks: the
    /// backing write, and the sub-blocks (slot, first, last, line) held
    /// clean until it lands (then dropped) or fails (then dirty again).
    held: FxHashMap<OpId, (Slot, u32, u32, u64)>,
    /// Slots whose old dirty line's writeback failed for good after the slot
    /// was given to another line (by slot: the old line). The slot keeps
    /// that line's only copy: it is never overwritten nor unmapped in the
    /// log (a restart recovers the line from it and writes it back), and
    /// requests on the line fail (the backing device holds an older version).
    stranded: FxHashMap<Slot, u64>,
}

/// A failed cache write of `line`'s data: the bytes it should have left in
/// the slot, which reads queued behind it get from here.
#[derive(Clone, Debug)]
struct Poison {
    /// The failed write.
    id: OpId,
    line: u64,
    /// Cache-device offset of `data[0]` (relative to the data region).
    start: u64,
    data: Arc<Vec<u8>>,
}

/// The live cache: one export.
pub struct LiveCache {
    pub(crate) core: Mutex<Core>,
    pub(crate) store: Mutex<Store<crate::MetaStore>>,
    pub(crate) cache: Arc<dyn BlockDev>,
    pub(crate) backing: Arc<dyn BlockDev>,
    data_offset: u64,
    line: u64,
    sub: u64,
    next_req: AtomicU64,
    commit_lock: tokio::sync::Mutex<()>,
    commit_wanted: tokio::sync::Notify,
    committed: watch::Sender<u64>,
    pub(crate) stats: LiveStats,
    pub(crate) degraded: AtomicBool,
    /// The write policy in force (an index into `WritePolicy::ALL`; `tiercache set` changes it).
    write_policy: std::sync::atomic::AtomicU8,
    /// Mirrors `Core::paused`, for requests to wait on.
    pause: watch::Sender<bool>,
    /// One `tiercache set` at a time.
    set_lock: tokio::sync::Mutex<()>,
    /// Filesystem-aware classes (ext4, XFS) for requests, when on: the
    /// classification state. Its lock may be held across reads
    /// through this cache (a classifier re-detecting the layout), which need
    /// the runtime's workers: async code never blocks on it (`with_fs`).
    pub(crate) fs: Mutex<crate::classify::FsState>,
    /// The filesystem being classified, if any (apart from `fs`, so that
    /// stats and the request path never wait for a classification).
    pub(crate) fs_name: Mutex<Option<String>>,
    /// The I/O engine data ops run on (`None`: tokio's blocking pool).
    io: Mutex<Option<Arc<dyn tiercache_io::Engine>>>,
    classify: AtomicBool,
    /// What each op in flight is doing now (dependencies, slot barrier, I/O): the
    /// `debug` control command shows it, to diagnose a stuck request.
    phases: Mutex<FxHashMap<OpId, (Op, &'static str)>>,
    /// Whether `phases` is kept (`TIERCACHE_DEBUG_OPS=1`; off by default: one more
    /// lock per op step costs all-hit read throughput).
    track_phases: AtomicBool,
    /// Set once a cache write ever failed: until then reads skip the poison check (and its lock).
    any_poison: AtomicBool,
    /// Set once a fill was ever dropped: until then cache reads skip the
    /// failed-fill check (and its lock).
    pub(super) any_failed_fill: AtomicBool,
    /// Set once a slot was stranded (`Core::stranded`): until then requests
    /// skip the check (and its lock).
    any_stranded: AtomicBool,
    /// The backing device's path, to record its identity at a clean shutdown.
    backing_path: Mutex<Option<std::path::PathBuf>>,
    /// Why the cache started cold at open (`stats` shows it), if it did.
    cold_start: std::sync::OnceLock<String>,
    /// A clean shutdown started: no more cleaning, writes and trims fail.
    stopping: AtomicBool,
    /// Why the metadata store went fail-stop in write-back mode (an I/O
    /// error failed a commit): no commit can happen any more, so requests
    /// waiting for one, FLUSH and FUA fail (see `failure`).
    metadata_failed: std::sync::OnceLock<String>,
    /// `serve --record`: every request as the core takes it (`intake`).
    pub(crate) recorder: std::sync::OnceLock<Arc<tiercache_runtime::Recorder>>,
}

/// An I/O error to hand to the client, with a message for the log.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LiveError(pub String);

fn policy_index(p: WritePolicy) -> u8 {
    WritePolicy::ALL
        .iter()
        .position(|(x, _)| *x == p)
        .unwrap_or(0) as u8
}

fn range_bits(first: u32, last: u32) -> SubBlocks {
    let mut s = SubBlocks::default();
    for i in first..=last {
        s.set(i);
    }
    s
}

impl LiveCache {
    /// Build the live cache around a recovered store and its table.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mut engine: Engine,
        store: Store<crate::MetaStore>,
        table: SlotTable,
        cache: Arc<dyn BlockDev>,
        backing: Arc<dyn BlockDev>,
        data_offset: u64,
        recovery: std::time::Duration,
    ) -> Result<Arc<LiveCache>, LiveError> {
        let geo = *engine.geometry();
        if table.len() != geo.slots as usize {
            return Err(LiveError(format!(
                "store has {} slots, engine {}",
                table.len(),
                geo.slots
            )));
        }
        engine
            .restore_slots(table.iter().map(|(s, m)| {
                (
                    s as Slot,
                    SlotBits {
                        line: m.line,
                        valid: m.valid.0,
                        dirty: m.dirty.0,
                        metadata: m.class != 0,
                    },
                )
            }))
            .map_err(|e| LiveError(format!("restoring the recovered table: {e}")))?;
        engine.set_journal(true);
        let _ = engine.take_touched();
        let write_policy = engine.config().write_policy;
        let fast_overwrite = write_policy == WritePolicy::WriteBack && !store.is_marked_clean();
        let stats = LiveStats::new(recovery);
        Ok(Arc::new(LiveCache {
            line: geo.line_bytes as u64,
            sub: geo.sub_block_bytes as u64,
            core: Mutex::new(Core {
                sched: tiercache_azor_policy::cleaning::CleaningScheduler::new(
                    engine.config().cleaning,
                    engine.geometry().slots as u64,
                    engine.dirty_target_lines() as u64,
                ),
                whatif: Some(Box::new(crate::whatif::WhatIf::new(
                    engine.config(),
                    engine.geometry().slots as u64,
                ))),
                engine,
                view: table,
                pending: Vec::new(),
                appended_gen: 0,
                needs_backing_flush: false,
                flushed_unmaps: Default::default(),
                signals: FxHashMap::default(),
                inflight_writes: FxHashMap::default(),
                slot_gen: FxHashMap::default(),
                pending_unmap: FxHashMap::default(),
                wb_reads: FxHashMap::default(),
                cache_errors: 0,
                failed_reads: Default::default(),
                failed_fills: Default::default(),
                dropped_subs: FxHashMap::default(),
                wb_slots: FxHashMap::default(),
                wb_write_slots: FxHashMap::default(),
                poisoned: FxHashMap::default(),
                withdrawn: FxHashMap::default(),
                fast_overwrite,
                paused: false,
                held: FxHashMap::default(),
                stranded: FxHashMap::default(),
            }),
            store: Mutex::new(store),
            cache,
            backing,
            data_offset,
            next_req: AtomicU64::new(1),
            commit_lock: tokio::sync::Mutex::new(()),
            commit_wanted: tokio::sync::Notify::new(),
            committed: watch::channel(0).0,
            stats,
            degraded: AtomicBool::new(false),
            write_policy: std::sync::atomic::AtomicU8::new(policy_index(write_policy)),
            pause: watch::channel(false).0,
            set_lock: tokio::sync::Mutex::new(()),
            fs: Mutex::new(crate::classify::FsState::default()),
            fs_name: Mutex::new(None),
            io: Mutex::new(None),
            classify: AtomicBool::new(false),
            phases: Mutex::new(FxHashMap::default()),
            any_poison: AtomicBool::new(false),
            any_failed_fill: AtomicBool::new(false),
            any_stranded: AtomicBool::new(false),
            backing_path: Mutex::new(None),
            cold_start: std::sync::OnceLock::new(),
            stopping: AtomicBool::new(false),
            metadata_failed: std::sync::OnceLock::new(),
            recorder: std::sync::OnceLock::new(),
            track_phases: AtomicBool::new(
                std::env::var_os("TIERCACHE_DEBUG_OPS").is_some_and(|v| v != "0"),
            ),
        }))
    }

    /// The write policy in force.
    pub fn write_policy(&self) -> WritePolicy {
        WritePolicy::ALL[self.write_policy.load(Ordering::Acquire) as usize].0
    }

    /// Size of the exported device.
    pub fn size(&self) -> u64 {
        self.backing.len()
    }

    /// The backing device's path: a clean shutdown records its identity (and
    /// marks the superblock clean) only when it is known.
    pub fn set_backing_path(&self, path: &std::path::Path) {
        *self.backing_path.lock().expect("backing path") = Some(path.to_path_buf());
    }

    /// Record why the cache started cold at open (detached, or its backing
    /// device modified while it was stopped).
    pub fn set_cold_start(&self, why: &str) {
        let _ = self.cold_start.set(why.to_string());
    }

    /// Why the cache started cold at open, if it did.
    pub fn cold_start(&self) -> Option<&str> {
        self.cold_start.get().map(String::as_str)
    }

    /// Classify requests by the filesystem on the device (ext4, XFS): attach now
    /// (in the background) and again whenever a write touches the first MiB.
    pub fn enable_classification(self: &Arc<Self>) {
        self.classify.store(true, Ordering::Relaxed);
        self.spawn_attach();
    }

    fn spawn_attach(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let rt = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || crate::classify::attach(&me, &me.fs, rt));
    }

    /// Run data I/O on `engine` (io_uring or a thread pool) instead of tokio's blocking pool.
    pub fn set_io_engine(&self, engine: Arc<dyn tiercache_io::Engine>) {
        *self.io.lock().expect("io") = Some(engine);
    }

    /// The filesystem being classified, if any.
    pub fn filesystem(&self) -> Option<String> {
        self.fs_name.lock().expect("fs name").clone()
    }

    /// Run `f` on the classification state without blocking a runtime
    /// worker: at once when the lock is free, else on the blocking pool. A
    /// worker blocked on it could deadlock the server: the holder may be
    /// waiting for a read through this cache, which needs the workers.
    pub(super) async fn with_fs<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut crate::classify::FsState) -> R + Send + 'static,
    ) -> R {
        let f = match self.fs.try_lock() {
            Ok(mut g) => return f(&mut g),
            Err(std::sync::TryLockError::Poisoned(e)) => panic!("fs: {e}"),
            Err(std::sync::TryLockError::WouldBlock) => f,
        };
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&mut me.fs.lock().expect("fs")))
            .await
            .expect("classification task")
    }
}
