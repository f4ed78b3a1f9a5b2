//! S-RAC-like single-level SSD cache on mirrored WO-SSDs behind a DRAM level
//! (see [`crate::baselines`]).
//!
//! S-RAC caches selectively to spare SSD writes: writes are always cached
//! (both SSDs, dirty), but a read-miss page is written to the SSDs only when
//! it hits the ghost queue, a FIFO history of recently missed page ids as
//! long as the SSD, i.e. on its second miss within that history. DRAM is a
//! plain LRU of clean pages in front (read misses and SSD hits fill it,
//! writes update it).

use hashlink::LinkedHashMap;
use rustc_hash::FxBuildHasher;

use super::{DramLru, Mirror};
use crate::{Architecture, Dev, LevelStats, Op, OpKind, Page};

/// S-RAC-like baseline.
#[derive(Debug)]
pub struct Srac {
    dram: DramLru,
    ssd: Mirror,
    ghost: LinkedHashMap<Page, (), FxBuildHasher>,
    ghost_cap: usize,
    stats: LevelStats,
}

impl Srac {
    /// `dram_pages` of DRAM, `ssd_pages` on each of the two WO-SSDs (also
    /// the ghost queue's length).
    pub fn new(dram_pages: usize, ssd_pages: usize) -> Srac {
        Srac {
            dram: DramLru::new(dram_pages),
            ssd: Mirror::new(ssd_pages),
            ghost: LinkedHashMap::default(),
            ghost_cap: ssd_pages.max(1),
            stats: LevelStats::default(),
        }
    }

    fn fill_dram(&mut self, p: Page, out: &mut Vec<Op>) {
        out.push(Op::fg(Dev::Dram, OpKind::Write, p, 1));
        self.dram.insert(p);
    }
}

impl Architecture for Srac {
    fn access(&mut self, p: Page, write: bool, out: &mut Vec<Op>) {
        if write {
            self.stats.write_pages += 1;
            self.ghost.remove(&p);
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
            if self.ghost.remove(&p).is_some() {
                self.ssd.insert(p, false, false, &mut self.stats, out);
                self.stats.promotions += 1;
            } else {
                self.ghost.insert(p, ());
                while self.ghost.len() > self.ghost_cap {
                    self.ghost.pop_front();
                }
            }
            self.fill_dram(p, out);
        }
    }

    fn trim(&mut self, p: Page, out: &mut Vec<Op>) {
        self.stats.trim_pages += 1;
        self.dram.remove(p);
        self.ghost.remove(&p);
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

    #[test]
    fn read_miss_enters_the_ssds_on_its_second_miss() {
        let mut s = Srac::new(1, 10);
        let mut out = Vec::new();
        s.access(1, false, &mut out);
        s.access(2, false, &mut out); // 1 leaves DRAM (1 page)
        assert!(!s.ssd.contains(1));
        s.access(1, false, &mut out); // second miss: ghost hit -> SSD
        assert!(s.ssd.contains(1));
        assert_eq!(s.stats().promotions, 1);
        s.access(2, false, &mut out); // 2: ghost hit too
        out.clear();
        s.access(1, false, &mut out);
        assert_eq!(s.stats().wo_ssd_hits, 1);
        assert_eq!(s.stats().misses, 4);
    }
}
