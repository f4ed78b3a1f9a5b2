//! First in, first out: lines leave in insertion order; hits change nothing.
//! One index-linked queue per set (libCacheSim `FIFO.c`).

use super::links::{Ends, Links};
use super::{Eviction, Slot};
use crate::lazy::Paged;

/// FIFO over `sets × ways` slots.
pub struct Fifo {
    links: Links,
    /// Per set: head = newest insertion, tail = next victim.
    queues: Paged<Ends>,
}

impl Fifo {
    /// A FIFO queue for each of `sets` sets of `ways` slots.
    pub fn new(sets: u32, ways: u32) -> Self {
        Fifo {
            links: Links::new(sets as usize * ways as usize),
            queues: Paged::new(sets as usize, Ends::EMPTY),
        }
    }
}

impl Eviction for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn on_hit(&mut self, _set: u32, _slot: Slot) {}
    fn on_miss(&mut self, _set: u32, _key: u64) {}
    fn evict(&mut self, set: u32, _key_of: &dyn Fn(Slot) -> u64) -> Slot {
        let q = &mut self.queues[set as usize];
        let victim = q.tail;
        debug_assert!(victim != super::NIL, "evict from an empty set");
        self.links.unlink(q, victim);
        victim
    }
    fn on_insert(&mut self, set: u32, slot: Slot, _key: u64) {
        self.links.push_front(&mut self.queues[set as usize], slot);
    }
    fn on_remove(&mut self, set: u32, slot: Slot) {
        self.links.unlink(&mut self.queues[set as usize], slot);
    }
    fn peek_victim(&self, set: u32, _incoming: u64) -> Slot {
        self.queues[set as usize].tail
    }
    fn metadata_bytes(&self) -> usize {
        self.links.bytes() + self.queues.capacity() * std::mem::size_of::<Ends>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_in_insertion_order_ignoring_hits() {
        let mut f = Fifo::new(1, 3);
        for s in 0..3 {
            f.on_miss(0, 10 + s as u64);
            f.on_insert(0, s, 10 + s as u64);
        }
        f.on_hit(0, 0);
        f.on_hit(0, 0);
        // LRU would now evict slot 1; FIFO still evicts the oldest insertion.
        assert_eq!(f.peek_victim(0, 99), 0);
        assert_eq!(f.evict(0, &|s| s as u64), 0);
        f.on_insert(0, 0, 99);
        assert_eq!(f.evict(0, &|s| s as u64), 1);
        f.on_remove(0, 2);
        assert_eq!(f.evict(0, &|s| s as u64), 0);
    }
}
