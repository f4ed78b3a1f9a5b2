//! The recovered slot table in a compact form ([`SlotTable`]), and the
//! [`SlotMap`] view that records apply to (a compact table or, in tests and
//! models, a plain `Vec<Option<LineMeta>>`).
//!
//! A slot costs `8 + 1 + 2 x sub-blocks / 8` bytes (line, class, valid and
//! dirty bits): 9.25 bytes with one sub-block per line, against 88 for an
//! `Option<LineMeta>` with its two 256-bit bitmaps.

use crate::line::{LineMeta, Slot, SubBlocks};

/// The line number that marks an unmapped slot (never a real line: line
/// numbers are byte offsets divided by the line size).
pub const NO_LINE: u64 = u64::MAX;

/// Read and write access to a slot table, one entry per slot.
pub trait SlotMap {
    /// Number of slots.
    fn slot_count(&self) -> usize;
    /// What `slot` holds (`None`: unmapped, or past the end).
    fn get_slot(&self, slot: Slot) -> Option<LineMeta>;
    /// Replaces what `slot` holds (ignored past the end).
    fn set_slot(&mut self, slot: Slot, m: Option<LineMeta>);
}

impl SlotMap for [Option<LineMeta>] {
    fn slot_count(&self) -> usize {
        self.len()
    }
    fn get_slot(&self, slot: Slot) -> Option<LineMeta> {
        self.get(slot as usize).copied().flatten()
    }
    fn set_slot(&mut self, slot: Slot, m: Option<LineMeta>) {
        if let Some(e) = self.get_mut(slot as usize) {
            *e = m;
        }
    }
}

impl SlotMap for Vec<Option<LineMeta>> {
    fn slot_count(&self) -> usize {
        self.len()
    }
    fn get_slot(&self, slot: Slot) -> Option<LineMeta> {
        self.as_slice().get_slot(slot)
    }
    fn set_slot(&mut self, slot: Slot, m: Option<LineMeta>) {
        self.as_mut_slice().set_slot(slot, m)
    }
}

/// One entry per slot: the line (or [`NO_LINE`]), the class, and the valid
/// and dirty bits of its sub-blocks packed `2 x sub_blocks` bits per slot.
#[derive(Clone, PartialEq, Eq)]
pub struct SlotTable {
    subs: u32,
    lines: Vec<u64>,
    classes: Vec<u8>,
    /// Per slot `subs` valid bits then `subs` dirty bits. `subs` is a power
    /// of two, so a slot's bits never straddle a word unless they fill whole words.
    bits: Vec<u64>,
}

impl std::fmt::Debug for SlotTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl SlotTable {
    /// Heap bytes per slot for lines of `sub_blocks` sub-blocks.
    pub fn bytes_per_slot(sub_blocks: u32) -> f64 {
        8.0 + 1.0 + 2.0 * sub_blocks as f64 / 8.0
    }

    /// An empty table of `slots` slots whose lines have `sub_blocks` (a power of two, at most 256) sub-blocks.
    pub fn new(slots: u32, sub_blocks: u32) -> SlotTable {
        let subs = sub_blocks.clamp(1, 256).next_power_of_two();
        let n = slots as usize;
        SlotTable {
            subs,
            lines: vec![NO_LINE; n],
            classes: vec![0; n],
            bits: vec![0; (n * 2 * subs as usize).div_ceil(64)],
        }
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether the table has no slots at all.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Sub-blocks per line.
    pub fn sub_blocks(&self) -> u32 {
        self.subs
    }

    /// What `slot` holds.
    #[inline]
    pub fn get(&self, slot: Slot) -> Option<LineMeta> {
        let s = slot as usize;
        let line = *self.lines.get(s)?;
        if line == NO_LINE {
            return None;
        }
        let (valid, dirty) = self.read_bits(s);
        Some(LineMeta {
            line,
            valid,
            dirty,
            class: self.classes[s],
        })
    }

    /// Whether `slot` is mapped.
    #[inline]
    pub fn is_mapped(&self, slot: Slot) -> bool {
        self.lines.get(slot as usize).is_some_and(|&l| l != NO_LINE)
    }

    /// Replaces what `slot` holds (ignored past the end). A `LineMeta` whose
    /// line is [`NO_LINE`] or whose bits lie past the line's sub-blocks is a
    /// caller bug (the store checks records and checkpoint entries first).
    pub fn set(&mut self, slot: Slot, m: Option<LineMeta>) {
        let s = slot as usize;
        if s >= self.lines.len() {
            return;
        }
        match m {
            Some(m) => {
                debug_assert!(m.line != NO_LINE, "line {NO_LINE} marks a free slot");
                self.lines[s] = m.line;
                self.classes[s] = m.class;
                self.write_bits(s, m.valid, m.dirty);
            }
            None => {
                self.lines[s] = NO_LINE;
                self.classes[s] = 0;
                self.write_bits(s, SubBlocks::EMPTY, SubBlocks::EMPTY);
            }
        }
    }

    /// Unmaps every slot.
    pub fn clear(&mut self) {
        self.lines.fill(NO_LINE);
        self.classes.fill(0);
        self.bits.fill(0);
    }

    /// The mapped slots in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (Slot, LineMeta)> + Clone + '_ {
        (0..self.lines.len() as Slot).filter_map(|s| self.get(s).map(|m| (s, m)))
    }

    /// Number of mapped slots.
    pub fn mapped(&self) -> usize {
        self.lines.iter().filter(|&&l| l != NO_LINE).count()
    }

    /// One entry per slot (for tests and small tables).
    pub fn to_vec(&self) -> Vec<Option<LineMeta>> {
        (0..self.lines.len() as Slot).map(|s| self.get(s)).collect()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.lines.capacity() * 8 + self.classes.capacity() + self.bits.capacity() * 8
    }

    fn read_bits(&self, s: usize) -> (SubBlocks, SubBlocks) {
        let subs = self.subs as usize;
        let mut valid = SubBlocks::EMPTY;
        let mut dirty = SubBlocks::EMPTY;
        if 2 * subs <= 64 {
            let bit = s * 2 * subs;
            let w = self.bits[bit / 64] >> (bit % 64);
            let mask = (1u64 << subs) - 1;
            valid.0[0] = w & mask;
            dirty.0[0] = (w >> subs) & mask;
        } else {
            let words = subs / 64;
            let base = s * 2 * words;
            valid.0[..words].copy_from_slice(&self.bits[base..base + words]);
            dirty.0[..words].copy_from_slice(&self.bits[base + words..base + 2 * words]);
        }
        (valid, dirty)
    }

    fn write_bits(&mut self, s: usize, valid: SubBlocks, dirty: SubBlocks) {
        let subs = self.subs as usize;
        if 2 * subs <= 64 {
            let bit = s * 2 * subs;
            let mask = (1u64 << subs) - 1;
            let field = ((1u128 << (2 * subs)) - 1) as u64;
            let v = (valid.0[0] & mask) | ((dirty.0[0] & mask) << subs);
            let w = &mut self.bits[bit / 64];
            *w = (*w & !(field << (bit % 64))) | (v << (bit % 64));
        } else {
            let words = subs / 64;
            let base = s * 2 * words;
            self.bits[base..base + words].copy_from_slice(&valid.0[..words]);
            self.bits[base + words..base + 2 * words].copy_from_slice(&dirty.0[..words]);
        }
    }
}

impl SlotMap for SlotTable {
    fn slot_count(&self) -> usize {
        self.len()
    }
    fn get_slot(&self, slot: Slot) -> Option<LineMeta> {
        self.get(slot)
    }
    fn set_slot(&mut self, slot: Slot, m: Option<LineMeta>) {
        self.set(slot, m)
    }
}

impl PartialEq<Vec<Option<LineMeta>>> for SlotTable {
    fn eq(&self, other: &Vec<Option<LineMeta>>) -> bool {
        self.len() == other.len()
            && (0..self.len() as Slot).all(|s| self.get(s) == other[s as usize])
    }
}

impl PartialEq<SlotTable> for Vec<Option<LineMeta>> {
    fn eq(&self, other: &SlotTable) -> bool {
        other == self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(line: u64, valid: &[u32], dirty: &[u32], class: u8) -> LineMeta {
        let mut v = SubBlocks::EMPTY;
        valid.iter().for_each(|&i| v.set(i));
        let mut d = SubBlocks::EMPTY;
        dirty.iter().for_each(|&i| d.set(i));
        LineMeta {
            line,
            valid: v,
            dirty: d,
            class,
        }
    }

    #[test]
    fn every_width_round_trips_and_neighbours_stay_apart() {
        for subs in [1u32, 2, 4, 16, 32, 64, 128, 256] {
            let mut t = SlotTable::new(37, subs);
            let mut model: Vec<Option<LineMeta>> = vec![None; 37];
            for s in 0..37u32 {
                if s % 3 == 0 {
                    continue;
                }
                let last = subs - 1;
                let m = meta(s as u64 * 7, &[0, last, s % subs], &[last], (s % 5) as u8);
                t.set(s, Some(m));
                model[s as usize] = Some(m);
            }
            assert_eq!(t, model, "{subs} sub-blocks");
            t.set(4, None);
            model[4] = None;
            t.set(5, Some(meta(1, &[0], &[], 0)));
            model[5] = Some(meta(1, &[0], &[], 0));
            assert_eq!(t.to_vec(), model, "{subs} sub-blocks");
            assert_eq!(t.mapped(), model.iter().flatten().count());
            t.clear();
            assert!(t.iter().next().is_none());
        }
    }

    #[test]
    fn one_sub_block_costs_under_ten_bytes_a_slot() {
        let t = SlotTable::new(1 << 16, 1);
        assert!(t.heap_bytes() as f64 / (1 << 16) as f64 <= SlotTable::bytes_per_slot(1));
        assert_eq!(SlotTable::bytes_per_slot(1), 9.25);
    }
}
