//! Adaptive Replacement Cache (Megiddo & Modha, FAST '03), per set, with the
//! exact semantics of libCacheSim's `ARC.c`:
//!
//! - T1 (seen once) and T2 (seen twice or more) hold resident lines, B1 and
//!   B2 remember the line numbers evicted from them; `p` is T1's target size,
//!   a floating-point value in `0..=ways`.
//! - A hit moves the line to the head of T2.
//! - A miss found in B1 raises `p` by `max(|B2|/|B1|, 1)` (capped at `ways`),
//!   one found in B2 lowers it by `max(|B1|/|B2|, 1)` (floored at 0); the
//!   ghost entry is dropped, REPLACE frees a slot if the set is full, and the
//!   line enters T2.
//! - A miss in no list (case IV) evicts only when the set is full: if
//!   `|T1| + |B1| + 1 > ways` it drops B1's oldest entry and runs REPLACE, or,
//!   when B1 is empty, discards T1's LRU line without a ghost; otherwise it
//!   drops B2's oldest entry when the four lists hold `2 * ways` entries, then
//!   runs REPLACE. The line enters T1.
//! - REPLACE evicts T1's LRU line into B1 when `|T1| > 0` and (`|T1| > p`, or
//!   `|T1| == p` on a B2 hit), or when T2 is empty; otherwise T2's LRU line
//!   into B2.
//!
//! Nothing happens to the ghost lists before a set first fills.

use super::links::{Ends, Ghosts, Links};
use super::{Eviction, Slot};
use crate::lazy::Paged;

/// Which ghost list the pending miss was found in.
const PENDING_NONE: u8 = 0;
const PENDING_B1: u8 = 1;
const PENDING_B2: u8 = 2;

/// ARC over `sets × ways` slots, with independent lists and `p` per set.
pub struct Arc {
    ways: u32,
    links: Links,
    /// Per slot: 1 when the line is in T2, 0 in T1.
    in_t2: Paged<u8>,
    t1: Paged<Ends>,
    t2: Paged<Ends>,
    /// Ghost lists: B1 of set s is list 2s, B2 is list 2s+1.
    ghosts: Ghosts,
    /// Target size of T1, per set.
    p: Paged<f64>,
    /// Ghost-hit state of the miss being handled, per set (from `on_miss`
    /// until `on_insert`).
    pending: Paged<u8>,
}

impl Arc {
    /// ARC state for `sets` sets of `ways` slots.
    pub fn new(sets: u32, ways: u32) -> Self {
        let n = sets as usize;
        Arc {
            ways,
            links: Links::new(n * ways as usize),
            in_t2: Paged::new(n * ways as usize, 0),
            t1: Paged::new(n, Ends::EMPTY),
            t2: Paged::new(n, Ends::EMPTY),
            ghosts: Ghosts::new(2 * n),
            p: Paged::new(n, 0.0),
            pending: Paged::new(n, PENDING_NONE),
        }
    }

    /// T1's current target size in `set` (for tests and introspection).
    pub fn target_t1(&self, set: u32) -> f64 {
        self.p[set as usize]
    }

    fn b1(set: u32) -> u32 {
        2 * set
    }

    fn b2(set: u32) -> u32 {
        2 * set + 1
    }

    /// REPLACE's choice: true to take T1's LRU line, false for T2's.
    fn replace_from_t1(&self, set: u32, p: f64, in_b2: bool) -> bool {
        let t1 = self.t1[set as usize].len;
        let t2 = self.t2[set as usize].len;
        (t1 > 0 && (t1 as f64 > p || (t1 as f64 == p && in_b2))) || t2 == 0
    }

    /// REPLACE: move an LRU line from T1 to B1 or from T2 to B2.
    fn replace(&mut self, set: u32, in_b2: bool, key_of: &dyn Fn(Slot) -> u64) -> Slot {
        let s = set as usize;
        if self.replace_from_t1(set, self.p[s], in_b2) {
            let victim = self.t1[s].tail;
            self.links.unlink(&mut self.t1[s], victim);
            self.ghosts.push_front(Self::b1(set), key_of(victim));
            victim
        } else {
            let victim = self.t2[s].tail;
            self.links.unlink(&mut self.t2[s], victim);
            self.ghosts.push_front(Self::b2(set), key_of(victim));
            victim
        }
    }
}

impl Eviction for Arc {
    fn name(&self) -> &'static str {
        "arc"
    }

    fn on_hit(&mut self, set: u32, slot: Slot) {
        let s = set as usize;
        if self.in_t2[slot as usize] == 0 {
            self.links.unlink(&mut self.t1[s], slot);
            self.in_t2[slot as usize] = 1;
        } else {
            self.links.unlink(&mut self.t2[s], slot);
        }
        self.links.push_front(&mut self.t2[s], slot);
    }

    fn on_miss(&mut self, set: u32, key: u64) {
        let s = set as usize;
        let (b1, b2) = (Self::b1(set), Self::b2(set));
        self.pending[s] = match self.ghosts.list_of(key) {
            Some(l) if l == b1 => {
                let delta = (self.ghosts.len(b2) as f64 / self.ghosts.len(b1) as f64).max(1.0);
                self.p[s] = (self.p[s] + delta).min(self.ways as f64);
                self.ghosts.remove(key);
                PENDING_B1
            }
            Some(l) if l == b2 => {
                let delta = (self.ghosts.len(b1) as f64 / self.ghosts.len(b2) as f64).max(1.0);
                self.p[s] = (self.p[s] - delta).max(0.0);
                self.ghosts.remove(key);
                PENDING_B2
            }
            _ => PENDING_NONE,
        };
    }

    fn evict(&mut self, set: u32, key_of: &dyn Fn(Slot) -> u64) -> Slot {
        let s = set as usize;
        let c = self.ways;
        match self.pending[s] {
            PENDING_B1 => return self.replace(set, false, key_of),
            PENDING_B2 => return self.replace(set, true, key_of),
            _ => {}
        }
        let (b1, b2) = (Self::b1(set), Self::b2(set));
        let (t1, t2) = (self.t1[s].len, self.t2[s].len);
        let (g1, g2) = (self.ghosts.len(b1), self.ghosts.len(b2));
        if t1 + g1 + 1 > c {
            if g1 > 0 {
                self.ghosts.pop_back(b1);
                self.replace(set, false, key_of)
            } else {
                // T1 fills the set on its own: discard its LRU line, no ghost.
                let victim = self.t1[s].tail;
                self.links.unlink(&mut self.t1[s], victim);
                victim
            }
        } else {
            if t1 + g1 + t2 + g2 >= 2 * c && g2 > 0 {
                self.ghosts.pop_back(b2);
            }
            self.replace(set, false, key_of)
        }
    }

    fn on_insert(&mut self, set: u32, slot: Slot, _key: u64) {
        let s = set as usize;
        if self.pending[s] == PENDING_NONE {
            self.in_t2[slot as usize] = 0;
            self.links.push_front(&mut self.t1[s], slot);
        } else {
            self.in_t2[slot as usize] = 1;
            self.links.push_front(&mut self.t2[s], slot);
        }
        self.pending[s] = PENDING_NONE;
    }

    fn on_remove(&mut self, set: u32, slot: Slot) {
        let s = set as usize;
        if self.in_t2[slot as usize] == 0 {
            self.links.unlink(&mut self.t1[s], slot);
        } else {
            self.links.unlink(&mut self.t2[s], slot);
        }
    }

    fn peek_victim(&self, set: u32, incoming: u64) -> Slot {
        let s = set as usize;
        let (b1, b2) = (Self::b1(set), Self::b2(set));
        let (g1, g2) = (self.ghosts.len(b1), self.ghosts.len(b2));
        let tail = |from_t1: bool| {
            if from_t1 {
                self.t1[s].tail
            } else {
                self.t2[s].tail
            }
        };
        match self.ghosts.list_of(incoming) {
            Some(l) if l == b1 => {
                let p = (self.p[s] + (g2 as f64 / g1 as f64).max(1.0)).min(self.ways as f64);
                tail(self.replace_from_t1(set, p, false))
            }
            Some(l) if l == b2 => {
                let p = (self.p[s] - (g1 as f64 / g2 as f64).max(1.0)).max(0.0);
                tail(self.replace_from_t1(set, p, true))
            }
            _ => {
                if self.t1[s].len + g1 + 1 > self.ways && g1 == 0 {
                    self.t1[s].tail
                } else {
                    tail(self.replace_from_t1(set, self.p[s], false))
                }
            }
        }
    }

    fn metadata_bytes(&self) -> usize {
        self.links.bytes()
            + self.in_t2.capacity()
            + (self.t1.capacity() + self.t2.capacity()) * std::mem::size_of::<Ends>()
            + self.p.capacity() * std::mem::size_of::<f64>()
            + self.pending.capacity()
            + self.ghosts.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Cache = crate::eviction::testkit::OneSet<Arc>;

    fn cache(ways: u32) -> Cache {
        Cache::new(Arc::new(1, ways), ways)
    }

    impl Cache {
        fn ghost(&self, key: u64) -> Option<&'static str> {
            self.p
                .ghosts
                .list_of(key)
                .map(|l| if l == 0 { "B1" } else { "B2" })
        }

        fn in_t2(&self, key: u64) -> bool {
            self.p.in_t2[self.slot_of[&key] as usize] == 1
        }
    }

    #[test]
    fn adapts_p_on_ghost_hits_and_replaces_as_in_the_paper() {
        let mut c = cache(4);
        for k in 1..=4 {
            assert_eq!(c.access(k), None);
        }
        c.access(1); // T1 = [4,3,2], T2 = [1]
        assert!(c.in_t2(1));
        // Case IV-B: |T1| + |B1| < c, REPLACE takes T1's LRU since |T1| > p = 0.
        assert_eq!(c.access(5), Some(2));
        assert_eq!(c.ghost(2), Some("B1"));
        // Case II: hit in B1, p += max(|B2|/|B1|, 1) = 1, line goes to T2.
        assert_eq!(c.access(2), Some(3));
        assert_eq!(c.p.target_t1(0), 1.0);
        assert_eq!(c.ghost(2), None);
        assert!(c.in_t2(2));
        assert_eq!(c.access(6), Some(4)); // B1 = [4,3]
                                          // Case IV-A: |T1| + |B1| = c, drop B1's LRU (3), then REPLACE.
        assert_eq!(c.access(7), Some(5));
        assert_eq!(c.ghost(3), None);
        assert_eq!(c.ghost(5), Some("B1"));
        // B1 hit: p = 2 = |T1|, so REPLACE now takes T2's LRU into B2.
        assert_eq!(c.access(4), Some(1));
        assert_eq!(c.p.target_t1(0), 2.0);
        assert_eq!(c.ghost(1), Some("B2"));
        // Case III: hit in B2, p -= max(|B1|/|B2|, 1) = 1; |T1| = 2 > 1.
        assert_eq!(c.access(1), Some(6));
        assert_eq!(c.p.target_t1(0), 1.0);
        assert!(c.in_t2(1));
        assert_eq!(c.ghost(6), Some("B1"));
    }

    #[test]
    fn scan_larger_than_cache_leaves_no_ghosts() {
        // Case IV-A with B1 empty: T1 alone fills the cache, its LRU line is
        // discarded without a ghost entry (libCacheSim and the paper).
        let mut c = cache(3);
        for k in 0..10 {
            c.access(k);
        }
        assert_eq!(c.p.ghosts.len(0) + c.p.ghosts.len(1), 0);
        assert_eq!(c.access(0), Some(7));
    }
}
