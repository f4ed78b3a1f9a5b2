//! The only choice of a direct-mapped cache: the occupant of the line's one
//! slot. No state, so direct-mapped metadata is just tags and bits.

use super::{Eviction, Slot};

/// Replacement for one-way sets: set `s` is slot `s`.
pub struct Occupant;

impl Eviction for Occupant {
    fn name(&self) -> &'static str {
        "direct"
    }
    fn on_hit(&mut self, _set: u32, _slot: Slot) {}
    fn on_miss(&mut self, _set: u32, _key: u64) {}
    fn evict(&mut self, set: u32, _key_of: &dyn Fn(Slot) -> u64) -> Slot {
        set
    }
    fn on_insert(&mut self, _set: u32, _slot: Slot, _key: u64) {}
    fn on_remove(&mut self, _set: u32, _slot: Slot) {}
    fn peek_victim(&self, set: u32, _incoming: u64) -> Slot {
        set
    }
    fn metadata_bytes(&self) -> usize {
        0
    }
}
