//! Fully associative index: a chained hash table whose bucket heads, chain
//! links and free list are `u32` slot indices in flat tables (Azor 2.1), and
//! 40-bit line numbers stored as `u32` + `u8`.

use crate::eviction::{Slot, NIL};

/// Hash index from line number to slot.
pub struct FullIndex {
    /// Bucket heads (one per slot, rounded up to a power of two).
    heads: Vec<Slot>,
    /// Next slot in the same bucket chain, or in the free list for free slots.
    next: Vec<Slot>,
    lo: Vec<u32>,
    hi: Vec<u8>,
    free: Slot,
    mask: u64,
}

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
        let buckets = (slots as usize).next_power_of_two().max(1);
        let mut next: Vec<Slot> = (1..=slots).collect();
        if let Some(last) = next.last_mut() {
            *last = NIL;
        }
        FullIndex {
            heads: vec![NIL; buckets],
            next,
            lo: vec![u32::MAX; slots as usize],
            hi: vec![FREE_HI; slots as usize],
            free: if slots == 0 { NIL } else { 0 },
            mask: buckets as u64 - 1,
        }
    }

    #[inline]
    fn bucket(&self, line: u64) -> usize {
        (hash(line) >> 16 & self.mask) as usize
    }

    #[inline]
    pub fn line_of(&self, slot: Slot) -> Option<u64> {
        let h = self.hi[slot as usize];
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

    pub fn free_head(&self) -> Slot {
        self.free
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

    pub fn metadata_bytes(&self) -> usize {
        self.heads.len() * 4 + self.next.len() * 4 + self.lo.len() * 4 + self.hi.len()
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
