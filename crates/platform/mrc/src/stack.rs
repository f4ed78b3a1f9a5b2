//! Exact LRU stack distances over a Fenwick tree of last-access times.

use crate::fenwick::Fenwick;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// No entry at this time.
const EMPTY: u64 = u64::MAX;
/// A hole: the free slot a removed line left.
const HOLE: u64 = u64::MAX - 1;
/// Smallest time array.
const MIN_CAPACITY: usize = 1024;

/// The LRU stack of lines, each at its last-access time. The stack distance
/// of an access is its line's position from the top (1 for the most recent
/// line), counting holes: a cache of C lines holds exactly the lines at
/// positions 1..=C, and the holes among them are its free slots.
///
/// Times are renumbered when the array fills (every live entry moves to the
/// front, in order), so memory follows the live lines, not the trace length.
#[derive(Debug, Default)]
pub struct StackDistance {
    /// Line -> its last-access time.
    at: FxHashMap<u64, u64>,
    /// Time -> line ([`EMPTY`], [`HOLE`]).
    slots: Vec<u64>,
    /// 1 at every time holding a line or a hole.
    fen: Fenwick,
    /// Times of holes.
    holes: BTreeSet<u64>,
    /// Entries (lines and holes).
    entries: u64,
    /// Next time.
    now: u64,
}

impl StackDistance {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lines in the stack.
    pub fn lines(&self) -> usize {
        self.at.len()
    }

    /// Holes in the stack (free slots of the caches that hold them).
    pub fn holes(&self) -> usize {
        self.holes.len()
    }

    /// Bytes of memory held (hash table, time array, Fenwick tree, holes).
    pub fn memory_bytes(&self) -> usize {
        self.at.capacity() * 17
            + self.slots.capacity() * 8
            + self.fen.len() * 4
            + self.holes.len() * 24
    }

    /// Whether `line` is in the stack.
    pub fn contains(&self, line: u64) -> bool {
        self.at.contains_key(&line)
    }

    /// Position from the top of the entry at time `t` (1 = most recent).
    fn position(&self, t: u64) -> u64 {
        self.entries - self.fen.prefix(t as usize) + 1
    }

    /// Access `line`: its stack distance (it hits in every cache of at least
    /// that many lines), or `None` on its first access (or its first since
    /// [`remove`](Self::remove)). The line is then at the top.
    ///
    /// The topmost hole above the line's old position (every hole, for a
    /// line not in the stack) is the free slot the caches that miss take:
    /// it moves down to the line's old position (or goes, for a new line).
    pub fn access(&mut self, line: u64) -> Option<u64> {
        debug_assert!(line < HOLE, "line numbers below 2^64 - 2");
        if self.now as usize == self.slots.len() {
            self.compact();
        }
        let old = self.at.get(&line).copied();
        let d = old.map(|t| self.position(t));
        let above = old.map_or(0, |t| t + 1);
        match self.holes.range(above..).next_back().copied() {
            Some(h) => {
                self.holes.remove(&h);
                self.slots[h as usize] = EMPTY;
                self.fen.add(h as usize, -1);
                self.entries -= 1;
                if let Some(t) = old {
                    self.slots[t as usize] = HOLE;
                    self.holes.insert(t);
                }
            }
            None => {
                if let Some(t) = old {
                    self.slots[t as usize] = EMPTY;
                    self.fen.add(t as usize, -1);
                    self.entries -= 1;
                }
            }
        }
        let t = self.now;
        self.now += 1;
        self.slots[t as usize] = line;
        self.fen.add(t as usize, 1);
        self.entries += 1;
        self.at.insert(line, t);
        d
    }

    /// An access that every cache misses and none keeps, to a line not in
    /// the stack (a write-back cache's partial-line write miss: the cache
    /// takes a slot for it, evicting its LRU line when full, writes the
    /// piece to the backing device and frees the slot). A full cache is
    /// left with one free slot: the topmost hole moves to the top, or a new
    /// hole goes there.
    pub fn miss_unkept(&mut self) {
        if self.now as usize == self.slots.len() {
            self.compact();
        }
        if let Some(h) = self.holes.pop_last() {
            self.slots[h as usize] = EMPTY;
            self.fen.add(h as usize, -1);
            self.entries -= 1;
        }
        let t = self.now;
        self.now += 1;
        self.slots[t as usize] = HOLE;
        self.holes.insert(t);
        self.fen.add(t as usize, 1);
        self.entries += 1;
    }

    /// Remove `line` from every cache (a trim): it leaves a hole, a free
    /// slot in each cache that held it. Returns whether it was there.
    pub fn remove(&mut self, line: u64) -> bool {
        match self.at.remove(&line) {
            Some(t) => {
                self.slots[t as usize] = HOLE;
                self.holes.insert(t);
                true
            }
            None => false,
        }
    }

    /// Forget `line` without a hole, as if it had never been accessed (a
    /// line leaving a SHARDS sample). Returns whether it was there.
    pub fn forget(&mut self, line: u64) -> bool {
        match self.at.remove(&line) {
            Some(t) => {
                self.slots[t as usize] = EMPTY;
                self.fen.add(t as usize, -1);
                self.entries -= 1;
                true
            }
            None => false,
        }
    }

    /// Renumber the live entries 0.. in order, in an array twice their number.
    fn compact(&mut self) {
        let live: Vec<u64> = self.slots.iter().copied().filter(|&s| s != EMPTY).collect();
        let cap = (live.len() * 2).max(MIN_CAPACITY);
        let mut slots = vec![EMPTY; cap];
        self.holes.clear();
        for (i, &s) in live.iter().enumerate() {
            slots[i] = s;
            if s == HOLE {
                self.holes.insert(i as u64);
            } else {
                self.at.insert(s, i as u64);
            }
        }
        self.fen = Fenwick::from_flags((0..cap).map(|i| i < live.len()), cap);
        self.slots = slots;
        self.now = live.len() as u64;
        debug_assert_eq!(self.entries, live.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_distances() {
        // a b c a b b d a: a at 3 (c, b above), b at 3, b at 1, a at 3 (d, b).
        let mut s = StackDistance::new();
        let got: Vec<Option<u64>> = [1, 2, 3, 1, 2, 2, 4, 1]
            .iter()
            .map(|&l| s.access(l))
            .collect();
        assert_eq!(
            got,
            [None, None, None, Some(3), Some(3), Some(1), None, Some(3)]
        );
        assert_eq!(s.lines(), 4);
    }

    #[test]
    fn a_removed_line_leaves_a_free_slot_the_next_miss_takes() {
        // Stack a b c (c on top); remove b: c, hole, a. A cache of 2 lines
        // holds c and a free slot; d takes it (d, c, a): a at distance 3.
        let mut s = StackDistance::new();
        for l in [1, 2, 3] {
            s.access(l);
        }
        assert!(s.remove(2));
        assert_eq!(s.holes(), 1);
        assert_eq!(s.access(4), None);
        assert_eq!(s.holes(), 0);
        assert_eq!(s.access(1), Some(3));
        assert_eq!(s.access(2), None);
    }

    #[test]
    fn an_unkept_miss_frees_a_slot_in_full_caches_only() {
        // Stack c b a (c on top). An unkept miss leaves hole c b a: the full
        // 3-line cache evicted a and holds c b and a free slot, which d takes
        // (d c b a): a is then at distance 4.
        let mut s = StackDistance::new();
        for l in [1, 2, 3] {
            s.access(l);
        }
        s.miss_unkept();
        assert_eq!(s.holes(), 1);
        assert_eq!(s.access(4), None);
        assert_eq!(s.holes(), 0);
        assert_eq!(s.access(1), Some(4));
        // A second unkept miss with a hole above reuses it: one hole at most.
        s.miss_unkept();
        s.miss_unkept();
        assert_eq!(s.holes(), 1);
    }

    #[test]
    fn compaction_keeps_distances() {
        let mut s = StackDistance::new();
        for i in 0..5000u64 {
            s.access(i % 7);
        }
        // 3 was last at 4994; 4, 5, 6, 0 and 1 came after it.
        assert_eq!(s.access(3), Some(6));
        assert!(s.slots.len() <= MIN_CAPACITY);
    }
}
