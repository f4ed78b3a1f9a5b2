//! Mapping: which cache slot holds which backing line, and which of its
//! sub-blocks are valid and dirty.
//!
//! One flat table per field, indexed by slot (Azor 2.1: indices, not
//! pointers). The tag layout depends on the associativity:
//! - direct-mapped and set-associative: set = `line % sets`, and a `u32` tag
//!   `line / sets` (4 bytes per line);
//! - fully associative: the full line number in 40 bits (`u32` + `u8`), found
//!   through a chained hash table whose bucket heads and chain links are `u32`
//!   slot indices in the same flat style ([`full`]).
//!
//! Valid and dirty bits live in one packed bitmap, `2 × subs` bits per slot,
//! so partial lines never need a read-modify-write (Azor 2.3).

pub mod bits;
pub mod full;

use crate::config::{Assoc, Geometry};
use crate::eviction::{Slot, NIL};
use crate::lazy::Paged;
use bits::SubBits;
use full::FullIndex;

/// Largest line number the fully associative table can hold (40 bits).
pub const MAX_FULL_LINE: u64 = (1 << 40) - 2;

/// The line table of a cache.
pub struct Mapping {
    geo: Geometry,
    index: Index,
    /// Valid and dirty bits per slot.
    pub bits: SubBits,
    /// Class bit per slot: set for metadata-like lines (2LBS level 1).
    meta: Paged<u64>,
    /// Occupied slots.
    used: u32,
}

enum Index {
    /// Direct-mapped and set-associative: tag per slot, `EMPTY` when free.
    Sets {
        tags: Paged<u32>,
    },
    Full(FullIndex),
}

const EMPTY: u32 = u32::MAX;

impl Mapping {
    /// An empty table for `geo` organised as `assoc`.
    pub fn new(geo: Geometry, assoc: Assoc) -> Self {
        let n = geo.slots as usize;
        let index = match assoc {
            Assoc::Full => Index::Full(FullIndex::new(geo.slots)),
            _ => Index::Sets {
                tags: Paged::new(n, EMPTY),
            },
        };
        Mapping {
            geo,
            index,
            bits: SubBits::new(geo.slots, geo.subs),
            meta: Paged::new(n.div_ceil(64), 0),
            used: 0,
        }
    }

    /// The geometry this table was built for.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The set a line belongs to.
    #[inline]
    pub fn set_of(&self, line: u64) -> u32 {
        match self.index {
            Index::Full(_) => 0,
            Index::Sets { .. } => (line % self.geo.sets as u64) as u32,
        }
    }

    /// Whether `line` can be represented at all (it is otherwise never cached).
    #[inline]
    pub fn representable(&self, line: u64) -> bool {
        match self.index {
            Index::Full(_) => line <= MAX_FULL_LINE,
            Index::Sets { .. } => line / (self.geo.sets as u64) < EMPTY as u64,
        }
    }

    /// The slot holding `line`, if any.
    #[inline]
    pub fn lookup(&self, line: u64) -> Option<Slot> {
        match &self.index {
            Index::Full(f) => f.lookup(line),
            Index::Sets { tags } => {
                let sets = self.geo.sets as u64;
                let set = (line % sets) as usize;
                let tag = (line / sets) as u32;
                let w = self.geo.ways as usize;
                let base = set * w;
                (base..base + w)
                    .find(|&i| tags[i] == tag)
                    .map(|i| i as Slot)
            }
        }
    }

    /// A free slot in `set`, if any.
    #[inline]
    pub fn free_slot(&self, set: u32) -> Option<Slot> {
        match &self.index {
            Index::Full(f) => f.peek_free(),
            Index::Sets { tags } => {
                let w = self.geo.ways as usize;
                let base = set as usize * w;
                (base..base + w)
                    .find(|&i| tags[i] == EMPTY)
                    .map(|i| i as Slot)
            }
        }
    }

    /// Put `line` into the free `slot` with no valid sub-blocks yet.
    pub fn insert(&mut self, slot: Slot, line: u64, metadata: bool) {
        debug_assert!(self.lookup(line).is_none(), "line {line} mapped twice");
        debug_assert!(!self.bits.any_valid(slot) && !self.bits.any_dirty(slot));
        debug_assert_eq!(
            self.set_of_slot(slot),
            self.set_of(line),
            "slot in the wrong set"
        );
        match &mut self.index {
            Index::Full(f) => f.insert(slot, line),
            Index::Sets { tags } => {
                debug_assert_eq!(tags[slot as usize], EMPTY);
                tags[slot as usize] = (line / self.geo.sets as u64) as u32;
            }
        }
        self.set_metadata(slot, metadata);
        self.used += 1;
    }

    /// Restore a saved table: map every `(slot, line, metadata)` into an empty
    /// table. Refuses a slot outside the geometry or in the wrong set (the
    /// saved table came from another geometry) and a line mapped twice.
    pub fn restore(
        &mut self,
        entries: impl IntoIterator<Item = (Slot, u64, bool)>,
    ) -> Result<(), String> {
        if self.used != 0 {
            return Err("restore needs an empty table".into());
        }
        for (slot, line, meta) in entries {
            if slot >= self.geo.slots {
                return Err(format!(
                    "slot {slot} is outside the cache's {} slots",
                    self.geo.slots
                ));
            }
            if !self.representable(line) || self.set_of(line) != self.set_of_slot(slot) {
                return Err(format!(
                    "slot {slot} cannot hold line {line} in this geometry"
                ));
            }
            if self.lookup(line).is_some() || self.line_of(slot).is_some() {
                return Err(format!("line {line} or slot {slot} appears twice"));
            }
            match &mut self.index {
                Index::Full(f) => f.insert_restored(slot, line),
                Index::Sets { tags } => tags[slot as usize] = (line / self.geo.sets as u64) as u32,
            }
            self.set_metadata(slot, meta);
            self.used += 1;
        }
        if let Index::Full(f) = &mut self.index {
            f.rebuild_free_list();
        }
        Ok(())
    }

    /// Free `slot`, clearing its bits.
    pub fn remove(&mut self, slot: Slot) {
        let line = self.line_of(slot);
        debug_assert!(line.is_some(), "removing free slot {slot}");
        match &mut self.index {
            Index::Full(f) => f.remove(slot, line.unwrap_or(0)),
            Index::Sets { tags } => tags[slot as usize] = EMPTY,
        }
        self.bits.clear(slot);
        self.set_metadata(slot, false);
        self.used -= 1;
    }

    /// The line held by `slot`, or `None` when free.
    #[inline]
    pub fn line_of(&self, slot: Slot) -> Option<u64> {
        match &self.index {
            Index::Full(f) => f.line_of(slot),
            Index::Sets { tags } => {
                let t = tags[slot as usize];
                (t != EMPTY)
                    .then(|| t as u64 * self.geo.sets as u64 + self.set_of_slot(slot) as u64)
            }
        }
    }

    #[inline]
    fn set_of_slot(&self, slot: Slot) -> u32 {
        slot / self.geo.ways
    }

    /// Whether `slot` holds a metadata-class line.
    #[inline]
    pub fn is_metadata(&self, slot: Slot) -> bool {
        self.meta[slot as usize / 64] >> (slot % 64) & 1 == 1
    }

    /// Mark `slot` as holding metadata or data.
    pub fn set_metadata(&mut self, slot: Slot, m: bool) {
        let (w, b) = (slot as usize / 64, slot % 64);
        if m {
            self.meta[w] |= 1 << b;
        } else {
            self.meta[w] &= !(1 << b);
        }
    }

    /// Number of occupied slots.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Bytes of DRAM held by the table (tags or hash index, bits, class bits).
    pub fn metadata_bytes(&self) -> usize {
        let idx = match &self.index {
            Index::Full(f) => f.metadata_bytes(),
            Index::Sets { tags } => tags.len() * 4,
        };
        idx + self.bits.metadata_bytes() + self.meta.len() * 8
    }

    /// Every occupied slot with its line (for checkpoints and invariant checks).
    /// Slots in ascending order; only those the table ever used are visited.
    pub fn iter(&self) -> impl Iterator<Item = (Slot, u64)> + '_ {
        let candidates: Box<dyn Iterator<Item = usize> + '_> = match &self.index {
            Index::Full(f) => Box::new(0..f.high_water() as usize),
            Index::Sets { tags } => Box::new(tags.touched()),
        };
        candidates.filter_map(move |s| self.line_of(s as Slot).map(|l| (s as Slot, l)))
    }

    /// Check the table's invariants (debug builds and tests).
    pub fn check_invariants(&self) {
        let mut n = 0;
        for (slot, line) in self.iter() {
            n += 1;
            assert_eq!(
                self.lookup(line),
                Some(slot),
                "slot {slot} line {line} not found by lookup"
            );
            assert_eq!(
                self.set_of(line),
                self.set_of_slot(slot),
                "slot {slot} in the wrong set"
            );
            assert!(
                self.bits.dirty_within_valid(slot),
                "slot {slot}: dirty bit without valid bit"
            );
        }
        assert_eq!(n, self.used, "occupied count");
        if let Index::Full(f) = &self.index {
            f.check_invariants(self.used);
        }
    }
}

impl FullIndex {
    fn peek_free(&self) -> Option<Slot> {
        let f = self.free_head();
        (f != NIL).then_some(f)
    }
}
