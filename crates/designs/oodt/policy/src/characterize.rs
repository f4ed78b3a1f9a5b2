//! Workload characterization (section 3.2 and Algorithm 1, lines 10-23).
//!
//! Every sub-request enters the *access queue* of the last `len` (8)
//! requests. A sub-request that an I/O scheduler would merge with a queued
//! one (same direction, adjacent: back or front merge, merged size within the
//! scheduler's request limit) extends that entry; any other evicts the oldest
//! entry. An evicted entry is one request as the disk would see it: its
//! priority (equation 1) is added to every block it covers:
//!
//! `priority = w_access * 1 + w_random * P + w_read * P * [read] + w_meta * P * [metadata]`
//!
//! with `P = unit / size` the inverse request size in 4 KiB units (3.2.1:
//! access frequency and randomness combined into one term of weight 1; read
//! and metadata priorities equal to it, with weights 10 %, 3.2.2-3.2.3).
//! Per block the table keeps two `f32`: the priority without the read term
//! and the read term, so the planner can rank without the read term once
//! the fast tier is full (3.2.2). 8 bytes per block in the dense table; the
//! bounded mode (5.1) keeps them in a fixed-size LRU table instead.

use crate::mapping::{BlockId, TierError};
use lru::LruCache;
use std::collections::VecDeque;
use std::num::NonZeroUsize;

/// Weights of equation 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Weights {
    /// Per access, independent of size. Paper: folded into `random` (0).
    pub access: f32,
    /// Times the inverse request size. Paper: 1.
    pub random: f32,
    /// Times the inverse size, for reads. Paper: 0.1.
    pub read: f32,
    /// Times the inverse size, for metadata. Paper: 0.1.
    pub metadata: f32,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            access: 0.0,
            random: 1.0,
            read: 0.1,
            metadata: 0.1,
        }
    }
}

impl Weights {
    /// Refuse negative or non-finite weights.
    pub fn validate(&self) -> Result<(), TierError> {
        for (n, w) in [
            ("access", self.access),
            ("random", self.random),
            ("read", self.read),
            ("metadata", self.metadata),
        ] {
            if !(w.is_finite() && w >= 0.0) {
                return Err(TierError::Config(format!(
                    "weight {n} = {w} (allowed: a finite number >= 0)"
                )));
            }
        }
        Ok(())
    }

    /// Priority one request of `bytes` adds to each block it covers, as
    /// `(without the read term, read term)`; `unit` is the size of `P = 1`.
    pub fn request_priority(&self, bytes: u64, read: bool, meta: bool, unit: u64) -> (f32, f32) {
        let p = unit as f32 / bytes.max(1) as f32;
        let mut base = self.access + self.random * p;
        if meta {
            base += self.metadata * p;
        }
        let r = if read { self.read * p } else { 0.0 };
        (base, r)
    }
}

/// One entry of the access queue: a request as the scheduler would merge it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedAccess {
    pub start: u64,
    pub end: u64,
    pub read: bool,
    pub meta: bool,
}

/// The access queue (see the module docs).
#[derive(Clone, Debug)]
pub struct AccessQueue {
    cap: usize,
    max_merge: u64,
    entries: VecDeque<QueuedAccess>,
}

impl AccessQueue {
    /// A queue of `len` entries (paper: 8) merging up to `max_merge_bytes`
    /// (Linux's default request limit is 512 KiB).
    pub fn new(len: usize, max_merge_bytes: u64) -> Result<Self, TierError> {
        if len == 0 || len > 4096 {
            return Err(TierError::Config(format!(
                "access queue length {len} (allowed: 1 to 4096)"
            )));
        }
        Ok(AccessQueue {
            cap: len,
            max_merge: max_merge_bytes.max(1),
            entries: VecDeque::with_capacity(len),
        })
    }

    /// Add one sub-request; returns the entry it evicted, if any.
    pub fn push(&mut self, start: u64, len: u64, read: bool, meta: bool) -> Option<QueuedAccess> {
        let end = start + len;
        // Newest first: the scheduler tries the most recent request first.
        for e in self.entries.iter_mut().rev() {
            if e.read != read || (e.end - e.start) + len > self.max_merge {
                continue;
            }
            if e.end == start {
                e.end = end;
            } else if end == e.start {
                e.start = start;
            } else {
                continue;
            }
            e.meta |= meta;
            return None;
        }
        let out = if self.entries.len() == self.cap {
            self.entries.pop_front()
        } else {
            None
        };
        self.entries.push_back(QueuedAccess {
            start,
            end,
            read,
            meta,
        });
        out
    }

    /// Remove and return all entries, oldest first.
    pub fn drain(&mut self) -> impl Iterator<Item = QueuedAccess> + '_ {
        self.entries.drain(..)
    }

    /// Entries, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &QueuedAccess> {
        self.entries.iter()
    }
}

/// Bytes of an LRU table entry, for the memory report: key, value, two list
/// links and one hash-table slot.
pub const LRU_ENTRY_BYTES: u64 = 8 + 8 + 16 + 8;

/// Per-block statistics `[priority without read, read term]`.
pub enum StatsTable {
    /// One entry per block of the volume (8 bytes each).
    Dense(Vec<[f32; 2]>),
    /// At most `cap` blocks, least recently updated dropped first (5.1).
    Lru(LruCache<BlockId, [f32; 2]>),
}

impl StatsTable {
    /// Dense table for `blocks` blocks, or an LRU table of `entries`.
    pub fn new(blocks: u64, entries: Option<usize>) -> Result<Self, TierError> {
        match entries {
            None => Ok(StatsTable::Dense(vec![[0.0; 2]; blocks as usize])),
            Some(n) => {
                let n = NonZeroUsize::new(n).ok_or_else(|| {
                    TierError::Config("statistics table of 0 entries (allowed: at least 1)".into())
                })?;
                Ok(StatsTable::Lru(LruCache::new(n)))
            }
        }
    }

    /// Add to a block's statistics.
    pub fn add(&mut self, block: BlockId, base: f32, read: f32) {
        match self {
            StatsTable::Dense(v) => {
                if let Some(e) = v.get_mut(block as usize) {
                    e[0] += base;
                    e[1] += read;
                }
            }
            StatsTable::Lru(c) => {
                let e = c.get_or_insert_mut(block, || [0.0; 2]);
                e[0] += base;
                e[1] += read;
            }
        }
    }

    /// A block's statistics (`None` when never seen or dropped).
    pub fn get(&self, block: BlockId) -> Option<[f32; 2]> {
        match self {
            StatsTable::Dense(v) => v.get(block as usize).copied().filter(|e| e[0] + e[1] > 0.0),
            StatsTable::Lru(c) => c.peek(&block).copied(),
        }
    }

    /// Visit every block with statistics.
    pub fn for_each(&self, mut f: impl FnMut(BlockId, [f32; 2])) {
        match self {
            StatsTable::Dense(v) => {
                for (b, e) in v.iter().enumerate() {
                    if e[0] + e[1] > 0.0 {
                        f(b as BlockId, *e)
                    }
                }
            }
            StatsTable::Lru(c) => {
                for (b, e) in c.iter() {
                    f(*b, *e)
                }
            }
        }
    }

    /// Memory used (dense: 8 bytes per block; LRU: capacity x entry size).
    pub fn memory_bytes(&self) -> u64 {
        match self {
            StatsTable::Dense(v) => v.len() as u64 * 8,
            StatsTable::Lru(c) => c.cap().get() as u64 * LRU_ENTRY_BYTES,
        }
    }
}

/// Access queue, weights and statistics table together.
pub struct Characterizer {
    pub queue: AccessQueue,
    pub stats: StatsTable,
    pub weights: Weights,
    block_bytes: u32,
    unit: u64,
}

/// Size of `P = 1`: a 4 KiB request.
pub const PRIORITY_UNIT_BYTES: u64 = 4096;

impl Characterizer {
    /// See the module docs; `stats_entries` selects the bounded LRU table.
    pub fn new(
        blocks: u64,
        block_bytes: u32,
        weights: Weights,
        queue_len: usize,
        max_merge_bytes: u64,
        stats_entries: Option<usize>,
    ) -> Result<Self, TierError> {
        weights.validate()?;
        Ok(Characterizer {
            queue: AccessQueue::new(queue_len, max_merge_bytes)?,
            stats: StatsTable::new(blocks, stats_entries)?,
            weights,
            block_bytes,
            unit: PRIORITY_UNIT_BYTES,
        })
    }

    /// Observe one sub-request.
    pub fn observe(&mut self, offset: u64, len: u64, read: bool, meta: bool) {
        if let Some(e) = self.queue.push(offset, len, read, meta) {
            self.credit(e);
        }
    }

    /// Credit the entries still queued (end of a trace).
    pub fn flush(&mut self) {
        let es: Vec<_> = self.queue.drain().collect();
        for e in es {
            self.credit(e);
        }
    }

    fn credit(&mut self, e: QueuedAccess) {
        let (base, read) =
            self.weights
                .request_priority(e.end - e.start, e.read, e.meta, self.unit);
        let bs = u64::from(self.block_bytes);
        for b in e.start / bs..(e.end - 1) / bs + 1 {
            self.stats.add(b, base, read);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_same_direction_requests_merge_like_a_scheduler() {
        let mut q = AccessQueue::new(8, 512 << 10).unwrap();
        assert_eq!(q.push(0, 4096, true, false), None);
        assert_eq!(q.push(4096, 4096, true, false), None); // back merge
        assert_eq!(q.push(1 << 20, 4096, true, false), None); // new entry
        assert_eq!(q.push(8192, 4096, false, false), None); // a write never merges with a read
        assert_eq!(q.push((1 << 20) - 4096, 4096, true, true), None); // front merge
        let e: Vec<_> = q.entries().copied().collect();
        assert_eq!(
            e,
            vec![
                QueuedAccess {
                    start: 0,
                    end: 8192,
                    read: true,
                    meta: false
                },
                QueuedAccess {
                    start: (1 << 20) - 4096,
                    end: (1 << 20) + 4096,
                    read: true,
                    meta: true
                },
                QueuedAccess {
                    start: 8192,
                    end: 12288,
                    read: false,
                    meta: false
                },
            ]
        );
        // Re-reading the same block is not a merge.
        q.push(0, 4096, true, false);
        assert_eq!(q.entries().count(), 4);
    }

    #[test]
    fn interleaved_streams_merge_within_the_queue_and_the_oldest_is_evicted() {
        // Two sequential streams interleaved: both merge (a window of 8
        // catches up to 8 streams), the ninth distinct request evicts the
        // oldest entry.
        let mut q = AccessQueue::new(2, 512 << 10).unwrap();
        for i in 0..4u64 {
            assert_eq!(q.push(i * 4096, 4096, true, false), None);
            assert_eq!(q.push((100 + i) * 4096, 4096, true, false), None);
        }
        let ev = q.push(500 * 4096, 4096, true, false).unwrap();
        assert_eq!(
            ev,
            QueuedAccess {
                start: 0,
                end: 4 * 4096,
                read: true,
                meta: false
            }
        );
        // The merge limit stops merging.
        let mut q = AccessQueue::new(8, 8192).unwrap();
        q.push(0, 4096, true, false);
        q.push(4096, 4096, true, false);
        q.push(8192, 4096, true, false);
        assert_eq!(q.entries().count(), 2);
    }

    #[test]
    fn priority_formula_matches_equation_1_by_hand() {
        let w = Weights::default();
        // 4 KiB random read: P = 1; 1 + 0.1 read.
        assert_eq!(w.request_priority(4096, true, false, 4096), (1.0, 0.1));
        // 16 KiB metadata write: P = 1/4; 0.25 + 0.025 metadata, no read term.
        assert_eq!(
            w.request_priority(16384, false, true, 4096),
            (0.25 + 0.025, 0.0)
        );
        // Custom weights with a per-access term: 2 + 0.5 * 0.5 + 0.3 * 0.5 read + 0.2 * 0.5 meta.
        let w = Weights {
            access: 2.0,
            random: 0.5,
            read: 0.3,
            metadata: 0.2,
        };
        let (b, r) = w.request_priority(8192, true, true, 4096);
        assert!((b - (2.0 + 0.25 + 0.1)).abs() < 1e-6 && (r - 0.15).abs() < 1e-6);
        assert!(Weights {
            read: -1.0,
            ..Weights::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn merged_requests_credit_every_block_with_the_merged_size() {
        // Blocks of 4 KiB; four sequential 4 KiB reads are one 16 KiB request
        // (P = 1/4 per block); a lone 4 KiB write elsewhere gets P = 1.
        let mut c = Characterizer::new(64, 4096, Weights::default(), 2, 512 << 10, None).unwrap();
        for i in 0..4 {
            c.observe(i * 4096, 4096, true, false);
        }
        c.observe(40 * 4096, 4096, false, false);
        c.observe(20 * 4096, 4096, false, false); // evicts the merged read
        c.flush();
        for b in 0..4 {
            assert_eq!(c.stats.get(b), Some([0.25, 0.025]));
        }
        assert_eq!(c.stats.get(40), Some([1.0, 0.0]));
        assert_eq!(c.stats.get(20), Some([1.0, 0.0]));
        assert_eq!(c.stats.get(5), None);
    }

    #[test]
    fn bounded_table_keeps_the_most_recently_updated_blocks() {
        let mut t = StatsTable::new(1000, Some(2)).unwrap();
        t.add(1, 1.0, 0.0);
        t.add(2, 1.0, 0.0);
        t.add(1, 1.0, 0.0);
        t.add(3, 1.0, 0.0); // drops block 2, the least recently updated
        assert_eq!(t.get(1), Some([2.0, 0.0]));
        assert_eq!(t.get(2), None);
        assert_eq!(t.get(3), Some([1.0, 0.0]));
        assert_eq!(t.memory_bytes(), 2 * LRU_ENTRY_BYTES);
        assert!(StatsTable::new(10, Some(0)).is_err());
    }
}
