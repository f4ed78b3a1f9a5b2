//! Fully associative index: a chained hash table whose bucket heads, chain
//! links and free list are `u32` slot indices in flat tables (Azor 2.1), and
//! 40-bit line numbers stored as `u32` + `u8`.

use crate::eviction::{Slot, NIL};

/// Hash index from line number to slot.
///
/// Its tables grow with the slots used, not with the cache's size: slots
/// are handed out from a high-water mark (`0, 1, 2, ...`) once the free
/// list of released slots is empty, which is exactly the order a free list
/// of every slot would give, and the bucket table doubles (rehashing) as
/// the slots in use pass its size, up to one bucket per slot.
pub struct FullIndex {
    /// Bucket heads (a power of two, at most the slots rounded up).
    heads: Vec<Slot>,
    /// Next slot in the same bucket chain, or in the free list for free slots.
    next: Vec<Slot>,
    lo: Vec<u32>,
    hi: Vec<u8>,
    /// Head of the list of released slots (below `high`).
    free: Slot,
    mask: u64,
    /// Slots of the cache.
    slots: u32,
    /// Slots `high..slots` were never used; the tables hold `0..high`.
    high: u32,
}

/// Bucket table size a new index starts with (it grows as slots are used).
const FIRST_BUCKETS: usize = 1024;

const FREE_HI: u8 = 0xff;

#[inline]
fn hash(line: u64) -> u64 {
    // A multiply-xorshift mix (from splitmix64): block numbers often share low bits.
    let mut x = line.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    x
}

impl FullIndex {
    pub fn new(slots: u32) -> Self {
        let buckets = Self::max_buckets(slots).min(FIRST_BUCKETS);
        FullIndex {
            heads: vec![NIL; buckets],
            next: Vec::new(),
            lo: Vec::new(),
            hi: Vec::new(),
            free: NIL,
            mask: buckets as u64 - 1,
            slots,
            high: 0,
        }
    }

    /// Bucket table size of a full index: one bucket per slot, rounded up.
    fn max_buckets(slots: u32) -> usize {
        (slots as usize).next_power_of_two().max(1)
    }

    /// Slots `0..high_water()` have been used; the others never were.
    pub fn high_water(&self) -> u32 {
        self.high
    }

    /// Extend the tables to hold slots `0..=slot` (the new ones free but not
    /// listed: the caller lists or takes them), doubling the bucket table
    /// while the slots outnumber the buckets.
    fn grow_to(&mut self, slot: Slot) {
        let n = slot as usize + 1;
        if n <= self.lo.len() {
            return;
        }
        self.next.resize(n, NIL);
        self.lo.resize(n, u32::MAX);
        self.hi.resize(n, FREE_HI);
        self.high = n as u32;
        let max = Self::max_buckets(self.slots);
        if n > self.heads.len() && self.heads.len() < max {
            let buckets = n.next_power_of_two().min(max);
            self.rehash(buckets);
        }
    }

    /// Rebuild the chains over `buckets` buckets.
    fn rehash(&mut self, buckets: usize) {
        self.heads = vec![NIL; buckets];
        self.mask = buckets as u64 - 1;
        for s in 0..self.high {
            if let Some(line) = self.line_of(s) {
                let b = self.bucket(line);
                self.next[s as usize] = self.heads[b];
                self.heads[b] = s;
            }
        }
    }

    #[inline]
    fn bucket(&self, line: u64) -> usize {
        (hash(line) >> 16 & self.mask) as usize
    }

    #[inline]
    pub fn line_of(&self, slot: Slot) -> Option<u64> {
        let h = *self.hi.get(slot as usize)?;
        (h != FREE_HI).then(|| (h as u64) << 32 | self.lo[slot as usize] as u64)
    }

    #[inline]
    pub fn lookup(&self, line: u64) -> Option<Slot> {
        let (lo, hi) = (line as u32, (line >> 32) as u8);
        let mut s = self.heads[self.bucket(line)];
        while s != NIL {
            if self.lo[s as usize] == lo && self.hi[s as usize] == hi {
                return Some(s);
            }
            s = self.next[s as usize];
        }
        None
    }

    /// The next slot to use: the last released one, else the first never used.
    pub fn free_head(&self) -> Slot {
        if self.free != NIL {
            self.free
        } else if self.high < self.slots {
            self.high
        } else {
            NIL
        }
    }

    /// Map `line` into `slot`, which must be free (it is taken off the free list).
    pub fn insert(&mut self, slot: Slot, line: u64) {
        self.take_free(slot);
        self.lo[slot as usize] = line as u32;
        self.hi[slot as usize] = (line >> 32) as u8;
        let b = self.bucket(line);
        self.next[slot as usize] = self.heads[b];
        self.heads[b] = slot;
    }

    fn take_free(&mut self, slot: Slot) {
        if slot >= self.high {
            // A never used slot: slots skipped below it join the end of the
            // free list, ahead of the never used ones, as in a full list.
            let skipped = self.high..slot;
            self.grow_to(slot);
            let mut tail = self.free;
            while tail != NIL && self.next[tail as usize] != NIL {
                tail = self.next[tail as usize];
            }
            for s in skipped {
                if tail == NIL {
                    self.free = s;
                } else {
                    self.next[tail as usize] = s;
                }
                tail = s;
            }
            return;
        }
        if self.free == slot {
            self.free = self.next[slot as usize];
            return;
        }
        // Rare: a caller picked a specific free slot; unlink it from the free list.
        let mut p = self.free;
        while p != NIL {
            let n = self.next[p as usize];
            if n == slot {
                self.next[p as usize] = self.next[slot as usize];
                return;
            }
            p = n;
        }
        debug_assert!(false, "slot {slot} is not free");
    }

    /// Map `line` into `slot` while restoring a saved table: the free list is
    /// left alone and must be rebuilt with [`FullIndex::rebuild_free_list`].
    pub fn insert_restored(&mut self, slot: Slot, line: u64) {
        self.grow_to(slot);
        self.lo[slot as usize] = line as u32;
        self.hi[slot as usize] = (line >> 32) as u8;
        let b = self.bucket(line);
        self.next[slot as usize] = self.heads[b];
        self.heads[b] = slot;
    }

    /// Chain every unmapped slot into the free list (after restoring).
    pub fn rebuild_free_list(&mut self) {
        self.free = NIL;
        for s in (0..self.lo.len() as Slot).rev() {
            if self.hi[s as usize] == FREE_HI {
                self.next[s as usize] = self.free;
                self.free = s;
            }
        }
    }

    /// Unmap `slot` (holding `line`) and return it to the free list.
    pub fn remove(&mut self, slot: Slot, line: u64) {
        let b = self.bucket(line);
        let mut p = self.heads[b];
        if p == slot {
            self.heads[b] = self.next[slot as usize];
        } else {
            while p != NIL && self.next[p as usize] != slot {
                p = self.next[p as usize];
            }
            debug_assert!(p != NIL, "slot {slot} not in its bucket");
            if p != NIL {
                self.next[p as usize] = self.next[slot as usize];
            }
        }
        self.lo[slot as usize] = u32::MAX;
        self.hi[slot as usize] = FREE_HI;
        self.next[slot as usize] = self.free;
        self.free = slot;
    }

    /// Bytes of the full index (every slot used): the design's footprint.
    pub fn metadata_bytes(&self) -> usize {
        Self::max_buckets(self.slots) * 4 + self.slots as usize * (4 + 4 + 1)
    }

    pub fn check_invariants(&self, used: u32) {
        let mut chained = 0;
        for (b, &h) in self.heads.iter().enumerate() {
            let mut s = h;
            while s != NIL {
                let line = self.line_of(s).expect("chained slot is free");
                assert_eq!(self.bucket(line), b);
                chained += 1;
                s = self.next[s as usize];
            }
        }
        assert_eq!(chained, used, "hash chains hold every used slot once");
        let mut free = 0;
        let mut s = self.free;
        while s != NIL {
            assert!(self.line_of(s).is_none());
            free += 1;
            s = self.next[s as usize];
        }
        assert_eq!(free + used as usize, self.lo.len());
    }
}
