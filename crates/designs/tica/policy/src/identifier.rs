//! DRAM low-capacity identifier (Algorithm 2): detects that the read working
//! set thrashes the small DRAM, so that pages evicted from DRAM are worth
//! copying to the WO-SSD (TICA-WED).
//!
//! Pages evicted from the DRAM read partition (they entered it on a read
//! miss) go to the Evicted Queue (EQ), a FIFO of page ids holding as many
//! entries as DRAM holds pages. For every read the identifier counts a DRAM
//! hit or, failing that, an EQ hit (the page would have been a hit with a
//! DRAM twice as large). Every `window` requests (twice the DRAM size in
//! pages) it decides, with `h = dram_hits / reads` and
//! `h_eq = (dram_hits + eq_hits) / reads`:
//!
//! 1. `h >= ef_hit` (default 0.25): DRAM alone serves reads well: EF,
//!    whatever the EQ says (the paper prefers EF for its lower TCO);
//! 2. `h_eq - h > eq_gain` (default 0.15): DRAM is too small: WED;
//! 3. otherwise EF.
//!
//! The paper's symbols were lost from the available text; the assignment of
//! its thresholds 0.15 and 0.25 to `eq_gain` and `ef_hit` is ours.

use hashlink::LinkedHashMap;
use rustc_hash::FxBuildHasher;

use crate::{Mode, Page};

/// Thresholds of Algorithm 2.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct IdentifierConfig {
    /// Minimum hit-ratio gain the EQ must show to switch to WED.
    pub eq_gain: f64,
    /// DRAM hit ratio at or above which EF is kept regardless of the EQ.
    pub ef_hit: f64,
}

impl Default for IdentifierConfig {
    fn default() -> Self {
        IdentifierConfig {
            eq_gain: 0.15,
            ef_hit: 0.25,
        }
    }
}

/// Algorithm 2 state.
#[derive(Debug)]
pub struct Identifier {
    cfg: IdentifierConfig,
    window: u64,
    eq_cap: usize,
    eq: LinkedHashMap<Page, (), FxBuildHasher>,
    requests: u64,
    reads: u64,
    dram_hits: u64,
    eq_hits: u64,
    mode: Mode,
}

/// What one read looked like to the identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    DramHit,
    /// Missed DRAM (served by an SSD or the HDD).
    DramMiss,
}

impl Identifier {
    /// `dram_pages` sets the window (2x) and the EQ length (1x).
    pub fn new(dram_pages: usize, cfg: IdentifierConfig) -> Identifier {
        Identifier {
            cfg,
            window: 2 * dram_pages.max(1) as u64,
            eq_cap: dram_pages.max(1),
            eq: LinkedHashMap::default(),
            requests: 0,
            reads: 0,
            dram_hits: 0,
            eq_hits: 0,
            mode: Mode::Ef,
        }
    }

    /// Current decision.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Pages currently in the EQ.
    pub fn eq_len(&self) -> usize {
        self.eq.len()
    }

    /// Counters of the current window: (requests, reads, DRAM hits, EQ hits).
    pub fn counters(&self) -> (u64, u64, u64, u64) {
        (self.requests, self.reads, self.dram_hits, self.eq_hits)
    }

    /// A page left the DRAM read partition.
    pub fn evicted(&mut self, p: Page) {
        self.eq.insert(p, ());
        while self.eq.len() > self.eq_cap {
            self.eq.pop_front();
        }
    }

    /// Whether `p` is in the eviction queue (a read only: see `Tica::warm`).
    pub fn in_queue(&self, p: Page) -> bool {
        self.eq.contains_key(&p)
    }

    /// A newer write or a trim makes an EQ entry meaningless.
    pub fn forget(&mut self, p: Page) {
        self.eq.remove(&p);
    }

    /// Account one request (lines 4-9); `read` is `None` for writes. At the
    /// end of a window, decide (lines 10-17) and return the new mode.
    pub fn record(&mut self, p: Page, read: Option<ReadOutcome>) -> Option<Mode> {
        self.requests += 1;
        match read {
            Some(ReadOutcome::DramHit) => {
                self.reads += 1;
                self.dram_hits += 1;
            }
            Some(ReadOutcome::DramMiss) => {
                self.reads += 1;
                if self.eq.remove(&p).is_some() {
                    self.eq_hits += 1;
                }
            }
            None => {}
        }
        if self.requests < self.window {
            return None;
        }
        let reads = self.reads.max(1) as f64;
        let h = self.dram_hits as f64 / reads;
        let h_eq = (self.dram_hits + self.eq_hits) as f64 / reads;
        self.mode = if self.reads > 0 && h >= self.cfg.ef_hit {
            Mode::Ef
        } else if h_eq - h > self.cfg.eq_gain {
            Mode::Wed
        } else {
            Mode::Ef
        };
        self.requests = 0;
        self.reads = 0;
        self.dram_hits = 0;
        self.eq_hits = 0;
        Some(self.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReadOutcome::*;

    /// DRAM of 2 pages: window of 4 requests, EQ of 2 entries.
    fn ident() -> Identifier {
        Identifier::new(2, IdentifierConfig::default())
    }

    #[test]
    fn eq_hits_count_only_after_a_dram_miss_and_consume_the_entry() {
        let mut id = ident();
        id.evicted(10);
        assert_eq!(id.record(10, Some(DramMiss)), None);
        assert_eq!(id.counters(), (1, 1, 0, 1));
        // The entry was consumed: a second miss on 10 is not an EQ hit.
        assert_eq!(id.record(10, Some(DramMiss)), None);
        assert_eq!(id.counters(), (2, 2, 0, 1));
        // A DRAM hit never consults the EQ.
        id.evicted(11);
        id.record(11, Some(DramHit));
        assert_eq!(id.counters(), (3, 3, 1, 1));
        assert_eq!(id.eq_len(), 1);
    }

    #[test]
    fn eq_is_bounded_fifo_of_dram_size() {
        let mut id = ident();
        for p in [1, 2, 3] {
            id.evicted(p);
        }
        assert_eq!(id.eq_len(), 2);
        id.record(1, Some(DramMiss)); // 1 fell out: no EQ hit
        id.record(3, Some(DramMiss)); // 3 is there
        assert_eq!(id.counters(), (2, 2, 0, 1));
    }

    #[test]
    fn switches_to_wed_when_eq_would_gain_enough() {
        let mut id = ident();
        // 4 reads: 0 DRAM hits, 2 EQ hits: h = 0, h_eq = 0.5 > 0.15.
        id.evicted(1);
        id.evicted(2);
        id.record(1, Some(DramMiss));
        id.record(2, Some(DramMiss));
        id.record(3, Some(DramMiss));
        assert_eq!(id.record(4, Some(DramMiss)), Some(Mode::Wed));
        assert_eq!(id.counters(), (0, 0, 0, 0), "counters reset per window");
    }

    #[test]
    fn high_dram_hit_ratio_keeps_ef_regardless_of_eq() {
        let mut id = ident();
        // h = 1/4 = 0.25 >= ef_hit, h_eq = 3/4: EF anyway.
        id.evicted(1);
        id.evicted(2);
        id.record(9, Some(DramHit));
        id.record(1, Some(DramMiss));
        id.record(2, Some(DramMiss));
        assert_eq!(id.record(3, Some(DramMiss)), Some(Mode::Ef));
    }

    #[test]
    fn small_eq_gain_goes_back_to_ef() {
        let mut id = ident();
        id.evicted(1);
        id.evicted(2);
        for p in [1, 2, 3, 4] {
            id.record(p, Some(DramMiss));
        }
        assert_eq!(id.mode(), Mode::Wed);
        // Next window: writes only, then one read miss with no EQ hit:
        // gain 0 -> EF.
        id.record(5, None);
        id.record(6, None);
        id.record(7, None);
        assert_eq!(id.record(8, Some(DramMiss)), Some(Mode::Ef));
    }
}
