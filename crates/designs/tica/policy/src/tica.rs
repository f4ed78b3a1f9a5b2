//! TICA: DRAM (read and write partitions), RO-SSD and WO-SSD (Algorithm 1).
//!
//! - Write of page `p`: older copies are invalidated everywhere (TRIM to the
//!   SSDs); the write goes to the DRAM write partition and to the WO-SSD, and
//!   is acknowledged when both are done. If the write partition is full it
//!   grows (Algorithm 1) or the write waits for the oldest flush; if the
//!   WO-SSD is full its LRU victim is discarded from both SSDs (written back
//!   to the HDD first when dirty).
//! - Flusher: asynchronously copies dirty pages from the DRAM write
//!   partition to the RO-SSD, oldest first; a page leaves DRAM when its flush
//!   completes. Dirty data is therefore always on two devices: DRAM + WO-SSD,
//!   then RO-SSD + WO-SSD.
//! - Read of `p`: DRAM, then RO-SSD, then WO-SSD; a miss reads the HDD and
//!   fills the DRAM read partition. A page evicted from the read partition is
//!   dropped (EF) or copied to the WO-SSD (WED); TICA-A picks WED while the
//!   low-capacity identifier (Algorithm 2) or SMBI (Algorithm 3) asks for it.
//!
//! The two SSDs share one LRU order ("update the LRU queue of both SSDs").
//! Every page on the RO-SSD is also on the WO-SSD, so with equal capacities
//! only the WO-SSD ever needs a victim.

use hashlink::LinkedHashMap;
use rustc_hash::FxBuildHasher;

use crate::dram::Dram;
use crate::identifier::{Identifier, IdentifierConfig, ReadOutcome};
use crate::smbi::{Smbi, SmbiConfig};
use crate::{Architecture, Dev, LevelStats, Mode, Op, OpKind, Page, Policy};

/// Configuration of a TICA instance.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TicaConfig {
    /// DRAM level size in pages (at least 2).
    pub dram_pages: usize,
    /// Size of each SSD in pages (RO-SSD and WO-SSD are equal), at least 1.
    pub ssd_pages: usize,
    pub policy: Policy,
    /// Baseline size of the DRAM write partition, in pages.
    pub write_base_pages: usize,
    pub identifier: IdentifierConfig,
    pub smbi: SmbiConfig,
}

impl TicaConfig {
    /// Paper defaults: thresholds 0.15, 0.25, 0.2, 0.2; write partition
    /// baseline a quarter of DRAM (our choice, the paper gives none).
    pub fn new(dram_pages: usize, ssd_pages: usize, policy: Policy) -> TicaConfig {
        TicaConfig {
            dram_pages: dram_pages.max(2),
            ssd_pages: ssd_pages.max(1),
            policy,
            write_base_pages: (dram_pages / 4).max(1),
            identifier: IdentifierConfig::default(),
            smbi: SmbiConfig::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SsdEntry {
    on_ro: bool,
    dirty: bool,
}

/// The TICA policy (see the module documentation).
#[derive(Debug)]
pub struct Tica {
    cfg: TicaConfig,
    dram: Dram,
    /// Pages on the WO-SSD, least recently used first.
    ssd: LinkedHashMap<Page, SsdEntry, FxBuildHasher>,
    dirty: usize,
    gen: u64,
    identifier: Identifier,
    smbi: Smbi,
    stats: LevelStats,
    ro_share_sum: f64,
    ro_share_n: u64,
}

impl Tica {
    pub fn new(cfg: TicaConfig) -> Tica {
        let dram = Dram::new(cfg.dram_pages, cfg.write_base_pages);
        Tica {
            identifier: Identifier::new(cfg.dram_pages, cfg.identifier),
            smbi: Smbi::new(cfg.dram_pages, cfg.smbi),
            dram,
            ssd: LinkedHashMap::default(),
            dirty: 0,
            gen: 0,
            stats: LevelStats::default(),
            ro_share_sum: 0.0,
            ro_share_n: 0,
            cfg,
        }
    }

    pub fn config(&self) -> &TicaConfig {
        &self.cfg
    }
    pub fn dram(&self) -> &Dram {
        &self.dram
    }
    pub fn identifier(&self) -> &Identifier {
        &self.identifier
    }
    pub fn smbi(&self) -> &Smbi {
        &self.smbi
    }
    /// Pages on the WO-SSD / on the RO-SSD.
    pub fn wo_len(&self) -> usize {
        self.ssd.len()
    }
    pub fn ro_len(&self) -> usize {
        self.ssd.values().filter(|e| e.on_ro).count()
    }
    pub fn on_wo(&self, p: Page) -> bool {
        self.ssd.contains_key(&p)
    }
    pub fn on_ro(&self, p: Page) -> bool {
        self.ssd.get(&p).is_some_and(|e| e.on_ro)
    }

    /// Re-enter a page found on the SSDs by a live cache's recovery: on the
    /// WO-SSD, also on the RO-SSD when `on_ro`, dirty or clean. Most recently
    /// used last. Returns `false` (and changes nothing) when the SSDs are full.
    pub fn restore_ssd_page(&mut self, p: Page, on_ro: bool, dirty: bool) -> bool {
        if self.ssd.len() >= self.cfg.ssd_pages && !self.ssd.contains_key(&p) {
            return false;
        }
        if let Some(old) = self.ssd.insert(p, SsdEntry { on_ro, dirty }) {
            if old.dirty {
                self.dirty -= 1;
            }
        }
        if dirty {
            self.dirty += 1;
        }
        true
    }

    /// A live cache wrote `p` back to the HDD outside the policy (a flush or
    /// detach): its SSD copies are clean now, and its DRAM copy (if any) no
    /// longer needs a flush to the RO-SSD.
    pub fn mark_clean(&mut self, p: Page) {
        if let Some(e) = self.ssd.get_mut(&p) {
            if e.dirty {
                e.dirty = false;
                self.dirty -= 1;
            }
        }
        if self.dram.write_slot(p).is_some() {
            self.dram.remove(p);
        }
    }

    /// What happens to pages evicted from DRAM right now.
    pub fn mode(&self) -> Mode {
        match self.cfg.policy {
            Policy::Ef => Mode::Ef,
            Policy::Wed => Mode::Wed,
            Policy::Adaptive => {
                if self.identifier.mode() == Mode::Wed || self.smbi.mode() == Mode::Wed {
                    Mode::Wed
                } else {
                    Mode::Ef
                }
            }
        }
    }

    fn next_gen(&mut self) -> u64 {
        self.gen += 1;
        self.gen
    }

    /// Remove `p` from both SSDs (TRIMs); `fg` when the request waits.
    fn discard_ssd(&mut self, p: Page, fg: bool, stage: u8, out: &mut Vec<Op>) {
        if let Some(e) = self.ssd.remove(&p) {
            if e.dirty {
                self.dirty -= 1;
            }
            let mk = |dev| {
                if fg {
                    Op::fg(dev, OpKind::Trim, p, stage)
                } else {
                    Op::bg(dev, OpKind::Trim, p)
                }
            };
            if e.on_ro {
                out.push(mk(Dev::RoSsd));
            }
            out.push(mk(Dev::WoSsd));
        }
    }

    /// Make room for one page on the WO-SSD (Algorithm 1, lines 9-11): the
    /// LRU victim is discarded from both SSDs, written back first if dirty.
    /// Foreground ops use stages 0 (read) and 1 (HDD write, TRIMs).
    fn free_wo(&mut self, fg: bool, out: &mut Vec<Op>) {
        while self.ssd.len() >= self.cfg.ssd_pages {
            let Some((&v, &e)) = self.ssd.front() else {
                return;
            };
            let op = |dev, kind, stage| {
                if fg {
                    Op::fg(dev, kind, v, stage)
                } else {
                    Op::bg(dev, kind, v)
                }
            };
            if e.dirty {
                // Read the dirty copy from the fastest device holding it.
                let src = if self.dram.write_slot(v).is_some() {
                    Dev::Dram
                } else if e.on_ro {
                    Dev::RoSsd
                } else {
                    Dev::WoSsd
                };
                out.push(op(src, OpKind::Read, 0));
                out.push(op(Dev::Hdd, OpKind::Write, 1));
                self.stats.writebacks += 1;
                // Clean now: the DRAM copy no longer needs its flush.
                self.dram.remove(v);
            }
            self.discard_ssd(v, fg, 1, out);
        }
    }

    /// Evict the DRAM read partition's LRU page: into the EQ, and to the
    /// WO-SSD in WED mode (a background copy).
    fn evict_dram_read(&mut self, out: &mut Vec<Op>) {
        let Some(v) = self.dram.evict_read() else {
            return;
        };
        self.identifier.evicted(v);
        if self.mode() == Mode::Wed && !self.ssd.contains_key(&v) {
            self.free_wo(false, out);
            out.push(Op::bg(Dev::Dram, OpKind::Read, v));
            out.push(Op::bg(Dev::WoSsd, OpKind::Write, v));
            self.ssd.insert(
                v,
                SsdEntry {
                    on_ro: false,
                    dirty: false,
                },
            );
            self.stats.promotions += 1;
        }
    }

    /// Drop every copy of `p` (before a newer write, or on trim).
    fn invalidate(&mut self, p: Page, out: &mut Vec<Op>) {
        self.dram.remove(p);
        self.identifier.forget(p);
        self.discard_ssd(p, true, 0, out);
    }

    fn write(&mut self, p: Page, out: &mut Vec<Op>) {
        self.stats.write_pages += 1;
        self.identifier.record(p, None);
        self.smbi.record(None);
        self.invalidate(p, out);
        // DRAM write partition (lines 5-8). After a shrink the partition may
        // hold more dirty pages than its size: free slots until one is left.
        while self.dram.write_full() {
            if self.dram.try_grow_write() {
                while self.dram.read_len() > self.dram.read_cap() {
                    self.evict_dram_read(out);
                }
            } else if let Some((q, gen)) = self.dram.oldest_flushing() {
                out.push(Op::fg(Dev::RoSsd, OpKind::WaitFlush, q, 0));
                self.flush_done(q, gen);
            } else if let Some((q, gen)) = self.dram.oldest_pending() {
                out.push(Op::fg(Dev::Dram, OpKind::Read, q, 0));
                out.push(Op::fg(Dev::RoSsd, OpKind::Write, q, 1));
                self.dram.mark_flushing(q);
                self.flush_done(q, gen);
            } else {
                break;
            }
        }
        // WO-SSD space (lines 9-11).
        self.free_wo(true, out);
        // Lines 12-14.
        let gen = self.next_gen();
        out.push(Op::fg(Dev::Dram, OpKind::Write, p, 2));
        out.push(Op::fg(Dev::WoSsd, OpKind::Write, p, 2));
        self.dram.insert_write(p, gen);
        self.ssd.insert(
            p,
            SsdEntry {
                on_ro: false,
                dirty: true,
            },
        );
        self.dirty += 1;
    }

    fn read(&mut self, p: Page, out: &mut Vec<Op>) {
        self.stats.read_pages += 1;
        if self.dram.touch_read(p) || self.dram.write_slot(p).is_some() {
            self.stats.dram_hits += 1;
            out.push(Op::fg(Dev::Dram, OpKind::Read, p, 0));
            self.identifier.record(p, Some(ReadOutcome::DramHit));
            self.smbi.record(Some(true));
            return;
        }
        self.identifier.record(p, Some(ReadOutcome::DramMiss));
        if let Some(e) = self.ssd.to_back(&p).map(|e| *e) {
            if e.on_ro {
                self.stats.ro_ssd_hits += 1;
                out.push(Op::fg(Dev::RoSsd, OpKind::Read, p, 0));
            } else {
                self.stats.wo_ssd_hits += 1;
                out.push(Op::fg(Dev::WoSsd, OpKind::Read, p, 0));
            }
            self.smbi.record(Some(true));
            return;
        }
        self.smbi.record(Some(false));
        self.stats.misses += 1;
        out.push(Op::fg(Dev::Hdd, OpKind::Read, p, 0));
        // Lines 28-32: make room in the read partition.
        if self.dram.read_len() >= self.dram.read_cap()
            && self.dram.write_cap() > self.dram.write_base()
        {
            self.dram.shrink_write();
        }
        while self.dram.read_len() > 0 && self.dram.read_len() >= self.dram.read_cap() {
            self.evict_dram_read(out);
        }
        out.push(Op::fg(Dev::Dram, OpKind::Write, p, 1));
        self.dram.insert_read(p);
    }

    fn sample_alpha(&mut self) {
        if self.dirty > 0 {
            let in_dram = self.dram.write_len().min(self.dirty);
            self.ro_share_sum += (self.dirty - in_dram) as f64 / self.dirty as f64;
            self.ro_share_n += 1;
        }
    }
}

impl Architecture for Tica {
    fn access(&mut self, page: Page, write: bool, out: &mut Vec<Op>) {
        if write {
            self.write(page, out);
        } else {
            self.read(page, out);
        }
        if self.mode() == Mode::Wed {
            self.stats.wed_accesses += 1;
        }
        self.sample_alpha();
    }

    fn trim(&mut self, page: Page, out: &mut Vec<Op>) {
        self.stats.trim_pages += 1;
        self.invalidate(page, out);
    }

    fn start_flushes(&mut self, max: usize, out: &mut Vec<Op>) -> Vec<(Page, u64)> {
        let mut started = Vec::new();
        while self.dram.flushing() < max {
            let Some((p, gen)) = self.dram.oldest_pending() else {
                break;
            };
            self.dram.mark_flushing(p);
            out.push(Op::bg(Dev::Dram, OpKind::Read, p));
            out.push(Op::bg(Dev::RoSsd, OpKind::Write, p));
            started.push((p, gen));
        }
        started
    }

    fn flush_done(&mut self, page: Page, gen: u64) {
        if self.dram.complete_flush(page, gen) {
            if let Some(e) = self.ssd.get_mut(&page) {
                e.on_ro = true;
            }
        }
    }

    fn flushes_in_flight(&self) -> usize {
        self.dram.flushing()
    }

    fn stats(&self) -> LevelStats {
        self.stats
    }

    fn dirty_copies(&self) -> Vec<(Page, Vec<Dev>)> {
        // A dirty DRAM page missing from the WO-SSD would be a single copy.
        let dram_only = self
            .dram
            .write_pages()
            .filter(|(p, _)| !self.ssd.get(p).is_some_and(|e| e.dirty))
            .map(|(p, _)| (p, vec![Dev::Dram]));
        self.ssd
            .iter()
            .filter(|(_, e)| e.dirty)
            .map(|(&p, e)| {
                let mut devs = Vec::new();
                if self.dram.write_slot(p).is_some() {
                    devs.push(Dev::Dram);
                }
                if e.on_ro {
                    devs.push(Dev::RoSsd);
                }
                devs.push(Dev::WoSsd);
                (p, devs)
            })
            .chain(dram_only)
            .collect()
    }

    fn dirty_ro_share(&self) -> f64 {
        if self.ro_share_n == 0 {
            0.0
        } else {
            self.ro_share_sum / self.ro_share_n as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tica(dram: usize, ssd: usize, policy: Policy) -> Tica {
        Tica::new(TicaConfig::new(dram, ssd, policy))
    }

    fn count(ops: &[Op], dev: Dev, kind: OpKind) -> usize {
        ops.iter()
            .filter(|o| o.dev == dev && o.kind == kind)
            .count()
    }

    #[test]
    fn write_goes_to_dram_and_wo_ssd_and_flushes_to_ro_ssd() {
        let mut t = tica(8, 8, Policy::Ef);
        let mut out = Vec::new();
        t.access(5, true, &mut out);
        assert_eq!(count(&out, Dev::Dram, OpKind::Write), 1);
        assert_eq!(count(&out, Dev::WoSsd, OpKind::Write), 1);
        assert_eq!(
            count(&out, Dev::RoSsd, OpKind::Write),
            0,
            "RO-SSD copy is asynchronous"
        );
        assert!(out.iter().all(|o| o.fg));
        assert_eq!(t.dirty_copies(), vec![(5, vec![Dev::Dram, Dev::WoSsd])]);
        out.clear();
        let started = t.start_flushes(4, &mut out);
        assert_eq!(started.len(), 1);
        assert_eq!(count(&out, Dev::RoSsd, OpKind::Write), 1);
        assert!(out.iter().all(|o| !o.fg));
        let (p, g) = started[0];
        t.flush_done(p, g);
        assert_eq!(t.dram().write_len(), 0, "the flushed page leaves DRAM");
        assert_eq!(t.dirty_copies(), vec![(5, vec![Dev::RoSsd, Dev::WoSsd])]);
        // A read now hits the RO-SSD, the fastest SSD reader.
        out.clear();
        t.access(5, false, &mut out);
        assert_eq!(out, vec![Op::fg(Dev::RoSsd, OpKind::Read, 5, 0)]);
    }

    #[test]
    fn rewrite_invalidates_and_trims_older_copies() {
        let mut t = tica(8, 8, Policy::Ef);
        let mut out = Vec::new();
        t.access(5, true, &mut out);
        let started = t.start_flushes(4, &mut out);
        t.flush_done(started[0].0, started[0].1);
        out.clear();
        t.access(5, true, &mut out);
        assert_eq!(count(&out, Dev::RoSsd, OpKind::Trim), 1);
        assert_eq!(count(&out, Dev::WoSsd, OpKind::Trim), 1);
        assert!(!t.on_ro(5), "the RO-SSD copy is stale");
        // A rewrite during an in-flight flush makes that flush stale.
        let started = t.start_flushes(4, &mut out);
        t.access(5, true, &mut out);
        t.flush_done(started[0].0, started[0].1);
        assert!(!t.on_ro(5));
        assert_eq!(t.dram().write_len(), 1);
    }

    #[test]
    fn read_lookup_order_and_miss_fill() {
        let mut t = tica(4, 8, Policy::Ef);
        let mut out = Vec::new();
        t.access(1, false, &mut out);
        assert_eq!(
            out,
            vec![
                Op::fg(Dev::Hdd, OpKind::Read, 1, 0),
                Op::fg(Dev::Dram, OpKind::Write, 1, 1)
            ]
        );
        out.clear();
        t.access(1, false, &mut out);
        assert_eq!(out, vec![Op::fg(Dev::Dram, OpKind::Read, 1, 0)]);
        let s = t.stats();
        assert_eq!((s.misses, s.dram_hits), (1, 1));
    }

    #[test]
    fn ef_drops_and_wed_copies_dram_victims() {
        // DRAM of 4 pages: write baseline 1, read partition 3.
        for (policy, copies) in [(Policy::Ef, 0), (Policy::Wed, 1)] {
            let mut t = tica(4, 8, policy);
            let mut out = Vec::new();
            for p in 1..=4 {
                t.access(p, false, &mut out);
            }
            assert_eq!(count(&out, Dev::WoSsd, OpKind::Write), copies, "{policy}");
            assert_eq!(t.on_wo(1), copies == 1);
            out.clear();
            t.access(1, false, &mut out);
            let hit = if copies == 1 { Dev::WoSsd } else { Dev::Hdd };
            assert_eq!(out[0], Op::fg(hit, OpKind::Read, 1, 0));
        }
    }

    #[test]
    fn wo_victim_is_written_back_and_discarded_from_both_ssds() {
        let mut t = tica(8, 2, Policy::Ef);
        let mut out = Vec::new();
        t.access(1, true, &mut out);
        let s = t.start_flushes(4, &mut out);
        t.flush_done(s[0].0, s[0].1);
        t.access(2, true, &mut out);
        out.clear();
        t.access(3, true, &mut out); // WO-SSD full: victim 1 (LRU)
        assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::Read, 1, 0)));
        assert!(out.contains(&Op::fg(Dev::Hdd, OpKind::Write, 1, 1)));
        assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::Trim, 1, 1)));
        assert!(out.contains(&Op::fg(Dev::WoSsd, OpKind::Trim, 1, 1)));
        assert!(!t.on_wo(1) && !t.on_ro(1));
        assert_eq!(t.stats().writebacks, 1);
        // Victim 2 still in DRAM (not flushed): written back from DRAM and
        // dropped from DRAM too.
        out.clear();
        t.access(4, true, &mut out);
        assert!(out.contains(&Op::fg(Dev::Dram, OpKind::Read, 2, 0)));
        assert!(t.dram().write_slot(2).is_none());
        for (p, devs) in t.dirty_copies() {
            assert!(devs.len() >= 2, "page {p} on {devs:?}");
        }
    }

    #[test]
    fn full_write_partition_grows_then_waits_for_a_flush() {
        // DRAM 8 pages, write baseline 2. Growth credit per full event is
        // 2 / W: page 2 finds W = 2 full, credit 1 -> W = 3; page 3 finds
        // W = 3 full, credit 2/3 -> no growth: the oldest pending page (0)
        // has no flush in flight, so it is flushed in the foreground.
        let mut t = tica(8, 64, Policy::Ef);
        let mut out = Vec::new();
        for p in 0..3 {
            t.access(p, true, &mut out);
        }
        assert_eq!(t.dram().write_cap(), 3);
        out.clear();
        t.access(3, true, &mut out);
        assert_eq!(t.dram().write_cap(), 3);
        assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::Write, 0, 1)));
        assert!(t.on_ro(0));
        // Page 4: credit 2/3 + 2/3 >= 1 -> W = 4, no wait.
        out.clear();
        t.access(4, true, &mut out);
        assert_eq!(t.dram().write_cap(), 4);
        assert!(!out.iter().any(|o| o.dev == Dev::RoSsd));
        // Page 5: credit 1/3 + 2/4 < 1 and page 1's flush is in flight:
        // the write waits for it.
        let s = t.start_flushes(1, &mut Vec::new());
        assert_eq!(s[0].0, 1);
        out.clear();
        t.access(5, true, &mut out);
        assert_eq!(t.dram().write_cap(), 4);
        assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::WaitFlush, 1, 0)));
        assert!(t.on_ro(1));
        assert_eq!(t.dram().write_len(), 4);
    }

    #[test]
    fn read_miss_shrinks_an_extended_write_partition() {
        let mut t = tica(8, 64, Policy::Ef);
        let mut out = Vec::new();
        for p in 0..3 {
            t.access(p, true, &mut out);
        }
        assert_eq!(t.dram().write_cap(), 3);
        let s = t.start_flushes(8, &mut out);
        for (p, g) in s {
            t.flush_done(p, g);
        }
        for p in 100..105 {
            t.access(p, false, &mut out); // read partition 8 - 3 = 5 pages
        }
        assert_eq!(t.dram().write_cap(), 3);
        t.access(105, false, &mut out); // read partition full: shrink
        assert_eq!(t.dram().write_cap(), 2);
        assert_eq!(
            t.dram().read_len(),
            6,
            "the freed slot went to the read page"
        );
        t.access(106, false, &mut out); // at baseline: evict instead
        assert_eq!(t.dram().write_cap(), 2);
        assert_eq!(t.dram().read_len(), 6);
    }

    #[test]
    fn adaptive_switches_to_wed_when_dram_thrashes() {
        // DRAM of 4 pages (read partition 3), window 8: a loop over 5 pages.
        // Window 1: 0..4 cold misses, then 0, 1, 2 miss DRAM but hit the EQ:
        // gain 3/8 > 0.15 -> WED.
        let mut t = tica(4, 64, Policy::Adaptive);
        let mut out = Vec::new();
        assert_eq!(t.mode(), Mode::Ef);
        for i in 0..8u64 {
            t.access(i % 5, false, &mut out);
        }
        assert_eq!(t.identifier().mode(), Mode::Wed);
        assert_eq!(t.mode(), Mode::Wed);
        assert_eq!(t.stats().misses, 8);
        // In WED DRAM victims go to the WO-SSD, where the loop then hits.
        for i in 8..24u64 {
            t.access(i % 5, false, &mut out);
        }
        assert!(t.stats().promotions > 0);
        assert!(t.stats().wo_ssd_hits > 0);
        // EF alone never leaves the HDD on the same loop.
        let mut ef = tica(4, 64, Policy::Ef);
        for i in 0..24u64 {
            ef.access(i % 5, false, &mut out);
        }
        assert_eq!(ef.stats().misses, 24);
        assert!(t.stats().misses < 24);
    }

    #[test]
    fn trim_drops_dirty_data_everywhere() {
        let mut t = tica(8, 8, Policy::Ef);
        let mut out = Vec::new();
        t.access(9, true, &mut out);
        t.trim(9, &mut out);
        assert!(t.dirty_copies().is_empty());
        assert!(!t.on_wo(9));
        assert_eq!(t.dram().write_len(), 0);
    }
}
