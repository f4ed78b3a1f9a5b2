//! The free slots of one cache SSD, taken in **log order**: ascending from
//! a cursor that moves on and wraps around the device, like a log's head.
//!
//! Pages written one after another land in adjacent slots whenever those
//! are free, so the kernel writes them back as sequential runs instead of
//! one 4 KiB I/O each, and a batch of writes goes to the device as one
//! vectored write per run (`Ssd::begin_batch`). Every write moves its page
//! to the head, so the slots ahead of the cursor are mostly old copies
//! already replaced (free): runs are long under a steady rewrite load.
//! Which slots may be taken at all (an unmapped slot only after its unmap is
//! durable) is the caller's rule; this only picks among them.

use tiercache_store::Slot;

/// Page size of the three-level cache: the unit of the TICA policy, of an
/// SSD slot and of the DRAM level.
pub const PAGE: u64 = 4096;

/// A set of free slots of a device with `n` slots.
pub struct FreeSlots {
    /// Bit `s` set: slot `s` is free.
    bits: Vec<u64>,
    count: usize,
    /// The next slot to look at.
    cursor: usize,
    n: usize,
}

impl FreeSlots {
    /// No slot free yet, on a device of `n` slots.
    pub fn new(n: usize) -> FreeSlots {
        FreeSlots {
            bits: vec![0; n.div_ceil(64)],
            count: 0,
            cursor: 0,
            n,
        }
    }

    /// Free slots.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No slot is free.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Make `s` free. A slot past the device or already free is a bug
    /// (checked in debug builds; ignored otherwise).
    pub fn push(&mut self, s: Slot) {
        let i = s as usize;
        debug_assert!(i < self.n, "slot {s} of {}", self.n);
        let Some(w) = self.bits.get_mut(i / 64) else {
            return;
        };
        let bit = 1u64 << (i % 64);
        debug_assert!(*w & bit == 0, "slot {s} freed twice");
        if *w & bit == 0 {
            *w |= bit;
            self.count += 1;
        }
    }

    /// Take the next free slot at or after the cursor, wrapping around.
    pub fn pop(&mut self) -> Option<Slot> {
        let s = self.next_set(self.cursor).or_else(|| self.next_set(0))?;
        self.bits[s / 64] &= !(1 << (s % 64));
        self.cursor = if s + 1 >= self.n { 0 } else { s + 1 };
        self.count -= 1;
        Some(s as Slot)
    }

    /// The lowest free slot at or after `from`.
    fn next_set(&self, from: usize) -> Option<usize> {
        if from >= self.n {
            return None;
        }
        let mut w = from / 64;
        let mut word = self.bits[w] & (!0u64 << (from % 64));
        loop {
            if word != 0 {
                let s = w * 64 + word.trailing_zeros() as usize;
                return (s < self.n).then_some(s);
            }
            w += 1;
            if w >= self.bits.len() {
                return None;
            }
            word = self.bits[w];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn slots_are_taken_ascending_from_the_cursor_and_wrap() {
        let mut f = FreeSlots::new(200);
        for s in [3, 7, 8, 9, 64, 130, 199] {
            f.push(s);
        }
        assert_eq!(f.pop(), Some(3));
        assert_eq!(f.pop(), Some(7));
        f.push(3); // behind the cursor: taken after the wrap
        assert_eq!(f.pop(), Some(8));
        let rest: Vec<_> = std::iter::from_fn(|| f.pop()).collect();
        assert_eq!(rest, vec![9, 64, 130, 199, 3]);
        assert!(f.is_empty());
        assert_eq!(f.pop(), None);
    }

    /// Against a brute-force model: the same set of free slots whatever
    /// the order of pushes and pops, and the pick is the first free slot at
    /// or after the cursor, else the lowest.
    #[test]
    fn log_order_matches_a_brute_force_model() {
        let n = 300usize;
        let mut f = FreeSlots::new(n);
        let mut model = BTreeSet::new();
        let mut cursor = 0usize;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = (x % n as u64) as usize;
            if x.is_multiple_of(3) && !model.contains(&s) {
                f.push(s as Slot);
                model.insert(s);
            } else {
                let want = model
                    .range(cursor..)
                    .next()
                    .or_else(|| model.iter().next())
                    .copied();
                let got = f.pop().map(|s| s as usize);
                assert_eq!(got, want);
                if let Some(s) = want {
                    model.remove(&s);
                    cursor = (s + 1) % n;
                }
            }
            assert_eq!(f.len(), model.len());
        }
    }
}
