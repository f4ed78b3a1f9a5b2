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

    /// Look page `p` up in every structure an access to it touches,
    /// changing nothing. A caller about to access several pages warms the
    /// CPU cache for all of them first: independent lookups overlap their
    /// cache misses, the accesses' dependent ones do not.
    pub fn warm(&self, p: Page) -> bool {
        let d = &self.dram;
        self.ssd.contains_key(&p)
            | d.in_read(p)
            | d.write_slot(p).is_some()
            | self.identifier.in_queue(p)
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

    /// Change the SSDs' capacity to `pages` (a live cache resizing its
    /// SSDs; at least 1). Shrinking below the pages held evicts the least
    /// recently used ones as a full WO-SSD does (a dirty victim is read from
    /// the fastest device holding it and written to the HDD before its SSD
    /// copies are discarded): background ops appended to `out`.
    pub fn set_ssd_pages(&mut self, pages: usize, out: &mut Vec<Op>) {
        self.cfg.ssd_pages = pages.max(1);
        if self.ssd.len() > self.cfg.ssd_pages {
            // `free_wo` makes room for one more page: stop one page short.
            self.cfg.ssd_pages += 1;
            self.free_wo(false, out);
            self.cfg.ssd_pages -= 1;
        }
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
mod tests;
