//! The fast path: all-hit reads and plain appends run on the caller's
//! thread (the runtime's worker), without the hand-off to a request thread,
//! when they are cheap; anything else returns `None` and takes the request
//! path.
//!
//! **Reads.** The blocks are looked up under the lock, the lock is released,
//! and their slots are read from the page cache without blocking
//! (`preadv2(RWF_NOWAIT)`, [`tiercache_io::read_cached`]). Released, the
//! lock no longer keeps cleaning from freeing the slots' segment and a roll
//! from reopening it for new data. So every segment has a *generation*
//! ([`Generations`]): the sequence number of its current life, set by
//! `roll` (under the lock) *before* any byte of the new life is written. A
//! slot is written once per life (appends only move forward; a failed write
//! burns its slots), so bytes read from a slot whose segment still has the
//! generation seen at the lookup are the bytes the lookup found; if the
//! generation moved, the read is thrown away and the request path reads
//! under the lock. Until the segment is reopened its data stays in place,
//! so a read racing with cleaning alone returns the looked-up data, which
//! was current at the lookup (the read's linearisation point).
//!
//! **Writes.** A whole-block write-back write without FUA that fits the
//! open segment, with enough free segments and dirty blocks under the
//! limit, appends under the lock on the caller's thread: exactly the
//! request path's `write_locked`, whose steps then neither clean nor write
//! back (a buffered `pwrite` into the page cache and the map update), and
//! roll only into a segment announced ahead (no I/O, `log`). Other rolls,
//! cleaning, FUA, FLUSH and misses stay on the request threads,
//! so a device sync never holds a runtime worker.
//!
//! The lock is only tried (a few spins): a request that finds it held
//! (a roll, a commit, the cleaner) goes to the request threads rather than
//! block a runtime worker. `TIERCACHE_LS_FAST=0` turns the fast path off (a
//! benchmark knob).

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{MutexGuard, TryLockError};

use super::{LogCache, Res, State};
use crate::layout::WritePolicy;
use crate::segment::BLOCK;

/// Largest request the fast path takes (bytes).
pub const FAST_MAX: usize = 128 << 10;

/// Tries of the lock before a request goes to the request threads.
const SPINS: usize = 64;

/// Per segment, the sequence number of its current life (see the module
/// documentation).
pub(crate) struct Generations(Box<[AtomicU64]>);

impl Generations {
    /// One per segment the cache can grow to (`tiercache resize`).
    pub(crate) fn new(st: &State) -> Self {
        let max = (st.sb.max_nsegs() as usize).max(st.segs.len());
        Generations(
            (0..max)
                .map(|s| AtomicU64::new(st.segs.get(s).map_or(0, |x| x.seq)))
                .collect(),
        )
    }
    /// Segment `seg` starts life `seq`: before any data of it is written.
    pub(crate) fn reopen(&self, seg: u32, seq: u64) {
        self.0[seg as usize].store(seq, Ordering::SeqCst);
    }
    pub(crate) fn get(&self, seg: u32) -> u64 {
        self.0[seg as usize].load(Ordering::SeqCst)
    }
}

/// Fast-path counters (`stats --json` "fast_path").
#[derive(Default)]
pub(crate) struct FastCounters {
    /// Blocks read and requests served by the fast path.
    pub(crate) read_blocks: AtomicU64,
    pub(crate) reads: AtomicU64,
    /// Reads given up after the lookup: a page not cached, or the segment
    /// reopened (generation moved) before the read completed.
    pub(crate) read_fallbacks: AtomicU64,
    pub(crate) read_raced: AtomicU64,
    /// Writes served by the fast path.
    pub(crate) writes: AtomicU64,
    /// Writes sent to the request threads because the lock was held.
    pub(crate) write_lock_busy: AtomicU64,
    /// Writes sent to the request threads because the append could need
    /// I/O (cleaning, write-back, a roll that is not announced) or the
    /// cache is degraded.
    pub(crate) write_not_plain: AtomicU64,
    /// Write batches served by the fast path, and the writes in them.
    pub(crate) batches: AtomicU64,
    pub(crate) batch_writes: AtomicU64,
    /// Batches declined for their shape (a partial block, a block twice,
    /// too large) or because the fast path is off; those declined because
    /// of the lock or I/O count per write in the two counters above.
    pub(crate) batch_fallbacks: AtomicU64,
}

/// Whether `serve` uses the fast path: yes unless `TIERCACHE_LS_FAST=0`.
pub fn fast_path_wanted() -> bool {
    !matches!(
        std::env::var("TIERCACHE_LS_FAST").as_deref().map(str::trim),
        Ok("0")
    )
}

/// One run of consecutive slots in one segment: where in the request, where
/// on the device, and the segment's generation at the lookup.
struct Run {
    at: usize,
    len: usize,
    off: u64,
    seg: u32,
    gen: u64,
}

impl LogCache {
    /// Turn the fast path on or off (on by default).
    pub fn set_fast_path(&self, on: bool) {
        self.fast_on.store(on, Ordering::Relaxed);
    }
    fn fast_on(&self) -> bool {
        self.fast_on.load(Ordering::Relaxed)
    }

    /// The lock if it can be had without waiting long (and the cache is open).
    fn try_lock_fast(&self) -> Option<MutexGuard<'_, State>> {
        for _ in 0..SPINS {
            match self.st.try_lock() {
                Ok(mut g) => {
                    if g.closed {
                        return None;
                    }
                    g.staged = None;
                    g.prepared = None;
                    return Some(g);
                }
                Err(TryLockError::WouldBlock) => std::hint::spin_loop(),
                Err(TryLockError::Poisoned(_)) => return None,
            }
        }
        None
    }

    /// Whether appending `n` dirty blocks needs no segment cleaning, no
    /// write-back and no roll that does I/O (the fast path's condition).
    fn plain_append(&self, st: &State, n: usize) -> bool {
        let limit = if self.cleaner_on() {
            self.foreground_dirty_limit(st)
        } else {
            self.dirty_limit(st)
        };
        st.degraded.is_none()
            && st.open_seg.is_some()
            && (st.room() >= n && st.free.len() >= super::RESERVE
                || super::log::announced_ready(st) && st.free.len() > super::RESERVE)
            && st.map.dirty() + n <= limit
    }

    /// Read `buf.len()` bytes at `offset` on the caller's thread if every
    /// block is cached and its page is in the page cache: `true` when `buf`
    /// holds them, `false` when the request path must read (`buf` may then
    /// hold anything).
    pub fn read_fast(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.read_fast_then(offset, buf, || ())
    }

    /// [`Self::read_fast`], running `between` after the lookup released the
    /// lock and before the slots are read (tests race cleaning there).
    pub(crate) fn read_fast_then(
        &self,
        offset: u64,
        buf: &mut [u8],
        between: impl FnOnce(),
    ) -> bool {
        if !self.fast_on() || self.geo.is_compressed() || buf.is_empty() || buf.len() > FAST_MAX {
            return false;
        }
        let Some(end) = offset.checked_add(buf.len() as u64) else {
            return false;
        };
        if end > self.size {
            return false;
        }
        let (b0, b1) = (offset / BLOCK, end.div_ceil(BLOCK));
        let n = (b1 - b0) as usize;
        let mut runs: Vec<Run> = Vec::with_capacity(2);
        {
            let Some(st) = self.try_lock_fast() else {
                return false;
            };
            let mut i = 0;
            while i < n {
                let Some(e) = st.map.get(b0 + i as u64) else {
                    return false;
                };
                let mut k = 1;
                while i + k < n
                    && !(e.slot + k as u32).is_multiple_of(self.data_blocks)
                    && st.map.get(b0 + (i + k) as u64).map(|x| x.slot) == Some(e.slot + k as u32)
                {
                    k += 1;
                }
                let seg = e.slot / self.data_blocks;
                runs.push(Run {
                    at: i * BLOCK as usize,
                    len: k * BLOCK as usize,
                    off: self.slot_offset(&st, e.slot),
                    seg,
                    gen: self.gens.get(seg),
                });
                i += k;
            }
        }
        between();
        // Off the lock: read the slots from the page cache, then check that
        // no slot's segment was reopened meanwhile.
        let head = (offset - b0 * BLOCK) as usize;
        let whole = head == 0 && buf.len() == n * BLOCK as usize;
        let mut tmp = if whole {
            Vec::new()
        } else {
            vec![0u8; n * BLOCK as usize]
        };
        let out: &mut [u8] = if whole { buf } else { &mut tmp };
        for r in &runs {
            if !matches!(
                tiercache_io::read_cached(self.cache.as_ref(), &mut out[r.at..r.at + r.len], r.off),
                Some(Ok(()))
            ) {
                self.fast.read_fallbacks.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        fence(Ordering::SeqCst);
        if runs.iter().any(|r| self.gens.get(r.seg) != r.gen) {
            self.fast.read_raced.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if !whole {
            buf.copy_from_slice(&tmp[head..head + buf.len()]);
        }
        self.fast.reads.fetch_add(1, Ordering::Relaxed);
        self.fast.read_blocks.fetch_add(n as u64, Ordering::Relaxed);
        true
    }

    /// Write `data` at `offset` on the caller's thread if it is a plain
    /// append (see the module documentation): `Some` with the result, or
    /// `None` when the request path must write it (nothing was done).
    pub fn write_fast(&self, offset: u64, data: &[u8], fua: bool) -> Option<Res<()>> {
        if !self.fast_on()
            || fua
            || self.policy != WritePolicy::WriteBack
            || self.geo.is_compressed()
            || data.is_empty()
            || data.len() > FAST_MAX
            || !offset.is_multiple_of(BLOCK)
            || !(data.len() as u64).is_multiple_of(BLOCK)
            || offset.checked_add(data.len() as u64)? > self.size
        {
            return None;
        }
        let n = data.len() / BLOCK as usize;
        let Some(mut st) = self.try_lock_fast() else {
            self.fast.write_lock_busy.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if !self.plain_append(&st, n) {
            self.fast.write_not_plain.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let r = self.write_locked(&mut st, offset, data, false);
        drop(st);
        self.fast.writes.fetch_add(1, Ordering::Relaxed);
        Some(r)
    }

    /// Whether [`Self::write_batch_fast`] can take batches at all: a
    /// write-back cache in the plain layout (the compressed layout and
    /// write-through never append on the fast path).
    pub fn takes_write_batches(&self) -> bool {
        self.policy == WritePolicy::WriteBack && !self.geo.is_compressed()
    }

    /// [`Self::write_fast`] for plain writes received together (the NBD
    /// layer's write batches): all their blocks are appended to the open
    /// segment with one hold of the lock and one device write. `None` when
    /// the batch cannot take the fast path as a whole (nothing was done):
    /// a write that is not whole blocks, a block written twice, or what
    /// sends a single write to the request threads. One result per write.
    pub fn write_batch_fast(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Res<()>>> {
        let declined = || {
            self.fast.batch_fallbacks.fetch_add(1, Ordering::Relaxed);
            None
        };
        if !self.fast_on() || !self.takes_write_batches() {
            return declined();
        }
        let mut total = 0usize;
        for &(offset, data) in writes {
            if data.is_empty()
                || !offset.is_multiple_of(BLOCK)
                || !(data.len() as u64).is_multiple_of(BLOCK)
                || offset
                    .checked_add(data.len() as u64)
                    .is_none_or(|e| e > self.size)
            {
                return declined();
            }
            total += data.len();
        }
        if total > FAST_MAX {
            return declined();
        }
        let n = total / BLOCK as usize;
        let mut lbas = Vec::with_capacity(n);
        for &(offset, data) in writes {
            let b0 = offset / BLOCK;
            lbas.extend(b0..b0 + (data.len() as u64 / BLOCK));
        }
        // One append places each block once: a block written twice in the
        // batch goes the single-write way (in order).
        let mut sorted = lbas.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return declined();
        }
        let Some(mut st) = self.try_lock_fast() else {
            self.fast
                .write_lock_busy
                .fetch_add(writes.len() as u64, Ordering::Relaxed);
            return None;
        };
        if !self.plain_append(&st, n) {
            self.fast
                .write_not_plain
                .fetch_add(writes.len() as u64, Ordering::Relaxed);
            return None;
        }
        let mut data = Vec::with_capacity(total);
        for &(_, d) in writes {
            data.extend_from_slice(d);
        }
        let r = self.write_blocks_locked(&mut st, &lbas, &data);
        drop(st);
        self.fast.batches.fetch_add(1, Ordering::Relaxed);
        self.fast
            .batch_writes
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        self.fast
            .writes
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        Some(vec![r; writes.len()])
    }

    /// Blocks read by the fast path (read hits the counters of the
    /// state do not hold).
    pub(super) fn fast_read_blocks(&self) -> u64 {
        self.fast.read_blocks.load(Ordering::Relaxed)
    }

    /// The `fast_path` part of `stats --json`.
    pub(super) fn fast_json(&self) -> serde_json::Value {
        let f = &self.fast;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "on": self.fast_on(),
            "reads": l(&f.reads),
            "read_blocks": l(&f.read_blocks),
            "read_fallbacks": l(&f.read_fallbacks),
            "read_raced": l(&f.read_raced),
            "writes": l(&f.writes),
            "write_fallbacks": { "lock_busy": l(&f.write_lock_busy), "needs_io": l(&f.write_not_plain) },
            "batches": l(&f.batches),
            "batch_writes": l(&f.batch_writes),
            "batch_fallbacks": l(&f.batch_fallbacks),
        })
    }
}
