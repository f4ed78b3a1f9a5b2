//! uCache-like DRAM + mirrored WO-SSD cache (see [`crate::baselines`]).
//!
//! Reads: DRAM, then the SSD pair (one mirror, round robin; the page is
//! promoted to DRAM), then the HDD (the page enters DRAM only). A page
//! evicted from DRAM is written to the SSD pair only if it was re-referenced
//! while in DRAM (its utility justifies the SSD write). Writes go to both
//! SSDs (dirty) and update DRAM's clean copy.

use super::{DramLru, Mirror};
use crate::{Architecture, Dev, LevelStats, Op, OpKind, Page};

/// uCache-like baseline.
#[derive(Debug)]
pub struct UCache {
    dram: DramLru,
    ssd: Mirror,
    stats: LevelStats,
}

impl UCache {
    /// `dram_pages` of DRAM, `ssd_pages` on each of the two WO-SSDs.
    pub fn new(dram_pages: usize, ssd_pages: usize) -> UCache {
        UCache {
            dram: DramLru::new(dram_pages),
            ssd: Mirror::new(ssd_pages),
            stats: LevelStats::default(),
        }
    }

    fn fill_dram(&mut self, p: Page, out: &mut Vec<Op>) {
        out.push(Op::fg(Dev::Dram, OpKind::Write, p, 1));
        if let Some((v, reused)) = self.dram.insert(p) {
            if reused && !self.ssd.contains(v) {
                out.push(Op::bg(Dev::Dram, OpKind::Read, v));
                self.ssd.insert(v, false, false, &mut self.stats, out);
                self.stats.promotions += 1;
            }
        }
    }
}

impl Architecture for UCache {
    fn access(&mut self, p: Page, write: bool, out: &mut Vec<Op>) {
        if write {
            self.stats.write_pages += 1;
            self.ssd.insert(p, true, true, &mut self.stats, out);
            self.dram.remove(p);
            self.fill_dram(p, out);
            return;
        }
        self.stats.read_pages += 1;
        if self.dram.hit(p) {
            self.stats.dram_hits += 1;
            out.push(Op::fg(Dev::Dram, OpKind::Read, p, 0));
        } else if self.ssd.read_hit(p, out) {
            self.stats.wo_ssd_hits += 1;
            self.fill_dram(p, out);
        } else {
            self.stats.misses += 1;
            out.push(Op::fg(Dev::Hdd, OpKind::Read, p, 0));
            self.fill_dram(p, out);
        }
    }

    fn trim(&mut self, p: Page, out: &mut Vec<Op>) {
        self.stats.trim_pages += 1;
        self.dram.remove(p);
        self.ssd.discard(p, true, 0, out);
    }

    fn stats(&self) -> LevelStats {
        self.stats
    }

    fn dirty_copies(&self) -> Vec<(Page, Vec<Dev>)> {
        self.ssd.dirty_copies()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writes_to_ssd(ops: &[Op]) -> usize {
        ops.iter()
            .filter(|o| o.kind == OpKind::Write && matches!(o.dev, Dev::WoSsd | Dev::WoSsdMirror))
            .count()
    }

    #[test]
    fn read_misses_reach_the_ssds_only_after_reuse_in_dram() {
        let mut u = UCache::new(2, 10);
        let mut out = Vec::new();
        u.access(1, false, &mut out);
        u.access(2, false, &mut out);
        u.access(3, false, &mut out); // evicts 1 (never reused): dropped
        assert_eq!(writes_to_ssd(&out), 0);
        out.clear();
        u.access(2, false, &mut out); // DRAM hit, 2 reused
        u.access(4, false, &mut out); // evicts 3 (not reused)
        u.access(5, false, &mut out); // evicts 2 (reused): to both SSDs
        assert_eq!(writes_to_ssd(&out), 2);
        assert!(u.ssd.contains(2));
        out.clear();
        u.access(2, false, &mut out);
        assert_eq!(u.stats().wo_ssd_hits, 1);
    }

    #[test]
    fn writes_are_mirrored_and_dirty_on_both() {
        let mut u = UCache::new(2, 10);
        let mut out = Vec::new();
        u.access(7, true, &mut out);
        assert_eq!(writes_to_ssd(&out), 2);
        assert_eq!(
            u.dirty_copies(),
            vec![(7, vec![Dev::WoSsd, Dev::WoSsdMirror])]
        );
    }
}
