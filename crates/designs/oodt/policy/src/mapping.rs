//! The tiered volume's mapping table: which tier and slot holds each block.
//!
//! The exported address space is split into fixed blocks. Tiers are ordered
//! fastest first. The last tier is the capacity tier: it reserves a *home*
//! slot for every block at the block's own index, so data living there keeps
//! its logical order on the disk (what the paper's planner aims for, 3.1) and
//! the tier needs no allocator. Faster tiers hold a limited number of slots
//! handed out by a bitmap allocator.
//!
//! A table made by [`MappingTable::new_sum`] has no homes: the capacity tier
//! has a bitmap allocator as well and every block occupies exactly one slot
//! of one tier, so the volume is the sum of the tiers (OODT's own design; the
//! live volume's `--capacity sum`). Each tier keeps at least one slot free at
//! rest: the scratch slots an exchange copies through (see
//! [`crate::migration::Exchange`]).
//!
//! One entry is a `u32`: the tier in the top 2 bits and the slot in the low
//! 30 bits (ignored for the capacity tier when it has homes). That is 4 bytes per block, against
//! the paper's 6 (5.1); at most [`MAX_TIERS`] tiers and `2^30` slots per fast
//! tier (4 TiB of 4 KiB blocks).

use thiserror::Error;

/// Logical block number of the volume.
pub type BlockId = u64;
/// Tier number, 0 = fastest.
pub type TierId = u8;

/// Most tiers a volume may have (2 bits in a mapping entry).
pub const MAX_TIERS: usize = 4;
/// Most slots of one fast tier (30 bits in a mapping entry).
pub const MAX_FAST_SLOTS: u64 = 1 << 30;
const SLOT_MASK: u32 = (1 << 30) - 1;
/// Host bytes of one block's mapping entry.
pub const ENTRY_BYTES: u64 = std::mem::size_of::<u32>() as u64;
/// Bytes of a checkpoint produced or consumed at a time by
/// [`MappingTable::write_checkpoint`] and [`MappingTable::read_checkpoint`].
pub const CHECKPOINT_CHUNK: usize = 1 << 20;

/// Where a block's data lives: a tier and a slot (block-sized unit) on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    pub tier: TierId,
    pub slot: u64,
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tier {} slot {}", self.tier, self.slot)
    }
}

impl Loc {
    /// Byte offset of the slot on its tier's device.
    pub fn byte_offset(&self, block_bytes: u32) -> u64 {
        self.slot * u64::from(block_bytes)
    }
}

/// What is wrong with a tiering request or configuration.
#[derive(Debug, Error, PartialEq)]
pub enum TierError {
    #[error("invalid tiering configuration: {0}")]
    Config(String),
    #[error("request [{offset}, +{len}) is outside the volume of {volume_bytes} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        volume_bytes: u64,
    },
    #[error("empty request at {0} (length must be at least 1 byte)")]
    Empty(u64),
    #[error("tier {0} has no free slot")]
    TierFull(TierId),
    #[error("block {block} is not at {expected} (it is at {actual})")]
    Moved {
        block: BlockId,
        expected: Loc,
        actual: Loc,
    },
    #[error("corrupt checkpoint: {0}")]
    Corrupt(String),
    #[error("migration state machine: {0}")]
    Protocol(String),
}

/// Slot allocator of one fast tier: one bit per slot, next-fit from a cursor
/// so that consecutive allocations tend to get consecutive slots.
#[derive(Clone, Debug)]
struct SlotBitmap {
    words: Vec<u64>,
    slots: u64,
    used: u64,
    cursor: u64,
}

/// Equal when the same slots are in use (the cursor is only a hint).
impl PartialEq for SlotBitmap {
    fn eq(&self, o: &Self) -> bool {
        self.words == o.words && self.slots == o.slots && self.used == o.used
    }
}

impl Eq for SlotBitmap {}

impl SlotBitmap {
    fn new(slots: u64) -> Self {
        SlotBitmap {
            words: vec![0; slots.div_ceil(64) as usize],
            slots,
            used: 0,
            cursor: 0,
        }
    }

    fn is_set(&self, s: u64) -> bool {
        self.words[(s / 64) as usize] >> (s % 64) & 1 == 1
    }

    fn set(&mut self, s: u64) {
        debug_assert!(!self.is_set(s));
        self.words[(s / 64) as usize] |= 1 << (s % 64);
        self.used += 1;
    }

    fn clear(&mut self, s: u64) {
        debug_assert!(self.is_set(s));
        self.words[(s / 64) as usize] &= !(1 << (s % 64));
        self.used -= 1;
    }

    /// Give the allocator `slots` slots: new ones are free; dropped ones
    /// must be (the first slot in use at or past `slots`, if any, is the error).
    fn resize(&mut self, slots: u64) -> Result<(), u64> {
        if let Some(s) = (slots..self.slots).find(|&s| self.is_set(s)) {
            return Err(s);
        }
        self.words.resize(slots.div_ceil(64) as usize, 0);
        // Bits past the last slot are never set (they were free, or never existed).
        if !slots.is_multiple_of(64) {
            if let Some(w) = self.words.last_mut() {
                *w &= (1u64 << (slots % 64)) - 1;
            }
        }
        self.slots = slots;
        self.cursor = if slots == 0 { 0 } else { self.cursor % slots };
        Ok(())
    }

    fn alloc(&mut self) -> Option<u64> {
        if self.used == self.slots {
            return None;
        }
        let n = self.words.len() as u64;
        let start = self.cursor / 64;
        for i in 0..=n {
            let w = (start + i) % n;
            let mut free = !self.words[w as usize];
            if i == 0 {
                // Only slots at or after the cursor in the first word.
                free &= !0u64 << (self.cursor % 64);
            }
            if free != 0 {
                let s = w * 64 + u64::from(free.trailing_zeros());
                // Bits past the last slot are never free slots.
                if s < self.slots {
                    self.set(s);
                    self.cursor = (s + 1) % self.slots;
                    return Some(s);
                }
            }
        }
        None
    }
}

/// The mapping table of a tiered volume (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappingTable {
    block_bytes: u32,
    entries: Vec<u32>,
    /// Allocators of the fast tiers (all but the last), and of the capacity
    /// tier too when it has no homes (`sum`).
    fast: Vec<SlotBitmap>,
    /// Number of tiers, the capacity tier included.
    ntiers: usize,
}

impl MappingTable {
    /// A volume of `blocks` blocks of `block_bytes`, with `fast_slots[i]`
    /// slots on fast tier `i`; every block starts at home on the capacity
    /// tier (tier `fast_slots.len()`).
    pub fn new(block_bytes: u32, blocks: u64, fast_slots: &[u64]) -> Result<Self, TierError> {
        if !(512..=4 << 20).contains(&block_bytes) || block_bytes & 511 != 0 {
            return Err(TierError::Config(format!(
                "block size {block_bytes} B (allowed: a multiple of 512 B from 4 KiB to 4 MiB; 512 B multiples below 4 KiB for tests)"
            )));
        }
        if fast_slots.is_empty() || fast_slots.len() + 1 > MAX_TIERS {
            return Err(TierError::Config(format!(
                "{} fast tiers (allowed: 1 to {})",
                fast_slots.len(),
                MAX_TIERS - 1
            )));
        }
        if let Some(s) = fast_slots.iter().find(|&&s| s > MAX_FAST_SLOTS) {
            return Err(TierError::Config(format!(
                "fast tier of {s} slots (allowed: at most {MAX_FAST_SLOTS})"
            )));
        }
        let blocks = usize::try_from(blocks)
            .map_err(|_| TierError::Config(format!("{blocks} blocks do not fit in memory")))?;
        let last = fast_slots.len() as u32;
        Ok(MappingTable {
            block_bytes,
            entries: vec![last << 30; blocks],
            fast: fast_slots.iter().map(|&s| SlotBitmap::new(s)).collect(),
            ntiers: fast_slots.len() + 1,
        })
    }

    /// A volume whose capacity is the sum of its tiers: `slots[i]` slots on
    /// tier `i` (the last is the capacity tier), no homes. Every tier keeps
    /// one slot free (scratch), so at most `sum(slots) - tiers` blocks fit;
    /// `blocks` start on the capacity tier at their own index (slot `b`,
    /// so a disk formatted this way keeps its contents at the start of the
    /// volume), the rest fill tier 0, 1, ... in order.
    pub fn new_sum(block_bytes: u32, blocks: u64, slots: &[u64]) -> Result<Self, TierError> {
        let Some((&cap, fast)) = slots.split_last() else {
            return Err(TierError::Config("no tiers".into()));
        };
        let mut t = MappingTable::new(block_bytes, blocks, fast)?;
        if cap > MAX_FAST_SLOTS || slots.iter().any(|&s| s < 2) {
            return Err(TierError::Config(format!(
                "tiers of {slots:?} slots (allowed: 2 to {MAX_FAST_SLOTS} each)"
            )));
        }
        let room: u64 = slots.iter().map(|s| s - 1).sum();
        if blocks > room {
            return Err(TierError::Config(format!(
                "{blocks} blocks do not fit in tiers of {slots:?} slots (at most {room}: one scratch slot per tier)"
            )));
        }
        t.fast.push(SlotBitmap::new(cap));
        let mut b = 0u64;
        let mut order: Vec<usize> = vec![slots.len() - 1];
        order.extend(0..slots.len() - 1);
        for tier in order {
            let mut slot = 0;
            while slot + 1 < slots[tier] && b < blocks {
                t.fast[tier].set(slot);
                t.entries[b as usize] = ((tier as u32) << 30) | slot as u32;
                slot += 1;
                b += 1;
            }
            t.fast[tier].cursor = slot % slots[tier];
        }
        Ok(t)
    }

    /// Whether the capacity tier has homes (`false`: the volume is the sum
    /// of the tiers, see [`new_sum`](Self::new_sum)).
    pub fn has_homes(&self) -> bool {
        self.fast.len() < self.ntiers
    }

    /// Blocks `tier` holds when no migration is in flight: all its slots,
    /// or all but its scratch slot in a table without homes.
    pub fn usable_slots(&self, tier: TierId) -> Option<u64> {
        let s = self.slots(tier)?;
        Some(if self.has_homes() { s } else { s - 1 })
    }

    /// Block size in bytes.
    pub fn block_bytes(&self) -> u32 {
        self.block_bytes
    }

    /// Number of blocks of the volume.
    pub fn blocks(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Volume size in bytes.
    pub fn volume_bytes(&self) -> u64 {
        self.blocks() * u64::from(self.block_bytes)
    }

    /// Number of tiers, the capacity tier included.
    pub fn tiers(&self) -> usize {
        self.ntiers
    }

    /// The capacity tier (the last one).
    pub fn capacity_tier(&self) -> TierId {
        (self.ntiers - 1) as TierId
    }

    /// Slots of `tier` (`None` for a capacity tier with homes: one per block).
    pub fn slots(&self, tier: TierId) -> Option<u64> {
        self.fast.get(tier as usize).map(|b| b.slots)
    }

    /// Resize fast tier `tier` of a volume with homes to `slots` slots (a
    /// fast tier grown or shrunk while it serves): new slots are free;
    /// slots dropped must hold no block (move their blocks home first).
    pub fn resize_fast(&mut self, tier: TierId, slots: u64) -> Result<(), TierError> {
        if !self.has_homes() || tier as usize + 1 >= self.ntiers {
            return Err(TierError::Config(format!(
                "tier {tier} is not a fast tier of a volume whose blocks have homes"
            )));
        }
        if slots == 0 || slots > MAX_FAST_SLOTS {
            return Err(TierError::Config(format!(
                "fast tier of {slots} slots (allowed: 1 to {MAX_FAST_SLOTS})"
            )));
        }
        self.fast[tier as usize].resize(slots).map_err(|s| {
            TierError::Config(format!(
                "slot {s} of tier {tier} holds a block (move it before shrinking to {slots} slots)"
            ))
        })
    }

    /// Free slots of `tier` (`u64::MAX` for a capacity tier with homes).
    pub fn free_slots(&self, tier: TierId) -> u64 {
        self.fast
            .get(tier as usize)
            .map_or(u64::MAX, |b| b.slots - b.used)
    }

    /// Slots of `tier` in use (mapped or reserved for a migration); for the
    /// capacity tier, the blocks mapped there.
    pub fn used_slots(&self, tier: TierId) -> u64 {
        match self.fast.get(tier as usize) {
            Some(b) => b.used,
            None => self
                .entries
                .iter()
                .filter(|&&e| e >> 30 == u32::from(tier))
                .count() as u64,
        }
    }

    fn decode(&self, block: BlockId, e: u32) -> Loc {
        let tier = (e >> 30) as TierId;
        if tier == self.capacity_tier() && self.has_homes() {
            Loc { tier, slot: block }
        } else {
            Loc {
                tier,
                slot: u64::from(e & SLOT_MASK),
            }
        }
    }

    /// Current location of `block` (`None` past the end of the volume).
    #[inline]
    pub fn lookup(&self, block: BlockId) -> Option<Loc> {
        let e = *self.entries.get(usize::try_from(block).ok()?)?;
        Some(self.decode(block, e))
    }

    /// Tier of `block`, without decoding the slot.
    #[inline]
    pub fn tier_of(&self, block: BlockId) -> Option<TierId> {
        self.entries
            .get(usize::try_from(block).ok()?)
            .map(|e| (e >> 30) as TierId)
    }

    /// Reserve a free slot on fast `tier` for a migration's destination;
    /// the capacity tier's destination is the block's home if it has homes.
    pub fn reserve(&mut self, tier: TierId, block: BlockId) -> Result<Loc, TierError> {
        if tier == self.capacity_tier() && self.has_homes() {
            return Ok(Loc { tier, slot: block });
        }
        let b = self
            .fast
            .get_mut(tier as usize)
            .ok_or_else(|| TierError::Config(format!("no tier {tier}")))?;
        let slot = b.alloc().ok_or(TierError::TierFull(tier))?;
        Ok(Loc { tier, slot })
    }

    /// Return a slot that no block maps to (a rolled-back reservation, or the
    /// source of a finished migration). Capacity-tier slots need no release.
    pub fn release(&mut self, loc: Loc) {
        if let Some(b) = self.fast.get_mut(loc.tier as usize) {
            if loc.slot < b.slots && b.is_set(loc.slot) {
                b.clear(loc.slot);
            }
        }
    }

    /// Atomically point `block` at `dst`, which must have been reserved;
    /// fails if the block is no longer at `expected`. The old slot stays
    /// allocated until [`release`](Self::release)d.
    pub fn switch(&mut self, block: BlockId, expected: Loc, dst: Loc) -> Result<(), TierError> {
        let actual = self.lookup(block).ok_or(TierError::OutOfRange {
            offset: block * u64::from(self.block_bytes),
            len: u64::from(self.block_bytes),
            volume_bytes: self.volume_bytes(),
        })?;
        if actual != expected {
            return Err(TierError::Moved {
                block,
                expected,
                actual,
            });
        }
        self.set_entry(block, dst)
    }

    fn set_entry(&mut self, block: BlockId, dst: Loc) -> Result<(), TierError> {
        let e = if dst.tier == self.capacity_tier() && self.has_homes() {
            if dst.slot != block {
                return Err(TierError::Corrupt(format!(
                    "block {block} mapped to capacity-tier slot {} (must be its home)",
                    dst.slot
                )));
            }
            u32::from(dst.tier) << 30
        } else {
            match self.fast.get(dst.tier as usize) {
                Some(b) if dst.slot < b.slots => (u32::from(dst.tier) << 30) | dst.slot as u32,
                _ => return Err(TierError::Corrupt(format!("no slot {dst}"))),
            }
        };
        self.entries[block as usize] = e;
        Ok(())
    }

    /// Blocks currently on fast `tier`, in block order (a scan of the table).
    pub fn residents(&self, tier: TierId) -> impl Iterator<Item = BlockId> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(move |(_, &e)| e >> 30 == u32::from(tier))
            .map(|(b, _)| b as BlockId)
    }

    /// Bytes of memory the table uses: entries plus allocator bitmaps.
    pub fn memory_bytes(&self) -> u64 {
        self.entries.len() as u64 * 4
            + self
                .fast
                .iter()
                .map(|b| b.words.len() as u64 * 8)
                .sum::<u64>()
    }

    /// Host bytes of a table of `blocks` blocks whose allocators have
    /// `allocator_slots` slots ([`memory_bytes`](Self::memory_bytes) before
    /// it is made).
    pub fn memory_bytes_for(blocks: u64, allocator_slots: &[u64]) -> u64 {
        blocks * ENTRY_BYTES
            + allocator_slots
                .iter()
                .map(|s| s.div_ceil(64) * 8)
                .sum::<u64>()
    }

    /// Bytes of [`checkpoint`](Self::checkpoint)'s output.
    pub fn checkpoint_len(&self) -> u64 {
        8 + 4 + 1 + 8 * self.fast.len() as u64 + 8 + 4 * self.entries.len() as u64 + 4
    }

    /// Serialize the table (a checkpoint on the capacity tier, 5.3): header,
    /// entries, CRC32C. Take it only when no migration is in flight.
    pub fn checkpoint(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.checkpoint_len() as usize);
        self.write_checkpoint(|b| {
            out.extend_from_slice(b);
            Ok::<(), std::convert::Infallible>(())
        })
        .expect("in memory");
        out
    }

    /// [`checkpoint`](Self::checkpoint)'s bytes handed to `out` in pieces of
    /// at most [`CHECKPOINT_CHUNK`] bytes, in order (no copy of the table).
    pub fn write_checkpoint<E>(
        &self,
        mut out: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut buf = Vec::with_capacity(CHECKPOINT_CHUNK);
        // Version 2: the capacity tier has no homes; its allocator's size
        // follows the fast tiers' (version 1 tables are unchanged).
        buf.extend_from_slice(if self.has_homes() {
            b"OODTMAP1"
        } else {
            b"OODTMAP2"
        });
        buf.extend_from_slice(&self.block_bytes.to_le_bytes());
        buf.push(self.fast.len() as u8);
        for b in &self.fast {
            buf.extend_from_slice(&b.slots.to_le_bytes());
        }
        buf.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        let mut crc = 0u32;
        for e in &self.entries {
            buf.extend_from_slice(&e.to_le_bytes());
            if buf.len() + 4 > CHECKPOINT_CHUNK {
                crc = crc32c::crc32c_append(crc, &buf);
                out(&buf)?;
                buf.clear();
            }
        }
        crc = crc32c::crc32c_append(crc, &buf);
        buf.extend_from_slice(&crc.to_le_bytes());
        out(&buf)
    }

    /// Rebuild a table from a [`checkpoint`](Self::checkpoint); the
    /// allocators are derived from the entries, so no slot leaks.
    pub fn from_checkpoint(bytes: &[u8]) -> Result<Self, TierError> {
        let mut at = 0usize;
        let t = Self::read_checkpoint(bytes.len() as u64, |buf: &mut [u8]| {
            let s = bytes
                .get(at..at + buf.len())
                .ok_or_else(|| TierError::Corrupt("truncated".into()))?;
            buf.copy_from_slice(s);
            at += buf.len();
            Ok(())
        })?;
        if at != bytes.len() {
            return Err(TierError::Corrupt("trailing bytes".into()));
        }
        Ok(t)
    }

    /// Rebuild a table from a checkpoint read in order by `read` (each call
    /// fills its buffer with the next bytes; at most [`CHECKPOINT_CHUNK`] at
    /// a time), so that only the table is held in memory. The CRC32C at its
    /// end is checked incrementally; a damaged checkpoint is an error. `len`
    /// is the checkpoint's length: a block count that disagrees with it is
    /// refused before anything is allocated for it.
    pub fn read_checkpoint(
        len: u64,
        mut read: impl FnMut(&mut [u8]) -> Result<(), TierError>,
    ) -> Result<Self, TierError> {
        let bad = |m: &str| TierError::Corrupt(m.to_string());
        let mut crc = 0u32;
        let mut take = |n: usize, crc: &mut u32| -> Result<Vec<u8>, TierError> {
            let mut b = vec![0u8; n];
            read(&mut b)?;
            *crc = crc32c::crc32c_append(*crc, &b);
            Ok(b)
        };
        let magic = take(8, &mut crc)?;
        let homes = match &magic[..] {
            b"OODTMAP1" => true,
            b"OODTMAP2" => false,
            _ => return Err(bad("not a mapping checkpoint")),
        };
        let block_bytes = u32::from_le_bytes(take(4, &mut crc)?.try_into().expect("4 bytes"));
        let nalloc = take(1, &mut crc)?[0] as usize;
        if nalloc > MAX_TIERS {
            return Err(bad("too many tiers"));
        }
        let mut slots = Vec::new();
        for _ in 0..nalloc {
            slots.push(u64::from_le_bytes(
                take(8, &mut crc)?.try_into().expect("8 bytes"),
            ));
        }
        let blocks = u64::from_le_bytes(take(8, &mut crc)?.try_into().expect("8 bytes"));
        let expect = blocks
            .checked_mul(4)
            .and_then(|b| b.checked_add(8 + 4 + 1 + 8 * nalloc as u64 + 8 + 4));
        if expect != Some(len) {
            return Err(bad("length does not match the block count"));
        }
        let mut t = if homes {
            MappingTable::new(block_bytes, blocks, &slots)?
        } else {
            let (&cap, fast) = slots.split_last().ok_or_else(|| bad("no tiers"))?;
            let mut t = MappingTable::new(block_bytes, blocks, fast)?;
            if cap > MAX_FAST_SLOTS {
                return Err(bad("capacity tier too large"));
            }
            t.fast.push(SlotBitmap::new(cap));
            t
        };
        let nfast = t.capacity_tier() as usize;
        let mut buf = vec![0u8; CHECKPOINT_CHUNK.min(4 * blocks as usize)];
        let mut b = 0u64;
        while b < blocks {
            let n = ((blocks - b) as usize).min(buf.len() / 4);
            let chunk = &mut buf[..4 * n];
            read(chunk)?;
            crc = crc32c::crc32c_append(crc, chunk);
            for e in chunk.chunks_exact(4) {
                let e = u32::from_le_bytes(e.try_into().expect("4 bytes"));
                let loc = t.decode(b, e);
                if (loc.tier as usize) > nfast
                    || t.fast
                        .get(loc.tier as usize)
                        .is_some_and(|m| loc.slot >= m.slots)
                {
                    return Err(bad("tier out of range"));
                }
                t.set_entry(b, loc)?;
                if let Some(bm) = t.fast.get_mut(loc.tier as usize) {
                    if bm.is_set(loc.slot) {
                        return Err(TierError::Corrupt(format!("slot {loc} mapped twice")));
                    }
                    bm.set(loc.slot);
                }
                b += 1;
            }
        }
        let mut end = [0u8; 4];
        read(&mut end)?;
        if crc.to_le_bytes() != end {
            return Err(bad("checksum mismatch"));
        }
        Ok(t)
    }

    /// Rebuild the fast-tier allocators from the entries alone (recovery):
    /// exactly the slots some block maps to are in use.
    pub fn rebuild_allocators(&mut self) -> Result<(), TierError> {
        for b in &mut self.fast {
            *b = SlotBitmap::new(b.slots);
        }
        for (i, &e) in self.entries.iter().enumerate() {
            let loc = self.decode(i as u64, e);
            if let Some(bm) = self.fast.get_mut(loc.tier as usize) {
                if bm.is_set(loc.slot) {
                    return Err(TierError::Corrupt(format!("slot {loc} mapped twice")));
                }
                bm.set(loc.slot);
            }
        }
        Ok(())
    }

    /// Set an entry during recovery (replaying a durable switch).
    pub(crate) fn force(&mut self, block: BlockId, dst: Loc) -> Result<(), TierError> {
        if block >= self.blocks() {
            return Err(TierError::Corrupt(format!("block {block} past the volume")));
        }
        self.set_entry(block, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_tier_grows_with_free_slots_and_shrinks_only_past_its_last_block() {
        let mut t = MappingTable::new(4096, 200, &[3]).unwrap();
        for b in 0..3 {
            let l = t.reserve(0, b).unwrap();
            t.switch(b, Loc { tier: 1, slot: b }, l).unwrap();
        }
        assert_eq!(t.free_slots(0), 0);
        t.resize_fast(0, 130).unwrap();
        assert_eq!((t.slots(0), t.free_slots(0)), (Some(130), 127));
        let mut seen = std::collections::HashSet::new();
        for b in 3..130 {
            let l = t.reserve(0, b).unwrap();
            assert!(l.slot < 130 && seen.insert(l.slot), "{l}");
        }
        assert!(t.reserve(0, 130).is_err(), "no slot past the new end");
        // Slot 129 holds a block: refused, nothing changed.
        assert!(t.resize_fast(0, 129).is_err());
        assert_eq!(t.slots(0), Some(130));
        for s in 3..130 {
            t.release(Loc { tier: 0, slot: s });
        }
        t.resize_fast(0, 3).unwrap();
        assert_eq!((t.slots(0), t.free_slots(0)), (Some(3), 0));
        // The checkpoint carries the new size.
        assert_eq!(
            MappingTable::from_checkpoint(&t.checkpoint())
                .unwrap()
                .slots(0),
            Some(3)
        );
        assert!(t.resize_fast(0, 0).is_err());
        assert!(t.resize_fast(1, 5).is_err(), "the capacity tier has homes");
        let mut sum = MappingTable::new_sum(4096, 6, &[4, 4]).unwrap();
        assert!(sum.resize_fast(0, 8).is_err(), "a sum volume has no homes");
    }

    #[test]
    fn blocks_start_at_home_on_the_capacity_tier() {
        let t = MappingTable::new(4096, 10, &[3]).unwrap();
        assert_eq!(t.lookup(7), Some(Loc { tier: 1, slot: 7 }));
        assert_eq!(t.lookup(10), None);
        assert_eq!(t.free_slots(0), 3);
        assert_eq!(t.memory_bytes(), 10 * 4 + 8);
    }

    #[test]
    fn reserve_switch_release_keep_slots_consistent() {
        let mut t = MappingTable::new(4096, 10, &[2]).unwrap();
        let home = t.lookup(4).unwrap();
        let d = t.reserve(0, 4).unwrap();
        assert_eq!(d, Loc { tier: 0, slot: 0 });
        t.switch(4, home, d).unwrap();
        assert_eq!(t.lookup(4), Some(d));
        // A stale expectation is refused.
        let d2 = t.reserve(0, 5).unwrap();
        assert!(matches!(t.switch(5, d, d2), Err(TierError::Moved { .. })));
        t.release(d2);
        assert_eq!(t.free_slots(0), 1);
        let d3 = t.reserve(0, 6).unwrap();
        assert_eq!(d3.slot, 1);
        assert_eq!(t.reserve(0, 7), Err(TierError::TierFull(0)));
        assert_eq!(t.residents(0).collect::<Vec<_>>(), vec![4]);
    }

    #[test]
    fn checkpoint_round_trips_and_detects_damage() {
        let mut t = MappingTable::new(4096, 100, &[8]).unwrap();
        for b in [3, 50, 99] {
            let d = t.reserve(0, b).unwrap();
            let h = t.lookup(b).unwrap();
            t.switch(b, h, d).unwrap();
        }
        let c = t.checkpoint();
        let back = MappingTable::from_checkpoint(&c).unwrap();
        assert_eq!(back, t);
        let mut bad = c.clone();
        bad[30] ^= 1;
        assert!(MappingTable::from_checkpoint(&bad).is_err());
        assert!(MappingTable::from_checkpoint(&c[..c.len() - 1]).is_err());
    }

    /// A checkpoint of several chunks comes out of `write_checkpoint` in
    /// pieces no larger than a chunk, equal to `checkpoint()`'s bytes, and
    /// reads back through `read_checkpoint`; a flipped byte in any chunk is
    /// damage.
    #[test]
    fn chunked_checkpoint_round_trips_and_detects_damage() {
        let blocks = (3 * CHECKPOINT_CHUNK / 4 + 123) as u64;
        let mut t = MappingTable::new_sum(4096, blocks, &[1000, blocks]).unwrap();
        for b in [0, 5, blocks / 2, blocks - 1] {
            let h = t.lookup(b).unwrap();
            let d = t.reserve(0, b).unwrap();
            t.switch(b, h, d).unwrap();
            t.release(h);
        }
        let mut pieces = Vec::new();
        t.write_checkpoint(|b| {
            pieces.push(b.to_vec());
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(pieces.len() >= 4 && pieces.iter().all(|p| p.len() <= CHECKPOINT_CHUNK));
        let whole = pieces.concat();
        assert_eq!(whole, t.checkpoint());
        assert_eq!(whole.len() as u64, t.checkpoint_len());
        let read = |bytes: &[u8]| {
            let mut at = 0;
            MappingTable::read_checkpoint(bytes.len() as u64, |buf| {
                assert!(buf.len() <= CHECKPOINT_CHUNK);
                buf.copy_from_slice(&bytes[at..at + buf.len()]);
                at += buf.len();
                Ok(())
            })
        };
        assert_eq!(read(&whole).unwrap(), t);
        for at in [
            9,
            40,
            CHECKPOINT_CHUNK + 17,
            whole.len() - 6,
            whole.len() - 1,
        ] {
            let mut bad = whole.clone();
            bad[at] ^= 0x10;
            assert!(read(&bad).is_err(), "damage at {at} not detected");
        }
    }

    #[test]
    fn a_table_without_homes_places_every_block_once_and_round_trips() {
        // 4 fast + 6 slow slots, one scratch each: 8 blocks.
        let mut t = MappingTable::new_sum(4096, 8, &[4, 6]).unwrap();
        assert!(!t.has_homes());
        assert_eq!(t.usable_slots(0), Some(3));
        assert_eq!(t.slots(1), Some(6));
        // Blocks 0..5 on slow slots 0..5, 5..8 on fast slots 0..3.
        assert_eq!(t.lookup(4), Some(Loc { tier: 1, slot: 4 }));
        assert_eq!(t.lookup(5), Some(Loc { tier: 0, slot: 0 }));
        assert_eq!((t.free_slots(0), t.free_slots(1)), (1, 1));
        // A capacity-tier destination is a free slot, not a home.
        let d = t.reserve(1, 6).unwrap();
        assert_eq!(d, Loc { tier: 1, slot: 5 });
        t.switch(6, Loc { tier: 0, slot: 1 }, d).unwrap();
        t.release(Loc { tier: 0, slot: 1 });
        let c = t.checkpoint();
        assert_eq!(&c[..8], b"OODTMAP2");
        assert_eq!(MappingTable::from_checkpoint(&c).unwrap(), t);
        // Too many blocks for the slots (one scratch slot per tier).
        let e = MappingTable::new_sum(4096, 9, &[4, 6]).unwrap_err();
        assert!(e.to_string().contains("scratch"), "{e}");
        assert!(MappingTable::new_sum(4096, 1, &[1, 6]).is_err());
    }

    #[test]
    fn bad_geometry_is_refused_with_the_allowed_range() {
        let e = MappingTable::new(100, 10, &[1]).unwrap_err();
        assert!(e.to_string().contains("allowed"));
        assert!(MappingTable::new(4096, 10, &[]).is_err());
        assert!(MappingTable::new(4096, 10, &[1, 1, 1, 1]).is_err());
    }
}
