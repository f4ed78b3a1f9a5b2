//! The slot table's vocabulary: a slot, the sub-block bitmaps and what one
//! slot holds ([`LineMeta`]).

use crate::codec::{Reader, Writer};

/// Index of a line slot in the data region.
pub type Slot = u32;

/// A bitmap over a line's sub-blocks (up to 256).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SubBlocks(pub [u64; 4]);

impl SubBlocks {
    /// No sub-block set.
    pub const EMPTY: SubBlocks = SubBlocks([0; 4]);

    /// The first `n` sub-blocks set (n <= 256).
    pub fn first(n: u32) -> SubBlocks {
        let n = n.min(256);
        SubBlocks(std::array::from_fn(|w| {
            let lo = w as u32 * 64;
            match n.saturating_sub(lo) {
                0 => 0,
                k if k >= 64 => u64::MAX,
                k => (1u64 << k) - 1,
            }
        }))
    }
    /// Sets sub-block `i` (ignored past 255).
    pub fn set(&mut self, i: u32) {
        if i < 256 {
            self.0[(i / 64) as usize] |= 1 << (i % 64);
        }
    }
    /// Whether sub-block `i` is set.
    pub fn get(&self, i: u32) -> bool {
        i < 256 && self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }
    /// Bits in either.
    pub fn union(self, o: SubBlocks) -> SubBlocks {
        SubBlocks(std::array::from_fn(|i| self.0[i] | o.0[i]))
    }
    /// Bits in both.
    pub fn intersect(self, o: SubBlocks) -> SubBlocks {
        SubBlocks(std::array::from_fn(|i| self.0[i] & o.0[i]))
    }
    /// Bits of `self` not in `o`.
    pub fn minus(self, o: SubBlocks) -> SubBlocks {
        SubBlocks(std::array::from_fn(|i| self.0[i] & !o.0[i]))
    }
    /// Whether every bit of `self` is also in `o`.
    pub fn is_subset(&self, o: &SubBlocks) -> bool {
        self.minus(*o).is_empty()
    }
    /// Whether only the first `n` sub-blocks may be set.
    pub fn within(&self, n: u32) -> bool {
        self.is_subset(&SubBlocks::first(n))
    }
    /// Number of bits set.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    pub(crate) fn encode(&self, w: &mut Writer, nbytes: usize) {
        for i in 0..nbytes {
            w.u8((self.0[i / 8] >> ((i % 8) * 8)) as u8);
        }
    }
    pub(crate) fn decode(r: &mut Reader, nbytes: usize) -> Option<SubBlocks> {
        let bytes = r.take(nbytes)?;
        let mut b = SubBlocks::EMPTY;
        for (i, &v) in bytes.iter().enumerate().take(32) {
            b.0[i / 8] |= (v as u64) << ((i % 8) * 8);
        }
        Some(b)
    }
}

/// What one slot holds: which backing line, which sub-blocks are valid and
/// which of those are dirty (newer than the backing device), and the class
/// the engine assigned (opaque to the store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LineMeta {
    /// Backing line number (byte offset / line size).
    pub line: u64,
    /// Sub-blocks whose cached data is usable.
    pub valid: SubBlocks,
    /// Sub-blocks newer in the cache than on the backing device (a subset of `valid`).
    pub dirty: SubBlocks,
    /// Engine-defined class tag.
    pub class: u8,
}
