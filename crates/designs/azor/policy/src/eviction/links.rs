//! Index-linked lists shared by the policies: doubly linked lists threaded
//! through two flat `u32` tables, and ghost histories of line numbers.
//!
//! Orientation: `head` is the newest end (most recently inserted or used),
//! `tail` the oldest; `next` points towards the tail, `prev` towards the head.

use super::NIL;
use crate::lazy::Paged;
use rustc_hash::FxHashMap;
use std::ops::{Index, IndexMut};

/// Ends and length of one list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ends {
    pub head: u32,
    pub tail: u32,
    pub len: u32,
}

impl Ends {
    pub const EMPTY: Ends = Ends {
        head: NIL,
        tail: NIL,
        len: 0,
    };
}

/// Storage of list links: a growable `Vec` (ghost nodes) or a [`Paged`]
/// array with one entry per slot (allocated where slots are used).
pub(crate) trait Cells: Index<usize, Output = u32> + IndexMut<usize> {
    fn push_cell(&mut self, v: u32);
    fn cells(&self) -> usize;
    /// Entries the storage is sized for (its metadata footprint).
    fn cap(&self) -> usize;
}

impl Cells for Vec<u32> {
    fn push_cell(&mut self, v: u32) {
        self.push(v)
    }
    fn cells(&self) -> usize {
        self.len()
    }
    fn cap(&self) -> usize {
        self.capacity()
    }
}

impl Cells for Paged<u32> {
    fn push_cell(&mut self, v: u32) {
        self.push(v)
    }
    fn cells(&self) -> usize {
        self.len()
    }
    fn cap(&self) -> usize {
        self.capacity()
    }
}

/// `prev`/`next` tables over node indices; lists are described by [`Ends`].
#[derive(Clone, Debug)]
pub(crate) struct Links<V: Cells = Paged<u32>> {
    prev: V,
    next: V,
}

impl Links {
    /// Links of `n` slots, all unlinked (memory taken as slots are linked).
    pub fn new(n: usize) -> Self {
        Links {
            prev: Paged::new(n, NIL),
            next: Paged::new(n, NIL),
        }
    }
}

impl Default for Links<Vec<u32>> {
    fn default() -> Self {
        Links {
            prev: Vec::new(),
            next: Vec::new(),
        }
    }
}

impl<V: Cells> Links<V> {
    /// Add node `n` (unlinked) to the table, returning its index.
    pub fn push_node(&mut self) -> u32 {
        self.prev.push_cell(NIL);
        self.next.push_cell(NIL);
        (self.prev.cells() - 1) as u32
    }

    /// Insert unlinked node `i` at the head of `e`.
    pub fn push_front(&mut self, e: &mut Ends, i: u32) {
        let h = e.head;
        self.prev[i as usize] = NIL;
        self.next[i as usize] = h;
        if h == NIL {
            e.tail = i;
        } else {
            self.prev[h as usize] = i;
        }
        e.head = i;
        e.len += 1;
    }

    /// Remove node `i` from list `e`.
    pub fn unlink(&mut self, e: &mut Ends, i: u32) {
        let (p, n) = (self.prev[i as usize], self.next[i as usize]);
        if p == NIL {
            e.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            e.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i as usize] = NIL;
        self.next[i as usize] = NIL;
        e.len -= 1;
    }

    /// The neighbour of `i` towards the head (newer), or `NIL`.
    pub fn newer(&self, i: u32) -> u32 {
        self.prev[i as usize]
    }

    /// Reset node `i`'s links (used by free lists, which reuse `next`).
    pub fn set_next(&mut self, i: u32, n: u32) {
        self.next[i as usize] = n;
    }

    pub fn next_of(&self, i: u32) -> u32 {
        self.next[i as usize]
    }

    pub fn bytes(&self) -> usize {
        (self.prev.cap() + self.next.cap()) * std::mem::size_of::<u32>()
    }
}

/// Ghost histories: several FIFO/LRU lists of line numbers (evicted lines
/// remembered without data), with a hash index from line number to node.
///
/// A line number lives in at most one list: in a set-associative cache a
/// line maps to exactly one set, so one index serves all sets. Nodes are
/// recycled through a free list, so memory follows the peak ghost count.
#[derive(Clone, Debug)]
pub(crate) struct Ghosts {
    links: Links<Vec<u32>>,
    keys: Vec<u64>,
    /// Which list each node is in (`u32::MAX` when free).
    list_of: Vec<u32>,
    free: u32,
    index: FxHashMap<u64, u32>,
    lists: Paged<Ends>,
}

impl Ghosts {
    /// `n_lists` empty lists.
    pub fn new(n_lists: usize) -> Self {
        Ghosts {
            links: Links::default(),
            keys: Vec::new(),
            list_of: Vec::new(),
            free: NIL,
            index: FxHashMap::default(),
            lists: Paged::new(n_lists, Ends::EMPTY),
        }
    }

    /// The list holding `key`, if any.
    pub fn list_of(&self, key: u64) -> Option<u32> {
        self.index.get(&key).map(|&i| self.list_of[i as usize])
    }

    pub fn len(&self, list: u32) -> u32 {
        self.lists[list as usize].len
    }

    /// Forget `key`; returns the list it was in.
    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let i = self.index.remove(&key)?;
        let list = self.list_of[i as usize];
        self.links.unlink(&mut self.lists[list as usize], i);
        self.release(i);
        Some(list)
    }

    /// Remember `key` as the newest entry of `list`. `key` must not be present.
    pub fn push_front(&mut self, list: u32, key: u64) {
        debug_assert!(!self.index.contains_key(&key));
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.links.next_of(i);
            self.links.set_next(i, NIL);
            self.keys[i as usize] = key;
            self.list_of[i as usize] = list;
            i
        } else {
            self.keys.push(key);
            self.list_of.push(list);
            self.links.push_node()
        };
        self.links.push_front(&mut self.lists[list as usize], i);
        self.index.insert(key, i);
    }

    /// Drop the oldest entry of `list`; returns its key.
    pub fn pop_back(&mut self, list: u32) -> Option<u64> {
        let i = self.lists[list as usize].tail;
        if i == NIL {
            return None;
        }
        let key = self.keys[i as usize];
        self.links.unlink(&mut self.lists[list as usize], i);
        self.index.remove(&key);
        self.release(i);
        Some(key)
    }

    fn release(&mut self, i: u32) {
        self.list_of[i as usize] = u32::MAX;
        self.links.set_next(i, self.free);
        self.free = i;
    }

    pub fn bytes(&self) -> usize {
        self.links.bytes()
            + self.keys.capacity() * std::mem::size_of::<u64>()
            + self.list_of.capacity() * std::mem::size_of::<u32>()
            + self.lists.capacity() * std::mem::size_of::<Ends>()
            // hashbrown: one (key, value) bucket plus one control byte per slot.
            + self.index.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ghosts_keep_fifo_order_and_recycle_nodes() {
        let mut g = Ghosts::new(2);
        for k in 1..=3 {
            g.push_front(0, k);
        }
        g.push_front(1, 9);
        assert_eq!(g.list_of(2), Some(0));
        assert_eq!(g.list_of(9), Some(1));
        assert_eq!(g.remove(2), Some(0));
        assert_eq!(g.list_of(2), None);
        assert_eq!(g.len(0), 2);
        assert_eq!(g.pop_back(0), Some(1));
        g.push_front(0, 4); // reuses a freed node
        assert_eq!(g.keys.len(), 4);
        assert_eq!(g.pop_back(0), Some(3));
        assert_eq!(g.pop_back(0), Some(4));
        assert_eq!(g.pop_back(0), None);
        assert_eq!(g.pop_back(1), Some(9));
    }
}
