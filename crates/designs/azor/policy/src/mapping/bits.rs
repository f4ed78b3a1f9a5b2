//! Packed per-slot valid and dirty bitmaps.

use crate::eviction::Slot;
use crate::lazy::Paged;

/// `subs` valid bits then `subs` dirty bits per slot, packed in `u64` words.
pub struct SubBits {
    subs: u32,
    words: Paged<u64>,
}

impl SubBits {
    pub fn new(slots: u32, subs: u32) -> Self {
        let bits = slots as usize * 2 * subs as usize;
        SubBits {
            subs,
            words: Paged::new(bits.div_ceil(64), 0),
        }
    }

    #[inline]
    fn base(&self, slot: Slot) -> usize {
        slot as usize * 2 * self.subs as usize
    }

    #[inline]
    fn get(&self, bit: usize) -> bool {
        self.words[bit / 64] >> (bit % 64) & 1 == 1
    }

    #[inline]
    fn put(&mut self, bit: usize, v: bool) {
        if v {
            self.words[bit / 64] |= 1 << (bit % 64);
        } else {
            self.words[bit / 64] &= !(1 << (bit % 64));
        }
    }

    /// Sub-block `i` of `slot` holds valid data.
    #[inline]
    pub fn valid(&self, slot: Slot, i: u32) -> bool {
        self.get(self.base(slot) + i as usize)
    }

    /// Sub-block `i` of `slot` is newer in the cache than on the backing device.
    #[inline]
    pub fn dirty(&self, slot: Slot, i: u32) -> bool {
        self.get(self.base(slot) + (self.subs + i) as usize)
    }

    /// Set the valid bits of sub-blocks `first..=last`.
    pub fn set_valid(&mut self, slot: Slot, first: u32, last: u32, v: bool) {
        let b = self.base(slot);
        for i in first..=last {
            self.put(b + i as usize, v);
        }
    }

    /// Set the dirty bits of sub-blocks `first..=last`.
    pub fn set_dirty(&mut self, slot: Slot, first: u32, last: u32, v: bool) {
        let b = self.base(slot) + self.subs as usize;
        for i in first..=last {
            self.put(b + i as usize, v);
        }
    }

    /// All of `first..=last` valid.
    pub fn all_valid(&self, slot: Slot, first: u32, last: u32) -> bool {
        (first..=last).all(|i| self.valid(slot, i))
    }

    /// Any sub-block valid.
    pub fn any_valid(&self, slot: Slot) -> bool {
        (0..self.subs).any(|i| self.valid(slot, i))
    }

    /// Any sub-block dirty.
    pub fn any_dirty(&self, slot: Slot) -> bool {
        (0..self.subs).any(|i| self.dirty(slot, i))
    }

    /// Number of dirty sub-blocks.
    pub fn dirty_count(&self, slot: Slot) -> u32 {
        (0..self.subs).filter(|&i| self.dirty(slot, i)).count() as u32
    }

    /// Clear every bit of `slot`.
    pub fn clear(&mut self, slot: Slot) {
        let b = self.base(slot);
        for i in 0..2 * self.subs as usize {
            self.put(b + i, false);
        }
    }

    /// Invariant: a dirty sub-block is also valid.
    pub fn dirty_within_valid(&self, slot: Slot) -> bool {
        (0..self.subs).all(|i| !self.dirty(slot, i) || self.valid(slot, i))
    }

    pub fn metadata_bytes(&self) -> usize {
        self.words.len() * 8
    }
}
