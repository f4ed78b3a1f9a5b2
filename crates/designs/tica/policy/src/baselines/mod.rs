//! Section 5's baselines, both on a RAID-1 pair of WO-SSDs behind a DRAM
//! level, with every single point of failure removed: DRAM holds only clean
//! copies, every write goes to both WO-SSDs before it is acknowledged.
//!
//! - [`ucache::UCache`]: uCache-like two-level cache that avoids SSD writes
//!   for read misses: a page enters the SSDs only when evicted from DRAM
//!   after being re-referenced there.
//! - [`srac::Srac`]: S-RAC-like selective SSD cache behind DRAM: a read-miss
//!   page enters the SSDs only on a ghost-queue hit (its second miss within
//!   the ghost history).

pub mod srac;
pub mod ucache;

use hashlink::LinkedHashMap;
use rustc_hash::FxBuildHasher;

use crate::{Dev, LevelStats, Op, OpKind, Page};

/// A RAID-1 pair of WO-SSDs with one LRU order.
#[derive(Debug)]
pub(crate) struct Mirror {
    cap: usize,
    /// page -> dirty
    pages: LinkedHashMap<Page, bool, FxBuildHasher>,
    /// Which mirror serves the next read (round robin).
    next: bool,
}

impl Mirror {
    pub(crate) fn new(cap: usize) -> Mirror {
        Mirror {
            cap: cap.max(1),
            pages: LinkedHashMap::default(),
            next: false,
        }
    }

    pub(crate) fn contains(&self, p: Page) -> bool {
        self.pages.contains_key(&p)
    }

    /// A read hit: LRU update and a read from one of the mirrors.
    pub(crate) fn read_hit(&mut self, p: Page, out: &mut Vec<Op>) -> bool {
        if self.pages.to_back(&p).is_none() {
            return false;
        }
        let dev = if self.next {
            Dev::WoSsdMirror
        } else {
            Dev::WoSsd
        };
        self.next = !self.next;
        out.push(Op::fg(dev, OpKind::Read, p, 0));
        true
    }

    /// Remove `p` from both mirrors (TRIMs).
    pub(crate) fn discard(&mut self, p: Page, fg: bool, stage: u8, out: &mut Vec<Op>) {
        if self.pages.remove(&p).is_some() {
            for dev in [Dev::WoSsd, Dev::WoSsdMirror] {
                out.push(if fg {
                    Op::fg(dev, OpKind::Trim, p, stage)
                } else {
                    Op::bg(dev, OpKind::Trim, p)
                });
            }
        }
    }

    /// Write `p` to both mirrors, evicting LRU victims first (dirty ones are
    /// written back to the HDD). Foreground writes use stage 2.
    pub(crate) fn insert(
        &mut self,
        p: Page,
        dirty: bool,
        fg: bool,
        stats: &mut LevelStats,
        out: &mut Vec<Op>,
    ) {
        self.discard(p, fg, 0, out);
        while self.pages.len() >= self.cap {
            let Some((v, vd)) = self.pages.pop_front() else {
                break;
            };
            let op = |dev, kind, stage| {
                if fg {
                    Op::fg(dev, kind, v, stage)
                } else {
                    Op::bg(dev, kind, v)
                }
            };
            if vd {
                out.push(op(Dev::WoSsd, OpKind::Read, 0));
                out.push(op(Dev::Hdd, OpKind::Write, 1));
                stats.writebacks += 1;
            }
            out.push(op(Dev::WoSsd, OpKind::Trim, 1));
            out.push(op(Dev::WoSsdMirror, OpKind::Trim, 1));
        }
        for dev in [Dev::WoSsd, Dev::WoSsdMirror] {
            out.push(if fg {
                Op::fg(dev, OpKind::Write, p, 2)
            } else {
                Op::bg(dev, OpKind::Write, p)
            });
        }
        self.pages.insert(p, dirty);
    }

    pub(crate) fn dirty_copies(&self) -> Vec<(Page, Vec<Dev>)> {
        self.pages
            .iter()
            .filter(|(_, d)| **d)
            .map(|(&p, _)| (p, vec![Dev::WoSsd, Dev::WoSsdMirror]))
            .collect()
    }
}

/// A DRAM LRU of clean pages with a per-page re-reference flag.
#[derive(Debug)]
pub(crate) struct DramLru {
    cap: usize,
    /// page -> re-referenced while in DRAM
    pages: LinkedHashMap<Page, bool, FxBuildHasher>,
}

impl DramLru {
    pub(crate) fn new(cap: usize) -> DramLru {
        DramLru {
            cap: cap.max(1),
            pages: LinkedHashMap::default(),
        }
    }
    pub(crate) fn hit(&mut self, p: Page) -> bool {
        match self.pages.to_back(&p) {
            Some(r) => {
                *r = true;
                true
            }
            None => false,
        }
    }
    pub(crate) fn remove(&mut self, p: Page) {
        self.pages.remove(&p);
    }
    /// Insert `p`; returns the evicted page and whether it was re-referenced.
    pub(crate) fn insert(&mut self, p: Page) -> Option<(Page, bool)> {
        let ev = if self.pages.len() >= self.cap && !self.pages.contains_key(&p) {
            self.pages.pop_front()
        } else {
            None
        };
        self.pages.insert(p, false);
        ev
    }
}
