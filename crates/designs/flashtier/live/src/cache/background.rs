//! Work beside the requests: group commit of FLUSH and FUA, and the
//! background cleaner.
//!
//! **Group commit.** A FLUSH (or a FUA write, after its append) needs one
//! commit — the open segment's summary made durable behind its data, a
//! checkpoint if one is due, the backing device flushed (`flush_locked`) —
//! that *started* after it arrived. Commits run one at a time; callers that
//! arrive while one runs wait for it and then share the next one, so N
//! concurrent FUA writers cost about two commits, not N. The commit itself
//! is the request path's `flush_locked` under the store's lock, so its
//! ordering (data, then summary, then flush) is unchanged; at queue depth 1
//! every caller runs its own commit, as before.
//!
//! **Background cleaner** ([`LogCache::start_cleaner`]). A thread keeps
//! [`RESERVE`] plus a margin of segments free, one victim segment per hold
//! of the lock (requests take the lock in between), and writes dirty blocks
//! back above the dirty target at the pace of the SSD cache's cleaner: the
//! shared `CleaningScheduler` (a PI rate controller on the dirty count,
//! after bcache's writeback rate; full speed during a tick with no request),
//! ticked every [`PACE_TICK`] with the wall clock. So a write burst is
//! absorbed dirty and cleaned towards the target afterwards, rather than
//! written back block for block as it arrives. It wakes when a request
//! finds segments to clean, and every tick. While it runs, requests clean
//! segments only when fewer than [`RESERVE`] are free (the policy's last
//! resort) and write back only past a hard limit halfway between the dirty
//! target and the whole cache (`foreground_dirty_limit`). Its steps are the
//! request path's own (`Log::clean_segment`, `Log::write_back_some`), so a
//! crash in the middle of one is a crash in the middle of a request's
//! cleaning. Cleaning then depends on timing: the conformance test against
//! the simulator serves with the cleaner off (`TIERCACHE_LS_CLEANER=0`),
//! which is the simulator's policy exactly.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tiercache_block::cleaning::{CleaningConfig, CleaningScheduler};

use super::{err, LogCache, Res, State, RESERVE};

/// The cleaner's tick: the write-back pace is decided once per tick (the
/// shared scheduler's interval).
pub const PACE_TICK: Duration = Duration::from_nanos(tiercache_block::cleaning::TICK_NS);

/// Blocks written back per lock hold by the cleaner.
const WRITE_BACK_BATCH: usize = 256;

fn relock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct CommitState {
    /// Commits started and finished (numbered from 1).
    started: u64,
    done: u64,
    running: bool,
    /// Why commit number `done` failed.
    failed: Option<String>,
    /// Callers served (FLUSH requests and FUA writes).
    requests: u64,
}

/// Group commit bookkeeping.
#[derive(Default)]
pub(super) struct Commits {
    m: Mutex<CommitState>,
    cv: Condvar,
}

/// The background cleaner's handle and counters.
#[derive(Default)]
pub(super) struct Cleaner {
    /// Started and not stopped: requests leave cleaning to it.
    on: AtomicBool,
    stop: AtomicBool,
    /// A wake-up is pending (set by requests, taken by the thread).
    wanted: AtomicBool,
    wake: Mutex<()>,
    cv: Condvar,
    handle: Mutex<Option<JoinHandle<()>>>,
    segments: AtomicU64,
    written_back: AtomicU64,
    /// The write-back rate the scheduler asked for last, lines/s (f64 bits).
    rate: AtomicU64,
}

/// Clears `running` and wakes the waiters even if the commit panicked.
struct Finish<'a> {
    c: &'a Commits,
    n: u64,
    failed: Option<String>,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let mut s = relock(&self.c.m);
        s.done = self.n;
        s.running = false;
        s.failed = if std::thread::panicking() {
            Some("a commit panicked".into())
        } else {
            self.failed.take()
        };
        self.c.cv.notify_all();
    }
}

impl LogCache {
    /// Make every write completed before the call durable: one commit that
    /// started after the call, shared with the callers that arrived while
    /// the previous commit ran (group commit).
    pub(super) fn commit(&self) -> Res<()> {
        let mut c = relock(&self.commits.m);
        c.requests += 1;
        let need = c.started + 1;
        while c.running && c.done < need {
            c = self.commits.cv.wait(c).unwrap_or_else(|e| e.into_inner());
        }
        if c.done >= need {
            // Commit `done` started after this call arrived.
            return match &c.failed {
                None => Ok(()),
                Some(e) => Err(err(e.clone())),
            };
        }
        debug_assert_eq!(c.started + 1, need);
        c.started = need;
        c.running = true;
        drop(c);
        let mut fin = Finish {
            c: &self.commits,
            n: need,
            failed: None,
        };
        let r = self.lock().and_then(|mut st| self.flush_locked(&mut st));
        fin.failed = r.as_ref().err().map(|e| e.0.clone());
        r
    }

    /// Whether `serve` starts the cleaner: yes unless `TIERCACHE_LS_CLEANER=0`
    /// (requests then clean inline, the simulator's policy exactly).
    pub fn cleaner_wanted() -> bool {
        !matches!(
            std::env::var("TIERCACHE_LS_CLEANER")
                .as_deref()
                .map(str::trim),
            Ok("0")
        )
    }

    /// Start the background cleaner thread (once; it ends at shutdown or
    /// when the cache is dropped).
    pub fn start_cleaner(self: &Arc<Self>) -> std::io::Result<()> {
        let mut h = relock(&self.cleaner.handle);
        if h.is_some() {
            return Ok(());
        }
        self.cleaner.stop.store(false, Ordering::SeqCst);
        self.cleaner.on.store(true, Ordering::SeqCst);
        let weak = Arc::downgrade(self);
        match std::thread::Builder::new()
            .name("ls-cleaner".into())
            .spawn(move || cleaner_loop(weak))
        {
            Ok(t) => {
                *h = Some(t);
                Ok(())
            }
            Err(e) => {
                self.cleaner.on.store(false, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// Stop the background cleaner and wait for it (between two steps);
    /// requests clean inline again.
    pub fn stop_cleaner(&self) {
        self.cleaner.stop.store(true, Ordering::SeqCst);
        self.cleaner.on.store(false, Ordering::SeqCst);
        {
            let _g = relock(&self.cleaner.wake);
            self.cleaner.cv.notify_all();
        }
        let h = relock(&self.cleaner.handle).take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// The background cleaner is running.
    pub(super) fn cleaner_on(&self) -> bool {
        self.cleaner.on.load(Ordering::Relaxed)
    }

    /// Free segments the cleaner keeps: [`RESERVE`] plus a sixteenth of
    /// the segments (at least 2, at most a quarter).
    pub(super) fn background_free(&self, st: &State) -> usize {
        let n = st.segs.len();
        RESERVE + std::cmp::min((n / 16).max(2), n / 4)
    }

    /// Dirty blocks the requests allow while the cleaner runs (the hard
    /// limit): halfway between the dirty target and every slot, at least
    /// the target plus 64 blocks. Between the target and this limit the
    /// cleaner's paced write-back works the count down.
    pub(super) fn foreground_dirty_limit(&self, st: &State) -> usize {
        let l = self.dirty_limit(st);
        let slots = (st.sb.slots() / self.geo.ratio as u64) as usize;
        (l + slots.saturating_sub(l) / 2).max(l + 64)
    }

    /// After a request: wake the cleaner if segments need cleaning (the
    /// write-back is paced by its ticks).
    pub(super) fn nudge_cleaner(&self, st: &State) {
        if !self.cleaner_on() || self.cleaner.wanted.load(Ordering::Relaxed) {
            return;
        }
        if st.free.len() < self.background_free(st) {
            self.cleaner.wanted.store(true, Ordering::Relaxed);
            let _g = relock(&self.cleaner.wake);
            self.cleaner.cv.notify_one();
        }
    }

    /// One step of the cleaner under the lock: clean one victim segment if
    /// fewer than [`Self::background_free`] are free, else write back one
    /// batch if past the dirty target. `Ok(true)`: there may be more work.
    pub fn background_step(&self) -> Res<bool> {
        if self.segment_step()? {
            return Ok(true);
        }
        Ok(self.write_back_step(WRITE_BACK_BATCH)? > 0)
    }

    /// Clean one victim segment if fewer than [`Self::background_free`]
    /// are free. `Ok(true)`: one was cleaned.
    fn segment_step(&self) -> Res<bool> {
        let mut st = self.lock()?;
        if st.degraded.is_some() || st.free.len() >= self.background_free(&st) {
            // Degraded: requests write everything back themselves.
            return Ok(false);
        }
        let Some(v) = st.victim_segment() else {
            return Ok(false);
        };
        st.clean_segment(self, v)?;
        self.cleaner.segments.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Write back up to `max` dirty blocks (one batch, one hold of the
    /// lock) if past the dirty target; how many.
    fn write_back_step(&self, max: usize) -> Res<usize> {
        let mut st = self.lock()?;
        if st.degraded.is_some() || st.map.dirty() <= self.dirty_limit(&st) {
            return Ok(0);
        }
        let n = st.write_back_some(self, max.min(WRITE_BACK_BATCH))?;
        self.cleaner
            .written_back
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Block accesses so far (hits and misses, fast-path reads included):
    /// the scheduler's idle test is that none came during a tick.
    fn accesses(&self, st: &State) -> u64 {
        let c = &st.counters;
        c.read_hits + c.read_misses + c.write_hits + c.write_misses + self.fast_read_blocks()
    }

    /// One tick of the paced write-back: ask the scheduler how many blocks
    /// to write back now (`sched` and `seen`, the accesses at the last
    /// tick, belong to the caller's loop) and write them back, one batch
    /// per hold of the lock.
    fn pace_tick(&self, sched: &mut CleaningScheduler, seen: &mut u64, origin: Instant) -> Res<()> {
        let (dirty, target, accesses) = {
            let st = self.lock()?;
            if st.degraded.is_some() {
                return Ok(());
            }
            let d = (st.map.dirty() as u64, self.dirty_limit(&st) as u64);
            (d.0, d.1, self.accesses(&st))
        };
        if accesses != *seen {
            // Not idle: the scheduler counts requests, not how many.
            *seen = accesses;
            sched.after_request(0);
        }
        let plan = sched.tick(origin.elapsed().as_nanos() as u64, dirty, target);
        self.cleaner
            .rate
            .store(sched.rate().to_bits(), Ordering::Relaxed);
        let mut left = plan.lines;
        while left > 0 && !self.cleaner.stop.load(Ordering::SeqCst) {
            let n = self.write_back_step(left)?;
            if n == 0 {
                break;
            }
            left -= n.min(left);
            std::thread::yield_now();
        }
        Ok(())
    }

    /// The `background` part of `stats --json`.
    pub(super) fn background_json(&self, st: &State) -> serde_json::Value {
        let c = relock(&self.commits.m);
        serde_json::json!({
            "cleaner": self.cleaner_on(),
            "free_segments_target": self.background_free(st),
            "dirty_limit": self.dirty_limit(st),
            "cleaner_segments_cleaned": self.cleaner.segments.load(Ordering::Relaxed),
            "cleaner_written_back": self.cleaner.written_back.load(Ordering::Relaxed),
            "foreground_dirty_limit": self.foreground_dirty_limit(st),
            "write_back_rate_blocks_per_s": f64::from_bits(self.cleaner.rate.load(Ordering::Relaxed)),
            "commit_requests": c.requests,
            "commits": c.done,
        })
    }
}

/// The cleaner thread: wait for a wake-up or a tick; clean segments back to
/// back (releasing the lock between them) while they are short; once per
/// tick, the paced write-back.
fn cleaner_loop(weak: Weak<LogCache>) {
    let origin = Instant::now();
    let (mut sched, mut seen) = {
        let Some(me) = weak.upgrade() else { return };
        let Ok(st) = me.lock() else { return };
        let slots = st.sb.slots() / me.geo.ratio as u64;
        let target = me.dirty_limit(&st) as u64;
        let cfg = CleaningConfig {
            // Segment cleaning, not a dirty eviction, relieves pressure here.
            pressure_lines: 0,
            timed: true,
        };
        (CleaningScheduler::new(cfg, slots, target), me.accesses(&st))
    };
    let mut next_tick = Instant::now() + PACE_TICK;
    loop {
        {
            let Some(me) = weak.upgrade() else { return };
            let c = &me.cleaner;
            if c.stop.load(Ordering::SeqCst) {
                return;
            }
            let g = relock(&c.wake);
            let now = Instant::now();
            if !c.wanted.load(Ordering::Relaxed) && now < next_tick {
                let _ = c.cv.wait_timeout(g, next_tick - now);
            }
        }
        let Some(me) = weak.upgrade() else { return };
        me.cleaner.wanted.store(false, Ordering::Relaxed);
        let mut r = Ok(());
        while !me.cleaner.stop.load(Ordering::SeqCst) {
            match me.segment_step() {
                Ok(true) => std::thread::yield_now(),
                Ok(false) => break,
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        if r.is_ok() && Instant::now() >= next_tick {
            next_tick = Instant::now() + PACE_TICK;
            r = me.pace_tick(&mut sched, &mut seen, origin);
        }
        if let Err(e) = r {
            if e.0 == "the cache is closed" {
                return;
            }
            tracing::warn!("background cleaning: {e}");
        }
    }
}
