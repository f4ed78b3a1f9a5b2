//! The free slots of one cache SSD and the order in which writes take them.
//!
//! Two orders, both within the SSD's crash rules (which slots may be taken
//! is decided by the caller; this only picks among them):
//! - **log order** ([`Order::Log`]): ascending from a cursor that moves on
//!   and wraps around the device, like a log's head. Pages written one after
//!   another land in adjacent slots whenever those are free, so the kernel
//!   writes them back as long sequential runs instead of one 4 KiB I/O each,
//!   and a batch of writes can go out as one vectored write. Under a
//!   steady rewrite load the slots ahead of the cursor are mostly old copies
//!   already replaced (freed), so runs are long;
//! - **last freed first** ([`Order::Lifo`]): the slot freed last is taken
//!   next. For an SSD whose unmapped slots are free at once (volatile
//!   metadata), a page that moves takes back the slot it just left, whose
//!   page-cache page is usually still dirty (no new write-back).

use tiercache_store::Slot;

/// Which free slot a write takes (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Log,
    Lifo,
}

/// A set of free slots of a device with `n` slots.
pub struct FreeSlots {
    order: Order,
    /// Bit `s` set: slot `s` is free (log order).
    bits: Vec<u64>,
    /// The free slots, last freed at the end (last freed first).
    stack: Vec<Slot>,
    count: usize,
    /// Log order: the next slot to look at.
    cursor: usize,
    n: usize,
}

impl FreeSlots {
    /// No slot free yet, on a device of `n` slots.
    pub fn new(n: usize, order: Order) -> FreeSlots {
        FreeSlots {
            order,
            bits: match order {
                Order::Log => vec![0; n.div_ceil(64)],
                Order::Lifo => Vec::new(),
            },
            stack: Vec::new(),
            count: 0,
            cursor: 0,
            n,
        }
    }

    /// The same free slots, taken in `order` from now on.
    pub fn into_order(mut self, order: Order) -> FreeSlots {
        if order == self.order {
            return self;
        }
        let mut f = FreeSlots::new(self.n, order);
        while let Some(s) = self.pop() {
            f.push(s);
        }
        f
    }

    /// The order in use.
    pub fn order(&self) -> Order {
        self.order
    }

    /// Free slots.
    pub fn len(&self) -> usize {
        self.count
    }

    /// No slot is free.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Make `s` free (it must not be free already, and be below `n`).
    pub fn push(&mut self, s: Slot) {
        let i = s as usize;
        debug_assert!(i < self.n, "slot {s} of {}", self.n);
        match self.order {
            Order::Log => {
                let (w, b) = (i / 64, i % 64);
                debug_assert!(self.bits[w] & (1 << b) == 0, "slot {s} freed twice");
                self.bits[w] |= 1 << b;
            }
            Order::Lifo => self.stack.push(s),
        }
        self.count += 1;
    }

    /// Take the next free slot in this set's order.
    pub fn pop(&mut self) -> Option<Slot> {
        if self.count == 0 {
            return None;
        }
        let s = match self.order {
            Order::Lifo => self.stack.pop()?,
            Order::Log => {
                let s = self.next_set(self.cursor).or_else(|| self.next_set(0))?;
                self.bits[s / 64] &= !(1 << (s % 64));
                self.cursor = if s + 1 >= self.n { 0 } else { s + 1 };
                s as Slot
            }
        };
        self.count -= 1;
        Some(s)
    }

    /// Whether the slot a [`FreeSlots::pop`] would take now is `s`.
    pub fn next_is(&self, s: Slot) -> bool {
        match self.order {
            Order::Lifo => self.stack.last() == Some(&s),
            Order::Log => {
                self.count > 0
                    && self.next_set(self.cursor).or_else(|| self.next_set(0)) == Some(s as usize)
            }
        }
    }

    /// The lowest free slot at or after `from` (log order).
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
    fn log_order_takes_slots_ascending_from_the_cursor_and_wraps() {
        let mut f = FreeSlots::new(200, Order::Log);
        for s in [3, 7, 8, 9, 64, 130, 199] {
            f.push(s);
        }
        assert_eq!(f.pop(), Some(3));
        assert_eq!(f.pop(), Some(7));
        f.push(3); // behind the cursor: taken after the wrap
        assert_eq!(f.pop(), Some(8));
        assert!(f.next_is(9));
        let rest: Vec<_> = std::iter::from_fn(|| f.pop()).collect();
        assert_eq!(rest, vec![9, 64, 130, 199, 3]);
        assert!(f.is_empty());
        assert_eq!(f.pop(), None);
    }

    #[test]
    fn lifo_takes_the_last_freed_slot() {
        let mut f = FreeSlots::new(10, Order::Lifo);
        for s in [1, 5, 2] {
            f.push(s);
        }
        assert!(f.next_is(2));
        assert_eq!(f.pop(), Some(2));
        f.push(9);
        assert_eq!(f.pop(), Some(9));
        assert_eq!(f.len(), 2);
    }

    /// Against a brute-force model: the same set of free slots whatever
    /// the order of pushes and pops, and log order's pick is the first free
    /// slot at or after the cursor, else the lowest.
    #[test]
    fn log_order_matches_a_brute_force_model() {
        let n = 300usize;
        let mut f = FreeSlots::new(n, Order::Log);
        let mut model = BTreeSet::new();
        let mut cursor = 0usize;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = (x % n as u64) as usize;
            if x % 3 == 0 && !model.contains(&s) {
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
