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
//! - FLUSH and FUA flush the backing device and commit the log.

use crate::stats::LiveStats;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tiercache_core::cleaning::{CleaningRate, CleaningTuning};
use tiercache_core::eviction::Slot;
use tiercache_core::{Class, Dev, Engine, IoKind, Op, OpId, Purpose, Request, Source, WritePolicy};
use tiercache_io::{BlockDev, IoOp};
use tiercache_store::{LineMeta, Record, Store, SubBlocks};
use tokio::sync::watch;

/// Consecutive device errors on the cache after which it stops caching new data.
const DEGRADE_AFTER: u64 = 8;

/// Requests after a dirty eviction that each clean `clean_budget` lines.
const PRESSURE_REQUESTS: u32 = 1024;

/// Interval of the background cleaner.
const CLEAN_TICK: std::time::Duration = std::time::Duration::from_millis(10);

/// Lines the background cleaner writes back per tick when no request came
/// during the last one (idle: clean at full speed), and at most per tick.
const CLEAN_TICK_MAX_LINES: usize = 256;

/// Records buffered after which a background commit starts.
const PENDING_COMMIT: usize = 16384;

/// Buffered records are committed at least this often with no FLUSH (like
/// dm-cache's commit every second): a commit syncs the cache file, so
/// committing by count alone under a write load would sync it many times a second.
const COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Buffer of one request, shared by its op tasks.
struct ReqBuf {
    offset: u64,
    data: Mutex<Vec<u8>>,
}

/// What the log says about one slot, plus the core under one lock.
pub(crate) struct Core {
    pub(crate) engine: Engine,
    /// The slot table as the appended log records describe it.
    pub(crate) view: Vec<Option<LineMeta>>,
    /// Records appended since the last commit.
    pending: Vec<Record>,
    /// Generation of the newest appended record (a commit makes everything up to it durable).
    appended_gen: u64,
    needs_backing_flush: bool,
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
    /// The core's dirty-eviction count at the last submission.
    dirty_evictions_seen: u64,
    /// Requests left that also clean (set when a victim was dirty).
    pressure_left: u32,
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
    pub(crate) store: Mutex<Store<std::fs::File>>,
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
    write_policy: WritePolicy,
    clean_budget: usize,
    /// Filesystem-aware classes (ext4, XFS) for requests, when on.
    pub(crate) fs: Mutex<crate::classify::FsState>,
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
    /// The backing device's path, to record its identity at a clean shutdown.
    backing_path: Mutex<Option<std::path::PathBuf>>,
    /// A clean shutdown started: no more cleaning, writes and trims fail.
    stopping: AtomicBool,
}

/// An I/O error to hand to the client, with a message for the log.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LiveError(pub String);

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
        store: Store<std::fs::File>,
        table: Vec<Option<LineMeta>>,
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
        let subs = geo.subs;
        let entries: Vec<_> = table
            .iter()
            .enumerate()
            .filter_map(|(s, m)| {
                m.map(|m| {
                    let v = (0..subs).map(|i| m.valid.get(i)).collect();
                    let d = (0..subs).map(|i| m.dirty.get(i)).collect();
                    (s as Slot, m.line, v, d, m.class != 0)
                })
            })
            .collect();
        engine
            .restore(&entries)
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
                engine,
                view: table,
                pending: Vec::new(),
                appended_gen: 0,
                needs_backing_flush: false,
                signals: FxHashMap::default(),
                inflight_writes: FxHashMap::default(),
                slot_gen: FxHashMap::default(),
                pending_unmap: FxHashMap::default(),
                wb_reads: FxHashMap::default(),
                cache_errors: 0,
                failed_reads: Default::default(),
                wb_slots: FxHashMap::default(),
                wb_write_slots: FxHashMap::default(),
                poisoned: FxHashMap::default(),
                withdrawn: FxHashMap::default(),
                fast_overwrite,
                dirty_evictions_seen: 0,
                pressure_left: 0,
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
            write_policy,
            clean_budget: 2,
            fs: Mutex::new(crate::classify::FsState::default()),
            io: Mutex::new(None),
            classify: AtomicBool::new(false),
            phases: Mutex::new(FxHashMap::default()),
            any_poison: AtomicBool::new(false),
            backing_path: Mutex::new(None),
            stopping: AtomicBool::new(false),
            track_phases: AtomicBool::new(
                std::env::var_os("TIERCACHE_DEBUG_OPS").is_some_and(|v| v != "0"),
            ),
        }))
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

    /// Whether `op` may overwrite clean valid sub-blocks of its own line in
    /// place with no invalidation commit first (rule 3b): a write-back write
    /// of client data while the superblock says "open". Fills, write-through
    /// copies and the other policies keep the invalidate-first rule.
    fn overwrites_in_place(c: &Core, op: &Op) -> bool {
        c.fast_overwrite
            && op.dev == Dev::Cache
            && op.kind == IoKind::Write
            && op.purpose == Purpose::WriteCache
    }

    fn append(core: &mut Core, rec: Record) {
        let withdraws = match rec {
            Record::Unmap { .. } => true,
            Record::Valid { slot, bitmap } => {
                core.view[slot as usize].is_some_and(|v| !v.valid.minus(bitmap).is_empty())
            }
            _ => false,
        };
        rec.apply(&mut core.view);
        core.pending.push(rec);
        core.appended_gen += 1;
        if withdraws {
            core.withdrawn.insert(rec.slot(), core.appended_gen);
        }
        tracing::trace!(target: "tiercache::log", "append {} {rec:?}", core.appended_gen);
    }

    // ---- requests ----

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
        self.fs.lock().expect("fs").filesystem.clone()
    }

    /// Run one client request. `data` is the write payload; reads return their bytes.
    pub async fn request(
        self: &Arc<Self>,
        kind: IoKind,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        fua: bool,
    ) -> Result<Vec<u8>, LiveError> {
        self.request_with_class(kind, offset, len, data, fua, None)
            .await
    }

    /// A request whose class is given (`Some`), or found by the filesystem classifier (`None`).
    pub async fn request_with_class(
        self: &Arc<Self>,
        kind: IoKind,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        fua: bool,
        class: Option<Class>,
    ) -> Result<Vec<u8>, LiveError> {
        let classify = class.is_none() && self.classify.load(Ordering::Relaxed);
        let class = match (class, kind, data) {
            (Some(c), ..) => c,
            (None, _, _) if !classify => Class::Data,
            (None, IoKind::Write, Some(d)) => {
                let me = Arc::clone(self);
                let d = d.to_vec();
                tokio::task::spawn_blocking(move || {
                    crate::classify::write_class(&me.fs, offset, &d)
                })
                .await
                .unwrap_or(Class::Data)
            }
            (None, IoKind::Read, _) => self.fs.lock().expect("fs").read_class(offset, len),
            _ => Class::Data,
        };
        let out = self
            .run_request(
                kind,
                offset,
                len,
                data.map(std::borrow::Cow::Borrowed),
                fua,
                class,
            )
            .await?;
        if classify {
            match kind {
                IoKind::Read => self.fs.lock().expect("fs").learn(offset, &out),
                IoKind::Write if offset < (1 << 20) && self.filesystem().is_none() => {
                    self.spawn_attach()
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// A client write whose payload the cache may keep (no copy), unless
    /// filesystem classification needs to look at it first.
    pub async fn write_owned(
        self: &Arc<Self>,
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    ) -> Result<(), LiveError> {
        if self.classify.load(Ordering::Relaxed) {
            return self
                .request(IoKind::Write, offset, data.len() as u64, Some(&data), fua)
                .await
                .map(|_| ());
        }
        let len = data.len() as u64;
        self.run_request(
            IoKind::Write,
            offset,
            len,
            Some(std::borrow::Cow::Owned(data)),
            fua,
            Class::Data,
        )
        .await
        .map(|_| ())
    }

    async fn run_request(
        self: &Arc<Self>,
        kind: IoKind,
        offset: u64,
        len: u64,
        data: Option<std::borrow::Cow<'_, [u8]>>,
        fua: bool,
        class: Class,
    ) -> Result<Vec<u8>, LiveError> {
        if self.stopping.load(Ordering::Acquire) && matches!(kind, IoKind::Write | IoKind::Trim) {
            // The clean shutdown's checkpoint is (being) written: the cache is detached.
            return Err(LiveError(
                "the cache is shutting down (detached): writes are refused".into(),
            ));
        }
        let id = self.next_req.fetch_add(1, Ordering::Relaxed);
        let buf = Arc::new(ReqBuf {
            offset,
            data: Mutex::new(match (kind, data) {
                (IoKind::Write, Some(d)) => d.into_owned(),
                (IoKind::Read, _) => vec![0; len as usize],
                _ => Vec::new(),
            }),
        });
        let req = Request {
            id,
            kind,
            offset,
            len,
            class,
            fua,
        };
        let (ops, need_commit) = self.submit(&req);
        tracing::trace!(target: "tiercache::ops", "req {req:?} -> {ops:?}");
        // Background ops of this request (a read miss's fills) use its buffer
        // after it is answered: then the answer is a copy.
        let shared_buf = ops.iter().any(|o| o.req == id && !o.foreground);
        if need_commit {
            self.spawn_commit(false);
        }
        // The request's one foreground op (the usual case) runs on this task;
        // several run as tasks of their own, in parallel; background ops
        // (fills, writebacks) always do, as they outlive the request.
        let n_fg = ops.iter().filter(|o| o.foreground && o.req == id).count();
        let mut fg = Vec::new();
        let mut inline = None;
        for op in ops {
            if n_fg == 1 && op.foreground && op.req == id {
                inline = Some(op);
                continue;
            }
            let me = Arc::clone(self);
            let b = Arc::clone(&buf);
            let h = tokio::spawn(async move { me.exec(op, Some(b)).await });
            if op.foreground && op.req == id {
                fg.push(h);
            }
        }
        let mut err = None;
        if let Some(op) = inline {
            if let Err(e) = Arc::clone(self).exec(op, Some(Arc::clone(&buf))).await {
                err = Some(e);
            }
        }
        for h in fg {
            match h.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => err = Some(e),
                Err(e) => err = Some(LiveError(format!("op task failed: {e}"))),
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        if fua || kind == IoKind::Flush {
            self.commit(true).await?;
        }
        self.stats.count_request(kind, len);
        let out = if kind == IoKind::Read && shared_buf {
            buf.data.lock().expect("buf").clone()
        } else if kind == IoKind::Read {
            std::mem::take(&mut *buf.data.lock().expect("buf"))
        } else {
            Vec::new()
        };
        Ok(out)
    }

    fn committed_gen(&self) -> u64 {
        *self.committed.borrow()
    }

    /// Submit to the core and derive the journal's downgrades. Returns the ops to run.
    /// Also says whether a slot barrier of this or an earlier batch waits for a commit.
    fn submit(&self, req: &Request) -> (Vec<Op>, bool) {
        let mut c = self.core.lock().expect("core");
        let mut out = Vec::new();
        c.engine.submit(req, &mut out);
        // Foreground-coupled cleaning only under eviction pressure: once a
        // victim was dirty (a writeback before reuse), the next requests each
        // clean a little too, so victims are clean again. Otherwise cleaning
        // is the background controller's (a write burst is not slowed).
        let de = c.engine.stats().dirty_evictions;
        if de != c.dirty_evictions_seen {
            c.dirty_evictions_seen = de;
            c.pressure_left = PRESSURE_REQUESTS;
        }
        if c.pressure_left > 0 {
            c.pressure_left -= 1;
            let n = c.engine.clean(self.clean_budget, false, &mut out) as u64;
            self.stats.cleaned_lines.fetch_add(n, Ordering::Relaxed);
            self.stats
                .pressure_cleaned_lines
                .fetch_add(n, Ordering::Relaxed);
        }
        self.register(&mut c, &out);
        let done = self.committed_gen();
        let need_commit = c
            .slot_gen
            .values()
            .any(|v| v.iter().any(|&(g, _)| g > done))
            || !c.pending_unmap.is_empty();
        (out, need_commit)
    }

    /// Register signals for new ops and append the records their submission implies.
    fn register(&self, c: &mut Core, out: &[Op]) {
        for o in out {
            c.signals.insert(o.id, None);
            if o.purpose == Purpose::WritebackRead {
                let slot = (o.offset / self.line) as Slot;
                c.wb_reads.insert(o.id, (slot, None));
            }
            if o.purpose == Purpose::WritebackWrite {
                let reads = match o.src {
                    Source::Op(r) => r..r + 1,
                    Source::Ops(first, n) => first..first + n as u64,
                    _ => 0..0,
                };
                let mut slots = Vec::new();
                for r in reads {
                    if let Some(&(slot, _)) = c.wb_reads.get(&r) {
                        c.wb_slots.entry(slot).or_default().push((r, o.id));
                        slots.push(slot);
                    }
                }
                c.wb_write_slots.insert(o.id, slots);
            }
        }
        let touched = c.engine.take_touched();
        for s in touched {
            self.journal_submit(c, s, out);
        }
        for o in out {
            if o.dev == Dev::Cache && o.kind == IoKind::Write {
                let slot = (o.offset / self.line) as Slot;
                let (f, l) = self.subs_of(o.offset, o.len);
                c.inflight_writes
                    .entry(slot)
                    .or_default()
                    .push((o.id, f, l));
            }
        }
    }

    fn subs_of(&self, cache_off: u64, len: u64) -> (u32, u32) {
        let in_line = cache_off % self.line;
        (
            (in_line / self.sub) as u32,
            ((in_line + len.max(1) - 1) / self.sub) as u32,
        )
    }

    fn journal_submit(&self, c: &mut Core, s: Slot, out: &[Op]) {
        // Barriers bind the cache writes of this batch and later ones only: an
        // older write on the slot may be what this batch's writeback waits for.
        let from = out.iter().map(|o| o.id).min().unwrap_or(OpId::MAX);
        let e = c.engine.slot_bits(s);
        let v = c.view[s as usize];
        match (v, &e) {
            (Some(v), e) if e.as_ref().is_none_or(|e| e.0 != v.line) => {
                // The slot's durable line is gone: unmap it before the slot is reused.
                // The writebacks of the old line are those that read this slot before
                // the new line's first write on it (this batch's eviction writeback, or
                // a cleaning writeback started earlier: the log says dirty until it
                // lands). Not "those covering the old line": that line may be cached in
                // another slot again, and its writeback there may read this slot after
                // the new line's write, which would make that write wait for itself.
                let first_write = out
                    .iter()
                    .filter(|o| {
                        o.dev == Dev::Cache
                            && o.kind == IoKind::Write
                            && o.offset / self.line == s as u64
                    })
                    .map(|o| o.id)
                    .min()
                    .unwrap_or(OpId::MAX);
                let wbs = Self::writebacks_reading(c, s, first_write);
                let waiting = c.pending_unmap.contains_key(&s);
                if !wbs.is_empty() && (waiting || !v.dirty.is_empty()) {
                    // Already waiting for the old line's writeback (an earlier batch),
                    // or waiting now: this batch's writes wait for its own barrier
                    // and every older one.
                    c.pending_unmap.entry(s).or_default().push((wbs, from));
                } else if waiting {
                    // Nothing of this batch to wait for: the older barriers bind its
                    // writes too, and their release unmaps the slot.
                } else {
                    if !v.dirty.is_empty() {
                        // Its writeback completed: the backing device is flushed before the unmap.
                        c.needs_backing_flush = true;
                    }
                    Self::append(c, Record::Unmap { slot: s });
                    let g = c.appended_gen;
                    c.slot_gen.entry(s).or_default().push((g, from));
                }
            }
            (Some(v), Some(e)) => {
                // Same line: drop clean sub-blocks that are invalid now or about to be overwritten.
                let mut writing = SubBlocks::default();
                // (Write-back writes of client data overwrite clean sub-blocks of
                // their own line in place: rule 3b, recovery after a crash makes
                // every valid sub-block dirty.)
                for o in out.iter().filter(|o| {
                    o.dev == Dev::Cache
                        && o.kind == IoKind::Write
                        && o.offset / self.line == s as u64
                        && !Self::overwrites_in_place(c, o)
                }) {
                    let (f, l) = self.subs_of(o.offset, o.len);
                    writing = writing.union(range_bits(f, l));
                }
                let valid_e = SubBlocks(e.1);
                let gone = v.valid.minus(valid_e);
                let overwritten = writing.intersect(v.valid).minus(v.dirty);
                let drop = gone.union(overwritten);
                if !drop.is_empty() {
                    Self::append(
                        c,
                        Record::Valid {
                            slot: s,
                            bitmap: v.valid.minus(drop),
                        },
                    );
                    if !overwritten.is_empty() {
                        let g = c.appended_gen;
                        c.slot_gen.entry(s).or_default().push((g, from));
                    }
                }
            }
            _ => {}
        }
    }

    /// Writeback writes in flight whose read of `slot` was issued before op
    /// `before`: they carry the slot's older bytes to the backing device.
    fn writebacks_reading(c: &Core, slot: Slot, before: OpId) -> Vec<OpId> {
        let mut w: Vec<OpId> = c
            .wb_slots
            .get(&slot)
            .map(|v| {
                v.iter()
                    .filter(|&&(r, _)| r < before)
                    .map(|&(_, w)| w)
                    .collect()
            })
            .unwrap_or_default();
        w.dedup();
        w
    }

    // ---- op execution ----

    async fn wait_op(&self, id: OpId) {
        let rx = self
            .core
            .lock()
            .expect("core")
            .signals
            .get_mut(&id)
            .map(|tx| {
                tx.get_or_insert_with(|| watch::channel(false).0)
                    .subscribe()
            });
        if let Some(mut rx) = rx {
            let _ = rx.wait_for(|d| *d).await;
        }
    }

    async fn wait_committed(self: &Arc<Self>, gen: u64) {
        let mut rx = self.committed.subscribe();
        if *rx.borrow() >= gen {
            return;
        }
        self.spawn_commit(false);
        let _ = rx.wait_for(|c| *c >= gen).await;
    }

    /// Cache writes on a slot wait until the slot's previous line is durably gone,
    /// for the barriers set by this op's batch or earlier ones.
    async fn wait_slot_ready(self: &Arc<Self>, slot: Slot, op_id: OpId) {
        loop {
            let (wbs, gen) = {
                let c = self.core.lock().expect("core");
                (
                    c.pending_unmap.get(&slot).and_then(|bs| {
                        let w: Vec<OpId> = bs
                            .iter()
                            .filter(|(_, f)| *f <= op_id)
                            .flat_map(|(w, _)| w.iter().copied())
                            .collect();
                        (!w.is_empty()).then_some(w)
                    }),
                    c.slot_gen
                        .get(&slot)
                        .and_then(|v| v.iter().filter(|(_, f)| *f <= op_id).map(|(g, _)| *g).max()),
                )
            };
            if let Some(wbs) = wbs {
                for w in wbs {
                    self.wait_op(w).await;
                }
                tokio::task::yield_now().await;
                continue;
            }
            if let Some(g) = gen {
                self.wait_committed(g).await;
                let done = self.committed_gen();
                let mut c = self.core.lock().expect("core");
                if let Some(v) = c.slot_gen.get_mut(&slot) {
                    v.retain(|&(g, _)| g > done);
                    if v.is_empty() {
                        c.slot_gen.remove(&slot);
                    }
                }
            }
            return;
        }
    }

    /// Clean valid sub-blocks of the durable slot state `v` that cache write `op` overwrites.
    fn clean_overwritten(&self, op: &Op, v: LineMeta) -> SubBlocks {
        let (f, l) = self.subs_of(op.offset, op.len);
        range_bits(f, l).intersect(v.valid).minus(v.dirty)
    }

    /// Whether a cache write of `line` into `slot` may start at once: no
    /// unmap or commit barrier on the slot, no undurable withdrawal of its
    /// claims, and the durable log claims none of the bytes it overwrites for
    /// anything else (then `wait_slot_ready` and `guard_overwrite` return at once).
    fn slot_ready_now(&self, op: &Op, slot: Slot, line: u64) -> bool {
        let c = self.core.lock().expect("core");
        if c.pending_unmap.contains_key(&slot)
            || c.slot_gen.contains_key(&slot)
            || c.withdrawn.contains_key(&slot)
        {
            return false;
        }
        match c.view[slot as usize] {
            Some(v) if v.line != line => false,
            Some(_) if Self::overwrites_in_place(&c, op) => true,
            Some(v) => self.clean_overwritten(op, v).is_empty(),
            None => true,
        }
    }

    /// Last check before a cache write of `line`'s data into `slot`: the durable
    /// log must not claim the bytes it overwrites for anything else. Barriers
    /// set at submission cover the usual case; this covers a log that changed
    /// since (an older write of another line completed and was recorded after
    /// this write was submitted). The log then first unmaps the slot (after the
    /// old line's writeback, if it is dirty) or drops the clean sub-blocks about
    /// to be overwritten, and that is committed before the write starts.
    async fn guard_overwrite(self: &Arc<Self>, op: &Op, slot: Slot, line: u64) {
        loop {
            let (wait_wb, gen) = {
                let mut c = self.core.lock().expect("core");
                match c.view[slot as usize] {
                    Some(v) if v.line != line => {
                        if !v.dirty.is_empty() {
                            if let Some(&w) = Self::writebacks_reading(&c, slot, op.id).first() {
                                (Some(w), None)
                            } else {
                                // Its writeback completed: flush the backing device before the unmap.
                                c.needs_backing_flush = true;
                                Self::append(&mut c, Record::Unmap { slot });
                                (None, Some(c.appended_gen))
                            }
                        } else {
                            Self::append(&mut c, Record::Unmap { slot });
                            (None, Some(c.appended_gen))
                        }
                    }
                    Some(_) if Self::overwrites_in_place(&c, op) => (None, None),
                    Some(v) => {
                        let over = self.clean_overwritten(op, v);
                        if over.is_empty() {
                            (None, None)
                        } else {
                            Self::append(
                                &mut c,
                                Record::Valid {
                                    slot,
                                    bitmap: v.valid.minus(over),
                                },
                            );
                            (None, Some(c.appended_gen))
                        }
                    }
                    None => (None, None),
                }
            };
            if let Some(w) = wait_wb {
                self.wait_op(w).await;
                tokio::task::yield_now().await;
                continue;
            }
            // Whoever withdrew the slot's old claims (this write's barrier, or another
            // batch's), that record must be durable before the bytes change.
            let withdrawn = {
                let mut c = self.core.lock().expect("core");
                let done = self.committed_gen();
                match c.withdrawn.get(&slot) {
                    Some(&g) if g > done => Some(g),
                    Some(_) => {
                        c.withdrawn.remove(&slot);
                        None
                    }
                    None => None,
                }
            };
            if let Some(g) = gen.max(withdrawn) {
                self.wait_committed(g).await;
            }
            return;
        }
    }

    /// Run one op: wait for its dependencies, do the I/O, report it.
    fn phase(&self, op: &Op, what: &'static str) {
        if !self.track_phases.load(Ordering::Relaxed) {
            return;
        }
        self.phases
            .lock()
            .expect("phases")
            .insert(op.id, (*op, what));
    }

    /// Keep track of what each op in flight waits for (the `debug` command's
    /// `ops`); also on with `TIERCACHE_DEBUG_OPS=1`.
    pub fn set_op_tracking(&self, on: bool) {
        self.track_phases.store(on, Ordering::Relaxed);
        if !on {
            // Entries of ops that finish untracked would never be removed.
            self.phases.lock().expect("phases").clear();
        }
    }

    /// Ops in flight and the barriers they may wait on, for the `debug` control command.
    pub fn debug_state(&self) -> serde_json::Value {
        let ph: Vec<String> = {
            let p = self.phases.lock().expect("phases");
            let mut v: Vec<_> = p.values().collect();
            v.sort_by_key(|(o, _)| o.id);
            v.iter()
                .map(|(o, w)| {
                    format!(
                        "{w}: {o:?} waits_for={:?}",
                        o.waits_for().collect::<Vec<_>>()
                    )
                })
                .collect()
        };
        let c = self.core.lock().expect("core");
        serde_json::json!({
            "ops_tracked": self.track_phases.load(Ordering::Relaxed),
            "committed_gen": self.committed_gen(),
            "appended_gen": c.appended_gen,
            "pending_records": c.pending.len(),
            "signals": c.signals.len(),
            "slot_gen": format!("{:?}", c.slot_gen),
            "pending_unmap": format!("{:?}", c.pending_unmap),
            "wb_slots": format!("{:?}", c.wb_slots),
            "ops": ph,
        })
    }

    async fn exec(self: Arc<Self>, op: Op, buf: Option<Arc<ReqBuf>>) -> Result<(), LiveError> {
        self.phase(&op, "deps");
        for d in op.waits_for() {
            self.wait_op(d).await;
        }
        let slot = (op.offset / self.line) as Slot;
        if op.purpose == Purpose::Fill {
            // The read feeding this fill failed: the buffer holds no data, do not cache it.
            let failed = {
                let mut c = self.core.lock().expect("core");
                op.deps().any(|d| c.failed_reads.remove(&d))
            };
            if failed {
                let (f, l) = self.subs_of(op.offset, op.len);
                Self::invalidate_failed(&mut self.core.lock().expect("core"), &op, slot, f, l);
                self.finish(&op, buf.as_ref().map(|b| b.offset), false);
                return Ok(());
            }
        }
        if op.dev == Dev::Cache && op.kind == IoKind::Write {
            let line = buf.as_ref().map(|b| (b.offset + op.buf_off) / self.line);
            // The usual case under one lock: no barrier on the slot, and the
            // log claims nothing the write overwrites (what `wait_slot_ready`
            // and `guard_overwrite` would find, without their two locks).
            let ready = line.is_some_and(|line| self.slot_ready_now(&op, slot, line));
            if !ready {
                self.phase(&op, "slot");
                self.wait_slot_ready(slot, op.id).await;
                if let Some(line) = line {
                    self.phase(&op, "log");
                    self.guard_overwrite(&op, slot, line).await;
                }
            }
        }
        self.phase(&op, "io");
        tracing::trace!(target: "tiercache::ops", "start {}", op.id);
        let dev = match op.dev {
            Dev::Cache => Arc::clone(&self.cache),
            Dev::Backing => Arc::clone(&self.backing),
        };
        let off = match op.dev {
            Dev::Cache => self.data_offset + op.offset,
            Dev::Backing => op.offset,
        };
        let started = Instant::now();
        let kind = op.kind;
        let len = op.len as usize;
        // A small buffered write (no FUA) of client data to a file or block
        // device without O_DIRECT: a pwrite into the page cache straight from
        // the request's buffer, here, with no copy and no hand-off.
        let mut written: Option<std::io::Result<Vec<u8>>> = None;
        if kind == IoKind::Write && !op.fua && matches!(op.src, Source::Request) {
            let b = buf.as_ref().expect("request buffer");
            let d = b.data.lock().expect("buf");
            let s = op.buf_off as usize;
            written = tiercache_io::write_buffered(&*dev, &d[s..s + len], off)
                .map(|r| r.map(|_| Vec::new()));
        }
        // The bytes a write carries (when not written above).
        let payload: Option<Vec<u8>> = match (op.kind, op.src) {
            _ if written.is_some() => None,
            (IoKind::Write, Source::Request) => {
                let b = buf.as_ref().expect("request buffer");
                let d = b.data.lock().expect("buf");
                let s = op.buf_off as usize;
                Some(d[s..s + op.len as usize].to_vec())
            }
            (IoKind::Write, Source::Op(rd)) => {
                let mut c = self.core.lock().expect("core");
                let data = c.wb_reads.get_mut(&rd).and_then(|w| w.1.take());
                c.wb_reads.remove(&rd);
                data
            }
            (IoKind::Write, Source::Ops(first, n)) => {
                // A merged writeback: the reads' buffers, concatenated.
                let mut c = self.core.lock().expect("core");
                let mut all = Vec::with_capacity(op.len as usize);
                let mut complete = true;
                for rd in first..first + n as u64 {
                    match c.wb_reads.remove(&rd).and_then(|w| w.1) {
                        Some(d) => all.extend_from_slice(&d),
                        None => complete = false,
                    }
                }
                complete.then_some(all)
            }
            _ => None,
        };
        let missing_source = kind == IoKind::Write && payload.is_none() && written.is_none();
        // A cache read whose data is in the page cache: read it here, no hand-off
        // to an I/O thread (all-hit reads; declined for O_DIRECT and wrappers).
        let cached = if kind == IoKind::Read && op.dev == Dev::Cache {
            let mut v = vec![0u8; len];
            matches!(tiercache_io::read_cached(&*dev, &mut v, off), Some(Ok(()))).then_some(v)
        } else {
            None
        };
        // Other small buffered writes (writebacks): a pwrite here too.
        if written.is_none() {
            written = match (&payload, kind, op.fua) {
                (Some(p), IoKind::Write, false) => {
                    tiercache_io::write_buffered(&*dev, p, off).map(|r| r.map(|_| Vec::new()))
                }
                _ => None,
            };
        }
        let res: std::io::Result<Vec<u8>> = if let Some(v) = cached {
            Ok(v)
        } else if let Some(r) = written {
            r
        } else if missing_source {
            Err(std::io::Error::other(
                "writeback data is missing (its read failed)",
            ))
        } else {
            let engine = self.io.lock().expect("io").clone();
            match engine {
                // An I/O engine (io_uring or a thread pool) of tiercache-io.
                Some(engine) => {
                    let io_op = match kind {
                        IoKind::Read => IoOp::Read { offset: off, len },
                        IoKind::Write => IoOp::Write {
                            offset: off,
                            data: payload.expect("payload"),
                            fua: op.fua,
                        },
                        IoKind::Trim => IoOp::Trim {
                            offset: off,
                            len: op.len,
                        },
                        IoKind::Flush => IoOp::Flush,
                    };
                    engine.run(&dev, io_op).await
                }
                // Portable default: positional I/O on tokio's blocking pool.
                None => tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
                    match kind {
                        IoKind::Read => {
                            let mut v = vec![0u8; len];
                            dev.read_at(&mut v, off)?;
                            Ok(v)
                        }
                        IoKind::Write => {
                            let p = payload.expect("payload");
                            if op.fua {
                                dev.write_at_fua(&p, off)?;
                            } else {
                                dev.write_at(&p, off)?;
                            }
                            Ok(Vec::new())
                        }
                        IoKind::Trim => dev.trim(off, op.len).map(|_| Vec::new()),
                        IoKind::Flush => dev.flush().map(|_| Vec::new()),
                    }
                })
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
            }
        };
        self.stats.record_op(op.dev, started.elapsed());
        let res = match res {
            Ok(mut bytes) if op.purpose == Purpose::ReadHit => {
                self.patch_poisoned(&op, buf.as_ref(), &mut bytes);
                Ok(bytes)
            }
            r => r,
        };
        let mut then = Vec::new();
        // Whether the I/O itself succeeded: only then may the log record what it wrote
        // (a failed cache write may still succeed for the client, rerouted).
        let io_ok = res.is_ok();
        let result = match res {
            Ok(bytes) => {
                if op.kind == IoKind::Read {
                    if op.purpose == Purpose::WritebackRead {
                        if let Some(w) = self.core.lock().expect("core").wb_reads.get_mut(&op.id) {
                            w.1 = Some(bytes);
                        }
                    } else if let Some(b) = &buf {
                        let mut d = b.data.lock().expect("buf");
                        let s = op.buf_off as usize;
                        d[s..s + bytes.len()].copy_from_slice(&bytes);
                    }
                }
                Ok(())
            }
            Err(e) => self.on_error(&op, buf.as_ref(), e, &mut then).await,
        };
        self.finish(&op, buf.as_ref().map(|b| b.offset), io_ok);
        // Ops that replace this one (a failed cache write rerouted to the backing device).
        let mut result = result;
        for o in then {
            let r = Arc::clone(&self)
                .spawn_exec(o, buf.clone())
                .await
                .unwrap_or_else(|e| Err(LiveError(format!("op task failed: {e}"))));
            result = result.and(r);
        }
        result
    }

    /// A cache read queued behind a failed cache write of the same line: the
    /// bytes that write should have left in the slot come from its payload.
    fn patch_poisoned(&self, op: &Op, buf: Option<&Arc<ReqBuf>>, bytes: &mut [u8]) {
        let Some(b) = buf else { return };
        if !self.any_poison.load(Ordering::Acquire) {
            return;
        }
        let line = (b.offset + op.buf_off) / self.line;
        let slot = (op.offset / self.line) as Slot;
        let (f, l) = self.subs_of(op.offset, op.len);
        let c = self.core.lock().expect("core");
        if c.poisoned.is_empty() {
            return;
        }
        let mut hits: Vec<&Poison> = (f..=l)
            .filter_map(|i| c.poisoned.get(&(slot, i)))
            .flatten()
            .filter(|p| p.id < op.id && p.line == line)
            .collect();
        hits.sort_by_key(|p| p.id);
        for p in hits {
            let s = p.start.max(op.offset);
            let e = (p.start + p.data.len() as u64).min(op.offset + op.len);
            if s < e {
                bytes[(s - op.offset) as usize..(e - op.offset) as usize]
                    .copy_from_slice(&p.data[(s - p.start) as usize..(e - p.start) as usize]);
            }
        }
    }

    /// Run `op` as its own task (a plain fn, so that `exec` may start ops without
    /// its future type depending on itself).
    fn spawn_exec(
        self: Arc<Self>,
        op: Op,
        buf: Option<Arc<ReqBuf>>,
    ) -> tokio::task::JoinHandle<Result<(), LiveError>> {
        tokio::spawn(self.exec(op, buf))
    }

    /// Device error handling: data safe on the backing device is never lost.
    async fn on_error(
        self: &Arc<Self>,
        op: &Op,
        buf: Option<&Arc<ReqBuf>>,
        e: std::io::Error,
        then: &mut Vec<Op>,
    ) -> Result<(), LiveError> {
        match op.dev {
            Dev::Backing => {
                self.stats.backing_errors.fetch_add(1, Ordering::Relaxed);
                if op.purpose == Purpose::WritebackWrite {
                    // Keep the data dirty: it is still only in the cache.
                    let mut c = self.core.lock().expect("core");
                    for line in op.offset / self.line..=(op.offset + op.len.max(1) - 1) / self.line
                    {
                        if let Some(s) = c.engine.mapping().lookup(line) {
                            let start = op.offset.max(line * self.line);
                            let end = (op.offset + op.len).min((line + 1) * self.line);
                            let (f, l) = self.subs_of(start, end - start);
                            c.engine.redirty(s, f, l);
                        }
                    }
                    for bs in c.pending_unmap.values_mut() {
                        bs.retain(|w| !w.0.contains(&op.id));
                    }
                    c.pending_unmap.retain(|_, bs| !bs.is_empty());
                }
                tracing::error!("backing device error ({:?} at {}): {e}", op.kind, op.offset);
                Err(LiveError(format!("backing device I/O error: {e}")))
            }
            Dev::Cache => {
                self.stats.cache_errors.fetch_add(1, Ordering::Relaxed);
                let slot = (op.offset / self.line) as Slot;
                let (f, l) = self.subs_of(op.offset, op.len);
                // The client offset of this op's data: from the request, not from the
                // slot (which may hold another line by now).
                let client_off = buf.map(|b| b.offset + op.buf_off);
                let line = client_off.map(|o| o / self.line);
                let (dirty, errors) = {
                    let mut c = self.core.lock().expect("core");
                    c.cache_errors += 1;
                    // Only the log's view knows whether the backing device already has the
                    // data (a Clean record follows the writeback); the core marks lines
                    // clean when their writeback starts.
                    let dirty = match c.view[slot as usize] {
                        Some(v) if Some(v.line) == line => (f..=l).any(|i| v.dirty.get(i)),
                        _ => false,
                    };
                    (dirty, c.cache_errors)
                };
                if let (IoKind::Write, Some(line), Some(b)) = (op.kind, line, buf) {
                    let data = {
                        let d = b.data.lock().expect("buf");
                        Arc::new(d[op.buf_off as usize..(op.buf_off + op.len) as usize].to_vec())
                    };
                    let mut c = self.core.lock().expect("core");
                    self.any_poison.store(true, Ordering::Release);
                    for i in f..=l {
                        // The piece of the write within sub-block `i`.
                        let sb = (op.offset / self.line) * self.line + i as u64 * self.sub;
                        let (ps, pe) = (sb.max(op.offset), (sb + self.sub).min(op.offset + op.len));
                        let piece =
                            data[(ps - op.offset) as usize..(pe - op.offset) as usize].to_vec();
                        c.poisoned.entry((slot, i)).or_default().push(Poison {
                            id: op.id,
                            line,
                            start: ps,
                            data: Arc::new(piece),
                        });
                    }
                }
                tracing::warn!("cache device error ({:?} at {}): {e}", op.kind, op.offset);
                if errors >= DEGRADE_AFTER && !self.degraded.swap(true, Ordering::Relaxed) {
                    tracing::error!("cache device failing ({errors} errors in a row): no longer caching new data; dirty data is kept and cleaned");
                    self.core.lock().expect("core").engine.degrade();
                }
                match (op.kind, op.purpose) {
                    (IoKind::Read, Purpose::ReadHit) if !dirty => {
                        // Serve the read from the backing device instead.
                        let Some(boff) = client_off else {
                            return Err(LiveError(format!("cache read error: {e}")));
                        };
                        let dev = Arc::clone(&self.backing);
                        let len = op.len as usize;
                        let r = tokio::task::spawn_blocking(move || {
                            let mut v = vec![0u8; len];
                            dev.read_at(&mut v, boff).map(|_| v)
                        })
                        .await
                        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
                        Self::invalidate_failed(
                            &mut self.core.lock().expect("core"),
                            op,
                            slot,
                            f,
                            l,
                        );
                        match r {
                            Ok(bytes) => {
                                if let Some(b) = buf {
                                    let mut d = b.data.lock().expect("buf");
                                    let s = op.buf_off as usize;
                                    d[s..s + bytes.len()].copy_from_slice(&bytes);
                                }
                                Ok(())
                            }
                            Err(e) => Err(LiveError(format!("backing device I/O error: {e}"))),
                        }
                    }
                    (IoKind::Write, Purpose::WriteCache)
                        if self.write_policy == WritePolicy::WriteBack =>
                    {
                        // The only copy would have been the cache: write it to the backing
                        // device instead, through the core so that it lands after any
                        // writeback of the line in flight. Invalidate and reroute under one
                        // lock: a read miss in between would read the backing device
                        // before the reroute is ordered ahead of it.
                        let (Some(line), Some(b)) = (line, buf) else {
                            Self::invalidate_failed(
                                &mut self.core.lock().expect("core"),
                                op,
                                slot,
                                f,
                                l,
                            );
                            return Err(LiveError(format!("cache write error: {e}")));
                        };
                        let rerouted = {
                            let mut c = self.core.lock().expect("core");
                            Self::invalidate_failed(&mut c, op, slot, f, l);
                            let mut out = Vec::new();
                            c.engine.reroute_failed_write(op, line, &mut out);
                            self.register(&mut c, &out);
                            out
                        };
                        // Run it once this op is finished: a writeback of the line
                        // queued behind this op may be what it waits for.
                        let _ = b;
                        then.extend(rerouted);
                        Ok(())
                    }
                    (IoKind::Write, _) => {
                        // A fill or a write-through copy: the backing device has the data.
                        Self::invalidate_failed(
                            &mut self.core.lock().expect("core"),
                            op,
                            slot,
                            f,
                            l,
                        );
                        Ok(())
                    }
                    _ => Err(LiveError(format!(
                        "cache device I/O error on dirty data: {e}"
                    ))),
                }
            }
        }
    }

    /// Drop sub-blocks `f..=l` of `slot` after a failed cache op, except those a
    /// later cache write still in flight rewrites (dropping them would lose that write).
    fn invalidate_failed(c: &mut Core, op: &Op, slot: Slot, f: u32, l: u32) {
        let later: Vec<(u32, u32)> = c
            .inflight_writes
            .get(&slot)
            .map(|ws| {
                ws.iter()
                    .filter(|w| w.0 > op.id)
                    .map(|w| (w.1, w.2))
                    .collect()
            })
            .unwrap_or_default();
        for i in f..=l {
            if !later.iter().any(|&(a, b)| a <= i && i <= b) {
                c.engine.invalidate(slot, i, i);
            }
        }
    }

    /// Report a finished op to the core and append the records its completion allows.
    fn finish(&self, op: &Op, req_offset: Option<u64>, ok: bool) {
        tracing::trace!(target: "tiercache::ops", "done {} ok={ok}", op.id);
        if self.track_phases.load(Ordering::Relaxed) {
            self.phases.lock().expect("phases").remove(&op.id);
        }
        let mut c = self.core.lock().expect("core");
        if ok && op.dev == Dev::Cache {
            c.cache_errors = 0;
        }
        let mut more = Vec::new();
        c.engine.complete(op, &mut more);
        if ok {
            match (op.dev, op.kind, op.purpose) {
                (Dev::Cache, IoKind::Write, _) => self.journal_cache_write(&mut c, op, req_offset),
                (Dev::Backing, IoKind::Write, Purpose::WritebackWrite) => {
                    self.journal_writeback(&mut c, op)
                }
                _ => {}
            }
        }
        if op.dev == Dev::Cache && op.kind == IoKind::Write {
            let slot = (op.offset / self.line) as Slot;
            if ok && !c.poisoned.is_empty() {
                let (f, l) = self.subs_of(op.offset, op.len);
                // Older failed bytes this write rewrote are in the slot now: keep
                // only the parts of older poisons outside its range.
                let (s, e) = (op.offset, op.offset + op.len);
                for i in f..=l {
                    if let Some(v) = c.poisoned.get_mut(&(slot, i)) {
                        let mut kept = Vec::with_capacity(v.len());
                        for p in v.drain(..) {
                            let pe = p.start + p.data.len() as u64;
                            if p.id >= op.id || pe <= s || e <= p.start {
                                kept.push(p);
                                continue;
                            }
                            for (a, z) in [(p.start, s), (e, pe)] {
                                if a < z {
                                    kept.push(Poison {
                                        id: p.id,
                                        line: p.line,
                                        start: a,
                                        data: Arc::new(
                                            p.data[(a - p.start) as usize..(z - p.start) as usize]
                                                .to_vec(),
                                        ),
                                    });
                                }
                            }
                        }
                        *v = kept;
                        if v.is_empty() {
                            c.poisoned.remove(&(slot, i));
                        }
                    }
                }
            }
            if let Some(v) = c.inflight_writes.get_mut(&slot) {
                v.retain(|w| w.0 != op.id);
                if v.is_empty() {
                    c.inflight_writes.remove(&slot);
                }
            }
        }
        if op.purpose == Purpose::WritebackWrite {
            for slot in c.wb_write_slots.remove(&op.id).unwrap_or_default() {
                if let Some(v) = c.wb_slots.get_mut(&slot) {
                    v.retain(|&(_, w)| w != op.id);
                    if v.is_empty() {
                        c.wb_slots.remove(&slot);
                    }
                }
            }
        }
        if op.purpose == Purpose::ReadMiss && !ok {
            c.failed_reads.insert(op.id);
        }
        if c.pending.len() >= PENDING_COMMIT {
            // Without FLUSHes nothing else commits write-back records: keep the
            // buffer (and the log tail a crash loses) bounded.
            self.commit_wanted.notify_one();
        }
        if op.purpose == Purpose::WritebackRead && !ok {
            c.wb_reads.remove(&op.id);
        }
        if let Some(Some(tx)) = c.signals.remove(&op.id) {
            let _ = tx.send(true);
        }
    }

    fn journal_cache_write(&self, c: &mut Core, op: &Op, req_offset: Option<u64>) {
        let slot = (op.offset / self.line) as Slot;
        let Some((line, valid, dirty, meta)) = c.engine.slot_bits(slot) else {
            return;
        };
        // The line this write was for: from the request's offset.
        let Some(ro) = req_offset else { return };
        if (ro + op.buf_off) / self.line != line {
            return;
        }
        let (f, l) = self.subs_of(op.offset, op.len);
        let mut x = range_bits(f, l);
        // Sub-blocks another in-flight write will still change are recorded by that write.
        if let Some(ws) = c.inflight_writes.get(&slot) {
            for &(id, wf, wl) in ws {
                if id != op.id && id > op.id {
                    x = x.minus(range_bits(wf, wl));
                }
            }
        }
        let x = x.intersect(SubBlocks(valid));
        if x.is_empty() {
            return;
        }
        if c.view[slot as usize].map(|v| v.line) != Some(line) {
            Self::append(
                c,
                Record::Map {
                    slot,
                    line,
                    class: meta as u8,
                },
            );
        }
        // A write-back write of client data is dirty in the log even when the core
        // already counts it clean (a cleaning writeback was issued behind it): only
        // that writeback's completion may record it clean.
        let dirty_x =
            if self.write_policy == WritePolicy::WriteBack && op.purpose == Purpose::WriteCache {
                x
            } else {
                x.intersect(SubBlocks(dirty))
            };
        // Sub-blocks the log already has dirty for this line need no new record
        // (rewriting dirty data in place, rule 2 of tiercache-store).
        let logged_dirty = c.view[slot as usize]
            .filter(|v| v.line == line)
            .map(|v| v.dirty)
            .unwrap_or_default();
        if !dirty_x.minus(logged_dirty).is_empty() {
            Self::append(
                c,
                Record::Dirty {
                    slot,
                    bitmap: dirty_x.minus(logged_dirty),
                },
            );
        }
        let clean_x = x.minus(dirty_x);
        if !clean_x.is_empty() {
            let v = c.view[slot as usize].expect("mapped above");
            Self::append(
                c,
                Record::Valid {
                    slot,
                    bitmap: v.valid.union(clean_x),
                },
            );
        }
    }

    fn journal_writeback(&self, c: &mut Core, op: &Op) {
        // A dirty victim's writeback: unmap its slot once all of them are done.
        // A merged writeback can carry several victims: finish every slot waiting for it.
        // Barriers are released oldest first, each once its writebacks are done.
        let mut unmapped = Vec::new();
        for (s, bs) in c.pending_unmap.iter_mut() {
            for (w, _) in bs.iter_mut() {
                w.retain(|&x| x != op.id);
            }
            while bs.first().is_some_and(|(w, _)| w.is_empty()) {
                let (_, from) = bs.remove(0);
                unmapped.push((*s, from));
            }
        }
        c.pending_unmap.retain(|_, bs| !bs.is_empty());
        for &(s, from) in &unmapped {
            if c.view[s as usize].is_some() {
                Self::append(c, Record::Unmap { slot: s });
            }
            c.needs_backing_flush = true;
            let g = c.appended_gen;
            c.slot_gen.entry(s).or_default().push((g, from));
        }
        // Cleaning: the written sub-blocks are clean unless rewritten since
        // (a merged writeback covers several lines).
        let end = op.offset + op.len.max(1);
        for line in op.offset / self.line..=(end - 1) / self.line {
            let Some(slot) = c.engine.mapping().lookup(line) else {
                continue;
            };
            if unmapped.iter().any(|&(s, _)| s == slot) {
                continue;
            }
            let Some((_, _, dirty, _)) = c.engine.slot_bits(slot) else {
                continue;
            };
            let Some(v) = c.view[slot as usize] else {
                continue;
            };
            if v.line != line {
                continue;
            }
            let start = op.offset.max(line * self.line);
            let stop = end.min((line + 1) * self.line);
            let (f, l) = self.subs_of(start, stop - start);
            let clean = range_bits(f, l).minus(SubBlocks(dirty)).intersect(v.dirty);
            if !clean.is_empty() {
                Self::append(
                    c,
                    Record::Clean {
                        slot,
                        bitmap: clean,
                    },
                );
                c.needs_backing_flush = true;
            }
        }
    }

    // ---- commits, cleaning, shutdown ----

    /// Ask the committer task for a commit (coalesced: one commit covers every append before it).
    fn spawn_commit(&self, _force_backing: bool) {
        self.commit_wanted.notify_one();
    }

    /// Start the background tasks: the committer and the write-back cleaner
    /// (a rate controller on the dirty line count, full speed when idle).
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = me.commit_wanted.notified() => {}
                    _ = tokio::time::sleep(COMMIT_INTERVAL) => {
                        if me.core.lock().expect("core").pending.is_empty() {
                            continue;
                        }
                    }
                }
                if let Err(e) = me.commit(false).await {
                    tracing::error!("background commit failed: {e}");
                }
            }
        });
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let (target, slots) = {
                let c = me.core.lock().expect("core");
                (
                    c.engine.dirty_target_lines() as u64,
                    c.engine.geometry().slots as u64,
                )
            };
            let mut ctl = CleaningRate::new(target, CleaningTuning::for_slots(slots));
            let mut tick = tokio::time::interval(CLEAN_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last = Instant::now();
            let mut last_reqs = me.next_req.load(Ordering::Relaxed);
            loop {
                tick.tick().await;
                let now = Instant::now();
                let dt = now.duration_since(last).as_secs_f64();
                last = now;
                let reqs = me.next_req.load(Ordering::Relaxed);
                let idle = reqs == last_reqs;
                last_reqs = reqs;
                let dirty = me.core.lock().expect("core").engine.dirty_lines() as u64;
                let paced = ctl.step(dirty, dt);
                let full = idle && dirty > target;
                let n = if full { CLEAN_TICK_MAX_LINES } else { paced };
                me.stats
                    .cleaning_target_rate
                    .store(ctl.rate().to_bits(), Ordering::Relaxed);
                if n > 0 {
                    let got = me.clean_step(n.min(CLEAN_TICK_MAX_LINES), false).await;
                    if full {
                        me.stats
                            .idle_cleaned_lines
                            .fetch_add(got as u64, Ordering::Relaxed);
                    }
                }
            }
        });
    }

    /// Write back up to `max_lines` dirty lines (all of them if `force`) and wait for it.
    /// Returns the lines cleaned.
    pub async fn clean_step(self: &Arc<Self>, max_lines: usize, force: bool) -> usize {
        if self.stopping.load(Ordering::Acquire) {
            // A clean shutdown records the backing device as it is: leave it alone.
            return 0;
        }
        let (ops, n) = {
            let mut c = self.core.lock().expect("core");
            let mut out = Vec::new();
            let n = if force {
                c.engine.clean(max_lines, true, &mut out)
            } else {
                c.engine.clean_at_most(max_lines, &mut out)
            };
            self.register(&mut c, &out);
            tracing::trace!(target: "tiercache::ops", "clean -> {out:?}");
            (out, n)
        };
        if n == 0 {
            return 0;
        }
        self.stats
            .cleaned_lines
            .fetch_add(n as u64, Ordering::Relaxed);
        let mut hs = Vec::new();
        for op in ops {
            let me = Arc::clone(self);
            hs.push(tokio::spawn(async move { me.exec(op, None).await }));
        }
        for h in hs {
            let _ = h.await;
        }
        n
    }

    /// Clean every dirty line and commit: the backing device then holds all data.
    pub async fn flush_all(self: &Arc<Self>) -> Result<(), LiveError> {
        loop {
            let errors = self.stats.backing_errors.load(Ordering::Relaxed);
            let n = self.clean_step(256, true).await;
            // Writebacks the background cleaner started: their lines count as
            // clean in the core already, but are clean only once these land
            // (a failure makes them dirty again).
            let others: Vec<OpId> = self
                .core
                .lock()
                .expect("core")
                .wb_write_slots
                .keys()
                .copied()
                .collect();
            for w in others {
                self.wait_op(w).await;
            }
            let dirty = self.core.lock().expect("core").engine.dirty_lines();
            if n == 0 && dirty == 0 {
                break;
            }
            if dirty > 0 && self.stats.backing_errors.load(Ordering::Relaxed) > errors {
                // Retrying forever would hang flush and detach: report it; the data stays dirty.
                return Err(LiveError(format!(
                    "backing device failed writeback: {dirty} lines are still dirty (kept in the cache)"
                )));
            }
            if n == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        self.commit(true).await
    }

    /// Clean shutdown: stop cleaning and writes, let the ops in flight finish,
    /// commit (flushing the backing device), then checkpoint the table and
    /// mark the superblock clean with the backing device's identity as it is
    /// now. Write-back overwrites in place (rule 3b) stop first, so the
    /// checkpoint describes every such write; a recovery from it trusts clean
    /// bits again. If ops are still in flight after 30 s (a client keeps
    /// reading), or the backing path is unknown, only the checkpoint is
    /// written and the superblock stays "open" (the next start recovers as
    /// after a crash, which is always safe).
    pub async fn shutdown(self: &Arc<Self>) -> Result<(), LiveError> {
        self.stopping.store(true, Ordering::Release);
        self.core.lock().expect("core").fast_overwrite = false;
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let drained = loop {
            if self.core.lock().expect("core").signals.is_empty() {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        };
        self.commit(true).await?;
        let path = self.backing_path.lock().expect("backing path").clone();
        let identity = match (&path, drained) {
            (Some(p), true) => {
                let p = p.clone();
                match tokio::task::spawn_blocking(move || {
                    tiercache_store::BackingIdentity::probe(&p)
                })
                .await
                {
                    Ok(Ok(id)) => Some(id),
                    Ok(Err(e)) => {
                        tracing::warn!("clean shutdown: probing the backing device: {e}; the next start recovers as after a crash");
                        None
                    }
                    Err(e) => return Err(LiveError(e.to_string())),
                }
            }
            (_, false) => {
                tracing::warn!("clean shutdown: ops still in flight after 30 s; the next start recovers as after a crash");
                None
            }
            (None, true) => None,
        };
        let me = Arc::clone(self);
        let _g = self.commit_lock.lock().await;
        let gen = tokio::task::spawn_blocking(move || -> Result<u64, LiveError> {
            let mut c = me.core.lock().expect("core");
            let mut st = me.store.lock().expect("store");
            // Records appended since the commit (a late read's fill): commit them
            // first, as `commit` does before its checkpoints.
            let recs = std::mem::take(&mut c.pending);
            if std::mem::take(&mut c.needs_backing_flush) {
                me.backing
                    .flush()
                    .map_err(|e| LiveError(format!("backing device flush failed: {e}")))?;
            }
            if !recs.is_empty() {
                for r in recs {
                    st.append(r)
                        .map_err(|e| LiveError(format!("metadata log: {e}")))?;
                }
                st.commit()
                    .map_err(|e| LiveError(format!("metadata commit: {e}")))?;
            }
            let gen = c.appended_gen;
            let table = tiercache_store::table_entries(&c.view);
            match identity {
                Some(id) => st
                    .mark_clean(table, &id)
                    .map_err(|e| LiveError(format!("clean shutdown: {e}")))?,
                None => st
                    .checkpoint(table)
                    .map_err(|e| LiveError(format!("checkpoint: {e}")))?,
            }
            Ok(gen)
        })
        .await
        .unwrap_or_else(|e| Err(LiveError(e.to_string())))?;
        self.committed.send_modify(|c| *c = (*c).max(gen));
        Ok(())
    }

    /// Make every appended record durable (and, with `force_backing` or when
    /// clean records need it, the backing device first).
    pub async fn commit(self: &Arc<Self>, force_backing: bool) -> Result<(), LiveError> {
        let _g = self.commit_lock.lock().await;
        let (recs, gen, need_backing) = {
            let mut c = self.core.lock().expect("core");
            (
                std::mem::take(&mut c.pending),
                c.appended_gen,
                std::mem::take(&mut c.needs_backing_flush),
            )
        };
        if need_backing || force_backing || self.write_policy != WritePolicy::WriteBack {
            let dev = Arc::clone(&self.backing);
            tokio::task::spawn_blocking(move || dev.flush())
                .await
                .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
                .map_err(|e| LiveError(format!("backing device flush failed: {e}")))?;
        }
        let started = Instant::now();
        let me = Arc::clone(self);
        let n = recs.len();
        let gen = tokio::task::spawn_blocking(move || -> Result<u64, LiveError> {
            let mut st = me.store.lock().expect("store");
            for r in recs {
                st.append(r)
                    .map_err(|e| LiveError(format!("metadata log: {e}")))?;
            }
            if !st.wants_checkpoint() {
                st.commit()
                    .map_err(|e| LiveError(format!("metadata commit: {e}")))?;
                return Ok(gen);
            }
            // The log is two-thirds full (or these records would not fit): a
            // checkpoint of the view replaces the commit. It covers every record
            // appended so far, also those appended after `recs` were taken; `Clean`
            // records among them need the backing device flushed first.
            let c = loop {
                let mut c = me.core.lock().expect("core");
                if !std::mem::take(&mut c.needs_backing_flush) {
                    break c;
                }
                drop(c);
                me.backing
                    .flush()
                    .map_err(|e| LiveError(format!("backing device flush failed: {e}")))?;
            };
            // Snapshot the view and let requests go on while the checkpoint is
            // written: records appended from now on wait in `pending` for the
            // next commit, which appends them after this checkpoint.
            let (entries, gen) = {
                let mut c = c;
                c.pending.clear();
                let e: Vec<_> = tiercache_store::table_entries(&c.view).collect();
                (e, c.appended_gen)
            };
            st.checkpoint(entries)
                .map_err(|e| LiveError(format!("checkpoint: {e}")))?;
            me.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            Ok(gen)
        })
        .await
        .unwrap_or_else(|e| Err(LiveError(e.to_string())))?;
        self.stats.record_commit(n, started.elapsed());
        tracing::trace!(target: "tiercache::log", "committed {gen}");
        self.committed.send_modify(|c| *c = (*c).max(gen));
        Ok(())
    }
}
