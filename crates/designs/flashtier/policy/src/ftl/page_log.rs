//! Page-mapped translation with FlashTier's log/data split (Section 4.3), the
//! `page-log` layer of the `ssc` and `ssc-v` devices.
//!
//! Every logical page maps to any physical page, as in [`super::page`], but
//! the blocks are split the way the paper's simulated SSC splits its flash:
//!
//! - **Log blocks** take every host write ("New data is written to the log
//!   and then merged into data blocks with garbage collection", 4.3). The log
//!   holds at most a fixed number of blocks: "we fix log blocks at 7% of
//!   capacity for SSC and allow the fraction to range from 0 to 20% for
//!   SSC-V" (5.1). When a new log block is needed and the log is at its
//!   limit, the oldest log block is reclaimed by *normal garbage
//!   collection*: its still-valid pages are copied into the data region and
//!   it is erased (the SSC "only creates erased *data blocks* and not log
//!   blocks, which still must use normal garbage collection", 4.3). A page
//!   rewritten while in the log is only invalidated there and never copied,
//!   so the stale copies left by write hits are compacted away in the log. A
//!   log block whose pages are all still valid has nothing to compact and
//!   becomes a data block as it is, FAST's *switch merge* ("convert a
//!   sequentially written log block into a data block without copying
//!   data", 4.3): sequential writes (iozone) are not copied twice.
//! - **Data blocks** receive those copies and are the only blocks silently
//!   evicted ("Both policies only apply silent eviction to data blocks", 4.3):
//!   when erased blocks fall to the reserve, the data block with the minimum
//!   (clean valid pages) / age ([`gc::eviction_victim`]) is reclaimed; its
//!   clean pages are dropped and its dirty ones copied ("If a page within the
//!   victim block is dirty, it uses regular garbage collection to copy the
//!   page, and otherwise discards the page contents", 6.2). Only when no data
//!   block can give space does it fall back to collecting a log block ("If
//!   there are not enough candidate blocks to provide free space, it reverts
//!   to regular garbage collection", 4.3).
//!
//! SSC and SSC-V differ only in the log limit: SSC-V "allows the erased blocks
//! to be used for either data or logging", so its log takes erased blocks made
//! by silent eviction until it reaches its maximum share, as the hybrid
//! layer's SSC-V does. Log blocks are collected oldest first, as FAST and the
//! hybrid layer recycle theirs (measured on the scattered workloads, greedy,
//! the prototype's "minimum utilization" rule of 6.2, misses 0.1 point more).
//! Log pages are copied on both devices: "Both policies only apply silent
//! eviction to data blocks" (4.3). The hybrid SSC-V's dropping of clean log
//! pages ("with merge operations for SSC-V when recycling log blocks", 5.1)
//! has no counterpart here: there is no merge with a data block, and dropping
//! the log's clean pages would make this layer the prototype's `page` again.
//!
//! Why a separate layer and not the behaviour of `page`: `page` models the
//! OpenSSD prototype (SSC-P: "We use a page-map FTL for OpenSSD because it is
//! simpler to implement in firmware than the simulated hybrid FTL for SSC",
//! 6), whose silent eviction discards every clean page of any victim and
//! keeps no log ("If a page within the victim block is dirty, it uses regular
//! garbage collection to copy the page, and otherwise discards the page
//! contents", 6.2); changing it would lose the prototype's figures. Section 4.3's split is the design of the
//! simulated SSC ("We implemented our own FTL that is similar to the FAST
//! FTL", 5.1); `page-log` puts that design on a page-mapped layer so that
//! data blocks are not tied to disk extents (docs/reproduction.md, "Scattered
//! writes").

use super::page::{page_read, page_remove, page_set_clean};
use super::{MapMemory, Translation};
use crate::flash::{Cause, Flash};
use crate::gc;
use crate::FlashError;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use tiercache_block::lazy::Paged;

/// Erased blocks kept for collection copies (as the hybrid layer's reserve).
pub const RESERVE: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Free,
    Log,
    Data,
}

/// A page-mapped FTL with a log region that is garbage-collected and a data
/// region that is silently evicted (FlashTier 4.3).
pub struct PageLogFtl {
    flash: Flash,
    map: FxHashMap<u64, u32>,
    role: Paged<Role>,
    /// The log block taking host writes.
    log_active: Option<u32>,
    /// Full log blocks, oldest first.
    log_sealed: VecDeque<u32>,
    /// The data block taking copies out of the log (and dirty pages moved
    /// by eviction).
    data_active: Option<u32>,
    log_limit: usize,
    peak_log: usize,
    log_reclaims: u64,
    data_evictions: u64,
}

impl PageLogFtl {
    /// A layer over an erased `flash` with at most `log_limit` log blocks (at
    /// least 1).
    pub fn new(flash: Flash, log_limit: usize) -> Result<Self, FlashError> {
        let n = flash.num_blocks() as usize;
        let log_limit = log_limit.max(1);
        // Log blocks, the data block taking copies, the reserve and one data
        // block to evict.
        if log_limit + RESERVE + 2 > n {
            return Err(FlashError::Config(format!(
                "{log_limit} log blocks leave no data region in {n} erase blocks"
            )));
        }
        Ok(PageLogFtl {
            flash,
            map: FxHashMap::default(),
            role: Paged::new(n, Role::Free),
            log_active: None,
            log_sealed: VecDeque::new(),
            data_active: None,
            log_limit,
            peak_log: 0,
            log_reclaims: 0,
            data_evictions: 0,
        })
    }

    /// Physical page of `lpn`.
    pub fn lookup(&self, lpn: u64) -> Option<u32> {
        self.map.get(&lpn).copied()
    }

    /// Whether erase block `b` is a log block (active or full).
    pub fn is_log_block(&self, b: u32) -> bool {
        self.role[b as usize] == Role::Log
    }

    /// Whether erase block `b` is a data block.
    pub fn is_data_block(&self, b: u32) -> bool {
        self.role[b as usize] == Role::Data
    }

    /// Log blocks allowed.
    pub fn log_limit(&self) -> usize {
        self.log_limit
    }

    /// Most log blocks in use at once.
    pub fn peak_log_blocks(&self) -> usize {
        self.peak_log
    }

    /// Log blocks reclaimed by garbage collection and data blocks reclaimed
    /// by silent eviction so far.
    pub fn reclaims(&self) -> (u64, u64) {
        (self.log_reclaims, self.data_evictions)
    }

    fn log_in_use(&self) -> usize {
        self.log_sealed.len() + usize::from(self.log_active.is_some())
    }

    /// The data block taking copies, opening a new one when it is full.
    fn data_dst(&mut self) -> Result<u32, FlashError> {
        let ppb = self.flash.ppb();
        if let Some(b) = self.data_active {
            if self.flash.block(b).written < ppb {
                return Ok(b);
            }
        }
        let b = self
            .flash
            .alloc()
            .ok_or_else(|| FlashError::Full("no erased block for collection copies".into()))?;
        self.role[b as usize] = Role::Data;
        self.data_active = Some(b);
        Ok(b)
    }

    /// Copy valid page `ppn` into the data region.
    fn move_to_data(&mut self, ppn: u32) -> Result<(), FlashError> {
        let lpn = self.flash.owner(ppn);
        let dst = self.data_dst()?;
        let off = self.flash.block(dst).written;
        let new = self.flash.copy(ppn, dst, off);
        self.map.insert(lpn, new);
        Ok(())
    }

    fn erase(&mut self, b: u32) {
        self.flash.erase(b);
        self.role[b as usize] = Role::Free;
    }

    /// Reclaim the oldest full log block. When every page is still valid it
    /// becomes a data block as it is (a switch merge: "convert a
    /// sequentially written log block into a data block without copying
    /// data", 4.3; a page-mapped data block has no order to respect).
    /// Otherwise normal garbage collection: its valid pages (clean or dirty)
    /// are copied into the data region, then it is erased.
    fn reclaim_log(&mut self) -> Result<(), FlashError> {
        let victim = self
            .log_sealed
            .pop_front()
            .ok_or_else(|| FlashError::Full("no full log block to collect".into()))?;
        self.log_reclaims += 1;
        if self.flash.block(victim).valid == self.flash.ppb() {
            self.flash.stats.switch_merges += 1;
            self.role[victim as usize] = Role::Data;
            return Ok(());
        }
        self.flash.stats.collections += 1;
        for off in 0..self.flash.ppb() {
            let ppn = self.flash.ppn(victim, off);
            if self.flash.is_valid(ppn) {
                self.move_to_data(ppn)?;
            }
        }
        self.erase(victim);
        Ok(())
    }

    /// Silent eviction of one data block (minimum clean-pages/age): clean
    /// pages are dropped, dirty ones copied. False when no data block would
    /// give space (none, or every candidate wholly dirty).
    fn evict_data_block(&mut self) -> Result<bool, FlashError> {
        let ppb = self.flash.ppb();
        let (role, flash, active) = (&self.role, &self.flash, self.data_active);
        let victim = gc::eviction_victim(
            flash,
            (0..flash.num_blocks()).filter(|&b| {
                role[b as usize] == Role::Data && Some(b) != active && flash.block(b).dirty < ppb
            }),
        );
        let Some(victim) = victim else {
            return Ok(false);
        };
        self.flash.stats.collections += 1;
        self.data_evictions += 1;
        for off in 0..ppb {
            let ppn = self.flash.ppn(victim, off);
            if !self.flash.is_valid(ppn) {
                continue;
            }
            if gc::reclaim(self.flash.is_dirty(ppn), true) == gc::Reclaim::Evict {
                let lpn = self.flash.owner(ppn);
                self.flash.evict(ppn);
                self.map.remove(&lpn);
            } else {
                self.move_to_data(ppn)?;
            }
        }
        self.erase(victim);
        Ok(true)
    }

    /// Make more than [`RESERVE`] erased blocks available: evict data
    /// blocks, else collect log blocks.
    fn ensure_free(&mut self) -> Result<(), FlashError> {
        let mut guard = 0usize;
        while self.flash.free_blocks() <= RESERVE {
            guard += 1;
            if guard > 4 * self.flash.num_blocks() as usize {
                return Err(FlashError::Full("reclaiming frees no erase block".into()));
            }
            if self.evict_data_block()? {
                continue;
            }
            if !self.log_sealed.is_empty() {
                self.reclaim_log()?;
                continue;
            }
            return Err(FlashError::Full(
                "no erased block, no data block to evict and no log block to collect".into(),
            ));
        }
        Ok(())
    }

    /// An erased block for the log, collecting log blocks while the log is
    /// at its limit.
    fn alloc_log(&mut self) -> Result<u32, FlashError> {
        while self.log_in_use() >= self.log_limit {
            self.reclaim_log()?;
        }
        self.ensure_free()?;
        let b = self
            .flash
            .alloc()
            .ok_or_else(|| FlashError::Full("no erased block for the log".into()))?;
        self.role[b as usize] = Role::Log;
        self.peak_log = self.peak_log.max(self.log_in_use() + 1);
        Ok(b)
    }
}

impl Translation for PageLogFtl {
    fn write(&mut self, lpn: u64, dirty: bool) -> Result<(), FlashError> {
        if let Some(old) = self.map.remove(&lpn) {
            self.flash.invalidate(old);
        }
        let ppb = self.flash.ppb();
        let b = match self.log_active {
            Some(b) if self.flash.block(b).written < ppb => b,
            _ => {
                if let Some(b) = self.log_active.take() {
                    self.log_sealed.push_back(b);
                }
                let b = self.alloc_log()?;
                self.log_active = Some(b);
                b
            }
        };
        let ppn = self
            .flash
            .append(b, lpn, dirty, Cause::Host)
            .expect("active log block has room");
        self.map.insert(lpn, ppn);
        Ok(())
    }

    fn read(&mut self, lpn: u64) -> bool {
        page_read(&self.map, &mut self.flash, lpn)
    }

    fn contains(&self, lpn: u64) -> bool {
        self.map.contains_key(&lpn)
    }

    fn is_dirty(&self, lpn: u64) -> Option<bool> {
        self.map.get(&lpn).map(|&p| self.flash.is_dirty(p))
    }

    fn remove(&mut self, lpn: u64) -> bool {
        page_remove(&mut self.map, &mut self.flash, lpn)
    }

    fn set_clean(&mut self, lpn: u64) -> bool {
        page_set_clean(&self.map, &mut self.flash, lpn)
    }

    fn flash(&self) -> &Flash {
        &self.flash
    }

    fn flash_mut(&mut self) -> &mut Flash {
        &mut self.flash
    }

    fn mapped(&self) -> u64 {
        self.map.len() as u64
    }

    fn memory(&self) -> MapMemory {
        // A page-level map over the whole device, as the page-mapped layer.
        MapMemory {
            forward_bytes: self.flash.geometry().pages() * 4,
            ..MapMemory::default()
        }
    }

    fn log_blocks(&self) -> u64 {
        self.log_in_use() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flash::{Geometry, Timing};

    fn tiny(blocks: u32, ppb: u32) -> Flash {
        Flash::new(
            Geometry {
                packages: 1,
                planes_per_package: 1,
                blocks_per_plane: blocks,
                pages_per_block: ppb,
                page_bytes: 4096,
            },
            Timing::default(),
        )
        .unwrap()
    }

    #[test]
    fn log_is_collected_with_copies_and_data_is_evicted_silently() {
        // 8 blocks of 4 pages, at most 2 log blocks, 2 erased blocks kept.
        // Erased blocks are handed out least-worn, then lowest, first; the
        // clock counts programs.
        let mut f = PageLogFtl::new(tiny(8, 4), 2).unwrap();
        // Log block 0: lpns 0, 1, 2, 3 (3 dirty); log block 1: 4, 0, 5, 6
        // (lpn 0 rewritten while in the log).
        for l in 0..4 {
            f.write(l, l == 3).unwrap();
        }
        for l in [4, 0, 5, 6] {
            f.write(l, false).unwrap();
        }
        assert_eq!(f.flash().stats.erases, 0);
        assert!(f.is_log_block(0) && f.is_log_block(1));
        // lpn 7 needs a third log block: the log is at its limit, so the
        // oldest, block 0, is collected. Its valid lpns 1, 2, 3 are copied
        // into data block 2; the stale copy of lpn 0 is not.
        f.write(7, false).unwrap();
        let s = &f.flash().stats;
        assert_eq!((s.gc_page_copies, s.erases, s.silent_evictions), (3, 1, 0));
        assert_eq!(f.lookup(0), Some(4 + 1), "lpn 0 stays in log block 1");
        assert_eq!(f.lookup(1), Some(2 * 4));
        assert_eq!(f.lookup(3), Some(2 * 4 + 2));
        assert!(f.is_data_block(2) && f.is_log_block(3));
        assert_eq!(f.flash().block(0).erases, 1);
        // Fill log block 3 (7, 8, 9, 10); lpn 11 reclaims log block 1, whose
        // 4 pages are all valid: a switch merge makes it a data block as it
        // is (no copy, no erase). lpn 11 opens log block 4.
        for l in 8..12 {
            f.write(l, false).unwrap();
        }
        let s = &f.flash().stats;
        assert_eq!((s.gc_page_copies, s.erases, s.switch_merges), (3, 1, 1));
        assert!(f.is_data_block(1));
        assert_eq!(f.lookup(0), Some(4 + 1));
        assert_eq!(f.lookup(11), Some(4 * 4));
        assert_eq!(f.flash().free_blocks(), 4);
        // Log block 4 takes 2 (its copy in data block 2 goes stale), 8, 12;
        // lpn 13 collects log block 3 (7 to data block 2, 9, 10 to block 5).
        // Block 6 takes 13, 14, 11, 15; lpn 16 collects block 4 (2, 8 to
        // block 5, 12 to block 7). Block 0 takes 16, 17, 13, 18; lpn 19
        // collects block 6 (14, 11, 15 to block 7). Block 3 takes 19-22; lpn
        // 23 switches block 0 into a data block (all 4 valid), which leaves
        // only the 2 reserved blocks erased: data blocks are evicted silently,
        // least clean-pages/age first. At clock 40, block 2 (clean lpns 1, 7,
        // dirty 3, stale 2, last written at 20) costs 2 / 21; block 1 (8)
        // 4 / 33, block 5 (28) 4 / 13, block 0 (33) 4 / 8. Block 2's clean
        // pages are dropped and its dirty lpn 3 copied, opening data block 4:
        // still only 2 erased, so at clock 41 block 1 (4 / 34) goes too.
        for l in [2, 8, 12, 13, 14, 11, 15, 16, 17, 13, 18]
            .into_iter()
            .chain(19..24)
        {
            f.write(l, false).unwrap();
        }
        assert_eq!(f.flash().now(), 42);
        let s = &f.flash().stats;
        assert_eq!(s.switch_merges, 2);
        assert_eq!(s.silent_evictions, 6);
        assert_eq!(s.gc_page_copies, 13);
        assert_eq!(s.erases, 6);
        assert_eq!(f.reclaims(), (6, 2));
        for l in [1, 7, 4, 0, 5, 6] {
            assert!(!f.contains(l), "lpn {l} evicted");
        }
        assert_eq!(f.lookup(3), Some(4 * 4));
        assert_eq!(f.is_dirty(3), Some(true));
        assert_eq!(f.lookup(2), Some(5 * 4 + 2));
        assert!(f.is_data_block(0) && f.is_data_block(4));
        // The erased block 1 was taken again, for the log (lpn 23).
        assert_eq!(f.flash().block(1).erases, 1);
        assert_eq!(f.lookup(23), Some(4));
        assert!(f.is_log_block(1));
        // Only data blocks lost pages: 24 lpns written, 6 evicted.
        assert_eq!(f.mapped(), 18);
        assert_eq!(f.peak_log_blocks(), 2);
    }

    #[test]
    fn too_large_a_log_is_refused() {
        assert!(PageLogFtl::new(tiny(8, 4), 5).is_err());
        assert!(PageLogFtl::new(tiny(8, 4), 4).is_ok());
    }
}
