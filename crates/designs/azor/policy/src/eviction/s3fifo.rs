//! S3-FIFO (Yang et al., SOSP '23), per set, with the exact semantics of
//! libCacheSim's `S3FIFO.c` and the Python package's defaults
//! (small queue 10 %, ghost 90 %, move-to-main threshold 2):
//!
//! - a small FIFO of `floor(0.1 * ways)` slots, a main FIFO of the rest
//!   (a 2-bit CLOCK), and a ghost FIFO of `floor(0.9 * ways)` line numbers;
//! - a hit increments the line's access count;
//! - a miss whose line number is in the ghost drops it from the ghost and
//!   inserts the line into main; any other miss inserts into small, except
//!   that before the set's first eviction lines go to main once small is full;
//! - eviction takes from main when main holds more than its share or small is
//!   empty; otherwise small's oldest line moves to main (count reset to 0) if
//!   it was accessed twice or more since insertion, else it is evicted and
//!   remembered in the ghost, repeating until one line is evicted;
//! - main's oldest line is evicted if its count is 0, else reinserted at the
//!   head with `min(count, 3) - 1`.
//!
//! One deliberate difference: libCacheSim refuses to insert outside the ghost
//! path when the small queue holds fewer than 2 lines (sets under 20 ways);
//! here the small queue has at least 1 slot and lines are always inserted, so
//! small sets still cache. From 20 ways up the behaviour is identical.

use super::links::{Ends, Ghosts, Links};
use super::{Eviction, Slot, NIL};
use crate::lazy::Paged;

/// Accesses since insertion at which a line leaves small for main.
const MOVE_TO_MAIN_THRESHOLD: u8 = 2;
/// Share of each set for the small queue.
const SMALL_RATIO: f64 = 0.10;
/// Ghost capacity as a share of the set.
const GHOST_RATIO: f64 = 0.90;

/// S3-FIFO over `sets × ways` slots, with independent queues per set.
pub struct S3Fifo {
    small_cap: u32,
    main_cap: u32,
    ghost_cap: u32,
    links: Links,
    /// Per slot: 1 when the line is in main, 0 in small.
    in_main: Paged<u8>,
    /// Per slot: accesses since insertion (saturating; only 0..=3 matter).
    freq: Paged<u8>,
    small: Paged<Ends>,
    main: Paged<Ends>,
    /// Ghost FIFO of set s is list s.
    ghosts: Ghosts,
    /// Per set: whether the set has evicted at least once.
    has_evicted: Paged<bool>,
    /// Per set: the miss being handled was found in the ghost.
    pending_ghost: Paged<bool>,
}

impl S3Fifo {
    /// S3-FIFO state for `sets` sets of `ways` slots.
    pub fn new(sets: u32, ways: u32) -> Self {
        let n = sets as usize;
        let slots = n * ways as usize;
        // Same float arithmetic as libCacheSim: truncation of size * ratio.
        let small_cap = ((ways as f64 * SMALL_RATIO) as u32).max(1).min(ways);
        S3Fifo {
            small_cap,
            main_cap: ways - small_cap,
            ghost_cap: (ways as f64 * GHOST_RATIO) as u32,
            links: Links::new(slots),
            in_main: Paged::new(slots, 0),
            freq: Paged::new(slots, 0),
            small: Paged::new(n, Ends::EMPTY),
            main: Paged::new(n, Ends::EMPTY),
            ghosts: Ghosts::new(n),
            has_evicted: Paged::new(n, false),
            pending_ghost: Paged::new(n, false),
        }
    }

    /// Slots reserved for the small queue of each set.
    pub fn small_capacity(&self) -> u32 {
        self.small_cap
    }

    /// Whether `slot` (resident) is in the main queue.
    pub fn in_main(&self, slot: Slot) -> bool {
        self.in_main[slot as usize] != 0
    }

    fn remember(&mut self, set: u32, key: u64) {
        if self.ghost_cap == 0 || self.ghosts.list_of(key).is_some() {
            return;
        }
        while self.ghosts.len(set) >= self.ghost_cap {
            self.ghosts.pop_back(set);
        }
        self.ghosts.push_front(set, key);
    }

    /// Evict from small; returns NIL when every line moved to main instead.
    fn evict_small(&mut self, set: u32, key_of: &dyn Fn(Slot) -> u64) -> Slot {
        let s = set as usize;
        while self.small[s].len > 0 {
            let t = self.small[s].tail;
            self.links.unlink(&mut self.small[s], t);
            if self.freq[t as usize] >= MOVE_TO_MAIN_THRESHOLD {
                self.freq[t as usize] = 0;
                self.in_main[t as usize] = 1;
                self.links.push_front(&mut self.main[s], t);
            } else {
                self.remember(set, key_of(t));
                return t;
            }
        }
        NIL
    }

    fn evict_main(&mut self, set: u32) -> Slot {
        let s = set as usize;
        loop {
            let t = self.main[s].tail;
            self.links.unlink(&mut self.main[s], t);
            let f = self.freq[t as usize];
            if f == 0 {
                return t;
            }
            self.freq[t as usize] = f.min(3) - 1;
            self.links.push_front(&mut self.main[s], t);
        }
    }

    /// The line main's CLOCK would evict; `appended` (if not NIL) is a line
    /// with count 0 that would first be appended at main's head.
    fn peek_main(&self, set: u32, appended: Slot) -> Slot {
        // A line with count f is evicted on its visit in pass min(f, 3)
        // (count 0: the first pass), and passes keep queue order.
        let mut best = (u8::MAX, NIL);
        let mut t = self.main[set as usize].tail;
        while t != NIL {
            let pass = self.freq[t as usize].min(3);
            if pass < best.0 {
                best = (pass, t);
                if pass == 0 {
                    return t;
                }
            }
            t = self.links.newer(t);
        }
        if appended != NIL {
            appended
        } else {
            best.1
        }
    }
}

impl Eviction for S3Fifo {
    fn name(&self) -> &'static str {
        "s3fifo"
    }

    fn on_hit(&mut self, _set: u32, slot: Slot) {
        let f = &mut self.freq[slot as usize];
        *f = f.saturating_add(1);
    }

    fn on_miss(&mut self, set: u32, key: u64) {
        let hit = self.ghosts.list_of(key) == Some(set);
        if hit {
            self.ghosts.remove(key);
        }
        self.pending_ghost[set as usize] = hit;
    }

    fn evict(&mut self, set: u32, key_of: &dyn Fn(Slot) -> u64) -> Slot {
        let s = set as usize;
        self.has_evicted[s] = true;
        loop {
            if self.main[s].len > self.main_cap || self.small[s].len == 0 {
                return self.evict_main(set);
            }
            let v = self.evict_small(set, key_of);
            if v != NIL {
                return v;
            }
        }
    }

    fn on_insert(&mut self, set: u32, slot: Slot, _key: u64) {
        let s = set as usize;
        self.freq[slot as usize] = 0;
        let to_main = std::mem::take(&mut self.pending_ghost[s])
            || (!self.has_evicted[s] && self.small[s].len >= self.small_cap);
        if to_main {
            self.in_main[slot as usize] = 1;
            self.links.push_front(&mut self.main[s], slot);
        } else {
            self.in_main[slot as usize] = 0;
            self.links.push_front(&mut self.small[s], slot);
        }
    }

    fn on_remove(&mut self, set: u32, slot: Slot) {
        let s = set as usize;
        if self.in_main[slot as usize] != 0 {
            self.links.unlink(&mut self.main[s], slot);
        } else {
            self.links.unlink(&mut self.small[s], slot);
        }
    }

    /// Walks small, then main, from their oldest lines: O(queue length) in
    /// the worst case, usually a few steps.
    fn peek_victim(&self, set: u32, _incoming: u64) -> Slot {
        let s = set as usize;
        if self.main[s].len > self.main_cap || self.small[s].len == 0 {
            return self.peek_main(set, NIL);
        }
        // Small's oldest line accessed fewer than twice goes; the ones
        // before it move to main with count 0.
        let mut t = self.small[s].tail;
        while t != NIL {
            if self.freq[t as usize] < MOVE_TO_MAIN_THRESHOLD {
                return t;
            }
            t = self.links.newer(t);
        }
        // All of small moves to main; the oldest of them is the first line
        // appended (count 0).
        self.peek_main(set, self.small[s].tail)
    }

    fn metadata_bytes(&self) -> usize {
        self.links.bytes()
            + self.in_main.capacity()
            + self.freq.capacity()
            + (self.small.capacity() + self.main.capacity()) * std::mem::size_of::<Ends>()
            + self.has_evicted.capacity()
            + self.pending_ghost.capacity()
            + self.ghosts.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Cache = crate::eviction::testkit::OneSet<S3Fifo>;

    fn cache(ways: u32) -> Cache {
        Cache::new(S3Fifo::new(1, ways), ways)
    }

    impl Cache {
        fn in_main(&self, key: u64) -> bool {
            self.p.in_main(self.slot_of[&key])
        }
    }

    #[test]
    fn sizes_follow_libcachesim_defaults() {
        let p = S3Fifo::new(1, 1000);
        assert_eq!((p.small_cap, p.main_cap, p.ghost_cap), (100, 900, 900));
        let p = S3Fifo::new(4, 25);
        assert_eq!((p.small_cap, p.main_cap, p.ghost_cap), (2, 23, 22));
    }

    #[test]
    fn promotes_from_small_and_reinserts_ghost_hits_into_main() {
        let mut c = cache(20); // small 2, main 18, ghost 18
        c.access(1);
        c.access(2);
        // Before the first eviction, lines overflow into main once small is full.
        for k in 3..=20 {
            c.access(k);
            assert!(c.in_main(k));
        }
        assert!(!c.in_main(1) && !c.in_main(2));
        c.access(1);
        c.access(1); // 1 reaches the move-to-main threshold (2 accesses)
        for _ in 0..4 {
            c.access(3); // main's CLOCK count saturates at 3
        }
        // Small's oldest (1) moves to main, the next (2) is evicted to the ghost.
        assert_eq!(c.access(21), Some(2));
        assert!(c.in_main(1));
        assert!(!c.in_main(21));
        assert_eq!(c.p.ghosts.list_of(2), Some(0));
        // Main is over its share (19 > 18): its CLOCK reinserts 3 (count
        // 4 -> min(4,3)-1 = 2) and evicts 4 (count 0), with no ghost.
        assert_eq!(c.access(22), Some(4));
        assert_eq!(c.p.freq[c.slot_of[&3] as usize], 2);
        assert_eq!(c.p.ghosts.list_of(4), None);
        // A ghost hit is inserted straight into main; small evicts 21.
        assert_eq!(c.access(2), Some(21));
        assert!(c.in_main(2));
        assert_eq!(c.p.ghosts.list_of(2), None);
        assert_eq!(c.p.ghosts.list_of(21), Some(0));
    }

    #[test]
    fn ghost_is_a_bounded_fifo() {
        let mut c = cache(20); // ghost holds 18 line numbers
        for k in 0..200 {
            c.access(k);
        }
        assert_eq!(c.p.ghosts.len(0), 18);
        // Small keeps the last two lines (198, 199); the 18 evictions before
        // them (180..=197) are remembered, older ones forgotten.
        assert_eq!(c.p.ghosts.list_of(198), None);
        assert_eq!(c.p.ghosts.list_of(197), Some(0));
        assert_eq!(c.p.ghosts.list_of(180), Some(0));
        assert_eq!(c.p.ghosts.list_of(179), None);
    }
}
