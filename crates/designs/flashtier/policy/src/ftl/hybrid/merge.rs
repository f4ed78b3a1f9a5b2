//! Log-block merges: switch merges of sequential log blocks, full merges,
//! reclaiming a log block and sweeping empty ones.

use super::Hybrid;
use super::{Role, Sw, RESERVE};
use crate::gc;
use crate::FlashError;

impl Hybrid {
    /// Merge the sequential log block: switch, partial or full merge.
    pub(super) fn merge_sw(&mut self, sw: Sw) -> Result<(), FlashError> {
        let b = sw.blk;
        let w = self.flash.block(b).written;
        let sequential = self.flash.block(b).valid == w;
        let old = self.data.get(sw.lbn);
        let base = sw.lbn * self.ppb;
        if sequential {
            if w < self.flash.ppb() {
                for off in w..self.flash.ppb() {
                    let lpn = base + u64::from(off);
                    let src = self.log_map.remove(&lpn).or_else(|| {
                        old.map(|o| self.flash.ppn(o, off))
                            .filter(|&p| self.flash.owner(p) == lpn)
                    });
                    if let Some(p) = src {
                        self.flash.copy(p, b, off);
                    }
                }
                self.flash.stats.partial_merges += 1;
            } else {
                self.flash.stats.switch_merges += 1;
            }
            for off in 0..w {
                self.log_map.remove(&(base + u64::from(off)));
            }
            if let Some(o) = old {
                debug_assert_eq!(self.flash.block(o).valid, 0);
                self.free_block(o);
            }
            self.role[b as usize] = Role::Data;
            self.data_lbn[b as usize] = sw.lbn;
            self.data.insert(sw.lbn, b);
        } else {
            self.full_merge(sw.lbn)?;
            debug_assert_eq!(self.flash.block(b).valid, 0);
            self.free_block(b);
        }
        self.sweep_empty_logs();
        Ok(())
    }

    /// Merge the newest copy of every page of `lbn` into a fresh data block.
    pub(super) fn full_merge(&mut self, lbn: u64) -> Result<(), FlashError> {
        self.flash.stats.full_merges += 1;
        let old = self.data.get(lbn);
        if old.is_none() && self.flash.free_blocks() <= RESERVE && self.cfg.evict_data {
            self.evict_data_block(Some(lbn));
        }
        let dest = self
            .flash
            .alloc()
            .ok_or_else(|| FlashError::Full("no erased block for a merge".into()))?;
        let base = lbn * self.ppb;
        let mut copied = 0;
        for off in 0..self.flash.ppb() {
            let lpn = base + u64::from(off);
            let src = self.log_map.remove(&lpn).or_else(|| {
                old.map(|o| self.flash.ppn(o, off))
                    .filter(|&p| self.flash.owner(p) == lpn)
            });
            if let Some(p) = src {
                self.flash.copy(p, dest, off);
                copied += 1;
            }
        }
        if let Some(o) = old {
            debug_assert_eq!(self.flash.block(o).valid, 0);
            self.data.remove(lbn);
            self.free_block(o);
        }
        if copied == 0 {
            // Never programmed: back to the pool without an erase.
            self.flash.release(dest);
        } else {
            self.role[dest as usize] = Role::Data;
            self.data_lbn[dest as usize] = lbn;
            self.data.insert(lbn, dest);
        }
        Ok(())
    }

    /// Reclaim the oldest log block.
    pub(super) fn reclaim_log(&mut self) -> Result<(), FlashError> {
        self.flash.stats.collections += 1;
        let victim = if let Some(b) = self.rw_full.pop_front() {
            b
        } else if let Some(sw) = self.sw.take() {
            return self.merge_sw(sw);
        } else if let Some(b) = self.rw_active.take() {
            b
        } else {
            return Err(FlashError::Full("no log block to reclaim".into()));
        };
        let mut lbns: Vec<u64> = Vec::new();
        for off in 0..self.flash.block(victim).written {
            let p = self.flash.ppn(victim, off);
            if self.flash.is_valid(p) {
                let lbn = self.flash.owner(p) / self.ppb;
                if !lbns.contains(&lbn) {
                    lbns.push(lbn);
                }
            }
        }
        for lbn in lbns {
            if self.cfg.evict_log {
                let mut dirty_left = false;
                for off in 0..self.flash.block(victim).written {
                    let p = self.flash.ppn(victim, off);
                    if self.flash.is_valid(p) && self.flash.owner(p) / self.ppb == lbn {
                        if gc::reclaim(self.flash.is_dirty(p), true) == gc::Reclaim::Move {
                            dirty_left = true;
                        } else {
                            self.log_map.remove(&self.flash.owner(p));
                            self.flash.evict(p);
                        }
                    }
                }
                if dirty_left {
                    self.full_merge(lbn)?;
                }
            } else {
                self.full_merge(lbn)?;
            }
        }
        debug_assert_eq!(self.flash.block(victim).valid, 0);
        self.free_block(victim);
        self.sweep_empty_logs();
        Ok(())
    }

    /// Erase log blocks whose pages were all superseded.
    pub(super) fn sweep_empty_logs(&mut self) {
        let ppb = self.flash.ppb();
        let empty: Vec<u32> = self
            .rw_full
            .iter()
            .copied()
            .filter(|&b| self.flash.block(b).valid == 0)
            .collect();
        if !empty.is_empty() {
            self.rw_full.retain(|b| !empty.contains(b));
            for b in empty {
                self.free_block(b);
            }
        }
        if let Some(sw) = self.sw {
            let blk = self.flash.block(sw.blk);
            if blk.valid == 0 && blk.written > 0 {
                self.sw = None;
                self.free_block(sw.blk);
            }
        }
        if let Some(b) = self.rw_active {
            let blk = self.flash.block(b);
            if blk.valid == 0 && blk.written == ppb {
                self.rw_active = None;
                self.free_block(b);
            }
        }
    }
}
