//! Least recently used: one doubly linked list per set, in two flat `u32`
//! tables (prev, next) indexed by slot.

use super::{Eviction, Slot, NIL};
use crate::lazy::Paged;

/// LRU over `sets × ways` slots.
pub struct Lru {
    ways: u32,
    prev: Paged<Slot>,
    next: Paged<Slot>,
    /// Most recently used slot of each set.
    head: Paged<Slot>,
    /// Least recently used slot of each set.
    tail: Paged<Slot>,
}

impl Lru {
    pub fn new(sets: u32, ways: u32) -> Self {
        let n = sets as usize * ways as usize;
        Lru {
            ways,
            prev: Paged::new(n, NIL),
            next: Paged::new(n, NIL),
            head: Paged::new(sets as usize, NIL),
            tail: Paged::new(sets as usize, NIL),
        }
    }

    fn unlink(&mut self, set: u32, slot: Slot) {
        let (p, n) = (self.prev[slot as usize], self.next[slot as usize]);
        if p == NIL {
            self.head[set as usize] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail[set as usize] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[slot as usize] = NIL;
        self.next[slot as usize] = NIL;
    }

    fn push_front(&mut self, set: u32, slot: Slot) {
        let h = self.head[set as usize];
        self.prev[slot as usize] = NIL;
        self.next[slot as usize] = h;
        if h == NIL {
            self.tail[set as usize] = slot;
        } else {
            self.prev[h as usize] = slot;
        }
        self.head[set as usize] = slot;
    }
}

impl Eviction for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }
    fn on_hit(&mut self, set: u32, slot: Slot) {
        if self.head[set as usize] != slot {
            self.unlink(set, slot);
            self.push_front(set, slot);
        }
    }
    fn on_miss(&mut self, _set: u32, _key: u64) {}
    fn evict(&mut self, set: u32, _key_of: &dyn Fn(Slot) -> u64) -> Slot {
        let victim = self.tail[set as usize];
        debug_assert!(victim != NIL, "evict from an empty set");
        debug_assert!(victim / self.ways == set || self.head.len() == 1);
        self.unlink(set, victim);
        victim
    }
    fn on_insert(&mut self, set: u32, slot: Slot, _key: u64) {
        self.push_front(set, slot);
    }
    fn on_remove(&mut self, set: u32, slot: Slot) {
        self.unlink(set, slot);
    }
    fn peek_victim(&self, set: u32, _incoming: u64) -> Slot {
        self.tail[set as usize]
    }
    fn metadata_bytes(&self) -> usize {
        (self.prev.len() + self.next.len() + self.head.len() + self.tail.len()) * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_in_its_set() {
        // 2 sets x 3 ways; set 1 holds slots 3,4,5.
        let mut l = Lru::new(2, 3);
        for (s, k) in [(3, 10), (4, 11), (5, 12)] {
            l.on_miss(1, k);
            l.on_insert(1, s, k);
        }
        l.on_hit(1, 3); // order now (MRU..LRU): 3,5,4
        assert_eq!(l.peek_victim(1, 99), 4);
        assert_eq!(l.evict(1, &|s| s as u64), 4);
        assert_eq!(l.evict(1, &|s| s as u64), 5);
        l.on_remove(1, 3);
        assert_eq!(l.tail[1], NIL);
    }
}
