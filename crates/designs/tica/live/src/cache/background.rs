//! The background flusher thread: the wall clock's ticks of the flush
//! scheduler (idle flushing) and metadata commits; its start and stop.

use super::CacheError;
use super::{State, ThreeLevel};
use crate::pair::Role;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_io::BlockDev;

/// Longest sleep between two looks at the stop flag.
const TICK_SLEEP_MAX: Duration = Duration::from_millis(10);

/// The background thread commits when an SSD has fewer free slots than this
/// share (1/N) of its slots, and at least a quarter of that share (an eighth of
/// the slots) waits (unmapped) for a commit to become free. Half, not less:
/// unmapped slots come back soon, so the log-order cursor (`crate::slots`)
/// finds long runs of free slots ahead of it (a 4 KiB random-write run: 3.3
/// pages per device write against 1.7 with an eighth, and 10 % more IOPS). A
/// commit writes back the pages written since the last one, so committing more
/// often adds write-back only for pages rewritten in between.
const LOW_SLOTS_DIV: usize = 2;

/// How often the background thread syncs the RO-SSD (outside the lock). Its
/// metadata is volatile while the cache runs (`Ssd::set_volatile_meta`), so
/// no commit needs its data durable; the sync is there to find a device
/// whose writeback fails (the SSD is then failed, as a failed commit would).
const RO_SYNC_INTERVAL: Duration = Duration::from_secs(1);

impl State {
    /// Whether the background thread should commit now: healthy, records
    /// waiting, and either a second since the last commit or an SSD short
    /// of free slots while enough unmapped ones wait for the commit.
    fn commit_due(&self) -> bool {
        if self.degraded.is_some()
            || self.closed
            || !(self.wo.has_pending() || self.ro.has_pending())
        {
            return false;
        }
        // Worth a commit only when it frees a good number of slots (not at
        // every tick while a full SSD unmaps a victim now and then).
        let low = |x: &crate::ssd::Ssd| {
            x.free_slots() < x.slots() / LOW_SLOTS_DIV
                && x.pending_free_slots() >= (x.slots() / (4 * LOW_SLOTS_DIV)).max(1)
        };
        self.wo.since_commit() > Duration::from_secs(1) || low(&self.wo) || low(&self.ro)
    }

    /// Whether the RO-SSD's periodic sync is due ([`RO_SYNC_INTERVAL`]).
    fn ro_sync_due(&self) -> bool {
        self.degraded.is_none() && !self.closed && self.ro_synced.elapsed() >= RO_SYNC_INTERVAL
    }

    /// The devices synced outside the lock: the WO-SSD ahead of a commit
    /// (`commit`), the RO-SSD when its periodic sync is due (`ro`). Not the
    /// backing device: its flush stays in the commit, under the lock, where a
    /// failure stops the victims' unmaps (after a failed `fsync` a later one
    /// may succeed although the data is gone).
    fn sync_targets(&self, commit: bool, ro: bool) -> Vec<(Role, Arc<dyn BlockDev>)> {
        let mut v = Vec::with_capacity(2);
        if ro {
            v.push((Role::RoSsd, Arc::clone(&self.ro.dev)));
        }
        if commit {
            v.push((Role::WoSsd, Arc::clone(&self.wo.dev)));
        }
        v
    }
}

impl ThreeLevel {
    /// Run the flusher once: up to `max` dirty DRAM pages to the RO-SSD, and
    /// a metadata commit when records waited longer than a second.
    pub fn flusher_step(&self, max: usize) -> Result<usize, CacheError> {
        let mut s = self.lock();
        if s.closed {
            return Ok(0);
        }
        let n = s.flush_some(max)?;
        if s.degraded.is_none()
            && (s.wo.has_pending() || s.ro.has_pending())
            && s.wo.since_commit() > Duration::from_secs(1)
        {
            s.sync()?;
        }
        Ok(n)
    }

    /// One tick of the flush scheduler at `now_ns` of the wall clock (idle
    /// flushing), and a metadata commit when records waited longer than a
    /// second or an SSD is short of free slots (so that requests seldom
    /// commit themselves, [`super::State::ensure_slot`]). Before such a
    /// commit the WO-SSD's data is synced *outside* the lock
    /// ([`Self::presync`]): the `fdatasync` in the commit, under the lock,
    /// then has little left to write. The RO-SSD is synced there too, once
    /// a second (its metadata needs no commit while the cache runs).
    fn flusher_tick(&self, now_ns: u64) -> Result<usize, CacheError> {
        let (devs, ro) = {
            let s = self.lock();
            if s.closed {
                return Ok(0);
            }
            let ro = s.ro_sync_due();
            (s.sync_targets(s.commit_due(), ro), ro)
        };
        if !devs.is_empty() {
            self.presync(&devs)?;
        }
        if ro {
            self.lock().ro_synced = Instant::now();
        }
        let mut s = self.lock();
        if s.closed {
            return Ok(0);
        }
        let n = s.flush_tick(now_ns)?;
        if s.commit_due() {
            s.sync()?;
        }
        Ok(n)
    }

    /// Sync the devices' data without the lock (a barrier only: nothing
    /// changes state). A failed sync fails its SSD (after an `fsync` error
    /// the kernel may have dropped the dirty pages, so a later sync proves
    /// nothing): the cache degrades, as if the commit had failed.
    fn presync(&self, devs: &[(Role, Arc<dyn BlockDev>)]) -> Result<(), CacheError> {
        for (role, dev) in devs {
            if let Err(e) = dev.flush() {
                let mut s = self.lock();
                if s.degraded.is_none() && !s.closed {
                    s.degrade(*role, &format!("{}: flush: {e}", dev.name()))?;
                }
            }
        }
        Ok(())
    }

    /// Start the background flusher thread: it passes the wall clock to the
    /// flush scheduler at each tick.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name("tica-flusher".into())
            .spawn(move || {
                let t0 = Instant::now();
                while !me.stop.load(Ordering::Relaxed) {
                    let next = me.lock().flusher.next_tick_ns();
                    let now = t0.elapsed().as_nanos() as u64;
                    if now < next {
                        std::thread::sleep(Duration::from_nanos(next - now).min(TICK_SLEEP_MAX));
                        continue;
                    }
                    if let Err(e) = me.flusher_tick(now) {
                        eprintln!("tiercache: flusher: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            });
        match h {
            Ok(h) => *self.flusher.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
            Err(e) => eprintln!("tiercache: could not start the flusher thread: {e}"),
        }
    }

    /// Stop the background flusher thread (shutdown does it too).
    pub fn stop_background(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let h = self
            .flusher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}
