//! Slot allocation: admission, free slots, victim eviction, and freeing
//! slots left empty.

use super::Engine;
use crate::eviction::Slot;

impl Engine {
    /// Find or make room for `line`, subject to admission. Returns the slot it now occupies (no valid data yet).
    pub(super) fn allocate(&mut self, line: u64, meta: bool) -> Option<Slot> {
        if self.bypass || self.degraded || !self.map.representable(line) {
            self.stats.admission_rejects += 1;
            return None;
        }
        if let Some(n) = &mut self.nhit {
            let occ = self.map.used() as f64 / self.geo.slots as f64;
            if !n.admit(line, occ) {
                self.stats.admission_rejects += 1;
                return None;
            }
        }
        let set = self.map.set_of(line);
        if let Some(free) = self.map.free_slot(set) {
            self.touch(free);
            self.evict.on_miss(set, line);
            self.map.insert(free, line, meta);
            self.evict.on_insert(set, free, line);
            return Some(free);
        }
        if let Some(t) = &self.two_level {
            let v = self.evict.peek_victim(set, line);
            let occ = self.map.line_of(v).expect("victim is occupied");
            if !t
                .decide(line, meta, Some((occ, self.map.is_metadata(v))))
                .admits()
            {
                self.stats.admission_rejects += 1;
                return None;
            }
        }
        self.evict.on_miss(set, line);
        let map = &self.map;
        let victim = self
            .evict
            .evict(set, &|s| map.line_of(s).unwrap_or(u64::MAX));
        let vline = self.map.line_of(victim).expect("victim is occupied");
        self.touch(victim);
        if self.map.bits.any_dirty(victim) {
            self.stats.dirty_evictions += 1;
            self.write_back_run(victim, vline, usize::MAX);
        }
        self.map.remove(victim);
        self.stats.evictions += 1;
        self.map.insert(victim, line, meta);
        self.evict.on_insert(set, victim, line);
        Some(victim)
    }

    /// Free a slot that ended up holding nothing valid (a refused partial fill).
    pub(super) fn drop_if_empty(&mut self, slot: Slot, line: u64) {
        self.touch(slot);
        if !self.map.bits.any_valid(slot) {
            let set = self.map.set_of(line);
            self.evict.on_remove(set, slot);
            self.map.remove(slot);
        }
    }
}
