//! A FAST-like hybrid translation layer (Lee et al. 2007), as FlashTier's
//! simulator uses: data blocks are block-mapped (logical block `lbn` =
//! `lpn / pages_per_block`, page `off` at page `off` of its data block) and a
//! small pool of log blocks is page-mapped.
//!
//! - A write to an erased page of its data block goes there in place (pages
//!   may be programmed out of order, as in FAST's model); a first write to a
//!   logical block allocates its data block.
//! - An overwrite goes to the log: offset 0 starts the sequential (SW) log
//!   block of that logical block; the next offsets in order append to it;
//!   anything else appends to the random (RW) log blocks.
//! - The SW block is merged when a new one is needed: a *switch merge* when it
//!   is full and sequential (it becomes the data block, the old one is
//!   erased), a *partial merge* when sequential but short (the missing pages
//!   are copied in), else a full merge.
//! - When the log is at its limit, the oldest RW block is reclaimed with a
//!   *full merge* of every logical block it holds pages of: the newest copy
//!   of each page goes to a fresh data block, the old data block is erased.
//!
//! Solid-state cache variants (FlashTier 4.3): with `evict_data`, when erased
//! blocks run out, data blocks holding only clean pages are silently evicted
//! (minimum clean-pages/age); with `evict_log` (SSC-V), reclaiming a log block
//! drops its clean pages and merges only logical blocks with dirty ones, and
//! log blocks are taken from the data area up to the log limit (variable log).

mod merge;
pub mod sparsehash;

use super::{MapMemory, Translation};
use crate::flash::{Cause, Flash};
use crate::gc;
use crate::FlashError;
use rustc_hash::FxHashMap;
use serde::Serialize;
use sparsehash::{BlockMap, DenseMap, SparseHash};
use std::collections::VecDeque;
use tiercache_block::lazy::Paged;

/// Erased blocks kept for merge destinations.
pub const RESERVE: usize = 2;
const NO_LBN: u64 = u64::MAX;

/// Configuration of a hybrid layer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HybridConfig {
    /// Log blocks as a share of all blocks: fixed for ssd and ssc, the
    /// maximum for ssc-v. At least 3 log blocks are used.
    pub log_fraction: f64,
    /// Silently evict clean data blocks when erased blocks run out.
    pub evict_data: bool,
    /// Drop clean pages of reclaimed log blocks instead of merging them.
    pub evict_log: bool,
    /// Logical blocks exported (a plain SSD's dense space); `None` for the
    /// SSC's sparse space keyed by disk block.
    pub exported_blocks: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Free,
    Data,
    Log,
}

#[derive(Clone, Copy, Debug)]
struct Sw {
    blk: u32,
    lbn: u64,
}

/// The hybrid FTL.
pub struct Hybrid {
    flash: Flash,
    cfg: HybridConfig,
    ppb: u64,
    data: BlockMap,
    data_lbn: Paged<u64>,
    role: Paged<Role>,
    log_map: FxHashMap<u64, u32>,
    sw: Option<Sw>,
    rw_active: Option<u32>,
    rw_full: VecDeque<u32>,
    log_limit: usize,
    peak_log: usize,
}

/// Log blocks for `blocks` erase blocks at `fraction` (at least 3).
pub fn log_blocks_for(blocks: u32, fraction: f64) -> usize {
    ((f64::from(blocks) * fraction).ceil() as usize).max(3)
}

/// Logical blocks a plain SSD can export with `fraction` of its blocks as log.
pub fn exported_blocks_for(blocks: u32, fraction: f64) -> u64 {
    (blocks as usize).saturating_sub(log_blocks_for(blocks, fraction) + RESERVE + 1) as u64
}

impl Hybrid {
    /// A hybrid layer over an erased `flash`.
    pub fn new(flash: Flash, cfg: HybridConfig) -> Result<Self, FlashError> {
        if !(0.0..=0.5).contains(&cfg.log_fraction) {
            return Err(FlashError::Config(format!(
                "log fraction {} (allowed: 0 to 0.5)",
                cfg.log_fraction
            )));
        }
        let n = flash.num_blocks();
        let log_limit = log_blocks_for(n, cfg.log_fraction);
        let data = match cfg.exported_blocks {
            Some(e) => {
                let max = exported_blocks_for(n, cfg.log_fraction);
                if e == 0 || e > max {
                    return Err(FlashError::Config(format!(
                        "{e} exported logical blocks (allowed: 1 to {max} for {n} erase blocks)"
                    )));
                }
                BlockMap::Dense(DenseMap::new(e))
            }
            None => BlockMap::Sparse(SparseHash::new()),
        };
        Ok(Hybrid {
            ppb: u64::from(flash.ppb()),
            data,
            data_lbn: Paged::new(n as usize, NO_LBN),
            role: Paged::new(n as usize, Role::Free),
            log_map: FxHashMap::default(),
            sw: None,
            rw_active: None,
            rw_full: VecDeque::new(),
            log_limit,
            peak_log: 0,
            flash,
            cfg,
        })
    }

    /// Most log blocks in use at once.
    pub fn peak_log_blocks(&self) -> usize {
        self.peak_log
    }

    /// Log blocks allowed.
    pub fn log_limit(&self) -> usize {
        self.log_limit
    }

    /// Data blocks mapped.
    pub fn data_blocks(&self) -> usize {
        self.data.len()
    }

    fn log_in_use(&self) -> usize {
        usize::from(self.sw.is_some()) + usize::from(self.rw_active.is_some()) + self.rw_full.len()
    }

    fn split(&self, lpn: u64) -> (u64, u32) {
        (lpn / self.ppb, (lpn % self.ppb) as u32)
    }

    /// Physical page holding `lpn`.
    pub fn locate(&self, lpn: u64) -> Option<u32> {
        if let Some(&p) = self.log_map.get(&lpn) {
            return Some(p);
        }
        let (lbn, off) = self.split(lpn);
        let b = self.data.get(lbn)?;
        let p = self.flash.ppn(b, off);
        (self.flash.owner(p) == lpn).then_some(p)
    }

    fn invalidate_lpn(&mut self, lpn: u64) -> bool {
        if let Some(p) = self.log_map.remove(&lpn) {
            self.flash.invalidate(p);
            return true;
        }
        match self.locate(lpn) {
            Some(p) => {
                self.flash.invalidate(p);
                true
            }
            None => false,
        }
    }

    fn free_block(&mut self, b: u32) {
        self.flash.erase(b);
        self.role[b as usize] = Role::Free;
        self.data_lbn[b as usize] = NO_LBN;
    }

    /// Make more than [`RESERVE`] erased blocks available.
    fn ensure_free(&mut self, exclude: Option<u64>) -> Result<(), FlashError> {
        let mut guard = 0usize;
        while self.flash.free_blocks() <= RESERVE {
            guard += 1;
            if guard > 4 * self.flash.num_blocks() as usize {
                return Err(FlashError::Full("reclaiming frees no erase block".into()));
            }
            if self.cfg.evict_data && self.evict_data_block(exclude) {
                continue;
            }
            if self.log_in_use() > 0 {
                self.reclaim_log()?;
                continue;
            }
            return Err(FlashError::Full(
                "no erased block, no clean data block to evict and no log block to merge".into(),
            ));
        }
        Ok(())
    }

    /// Silently evict the clean data block with the least clean-pages/age.
    fn evict_data_block(&mut self, exclude: Option<u64>) -> bool {
        let role = &self.role;
        let data_lbn = &self.data_lbn;
        let flash = &self.flash;
        let victim = gc::eviction_victim(
            flash,
            (0..flash.num_blocks()).filter(|&b| {
                role[b as usize] == Role::Data
                    && flash.block(b).dirty == 0
                    && Some(data_lbn[b as usize]) != exclude
            }),
        );
        let Some(b) = victim else { return false };
        for off in 0..self.flash.ppb() {
            let p = self.flash.ppn(b, off);
            self.flash.evict(p);
        }
        let lbn = self.data_lbn[b as usize];
        self.data.remove(lbn);
        self.free_block(b);
        true
    }

    /// Take an erased block for the log, reclaiming the oldest log block when
    /// the log is at its limit.
    fn alloc_log(&mut self) -> Result<u32, FlashError> {
        let mut guard = 0usize;
        while self.log_in_use() >= self.log_limit {
            self.reclaim_log()?;
            guard += 1;
            if guard > self.log_limit + 2 {
                return Err(FlashError::Full("log reclaim frees no log block".into()));
            }
        }
        self.ensure_free(None)?;
        let b = self
            .flash
            .alloc()
            .ok_or_else(|| FlashError::Full("no erased block for the log".into()))?;
        self.role[b as usize] = Role::Log;
        self.peak_log = self.peak_log.max(self.log_in_use() + 1);
        Ok(b)
    }

    fn log_write(&mut self, lpn: u64, dirty: bool) -> Result<(), FlashError> {
        let (lbn, off) = self.split(lpn);
        if off == 0 {
            if let Some(sw) = self.sw.take() {
                self.merge_sw(sw)?;
            }
            let b = self.alloc_log()?;
            let p = self.flash.program(b, 0, lpn, dirty, Cause::Host);
            self.log_map.insert(lpn, p);
            self.sw = Some(Sw { blk: b, lbn });
            return Ok(());
        }
        if let Some(sw) = self.sw {
            if sw.lbn == lbn && self.flash.block(sw.blk).written == off {
                let p = self.flash.program(sw.blk, off, lpn, dirty, Cause::Host);
                self.log_map.insert(lpn, p);
                return Ok(());
            }
        }
        let ppb = self.flash.ppb();
        let b = match self.rw_active {
            Some(b) if self.flash.block(b).written < ppb => b,
            _ => {
                if let Some(b) = self.rw_active.take() {
                    self.rw_full.push_back(b);
                }
                let b = self.alloc_log()?;
                self.rw_active = Some(b);
                b
            }
        };
        let p = self
            .flash
            .append(b, lpn, dirty, Cause::Host)
            .expect("active log block has room");
        self.log_map.insert(lpn, p);
        Ok(())
    }
}

impl Translation for Hybrid {
    fn write(&mut self, lpn: u64, dirty: bool) -> Result<(), FlashError> {
        let (lbn, off) = self.split(lpn);
        if let Some(e) = self.cfg.exported_blocks {
            if lbn >= e {
                return Err(FlashError::Config(format!(
                    "logical page {lpn} is beyond the exported capacity of {} pages",
                    e * self.ppb
                )));
            }
        }
        // An offset-0 overwrite starts a new sequential log block: merge the
        // current one first, while its pages are all still current.
        if off == 0 && self.sw.is_some() {
            if let Some(b) = self.data.get(lbn) {
                if !self.flash.page_free(b, 0) {
                    let sw = self.sw.take().expect("checked");
                    self.merge_sw(sw)?;
                }
            }
        }
        self.invalidate_lpn(lpn);
        if self.data.get(lbn).is_none() {
            // A solid-state cache's space is sparse (keyed by disk block):
            // new data goes to the log and data blocks are made only by
            // merges (FlashTier 4.3: "New data is written to the log and then
            // merged into data blocks"; SSC-V: "new data blocks are created
            // via switch merges"), not one erase block per scattered write.
            if self.cfg.evict_data {
                return self.log_write(lpn, dirty);
            }
            self.ensure_free(Some(lbn))?;
        }
        match self.data.get(lbn) {
            Some(b) if self.flash.page_free(b, off) => {
                self.flash.program(b, off, lpn, dirty, Cause::Host);
                Ok(())
            }
            Some(_) => self.log_write(lpn, dirty),
            None => {
                let b = self
                    .flash
                    .alloc()
                    .ok_or_else(|| FlashError::Full("no erased block for data".into()))?;
                self.role[b as usize] = Role::Data;
                self.data_lbn[b as usize] = lbn;
                self.data.insert(lbn, b);
                self.flash.program(b, off, lpn, dirty, Cause::Host);
                Ok(())
            }
        }
    }

    fn read(&mut self, lpn: u64) -> bool {
        let hit = self.locate(lpn).is_some();
        if hit {
            self.flash.stats.host_page_reads += 1;
        }
        hit
    }

    fn contains(&self, lpn: u64) -> bool {
        self.locate(lpn).is_some()
    }

    fn is_dirty(&self, lpn: u64) -> Option<bool> {
        self.locate(lpn).map(|p| self.flash.is_dirty(p))
    }

    fn remove(&mut self, lpn: u64) -> bool {
        self.invalidate_lpn(lpn)
    }

    fn set_clean(&mut self, lpn: u64) -> bool {
        match self.locate(lpn) {
            Some(p) => {
                self.flash.set_dirty(p, false);
                true
            }
            None => false,
        }
    }

    fn flash(&self) -> &Flash {
        &self.flash
    }

    fn flash_mut(&mut self) -> &mut Flash {
        &mut self.flash
    }

    fn mapped(&self) -> u64 {
        (0..self.flash.num_blocks())
            .map(|b| u64::from(self.flash.block(b).valid))
            .sum()
    }

    fn memory(&self) -> MapMemory {
        MapMemory {
            forward_bytes: self.data.memory_bytes(),
            // Page-level translations reserved for the largest log: 8-byte
            // logical key and 4-byte physical page per log page.
            log_map_bytes: self.log_limit as u64 * self.ppb * 12,
            dirty_bitmap_bytes: if self.cfg.evict_data {
                self.data.len() as u64 * 8
            } else {
                0
            },
        }
    }

    fn log_blocks(&self) -> u64 {
        self.log_in_use() as u64
    }
}

#[cfg(test)]
mod tests;
