//! The migration worker: planning rounds, running migrations step by step
//! (lock, copy, flush, switch, trim, release), exchanges on a `sum` volume
//! (the same steps for two blocks at once, see
//! [`tiercache_oodt_policy::migration::Exchange`]), checkpoints, and shutdown.

use super::TieredVolume;
use super::{lock, tier_err, Core};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_oodt_policy::migration::{Action, Exchange, LogRecord, Migration, Phase, Steps};
use tiercache_oodt_policy::planner::{plan_round, Move, Pair, Round};
use tiercache_oodt_policy::{BlockId, TierError};

/// One unit of work of a planning round.
#[derive(Clone, Copy, Debug)]
pub(super) enum Job {
    /// Move one block (a volume with homes).
    Move(Move),
    /// Exchange two blocks' tiers (a `sum` volume).
    Pair(Pair),
}

impl std::fmt::Display for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Move(m) => write!(f, "move of {m}"),
            Job::Pair(p) => p.fmt(f),
        }
    }
}

impl TieredVolume {
    /// Start the migration worker.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name("tier-migrate".into())
            .spawn(move || me.worker())
            .expect("spawn the migration worker");
        *lock(&self.worker) = Some(h);
    }

    pub(super) fn wake_worker(&self) {
        let _g = lock(&self.wake.0);
        self.wake.1.notify_all();
    }

    /// The migration worker's loop (see the module docs).
    pub(super) fn worker(self: Arc<Self>) {
        let idle = Duration::from_millis(self.cfg.idle_ms.max(1));
        let tick = idle.min(Duration::from_millis(50));
        let rate = self.cfg.migrate_rate as f64;
        let mut pace = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            {
                let g = lock(&self.wake.0);
                let _ = self.wake.1.wait_timeout(g, tick);
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let jobs = self.plan_round(idle);
            for job in jobs {
                // Not while a resize runs (it may drop the slots a job takes).
                let _no_resize = lock(&self.resizing);
                if self.stop.load(Ordering::Acquire) || !self.checkpoint_if_full() {
                    break;
                }
                let now = Instant::now();
                if pace > now {
                    std::thread::sleep(pace - now);
                }
                let r = match job {
                    Job::Move(mv) => self.migrate(mv),
                    Job::Pair(p) => self.exchange(p),
                };
                match r {
                    Ok(bytes) => {
                        pace = pace.max(now) + Duration::from_secs_f64(bytes as f64 / rate);
                    }
                    Err(e) => {
                        self.counters
                            .migration_errors
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::error!("migration ({job}) failed: {e}");
                        break;
                    }
                }
            }
            self.checkpoint_if_full();
        }
    }

    /// Run one planning round now, in the caller's thread, and its moves or
    /// exchanges one after the other (for deterministic tests and
    /// simulations: the worker must not be running). The jobs completed;
    /// the first migration error ends the round and is returned.
    pub fn migrate_now(&self) -> io::Result<usize> {
        if lock(&self.worker).is_some() {
            return Err(io::Error::other(
                "the migration worker is running (migrate_now is for volumes without it)",
            ));
        }
        lock(&self.core).plan_due = true;
        self.run_round()
    }

    /// Plan a round now (when one is due) and run its jobs one after the
    /// other in the caller's thread; the jobs completed, or the first
    /// migration error.
    fn run_round(&self) -> io::Result<usize> {
        let jobs = self.plan_round(Duration::MAX);
        let mut done = 0;
        for job in jobs {
            let _no_resize = lock(&self.resizing);
            if !self.checkpoint_if_full() {
                return Err(io::Error::other("checkpoint failed"));
            }
            let r = match job {
                Job::Move(mv) => self.migrate(mv),
                Job::Pair(p) => self.exchange(p),
            };
            if let Err(e) = r {
                self.counters
                    .migration_errors
                    .fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
            done += 1;
        }
        Ok(done)
    }

    /// With `--plan-clock requests`: the round a request made due, run after
    /// the request's I/O and the release of its claims, before it is
    /// answered (so at queue depth 1 before the next request arrives). One
    /// round at a time; a migration error is logged and counted like the
    /// worker's, the request itself succeeded.
    pub(super) async fn round_after_request(self: &Arc<Self>) {
        if !std::mem::take(&mut lock(&self.core).request_round_due) {
            return;
        }
        let me = Arc::clone(self);
        let r = tokio::task::spawn_blocking(move || {
            let _one = lock(&me.request_round);
            lock(&me.core).plan_due = true;
            me.run_round()
        })
        .await;
        match r {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!("planning round after a request: {e}"),
            Err(e) => tracing::error!("planning round after a request: {e}"),
        }
    }

    /// Between migrations: checkpoint when the log lacks room for one more
    /// migration's or exchange's records. `false` if that failed (migrations stop).
    pub(super) fn checkpoint_if_full(&self) -> bool {
        if !lock(&self.journal).needs_checkpoint(4) {
            return true;
        }
        match self.checkpoint() {
            Ok(()) => true,
            Err(e) => {
                self.fail(format!("checkpoint: {e}"));
                false
            }
        }
    }

    /// Run the planner if a round is due; the moves or exchanges to make, in order.
    pub(super) fn plan_round(&self, idle: Duration) -> Vec<Job> {
        let mut c = lock(&self.core);
        if c.failed.is_some() {
            return Vec::new();
        }
        let idle_for = c.last_request.elapsed();
        let planner = c.planner;
        let due = std::mem::take(&mut c.plan_due)
            || (idle_for >= idle && c.trigger.on_idle(&planner, idle_for.as_nanos() as u64));
        if !due {
            return Vec::new();
        }
        self.counters.planner_rounds.fetch_add(1, Ordering::Relaxed);
        let c = &mut *c;
        let mut cands = Vec::new();
        match plan_round(
            &c.table,
            c.policy.as_mut(),
            &mut cands,
            planner.max_moves_per_round,
        ) {
            Round::Moves(moves) => moves.into_iter().map(Job::Move).collect(),
            Round::Exchanges(pairs) => pairs.into_iter().map(Job::Pair).collect(),
        }
    }

    pub(super) fn fail(&self, why: String) {
        tracing::error!("tiered volume: migrations stopped: {why}");
        lock(&self.core).failed.get_or_insert(why);
    }

    /// Write a checkpoint of the mapping (no migration in flight: called
    /// by the worker between migrations, or after it stopped).
    pub(super) fn checkpoint(&self) -> io::Result<()> {
        self.checkpoint_observed(&|| {})
    }

    /// [`checkpoint`](Self::checkpoint), calling `after_write` after each
    /// device write and sync.
    pub(super) fn checkpoint_observed(&self, after_write: &dyn Fn()) -> io::Result<()> {
        let table = lock(&self.core).table.clone();
        lock(&self.journal).checkpoint_observed(&table, after_write)?;
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Unlock a block after its switch or an abandoned migration.
    pub(super) fn unlock(&self, c: &mut Core, block: BlockId) {
        c.disp.unlock(block);
        self.unlocked.notify_waiters();
    }

    /// Move one block; the bytes copied (0 when the move no longer applies).
    pub(super) fn migrate(&self, mv: Move) -> io::Result<u64> {
        let bs = u64::from(self.sb.block_bytes);
        if (mv.block + 1) * bs > self.size() {
            return Ok(0); // a partial last block stays home
        }
        let mut m = {
            let mut c = lock(&self.core);
            if c.table.tier_of(mv.block) != Some(mv.from) {
                return Ok(0);
            }
            let id = c.next_migration;
            let m = match Migration::start(&mut c.table, id, mv.block, mv.to) {
                Ok(m) => m,
                Err(TierError::TierFull(_)) => return Ok(0),
                Err(e) => return Err(tier_err(e)),
            };
            c.next_migration += 1;
            c.disp.lock(mv.block);
            // Under the core lock, with the slot the start took (stats
            // read both in one section: see `stats_json`).
            self.counters.in_flight.store(1, Ordering::Relaxed);
            while !c.disp.drained(mv.block) {
                c = self.drained.wait(c).unwrap_or_else(|p| p.into_inner());
            }
            m
        };
        let r = self.run_migration(&mut m);
        self.migration_ended();
        r?;
        self.counters.migrations.fetch_add(1, Ordering::Relaxed);
        self.counters
            .migrated_bytes
            .fetch_add(bs, Ordering::Relaxed);
        if m.dst.tier < m.src.tier {
            self.counters.promotions.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.demotions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(bs)
    }

    /// Exchange the tiers of a pair of blocks (a `sum` volume); the bytes
    /// copied (0 when the exchange no longer applies).
    pub(super) fn exchange(&self, p: Pair) -> io::Result<u64> {
        let bs = u64::from(self.sb.block_bytes);
        let (up, down) = (p.up.block, p.down.block);
        let mut x = {
            let mut c = lock(&self.core);
            if c.table.tier_of(up) != Some(p.up.from) || c.table.tier_of(down) != Some(p.down.from)
            {
                return Ok(0);
            }
            let id = c.next_migration;
            let x = match Exchange::start(&mut c.table, id, up, down) {
                Ok(x) => x,
                Err(TierError::TierFull(_)) => return Ok(0),
                Err(e) => return Err(tier_err(e)),
            };
            c.next_migration += 1;
            for b in [up, down] {
                c.disp.lock(b);
            }
            self.counters.in_flight.store(1, Ordering::Relaxed);
            while !c.disp.drained(up) || !c.disp.drained(down) {
                c = self.drained.wait(c).unwrap_or_else(|p| p.into_inner());
            }
            x
        };
        let r = self.run_migration(&mut x);
        self.migration_ended();
        r?;
        let n = &self.counters;
        n.migrations.fetch_add(2, Ordering::Relaxed);
        n.exchanges.fetch_add(1, Ordering::Relaxed);
        n.promotions.fetch_add(1, Ordering::Relaxed);
        n.demotions.fetch_add(1, Ordering::Relaxed);
        n.migrated_bytes.fetch_add(2 * bs, Ordering::Relaxed);
        Ok(2 * bs)
    }

    /// The migration in flight ended (done or abandoned): cleared under the
    /// core lock, after the table released its slots, so stats never show
    /// a started migration's slot without the migration.
    fn migration_ended(&self) {
        let _c = lock(&self.core);
        self.counters.in_flight.store(0, Ordering::Relaxed);
    }

    /// Run a migration or an exchange to its end (or abandon it on an error).
    pub(super) fn run_migration(&self, m: &mut dyn Steps) -> io::Result<()> {
        let bs = self.sb.block_bytes as usize;
        let mut buf = vec![0u8; bs];
        let mut journal = lock(&self.journal);
        while let Some(a) = m.next_action() {
            let r = match a {
                Action::Log(rec) => journal.append(&rec),
                Action::Copy { from, to } => {
                    if !self.copy_pause.is_zero() {
                        std::thread::sleep(self.copy_pause);
                    }
                    let (src, so) = self.locate(from);
                    let (dst, d_off) = self.locate(to);
                    src.read_at(&mut buf, so)
                        .and_then(|_| write_copy(dst.as_ref(), to.tier, &buf, d_off))
                }
                Action::Flush { tier } => self.devs[tier as usize].flush(),
                // Advisory: a failed trim leaves old bytes no block maps to.
                Action::Trim { loc } => {
                    let (d, off) = self.locate(loc);
                    if let Err(e) = d.trim(off, bs as u64) {
                        tracing::warn!("trimming the source of migration {}: {e}", m.id());
                    }
                    Ok(())
                }
            };
            if let Err(e) = r {
                drop(journal);
                return Err(self.abandon(m, a, e));
            }
            let mut c = lock(&self.core);
            let was_locked = m.locks_block();
            m.advance(&mut c.table).map_err(tier_err)?;
            if was_locked && !m.locks_block() {
                for (block, _, _) in m.halves() {
                    self.unlock(&mut c, block);
                }
            }
        }
        Ok(())
    }

    /// A step of `m` failed with `e`: undo what can be undone.
    pub(super) fn abandon(&self, m: &dyn Steps, a: Action, e: io::Error) -> io::Error {
        let mut c = lock(&self.core);
        let halves = m.halves();
        match (m.phase(), a) {
            // The switch may or may not be durable: the blocks' location is
            // unknown until recovery decides.
            (Phase::Flushed, Action::Log(LogRecord::Switch { .. })) => {
                for &(block, _, _) in &halves {
                    c.poisoned.insert(block);
                }
                drop(c);
                self.fail(format!("logging the switch of migration {}: {e}", m.id()));
                let mut c = lock(&self.core);
                for &(block, _, _) in &halves {
                    self.unlock(&mut c, block);
                }
            }
            // Before the commit point: the blocks stay at their sources.
            (p, _) if p < Phase::Switched => {
                for &(block, _, dst) in &halves {
                    c.table.release(dst);
                    self.unlock(&mut c, block);
                }
                self.counters
                    .rolled_back_live
                    .fetch_add(1, Ordering::Relaxed);
                if matches!(a, Action::Log(_)) {
                    drop(c);
                    self.fail(format!("migration log write: {e}"));
                }
            }
            // After it: only the log's Done is missing; recovery re-trims.
            _ => {
                drop(c);
                self.fail(format!("migration log write: {e}"));
            }
        }
        e
    }

    /// Why the volume cannot be evacuated to its slow tier, if it cannot: a
    /// `sum` volume does not fit there (every block has a slot on exactly
    /// one tier and the volume is larger than the slow tier's slots).
    pub fn evacuation_refusal(&self) -> Option<String> {
        let bs = u64::from(self.sb.block_bytes);
        let (blocks, slow) = {
            let c = lock(&self.core);
            (c.table.blocks(), c.table.slots(1))
        };
        let slow = slow?; // a home for every block: it always fits
        let excess = (blocks * bs).saturating_sub(slow * bs);
        (excess > 0).then(|| {
            format!(
                "a tiered volume of capacity sum cannot be detached (evacuated to its slow tier): the volume is {} bytes and the slow tier holds {} bytes, so {excess} bytes ({} blocks) would have to be freed first, and shrinking a volume is not supported (stop the server with SIGTERM; every block stays where it is)",
                blocks * bs,
                slow * bs,
                excess / bs
            )
        })
    }

    /// Stop the worker and move every block of the fast tier home, so the
    /// slow tier alone is the volume (`detach` of a `slow` volume); then
    /// flush and checkpoint like [`shutdown`](Self::shutdown). The blocks moved.
    pub fn evacuate(&self) -> io::Result<u64> {
        if let Some(why) = self.evacuation_refusal() {
            return Err(io::Error::other(why));
        }
        self.stop.store(true, Ordering::Release);
        self.wake_worker();
        if let Some(h) = lock(&self.worker).take() {
            let _ = h.join();
        }
        // After the worker stopped (it may wait on this lock for a job).
        let _no_resize = lock(&self.resizing);
        let residents: Vec<BlockId> = lock(&self.core).table.residents(0).collect();
        let mut moved = 0;
        for block in residents {
            let mv = Move {
                block,
                from: 0,
                to: 1,
                rank: u32::MAX,
                score: f32::NEG_INFINITY,
            };
            if !self.checkpoint_if_full() {
                return Err(io::Error::other("checkpoint failed during evacuation"));
            }
            if self.migrate(mv)? > 0 {
                moved += 1;
            }
        }
        let left = lock(&self.core).table.used_slots(0);
        if left > 0 {
            return Err(io::Error::other(format!(
                "{left} blocks are still on the fast tier after evacuation"
            )));
        }
        self.shutdown()?;
        Ok(moved)
    }

    /// Stop the worker (finishing the migration in flight), flush every tier
    /// and write a checkpoint. Idempotent.
    pub fn shutdown(&self) -> io::Result<()> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop.store(true, Ordering::Release);
        self.wake_worker();
        if let Some(h) = lock(&self.worker).take() {
            let _ = h.join();
        }
        self.flush_devices()?;
        self.checkpoint()
    }
}

/// Size of the pieces a migration writes its copy to the fast tier in.
///
/// A buffered write of a whole block (1 MiB by default) makes the kernel cache
/// it as one large folio, and ext4 then walks every buffer head of that folio
/// on each later 4 KiB write into it (`ext4_block_write_begin` was 46 % of the
/// server's time under 4 KiB random writes in a profile). Writing the copy page
/// by page keeps the fast tier's page cache in small folios; the few hundred
/// more system calls per migration cost far less. The slow tier, and a fast
/// tier opened `O_DIRECT` (no page cache), get whole blocks.
pub(super) const FAST_COPY_PIECE: usize = 4096;

/// Write a migration's copy `buf` at `offset` of tier `tier`'s device.
fn write_copy(
    dev: &dyn tiercache_io::BlockDev,
    tier: tiercache_oodt_policy::TierId,
    buf: &[u8],
    offset: u64,
) -> io::Result<()> {
    let direct = dev.raw_target().is_some_and(|t| t.direct_align.is_some());
    if tier != 0 || direct {
        return dev.write_at(buf, offset);
    }
    for (i, piece) in buf.chunks(FAST_COPY_PIECE).enumerate() {
        dev.write_at(piece, offset + (i * FAST_COPY_PIECE) as u64)?;
    }
    Ok(())
}
