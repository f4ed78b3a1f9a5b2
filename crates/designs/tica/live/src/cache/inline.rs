//! Requests served on the caller's thread ("inline": the runtime's worker,
//! no hand-off to a request thread), when they need no slow I/O.
//!
//! The hand-off to a request thread (a channel, a oneshot, two context
//! switches) cost more than an all-hit request itself. An inline request takes
//! the same lock and runs the same code as one on a request thread, so the
//! policy, the devices and every crash rule see the same sequence of
//! operations; only the thread differs. What it may not do is wait on a slow
//! device while holding a runtime worker, so a request runs inline only when:
//!
//! - no other holder of the lock is doing slow I/O right now (a metadata
//!   commit with its `fdatasync`, backing-device I/O, degrading): such
//!   sections mark the state ([`SlowIo`]) and inline requests then go to the
//!   request threads instead of queueing on the lock;
//! - the cache is healthy and open;
//! - a read hits DRAM or an SSD for every page, and each SSD page is in the
//!   page cache (`preadv2(RWF_NOWAIT)`, [`tiercache_io::read_cached`]); the
//!   bytes are read before the policy is touched, so a request that cannot
//!   run inline leaves no trace;
//! - a write is whole pages, not FUA, and both SSDs have enough free slots
//!   and the WO-SSD enough room that neither a metadata commit
//!   ([`super::State::ensure_slot`]) nor a victim's write-back to the backing
//!   device can be needed (SSD writes are buffered `pwrite`s).
//!
//! `TIERCACHE_TICA_INLINE=0` turns it off (a benchmark knob);
//! [`ThreeLevel::set_inline`] does the same for tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, MutexGuard};

use tiercache_tica_policy::{Architecture, Dev, Op, OpKind, Page};

use super::{CacheError, State, ThreeLevel};
use crate::pair::{Role, PAGE};

/// Free slots kept in reserve beyond what an inline request can use.
const SLOT_MARGIN: usize = 8;

/// While alive, the lock's holder is doing slow I/O (a sync, the backing
/// device): inline requests go to the request threads instead of waiting.
pub(crate) struct SlowIo(Arc<AtomicUsize>);

impl SlowIo {
    /// Mark the start of a slow section (nested sections count).
    pub(crate) fn enter(mark: &Arc<AtomicUsize>) -> SlowIo {
        mark.fetch_add(1, Ordering::SeqCst);
        SlowIo(Arc::clone(mark))
    }
}

impl Drop for SlowIo {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Inline requests unless `TIERCACHE_TICA_INLINE=0`.
pub(super) fn enabled_by_env() -> bool {
    std::env::var("TIERCACHE_TICA_INLINE").map_or(true, |v| v.trim() != "0")
}

impl State {
    /// The device the policy would read page `p` from now, without touching
    /// it (the same order as its read: DRAM, RO-SSD, WO-SSD); `None` on a miss.
    fn hit_source(&self, p: Page) -> Option<Dev> {
        let d = self.tica.dram();
        if d.in_read(p) || d.write_slot(p).is_some() {
            Some(Dev::Dram)
        } else if self.tica.on_ro(p) {
            Some(Dev::RoSsd)
        } else if self.tica.on_wo(p) {
            Some(Dev::WoSsd)
        } else {
            None
        }
    }

    /// Copy `dst.len()` bytes of page `p` at `in_page` from `dev` without
    /// blocking; `false` if the page is not there or not in the page cache.
    fn copy_hit(&self, p: Page, dev: Dev, in_page: usize, dst: &mut [u8]) -> bool {
        let ssd = match dev {
            Dev::Dram => {
                let Some(d) = self.dram.get(&p) else {
                    return false;
                };
                dst.copy_from_slice(&d.data[in_page..in_page + dst.len()]);
                return true;
            }
            Dev::RoSsd => &self.ro,
            Dev::WoSsd => &self.wo,
            _ => return false,
        };
        let Some(off) = ssd.get(p).and_then(|e| ssd.slot_offset(e.slot)) else {
            return false;
        };
        matches!(
            tiercache_io::read_cached(&*ssd.dev, dst, off + in_page as u64),
            Some(Ok(()))
        )
    }

    /// End a batch on both SSDs (their held pages go out). A failed write
    /// fails its SSD as a single write's would: every dirty page goes back
    /// to the backing device from its other copy (DRAM or the other SSD),
    /// and the batch's writes count as served that way; `Err` only when
    /// that failed too.
    pub(super) fn end_batches(&mut self) -> Result<(), CacheError> {
        for role in [Role::WoSsd, Role::RoSsd] {
            if let Err(e) = self.ssd(role).end_batch() {
                self.degrade(role, &e.0)?;
            }
        }
        Ok(())
    }

    /// Look `pages` up in the policy (`Tica::warm`), both SSDs' tables and the
    /// DRAM level, changing nothing: these independent lookups overlap their
    /// cache misses, and the writes' own lookups then hit (the server's user
    /// time per write 2.6 -> 2.3 us).
    fn warm(&self, pages: &[Page]) {
        let found: usize = pages
            .iter()
            .map(|&p| {
                self.tica.warm(p) as usize
                    + self.wo.get(p).is_some() as usize
                    + self.ro.get(p).is_some() as usize
                    + self.dram.contains_key(&p) as usize
            })
            .sum();
        std::hint::black_box(found);
    }

    /// Whether the flushes after a request can need no metadata commit.
    fn flush_is_cheap(&self) -> bool {
        self.ro.free_slots() >= self.flusher.config().per_request + SLOT_MARGIN
    }

    /// Whether writing `n` whole pages can need neither a metadata commit
    /// nor a write-back to the backing device: each page takes at most one
    /// WO-SSD slot for itself and one for a WED copy of a page leaving DRAM,
    /// and at most one RO-SSD slot for a flush the full write partition
    /// forces; no WO-SSD victim is due while the policy's SSD level has room.
    fn write_is_cheap(&self, n: usize) -> bool {
        let room = self.tica.config().ssd_pages;
        self.wo.free_slots() >= 2 * n + SLOT_MARGIN
            && self.ro.free_slots() >= n + self.flusher.config().per_request + SLOT_MARGIN
            && self.tica.wo_len() + 2 * n + SLOT_MARGIN <= room
    }
}

impl ThreeLevel {
    /// A non-empty write of whole pages inside the device.
    fn whole_pages(&self, offset: u64, data: &[u8]) -> bool {
        !data.is_empty()
            && offset.is_multiple_of(PAGE)
            && (data.len() as u64).is_multiple_of(PAGE)
            && self.check_range(offset, data.len() as u64).is_ok()
    }

    /// Allow or forbid inline requests (on by default unless
    /// `TIERCACHE_TICA_INLINE=0`).
    pub fn set_inline(&self, on: bool) {
        self.inline.store(on, Ordering::Relaxed);
    }

    /// The lock for an inline request: `None` (go to the request threads)
    /// when inline requests are off or the holder is doing slow I/O.
    fn inline_lock(&self) -> Option<MutexGuard<'_, State>> {
        if !self.inline.load(Ordering::Relaxed) || self.slow.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let s = self.lock();
        if s.closed || s.degraded.is_some() || s.work.is_some() {
            return None;
        }
        Some(s)
    }

    /// Serve a read on the caller's thread when every page is a hit whose
    /// bytes can be had without blocking (see the module documentation);
    /// `None` when it must go to a request thread (nothing was done then).
    pub fn read_inline(&self, offset: u64, buf: &mut [u8]) -> Option<Result<(), CacheError>> {
        if buf.is_empty() || self.check_range(offset, buf.len() as u64).is_err() {
            return None;
        }
        let mut s = self.inline_lock()?;
        if !s.flush_is_cheap() {
            return None;
        }
        let end = offset + buf.len() as u64;
        // The bytes first, the policy untouched: any page that cannot be
        // read this way sends the whole request to the request threads.
        let mut hits: Vec<(Page, Dev)> = Vec::with_capacity(buf.len().div_ceil(PAGE as usize) + 1);
        let mut pos = offset;
        while pos < end {
            let p = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min((end - pos) as usize);
            let at = (pos - offset) as usize;
            let dev = s.hit_source(p)?;
            if !s.copy_hit(p, dev, in_page, &mut buf[at..at + n]) {
                return None;
            }
            hits.push((p, dev));
            pos += n as u64;
        }
        // Then the policy's accesses: for a hit, one read of the device the
        // bytes came from (checked; anything else runs as on the threads).
        s.record(tiercache_block::IoKind::Read, offset, buf.len() as u64);
        let mut ops: Vec<Op> = Vec::with_capacity(1);
        let mut pos = offset;
        for (p, dev) in hits {
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min((end - pos) as usize);
            let at = (pos - offset) as usize;
            pos += n as u64;
            ops.clear();
            s.tica.access(p, false, &mut ops);
            match ops.as_slice() {
                [op] if op.dev == dev && op.kind == OpKind::Read && op.page == p => match dev {
                    Dev::RoSsd => s.ssd(Role::RoSsd).reads += 1,
                    Dev::WoSsd => s.ssd(Role::WoSsd).reads += 1,
                    _ => {}
                },
                _ => {
                    debug_assert!(false, "page {p}: the policy's read differs: {ops:?}");
                    match s.read_ops(p, &ops) {
                        Ok(Some(d)) => buf[at..at + n].copy_from_slice(&d[in_page..in_page + n]),
                        Ok(None) => match s.read_page(p) {
                            Ok(d) => buf[at..at + n].copy_from_slice(&d[in_page..in_page + n]),
                            Err(e) => return Some(Err(e)),
                        },
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
        }
        s.gc_dram();
        s.counters.inline_reads += 1;
        Some(s.flush_after_request().map(|_| ()))
    }

    /// Serve a write on the caller's thread when it is whole pages, not
    /// FUA, and can need no slow I/O (see the module documentation); `None`
    /// when it must go to a request thread (nothing was done then).
    pub fn write_inline(
        &self,
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> Option<Result<(), CacheError>> {
        if fua || !self.whole_pages(offset, data) {
            return None;
        }
        let mut s = self.inline_lock()?;
        if !s.write_is_cheap(data.len() / PAGE as usize) {
            return None;
        }
        s.counters.inline_writes += 1;
        Some(s.write_range(offset, data))
    }

    /// Serve plain writes received together ([`Self::write_inline`]'s
    /// conditions for all of them, no page twice) under one lock hold, with
    /// both SSDs' page writes held back and written as runs of adjacent
    /// slots ([`crate::ssd::Ssd::begin_batch`]) before any is answered.
    /// Each write runs exactly as a single one would (the policy and the
    /// records see the same sequence); `None` when the batch must run as
    /// single writes (nothing was done then).
    pub fn write_batch_inline(
        &self,
        writes: &[(u64, &[u8])],
    ) -> Option<Vec<Result<(), CacheError>>> {
        let mut pages = Vec::with_capacity(writes.len());
        for &(offset, data) in writes {
            if !self.whole_pages(offset, data) {
                return None;
            }
            pages.extend((0..data.len() as u64 / PAGE).map(|i| offset / PAGE + i));
        }
        pages.sort_unstable();
        if pages.windows(2).any(|w| w[0] == w[1]) {
            return None;
        }
        let mut s = self.inline_lock()?;
        if !s.write_is_cheap(pages.len()) {
            return None;
        }
        s.warm(&pages);
        s.wo.begin_batch();
        s.ro.begin_batch();
        let mut results: Vec<Result<(), CacheError>> = writes
            .iter()
            .map(|&(offset, data)| {
                s.counters.inline_writes += 1;
                s.write_range(offset, data)
            })
            .collect();
        if let Err(e) = s.end_batches() {
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(e.clone());
            }
        }
        Some(results)
    }
}
