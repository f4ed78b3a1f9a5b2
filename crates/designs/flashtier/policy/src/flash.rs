//! The physical flash: packages, planes, erase blocks and pages (FlashTier
//! Table IV by default), page states, per-block erase counts and counters.
//!
//! Translation layers own the logical-to-physical maps; this layer only knows
//! which logical page each physical page holds (the reverse map kept in the
//! out-of-band area) and whether it is valid and dirty. Blocks are allocated
//! from any plane (the paper's inter-plane copy), least-worn first, so the
//! maximum wear difference reflects the translation layer, not allocation.

use crate::FlashError;
use serde::Serialize;
use std::collections::BTreeSet;
use tiercache_block::lazy::Paged;

/// Physical page state marker: never programmed since the last erase.
pub const FREE: u64 = u64::MAX;
/// Physical page state marker: programmed, then superseded or evicted.
pub const INVALID: u64 = u64::MAX - 1;

/// Shape of the flash array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Geometry {
    pub packages: u32,
    pub planes_per_package: u32,
    pub blocks_per_plane: u32,
    pub pages_per_block: u32,
    pub page_bytes: u32,
}

impl Default for Geometry {
    /// FlashTier Table IV: 10 planes of 256 erase blocks of 64 4-KiB pages.
    fn default() -> Self {
        Geometry {
            packages: 1,
            planes_per_package: 10,
            blocks_per_plane: 256,
            pages_per_block: 64,
            page_bytes: 4096,
        }
    }
}

impl Geometry {
    /// Table IV geometry with the plane size scaled to hold `bytes` (rounded
    /// up to whole erase blocks per plane), as the paper scales capacity.
    pub fn for_capacity(bytes: u64) -> Result<Self, FlashError> {
        let g = Geometry::default();
        let per_plane_block = u64::from(g.pages_per_block) * u64::from(g.page_bytes);
        let planes = u64::from(g.packages * g.planes_per_package);
        let bpp = bytes.div_ceil(per_plane_block * planes);
        if bpp < 2 {
            return Err(FlashError::Config(format!(
                "flash capacity {bytes} B is too small (allowed: at least {} B, two erase blocks per plane)",
                2 * per_plane_block * planes
            )));
        }
        let bpp = u32::try_from(bpp)
            .map_err(|_| FlashError::Config(format!("flash capacity {bytes} B is too large")))?;
        Ok(Geometry {
            blocks_per_plane: bpp,
            ..g
        })
    }

    /// Check that the shape is usable.
    pub fn validate(&self) -> Result<(), FlashError> {
        if self.packages == 0 || self.planes_per_package == 0 || self.blocks_per_plane == 0 {
            return Err(FlashError::Config(
                "packages, planes and blocks per plane must be at least 1".into(),
            ));
        }
        // Physical page numbers are 32-bit: at most 2^32 pages (16 TiB of
        // 4 KiB pages, less the rounding to whole erase blocks per plane).
        let pages = u64::from(self.packages)
            * u64::from(self.planes_per_package)
            * u64::from(self.blocks_per_plane)
            * u64::from(self.pages_per_block);
        if pages > 1 << 32 {
            return Err(FlashError::Config(format!(
                "flash of {pages} pages is too large (allowed: at most 2^32 pages, just under 16 TiB of {} B pages)",
                self.page_bytes
            )));
        }
        if !(2..=1024).contains(&self.pages_per_block) {
            return Err(FlashError::Config(format!(
                "{} pages per erase block (allowed: 2 to 1024)",
                self.pages_per_block
            )));
        }
        if !self.page_bytes.is_power_of_two() || self.page_bytes < 512 {
            return Err(FlashError::Config(format!(
                "page size {} B (allowed: a power of two from 512 B)",
                self.page_bytes
            )));
        }
        if self.blocks() < 8 {
            return Err(FlashError::Config(format!(
                "{} erase blocks in total (allowed: at least 8)",
                self.blocks()
            )));
        }
        Ok(())
    }

    /// Planes in the device.
    pub fn planes(&self) -> u32 {
        self.packages * self.planes_per_package
    }

    /// Erase blocks in the device.
    pub fn blocks(&self) -> u32 {
        self.planes() * self.blocks_per_plane
    }

    /// Pages in the device.
    pub fn pages(&self) -> u64 {
        u64::from(self.blocks()) * u64::from(self.pages_per_block)
    }

    /// Raw capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.pages() * u64::from(self.page_bytes)
    }
}

/// Operation latencies (Table IV).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Timing {
    pub page_read_us: f64,
    pub page_write_us: f64,
    pub erase_us: f64,
    pub bus_us: f64,
    pub control_us: f64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            page_read_us: 65.0,
            page_write_us: 85.0,
            erase_us: 1000.0,
            bus_us: 2.0,
            control_us: 10.0,
        }
    }
}

/// What a page program is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Data written by the host.
    Host,
    /// A valid page copied by garbage collection or a merge.
    Copy,
}

/// Counters of flash operations.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FlashStats {
    /// Pages programmed with host data.
    pub host_page_writes: u64,
    /// Pages copied by garbage collection and merges.
    pub gc_page_copies: u64,
    /// Pages of mapping log and checkpoints written (SSC persistence).
    pub metadata_page_writes: u64,
    /// Pages read for the host.
    pub host_page_reads: u64,
    /// Erase operations on data/log blocks.
    pub erases: u64,
    /// Erases of the metadata (log and checkpoint) region.
    pub metadata_erases: u64,
    /// Valid clean pages dropped instead of copied (silent eviction).
    pub silent_evictions: u64,
    /// Garbage collections (page-mapped) or log-block reclaims (hybrid).
    pub collections: u64,
    pub switch_merges: u64,
    pub partial_merges: u64,
    pub full_merges: u64,
    /// Time spent copying and erasing for collection, in microseconds
    /// (serialised; an upper bound of the time the host would wait).
    pub gc_time_us: f64,
}

/// Per erase block state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Times erased.
    pub erases: u32,
    /// Valid pages.
    pub valid: u32,
    /// Valid dirty pages.
    pub dirty: u32,
    /// Pages programmed since the last erase (the highest programmed offset + 1).
    pub written: u32,
    /// Logical clock of the last program (for cost-benefit ages).
    pub stamp: u64,
}

/// Erase counts at one moment, of the blocks erased at least once, in block
/// order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EraseSnapshot(Vec<(u32, u32)>);

/// Erase wear over an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wear {
    /// The most erases one block took.
    pub max_block_erases: u64,
    /// Most-erased minus least-erased block.
    pub max_difference: u64,
}

/// The flash array.
#[derive(Clone, Debug)]
pub struct Flash {
    geo: Geometry,
    timing: Timing,
    blocks: Paged<Block>,
    /// Reverse map: logical page held by each physical page, or FREE/INVALID.
    owner: Paged<u64>,
    dirty: Paged<bool>,
    /// Erased blocks that have been used before, as (erases, block): the
    /// least-worn comes first.
    free: BTreeSet<(u32, u32)>,
    /// Blocks `fresh..` were never allocated (0 erases, all erased). Keeping
    /// them as a range rather than set entries makes the pool's memory follow
    /// the blocks a trace uses, not the device's size.
    fresh: u32,
    clock: u64,
    /// Operation counters.
    pub stats: FlashStats,
}

impl Flash {
    /// An erased device.
    pub fn new(geo: Geometry, timing: Timing) -> Result<Self, FlashError> {
        geo.validate()?;
        let n = geo.blocks() as usize;
        let pages = geo.pages() as usize;
        Ok(Flash {
            geo,
            timing,
            blocks: Paged::new(n, Block::default()),
            owner: Paged::new(pages, FREE),
            dirty: Paged::new(pages, false),
            free: BTreeSet::new(),
            fresh: 0,
            clock: 0,
            stats: FlashStats::default(),
        })
    }

    /// The shape.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The latencies.
    pub fn timing(&self) -> &Timing {
        &self.timing
    }

    /// Pages per erase block.
    pub fn ppb(&self) -> u32 {
        self.geo.pages_per_block
    }

    /// Erase blocks.
    pub fn num_blocks(&self) -> u32 {
        self.geo.blocks()
    }

    /// Erased blocks available.
    pub fn free_blocks(&self) -> usize {
        self.free.len() + (self.geo.blocks() - self.fresh) as usize
    }

    /// Logical clock (programs so far).
    pub fn now(&self) -> u64 {
        self.clock
    }

    /// Take the least-worn erased block.
    pub fn alloc(&mut self) -> Option<u32> {
        // Order by (erases, block): a released never-erased block (0, b) has
        // b < fresh and so precedes every fresh block; an erased one follows.
        let reused_first = matches!(self.free.first(), Some(&(0, _)));
        if !reused_first && self.fresh < self.geo.blocks() {
            self.fresh += 1;
            return Some(self.fresh - 1);
        }
        self.free.pop_first().map(|(_, b)| b)
    }

    /// State of erase block `b`.
    pub fn block(&self, b: u32) -> &Block {
        &self.blocks[b as usize]
    }

    /// Physical page number of page `off` of block `b`.
    pub fn ppn(&self, b: u32, off: u32) -> u32 {
        b * self.geo.pages_per_block + off
    }

    /// Block holding physical page `ppn`.
    pub fn block_of(&self, ppn: u32) -> u32 {
        ppn / self.geo.pages_per_block
    }

    /// Reverse-map entry of `ppn`: the logical page, or FREE / INVALID.
    pub fn owner(&self, ppn: u32) -> u64 {
        self.owner[ppn as usize]
    }

    /// Whether `ppn` holds valid data.
    pub fn is_valid(&self, ppn: u32) -> bool {
        self.owner[ppn as usize] < INVALID
    }

    /// Whether `ppn` holds valid dirty data.
    pub fn is_dirty(&self, ppn: u32) -> bool {
        self.is_valid(ppn) && self.dirty[ppn as usize]
    }

    /// Program page `off` of block `b` with logical page `lpn`. The page must
    /// be erased; pages may be programmed out of order (as FAST's in-place
    /// data-block writes assume).
    pub fn program(&mut self, b: u32, off: u32, lpn: u64, dirty: bool, cause: Cause) -> u32 {
        let ppn = self.ppn(b, off);
        debug_assert_eq!(self.owner[ppn as usize], FREE, "program of a used page");
        debug_assert!(lpn < INVALID);
        self.clock += 1;
        self.owner[ppn as usize] = lpn;
        self.dirty[ppn as usize] = dirty;
        let blk = &mut self.blocks[b as usize];
        blk.valid += 1;
        blk.dirty += u32::from(dirty);
        blk.written = blk.written.max(off + 1);
        blk.stamp = self.clock;
        match cause {
            Cause::Host => self.stats.host_page_writes += 1,
            Cause::Copy => {
                self.stats.gc_page_copies += 1;
                self.stats.gc_time_us +=
                    self.timing.page_read_us + self.timing.page_write_us + 2.0 * self.timing.bus_us;
            }
        }
        ppn
    }

    /// Program the next unwritten page of block `b`; `None` when it is full.
    pub fn append(&mut self, b: u32, lpn: u64, dirty: bool, cause: Cause) -> Option<u32> {
        let off = self.blocks[b as usize].written;
        if off >= self.geo.pages_per_block {
            return None;
        }
        Some(self.program(b, off, lpn, dirty, cause))
    }

    /// Whether page `off` of block `b` is erased.
    pub fn page_free(&self, b: u32, off: u32) -> bool {
        self.owner[self.ppn(b, off) as usize] == FREE
    }

    /// Mark `ppn` invalid (superseded, trimmed or evicted).
    pub fn invalidate(&mut self, ppn: u32) {
        let i = ppn as usize;
        if self.owner[i] >= INVALID {
            return;
        }
        self.owner[i] = INVALID;
        let b = self.block_of(ppn) as usize;
        self.blocks[b].valid -= 1;
        if self.dirty[i] {
            self.blocks[b].dirty -= 1;
            self.dirty[i] = false;
        }
    }

    /// Change the dirty state of a valid page.
    pub fn set_dirty(&mut self, ppn: u32, dirty: bool) {
        let i = ppn as usize;
        if self.owner[i] >= INVALID || self.dirty[i] == dirty {
            return;
        }
        self.dirty[i] = dirty;
        let b = self.block_of(ppn) as usize;
        if dirty {
            self.blocks[b].dirty += 1;
        } else {
            self.blocks[b].dirty -= 1;
        }
    }

    /// Copy valid page `from` to page `off` of block `to` (a collection copy),
    /// invalidating the source. Returns the new physical page.
    pub fn copy(&mut self, from: u32, to: u32, off: u32) -> u32 {
        let lpn = self.owner[from as usize];
        let dirty = self.dirty[from as usize];
        self.invalidate(from);
        self.program(to, off, lpn, dirty, Cause::Copy)
    }

    /// Drop a valid clean page during collection (silent eviction).
    pub fn evict(&mut self, ppn: u32) {
        if self.is_valid(ppn) {
            self.invalidate(ppn);
            self.stats.silent_evictions += 1;
        }
    }

    /// Erase block `b` (it must hold no valid page) and return it to the pool.
    pub fn erase(&mut self, b: u32) {
        debug_assert_eq!(self.blocks[b as usize].valid, 0, "erase of live block");
        let ppb = self.geo.pages_per_block;
        let start = (b * ppb) as usize;
        for i in start..start + ppb as usize {
            self.owner[i] = FREE;
            self.dirty[i] = false;
        }
        let blk = &mut self.blocks[b as usize];
        blk.erases += 1;
        blk.valid = 0;
        blk.dirty = 0;
        blk.written = 0;
        self.stats.erases += 1;
        self.stats.gc_time_us += self.timing.erase_us;
        self.free.insert((blk.erases, b));
    }

    /// Return an allocated but never programmed block to the pool (no erase).
    pub fn release(&mut self, b: u32) {
        debug_assert_eq!(self.blocks[b as usize].written, 0);
        self.free.insert((self.blocks[b as usize].erases, b));
    }

    /// Logical pages of all valid physical pages.
    pub fn valid_owners(&self) -> Vec<u64> {
        self.owner
            .touched()
            .map(|i| self.owner[i])
            .filter(|&o| o < INVALID)
            .collect()
    }

    /// Erase counts of the blocks erased at least once, by block (memory
    /// follows the blocks a trace wore, not the device's size).
    pub fn erase_snapshot(&self) -> EraseSnapshot {
        EraseSnapshot(
            self.blocks
                .touched()
                .filter(|&b| self.blocks[b].erases > 0)
                .map(|b| (b as u32, self.blocks[b].erases))
                .collect(),
        )
    }

    /// Wear since `before`: the most erases any block took, and the
    /// difference between the most- and the least-erased block.
    pub fn wear_since(&self, before: &EraseSnapshot) -> Wear {
        let now = self.erase_snapshot();
        let mut max = 0u64;
        let mut min = u64::MAX;
        let mut worn = 0u64;
        for &(b, e) in &now.0 {
            let prev = before
                .0
                .binary_search_by_key(&b, |&(x, _)| x)
                .map_or(0, |i| before.0[i].1);
            let d = u64::from(e - prev);
            max = max.max(d);
            min = min.min(d);
            worn += 1;
        }
        // A block never erased wore 0.
        if worn < u64::from(self.geo.blocks()) {
            min = 0;
        }
        Wear {
            max_block_erases: max,
            max_difference: max - min.min(max),
        }
    }

    /// Count metadata pages written to the dedicated log/checkpoint region
    /// (outside address translation); an erase per erase block's worth.
    pub fn metadata_writes(&mut self, pages: u64) {
        let ppb = u64::from(self.geo.pages_per_block);
        let before = self.stats.metadata_page_writes / ppb;
        self.stats.metadata_page_writes += pages;
        self.stats.metadata_erases += self.stats.metadata_page_writes / ppb - before;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Flash {
        let g = Geometry {
            packages: 1,
            planes_per_package: 2,
            blocks_per_plane: 4,
            pages_per_block: 4,
            page_bytes: 4096,
        };
        Flash::new(g, Timing::default()).unwrap()
    }

    #[test]
    fn table_iv_geometry_and_capacity_scaling() {
        let g = Geometry::default();
        assert_eq!(g.blocks(), 2560);
        assert_eq!(g.capacity_bytes(), 10 * 256 * 64 * 4096);
        // 1 GiB = 4096 blocks of 256 KiB = 410 per plane (rounded up).
        let g = Geometry::for_capacity(1 << 30).unwrap();
        assert_eq!(g.blocks_per_plane, 410);
        assert!(Geometry::for_capacity(4096).is_err());
    }

    #[test]
    fn program_invalidate_erase_counts() {
        let mut f = small();
        let b = f.alloc().unwrap();
        let p0 = f.append(b, 10, true, Cause::Host).unwrap();
        let p1 = f.append(b, 11, false, Cause::Host).unwrap();
        assert_eq!(f.block(b).valid, 2);
        assert_eq!(f.block(b).dirty, 1);
        f.set_dirty(p0, false);
        assert_eq!(f.block(b).dirty, 0);
        let c = f.alloc().unwrap();
        let q = f.copy(p1, c, 0);
        assert_eq!(f.owner(q), 11);
        assert_eq!(f.owner(p1), INVALID);
        f.evict(p0);
        assert_eq!(f.stats.silent_evictions, 1);
        f.erase(b);
        assert_eq!(f.block(b).erases, 1);
        assert_eq!(f.stats.erases, 1);
        assert_eq!(f.stats.gc_page_copies, 1);
        assert_eq!(f.stats.host_page_writes, 2);
        // The least-worn block is handed out first: b (1 erase) comes last.
        let mut order = Vec::new();
        while let Some(x) = f.alloc() {
            order.push(x);
        }
        assert_eq!(*order.last().unwrap(), b);
    }

    /// The lazy pool hands out blocks in the order of a set holding every
    /// block as (erases, block), and the sparse wear equals the wear over
    /// every block's count; checked against that brute-force model under a
    /// pseudo-random mix of allocations, erases and releases.
    #[test]
    fn lazy_pool_and_sparse_wear_match_the_full_model() {
        let mut f = small();
        let n = f.num_blocks();
        let mut model: BTreeSet<(u32, u32)> = (0..n).map(|b| (0, b)).collect();
        let mut counts = vec![0u32; n as usize];
        let mut held: Vec<u32> = Vec::new();
        let mut seed = 0x9e37_79b9_u64;
        let mut snap = f.erase_snapshot();
        let mut before = counts.clone();
        for step in 0..2000 {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (seed >> 33) % 3;
            if r == 0 || held.is_empty() {
                let got = f.alloc();
                let want = model.pop_first().map(|(_, b)| b);
                assert_eq!(got, want, "allocation order at step {step}");
                held.extend(got);
            } else {
                let b = held.swap_remove((seed >> 40) as usize % held.len());
                if r == 1 {
                    f.append(b, u64::from(b), false, Cause::Host).unwrap();
                    f.invalidate(f.ppn(b, 0));
                    f.erase(b);
                    counts[b as usize] += 1;
                } else {
                    f.release(b);
                }
                model.insert((counts[b as usize], b));
            }
            assert_eq!(f.free_blocks(), model.len());
            if step == 700 {
                snap = f.erase_snapshot();
                before = counts.clone();
            }
        }
        let wear: Vec<u64> = counts
            .iter()
            .zip(&before)
            .map(|(a, b)| u64::from(a - b))
            .collect();
        let w = f.wear_since(&snap);
        assert_eq!(w.max_block_erases, *wear.iter().max().unwrap());
        assert_eq!(
            w.max_difference,
            wear.iter().max().unwrap() - wear.iter().min().unwrap()
        );
        assert!(w.max_block_erases > 0);
    }

    /// A 15 TiB device costs memory only for the blocks it used.
    #[test]
    fn a_huge_device_allocates_by_use() {
        let g = Geometry::for_capacity(15 << 40).unwrap();
        let mut f = Flash::new(g, Timing::default()).unwrap();
        let b = f.alloc().unwrap();
        f.append(b, 1, true, Cause::Host).unwrap();
        assert_eq!(f.free_blocks() as u32, g.blocks() - 1);
        let w = f.wear_since(&EraseSnapshot::default());
        assert_eq!(w, Wear::default());
        let bytes =
            f.blocks.allocated_bytes() + f.owner.allocated_bytes() + f.dirty.allocated_bytes();
        assert!(bytes < 64 << 20, "{bytes} B allocated for one written page");
    }
}
