//! A one-set cache that drives a policy through the engine's call protocol
//! and checks `peek_victim` against every `evict` (tests only).

use super::{Eviction, Slot};
use rustc_hash::FxHashMap;

/// One set of `ways` slots managed by policy `p`.
pub(crate) struct OneSet<E: Eviction> {
    pub p: E,
    ways: usize,
    pub slot_of: FxHashMap<u64, Slot>,
    key_of: Vec<u64>,
}

impl<E: Eviction> OneSet<E> {
    pub fn new(p: E, ways: u32) -> Self {
        OneSet {
            p,
            ways: ways as usize,
            slot_of: FxHashMap::default(),
            key_of: Vec::new(),
        }
    }

    /// Access `key`; returns the evicted key, if any.
    pub fn access(&mut self, key: u64) -> Option<u64> {
        if let Some(&s) = self.slot_of.get(&key) {
            self.p.on_hit(0, s);
            return None;
        }
        self.p.on_miss(0, key);
        let (slot, evicted) = if self.key_of.len() < self.ways {
            self.key_of.push(key);
            ((self.key_of.len() - 1) as Slot, None)
        } else {
            let peek = self.p.peek_victim(0, key);
            let keys = self.key_of.clone();
            let v = self.p.evict(0, &|s| keys[s as usize]);
            assert_eq!(peek, v, "peek_victim disagrees with evict");
            let old = self.key_of[v as usize];
            self.slot_of.remove(&old);
            self.key_of[v as usize] = key;
            (v, Some(old))
        };
        self.slot_of.insert(key, slot);
        self.p.on_insert(0, slot, key);
        evicted
    }
}
