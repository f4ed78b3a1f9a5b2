//! The unified sparse map: backing block number -> cache slot, with the
//! block's dirty state, in one compact open-addressing table. The live
//! log-structured store (`tiercache-flashtier-live`) keeps it, and the
//! simulator measures it (`map_comparison.sparse_bytes_per_block`).
//!
//! FlashTier keys its solid-state cache by disk block in a sparse hash map so
//! that the host keeps no second mapping. Here every entry is a bit-packed
//! integer of `width` bytes (the fewest that hold `lba + 1`, the slot and two
//! flags, fixed at format time from the device sizes), stored back to back in
//! one byte vector. Robin Hood linear probing keeps lookups short at a load
//! factor of up to 0.9, so the table costs `width / 0.9` bytes per cached
//! block when the cache is full (6.7 B for 6-byte entries).
//!
//! The dirty flag of each entry is the write-back manager's dirty-block
//! table: no other host structure is kept; the cleaner scans the table for
//! dirty blocks in backing order. A scan walks the whole table, so a user
//! that asks for a few dirty blocks many times a second (the live store's
//! paced write-back) may turn on an ordered index of the dirty blocks
//! ([`SparseMap::index_dirty`]): the same answers, at about
//! [`DIRTY_INDEX_BYTES`] more per dirty block.

/// The largest share of table entries in use.
pub const MAX_LOAD: f64 = 0.9;

/// Host bytes per dirty block of the optional dirty index, at most: a
/// B-tree of 8-byte block numbers, measured at 18 to 19 bytes per block
/// (nodes half full when blocks become dirty in block order, fuller in random
/// order; `tiercache-flashtier-live`'s `memory_bound` test), rounded up.
pub const DIRTY_INDEX_BYTES: usize = 20;

/// What the map holds for one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Global cache slot (segment * data blocks per segment + index).
    pub slot: u32,
    /// The cache copy is newer than the backing device's.
    pub dirty: bool,
}

/// The sparse block -> slot map (see the module documentation).
#[derive(Clone, Debug)]
pub struct SparseMap {
    data: Vec<u8>,
    width: usize,
    cap: usize,
    len: usize,
    limit: usize,
    dirty: usize,
    slot_bits: u32,
    max_lba: u64,
    /// The dirty blocks in block order, when turned on ([`Self::index_dirty`]).
    dirty_index: Option<std::collections::BTreeSet<u64>>,
}

fn bits(n: u64) -> u32 {
    64 - n.leading_zeros()
}

fn mix(x: u64) -> u64 {
    // splitmix64's finalizer: consecutive block numbers spread evenly.
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SparseMap {
    /// A map for up to `max_entries` blocks of a backing device of
    /// `backing_blocks` blocks, pointing into `slots` cache slots.
    /// Fails when an entry would need more than 8 bytes.
    pub fn new(max_entries: u64, backing_blocks: u64, slots: u64) -> Result<SparseMap, String> {
        let (width, cap, slot_bits) = Self::shape(max_entries, backing_blocks, slots)?;
        Ok(SparseMap {
            data: vec![0; cap * width],
            width,
            cap,
            len: 0,
            limit: max_entries as usize,
            dirty: 0,
            slot_bits,
            max_lba: backing_blocks,
            dirty_index: None,
        })
    }

    /// Entry width in bytes, table entries and slot bits of a map made by
    /// [`Self::new`] with these arguments.
    fn shape(
        max_entries: u64,
        backing_blocks: u64,
        slots: u64,
    ) -> Result<(usize, usize, u32), String> {
        let lba_bits = bits(backing_blocks.max(1));
        let slot_bits = bits(slots.saturating_sub(1)).max(1);
        if slots > u32::MAX as u64 {
            return Err(format!("{slots} cache slots: at most 2^32 are supported"));
        }
        let total = lba_bits + slot_bits + 1;
        if total > 64 {
            return Err(format!(
                "a map entry would need {total} bits ({lba_bits} for the block, {slot_bits} for the slot)"
            ));
        }
        let width = total.div_ceil(8) as usize;
        let cap = ((max_entries as f64 / MAX_LOAD).ceil() as usize)
            .max(max_entries as usize + 1)
            .max(8);
        Ok((width, cap, slot_bits))
    }

    /// Bytes of the table [`Self::new`] allocates for these arguments
    /// (without the optional dirty index), without allocating it: what a
    /// cache of `slots` slots will hold in memory.
    pub fn table_bytes(max_entries: u64, backing_blocks: u64, slots: u64) -> Result<u64, String> {
        let (width, cap, _) = Self::shape(max_entries, backing_blocks, slots)?;
        Ok((width as u64).saturating_mul(cap as u64) + std::mem::size_of::<Self>() as u64)
    }

    /// The same map for a cache of `slots` slots (up to `slots` entries,
    /// the same backing device): every entry copied into a table shaped for
    /// it (the dirty index kept if on). Fails, changing nothing, when an
    /// entry points at a slot past `slots` or the entries would not fit.
    pub fn with_slots(&self, slots: u64) -> Result<SparseMap, String> {
        if let Some((lba, e)) = self.iter().find(|(_, e)| e.slot as u64 >= slots) {
            return Err(format!(
                "block {lba} is cached in slot {}, past the {slots} slots",
                e.slot
            ));
        }
        let mut m = SparseMap::new(slots, self.max_lba, slots)?;
        for (lba, e) in self.iter() {
            m.insert(lba, e)?;
        }
        if self.dirty_index.is_some() {
            m.index_dirty();
        }
        Ok(m)
    }

    /// Blocks mapped.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no block is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Blocks whose cache copy is dirty.
    pub fn dirty(&self) -> usize {
        self.dirty
    }
    /// Bytes per entry.
    pub fn entry_bytes(&self) -> usize {
        self.width
    }
    /// Table entries (used and free).
    pub fn capacity(&self) -> usize {
        self.cap
    }
    /// Host memory of the table in bytes.
    pub fn memory_bytes(&self) -> usize {
        self.data.len() + std::mem::size_of::<Self>() + self.dirty_index_bytes()
    }

    /// Estimated host bytes of the dirty index (0 when it is off).
    pub fn dirty_index_bytes(&self) -> usize {
        self.dirty_index
            .as_ref()
            .map_or(0, |d| d.len() * DIRTY_INDEX_BYTES)
    }

    /// Keep an ordered index of the dirty blocks from now on, so that
    /// [`Self::dirty_from`] costs `O(log n + returned)` instead of a walk of
    /// the whole table (the answers are the same).
    pub fn index_dirty(&mut self) {
        if self.dirty_index.is_none() {
            let idx = self
                .iter()
                .filter(|(_, e)| e.dirty)
                .map(|(l, _)| l)
                .collect();
            self.dirty_index = Some(idx);
        }
        self.check_dirty_index();
    }

    /// Record that `lba`'s dirty state went from `was` to `now`.
    fn note_dirty(&mut self, lba: u64, was: bool, now: bool) {
        if was == now {
            return;
        }
        if let Some(d) = &mut self.dirty_index {
            if now {
                d.insert(lba);
            } else {
                d.remove(&lba);
            }
        }
    }

    /// Debug builds: the dirty index holds as many blocks as are dirty.
    fn check_dirty_index(&self) {
        if let Some(d) = &self.dirty_index {
            debug_assert_eq!(
                d.len(),
                self.dirty,
                "the dirty index disagrees with the map"
            );
        }
    }

    fn raw(&self, i: usize) -> u64 {
        let mut b = [0u8; 8];
        b[..self.width].copy_from_slice(&self.data[i * self.width..(i + 1) * self.width]);
        u64::from_le_bytes(b)
    }
    fn set_raw(&mut self, i: usize, v: u64) {
        let w = self.width;
        self.data[i * w..(i + 1) * w].copy_from_slice(&v.to_le_bytes()[..w]);
    }
    fn encode(&self, lba: u64, e: Entry) -> u64 {
        ((lba + 1) << (self.slot_bits + 1)) | ((e.slot as u64) << 1) | e.dirty as u64
    }
    fn decode(&self, v: u64) -> (u64, Entry) {
        let lba = (v >> (self.slot_bits + 1)) - 1;
        let slot = ((v >> 1) & ((1u64 << self.slot_bits) - 1)) as u32;
        (
            lba,
            Entry {
                slot,
                dirty: v & 1 != 0,
            },
        )
    }
    fn home(&self, lba: u64) -> usize {
        ((mix(lba) as u128 * self.cap as u128) >> 64) as usize
    }
    fn dist(&self, i: usize, home: usize) -> usize {
        (i + self.cap - home) % self.cap
    }
    fn find(&self, lba: u64) -> Option<usize> {
        let mut i = self.home(lba);
        let mut d = 0;
        loop {
            let v = self.raw(i);
            if v == 0 {
                return None;
            }
            let (l, _) = self.decode(v);
            if l == lba {
                return Some(i);
            }
            if self.dist(i, self.home(l)) < d {
                return None;
            }
            i = (i + 1) % self.cap;
            d += 1;
        }
    }

    /// The entry of `lba`.
    pub fn get(&self, lba: u64) -> Option<Entry> {
        self.find(lba).map(|i| self.decode(self.raw(i)).1)
    }

    /// Map `lba` to `e`, returning the entry it replaces. Fails (changing
    /// nothing) on a block past the backing device or a full table.
    pub fn insert(&mut self, lba: u64, e: Entry) -> Result<Option<Entry>, String> {
        if lba >= self.max_lba {
            return Err(format!(
                "block {lba} is past the backing device ({} blocks)",
                self.max_lba
            ));
        }
        if e.slot as u64 >= 1u64 << self.slot_bits {
            return Err(format!("slot {} does not fit the map's entries", e.slot));
        }
        if let Some(i) = self.find(lba) {
            let (_, old) = self.decode(self.raw(i));
            self.dirty = self.dirty - old.dirty as usize + e.dirty as usize;
            self.note_dirty(lba, old.dirty, e.dirty);
            self.check_dirty_index();
            let v = self.encode(lba, e);
            self.set_raw(i, v);
            return Ok(Some(old));
        }
        if self.len >= self.limit {
            return Err(format!("the map is full ({} entries)", self.len));
        }
        let mut carry = self.encode(lba, e);
        let mut i = self.home(lba);
        let mut d = 0;
        loop {
            let v = self.raw(i);
            if v == 0 {
                self.set_raw(i, carry);
                break;
            }
            let (l, _) = self.decode(v);
            let ed = self.dist(i, self.home(l));
            if ed < d {
                self.set_raw(i, carry);
                carry = v;
                d = ed;
            }
            i = (i + 1) % self.cap;
            d += 1;
        }
        self.len += 1;
        self.dirty += e.dirty as usize;
        self.note_dirty(lba, false, e.dirty);
        self.check_dirty_index();
        Ok(None)
    }

    /// Unmap `lba`, returning its entry.
    pub fn remove(&mut self, lba: u64) -> Option<Entry> {
        let mut i = self.find(lba)?;
        let (_, old) = self.decode(self.raw(i));
        // Backward-shift deletion: no tombstones, probe lengths stay short.
        loop {
            let j = (i + 1) % self.cap;
            let v = self.raw(j);
            if v == 0 || self.dist(j, self.home(self.decode(v).0)) == 0 {
                self.set_raw(i, 0);
                break;
            }
            self.set_raw(i, v);
            i = j;
        }
        self.len -= 1;
        self.dirty -= old.dirty as usize;
        self.note_dirty(lba, old.dirty, false);
        self.check_dirty_index();
        Some(old)
    }

    /// Every mapped block and its entry, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        (0..self.cap).filter_map(move |i| {
            let v = self.raw(i);
            (v != 0).then(|| self.decode(v))
        })
    }

    /// Keep only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, Entry) -> bool) {
        let drop: Vec<u64> = self
            .iter()
            .filter(|&(l, e)| !keep(l, e))
            .map(|(l, _)| l)
            .collect();
        for l in drop {
            self.remove(l);
        }
    }

    /// Up to `n` dirty blocks at or after `from`, in block order (the
    /// write-back cleaner's scan of the dirty-block table).
    pub fn dirty_from(&self, from: u64, n: usize) -> Vec<u64> {
        if let Some(d) = &self.dirty_index {
            return d.range(from..).take(n).copied().collect();
        }
        let mut heap = std::collections::BinaryHeap::new();
        for (l, e) in self.iter() {
            if e.dirty && l >= from {
                heap.push(l);
                if heap.len() > n {
                    heap.pop();
                }
            }
        }
        heap.into_sorted_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(slot: u32, dirty: bool) -> Entry {
        Entry { slot, dirty }
    }

    #[test]
    fn insert_get_remove_against_a_reference() {
        let mut m = SparseMap::new(1000, 1 << 30, 1000).unwrap();
        let mut r = std::collections::HashMap::new();
        let mut x = 7u64;
        for step in 0..20_000u32 {
            x = mix(x);
            let lba = x % 3000;
            if x.is_multiple_of(3) {
                assert_eq!(m.remove(lba), r.remove(&lba), "step {step}");
            } else if r.len() < 1000 || r.contains_key(&lba) {
                let en = e((x >> 20) as u32 % 1000, x & 16 != 0);
                assert_eq!(m.insert(lba, en).unwrap(), r.insert(lba, en));
            }
            assert_eq!(m.len(), r.len());
        }
        for l in 0..3000 {
            assert_eq!(m.get(l), r.get(&l).copied(), "block {l}");
        }
        assert_eq!(m.dirty(), r.values().filter(|e| e.dirty).count());
        let mut d: Vec<u64> = r
            .iter()
            .filter(|(_, e)| e.dirty)
            .map(|(l, _)| *l)
            .filter(|l| *l >= 100)
            .collect();
        d.sort();
        d.truncate(10);
        assert_eq!(m.dirty_from(100, 10), d);
    }

    #[test]
    fn the_dirty_index_gives_the_scans_answers() {
        // Two maps fed the same operations: one scans its table, the other
        // turns its index on part way (built from the table, then kept).
        let mut scan = SparseMap::new(500, 1 << 20, 500).unwrap();
        let mut idx = scan.clone();
        let mut x = 11u64;
        for step in 0..30_000u32 {
            if step == 3_000 {
                idx.index_dirty();
            }
            x = mix(x);
            let lba = x % 1500;
            if x.is_multiple_of(4) {
                assert_eq!(idx.remove(lba), scan.remove(lba));
            } else if scan.len() < 500 || scan.get(lba).is_some() {
                let en = e((x >> 20) as u32 % 500, x & 32 != 0);
                assert_eq!(idx.insert(lba, en), scan.insert(lba, en));
            }
            if step % 97 == 0 {
                let from = (x >> 33) % 1600;
                let n = 1 + (x >> 40) as usize % 40;
                assert_eq!(
                    idx.dirty_from(from, n),
                    scan.dirty_from(from, n),
                    "step {step}"
                );
            }
        }
        idx.retain(|l, _| l % 3 != 0);
        scan.retain(|l, _| l % 3 != 0);
        assert_eq!(idx.dirty_from(0, 2000), scan.dirty_from(0, 2000));
        assert_eq!(idx.dirty(), scan.dirty());
        assert!(idx.dirty() > 0, "the test must exercise dirty blocks");
        assert_eq!(
            idx.memory_bytes() - scan.memory_bytes(),
            idx.dirty() * DIRTY_INDEX_BYTES
        );
    }

    #[test]
    fn bytes_per_cached_block_within_goal() {
        // 4 GiB of cache slots in front of 1 TiB: a full map.
        let slots = 1u64 << 20;
        let mut m = SparseMap::new(slots, 1 << 28, slots).unwrap();
        for i in 0..slots {
            m.insert(i * 257 % (1 << 28), e(i as u32, i % 4 == 0))
                .unwrap();
        }
        let per = m.memory_bytes() as f64 / m.len() as f64;
        assert!(per <= 8.0, "{per} bytes per cached block");
        assert_eq!(m.entry_bytes(), 7);
    }

    #[test]
    fn rejects_bad_input() {
        let mut m = SparseMap::new(4, 100, 4).unwrap();
        assert!(m.insert(100, e(0, false)).is_err());
        for l in 0..4 {
            m.insert(l, e(l as u32, false)).unwrap();
        }
        assert!(m.insert(50, e(0, false)).is_err(), "table full");
        assert!(SparseMap::new(4, u64::MAX, 1 << 31).is_err());
    }
}
