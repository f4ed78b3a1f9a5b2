//! Flushing and write-back: the DRAM flusher's batches, FLUSH (SSD
//! commits), and writing every dirty page back to the backing device.

use super::State;
use super::{ssd_fault, CacheError, Fault};
use crate::pair::Role;
use rustc_hash::FxHashSet;
use tiercache_tica_policy::tica::Tica;
use tiercache_tica_policy::Architecture;
use tiercache_tica_policy::{Dev, FlushScheduler, Op, OpKind, Page};

impl State {
    /// Copy up to `max` dirty DRAM pages to the RO-SSD (an idle tick, a
    /// test's flusher step, the shutdown's drain).
    pub(super) fn flush_some(&mut self, max: usize) -> Result<usize, CacheError> {
        self.run_flushes(|tica, _, ops| tica.start_flushes(max, ops))
    }

    /// After a client request, before it is answered: the flushes the
    /// scheduler allows ([`FlushScheduler::after_request`], as `sim` runs
    /// them), done at once.
    pub(super) fn flush_after_request(&mut self) -> Result<usize, CacheError> {
        self.run_flushes(|tica, sched, ops| sched.after_request(tica, ops))
    }

    /// A tick of the scheduler's clock (the wall clock, ns since the cache
    /// opened): the pages an idle tick flushes.
    pub(super) fn flush_tick(&mut self, now_ns: u64) -> Result<usize, CacheError> {
        let n = self.flusher.tick(now_ns);
        if n == 0 {
            return Ok(0);
        }
        self.flush_some(n)
    }

    /// Start flushes with `start` and copy them, completing each.
    fn run_flushes(
        &mut self,
        start: impl FnOnce(&mut Tica, &mut FlushScheduler, &mut Vec<Op>) -> Vec<(Page, u64)>,
    ) -> Result<usize, CacheError> {
        if self.degraded.is_some() || self.closed {
            return Ok(0);
        }
        let mut ops = std::mem::take(&mut self.ops);
        ops.clear();
        let started = start(&mut self.tica, &mut self.flusher, &mut ops);
        let r = self.exec_flushes(&ops);
        self.ops = ops;
        match r {
            Ok(_) => {
                for &(p, gen) in &started {
                    self.tica.flush_done(p, gen);
                    self.recycle_dram(p);
                }
                self.counters.flusher_pages += started.len() as u64;
                self.gc_dram();
                Ok(started.len())
            }
            Err(Fault::Ssd(role, why)) => {
                self.degrade(role, &why)?;
                Ok(0)
            }
            Err(Fault::Other(e)) => Err(CacheError(e)),
        }
    }

    /// Execute a flusher batch: the ops [`Tica::start_flushes`] emits, one
    /// DRAM read and one RO-SSD write per page, the write taken straight from
    /// the DRAM copy (what [`State::exec`] does, without copying each page
    /// into a buffer first). Any other op sequence goes to `exec`.
    fn exec_flushes(&mut self, ops: &[Op]) -> Result<(), Fault> {
        let is_flush = |pair: &[Op]| {
            matches!(pair, [r, w] if r.dev == Dev::Dram && r.kind == OpKind::Read
                && w.dev == Dev::RoSsd && w.kind == OpKind::Write && r.page == w.page)
        };
        if !ops.len().is_multiple_of(2) || !ops.chunks(2).all(is_flush) {
            return self.exec(ops, None).map(|_| ());
        }
        for pair in ops.chunks(2) {
            let p = pair[0].page;
            if !self.dram.contains_key(&p) {
                return Err(Fault::Other(format!("internal: page {p} is not in DRAM")));
            }
            self.ensure_slot(Role::RoSsd)?;
            let Some(d) = self.dram.get(&p) else {
                return Err(Fault::Other(format!("internal: page {p} is not in DRAM")));
            };
            self.ro
                .write(p, &d.data, true)
                .map_err(|e| ssd_fault(e, Role::RoSsd))?;
        }
        Ok(())
    }

    /// FLUSH: make every acknowledged write durable.
    pub(super) fn flush(&mut self) -> Result<(), CacheError> {
        self.counters.flushes += 1;
        self.sync()
    }

    /// Commit everything (degrading on an SSD error; then the backing
    /// device is complete and flushed).
    pub(super) fn sync(&mut self) -> Result<(), CacheError> {
        loop {
            if self.degraded.is_some() {
                self.finish_degrade()?;
                return self.backing_flush();
            }
            match self.commit_all() {
                Ok(()) => return Ok(()),
                Err(Fault::Ssd(role, why)) => self.degrade(role, &why)?,
                Err(Fault::Other(e)) => return Err(CacheError(e)),
            }
        }
    }

    /// Pages newer than the backing device, each with where its newest copy
    /// is: DRAM first, else an SSD.
    pub(super) fn dirty_pages(&self) -> Vec<Page> {
        let mut set: FxHashSet<Page> = self
            .dram
            .iter()
            .filter(|(_, d)| d.dirty)
            .map(|(p, _)| *p)
            .collect();
        for (p, e) in self.wo.entries().chain(self.ro.entries()) {
            if e.dirty {
                set.insert(p);
            }
        }
        let mut v: Vec<Page> = set.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// Write every dirty page back (control `flush`, `detach`): healthy
    /// only; marks the pages clean in the policy and on both SSDs.
    pub(super) fn write_back_all(&mut self) -> Result<u64, CacheError> {
        if self.degraded.is_some() {
            self.finish_degrade()?;
            self.backing_flush()?;
            return Ok(0);
        }
        let pages = self.dirty_pages();
        for &p in &pages {
            let data = match self.dram.get(&p) {
                Some(d) => d.data.clone(),
                None => {
                    let role = if self.ro.get(p).is_some() {
                        Role::RoSsd
                    } else {
                        Role::WoSsd
                    };
                    match self.ssd(role).read(p) {
                        Ok(d) => d,
                        Err(e) => {
                            // Degrading writes everything back itself.
                            self.degrade(role, &e.0)?;
                            return Ok(pages.len() as u64);
                        }
                    }
                }
            };
            self.backing_write(p, &data)?;
        }
        self.backing_flush()?;
        for &p in &pages {
            self.tica.mark_clean(p);
            if let Some(d) = self.dram.get_mut(&p) {
                d.dirty = false;
            }
            for role in [Role::RoSsd, Role::WoSsd] {
                if let Err(e) = self.ssd(role).mark_clean(p) {
                    self.degrade(role, &e.0)?;
                    return Ok(pages.len() as u64);
                }
            }
        }
        self.gc_dram();
        match self.commit_all() {
            Ok(()) => {}
            Err(Fault::Ssd(role, why)) => self.degrade(role, &why)?,
            Err(Fault::Other(e)) => return Err(CacheError(e)),
        }
        Ok(pages.len() as u64)
    }
}
