//! Three-level I/O caches: DRAM, a read-optimized SSD (RO-SSD) and a
//! write-optimized SSD (WO-SSD) in front of an HDD, after TICA (Salkhordeh,
//! Hadizadeh and Asadi, "An Efficient Hybrid I/O Caching Architecture Using
//! Heterogeneous SSDs"), and the two mirrored-SSD baselines of its section 5.
//!
//! Every architecture is a deterministic, I/O-free policy over page ids: an
//! access returns the device operations ([`Op`]) it needs, tagged with the
//! device, whether the request waits for them and in which dependency stage.
//! [`sim`] replays a trace through a policy against `tiercache_model` device
//! timing models and derives the reports of [`models`] (energy, cost,
//! endurance, reliability).
//!
//! - [`tica::Tica`]: TICA-EF, TICA-WED and TICA-A ([`Policy`]).
//! - [`flusher::FlushScheduler`]: when and what to flush from DRAM to the
//!   RO-SSD, shared by [`sim`] and the live cache.
//! - [`dram::Dram`]: DRAM read/write partitions resized by Algorithm 1.
//! - [`identifier::Identifier`]: DRAM low-capacity identifier (Algorithm 2).
//! - [`smbi::Smbi`]: state-machine-based insertion (Algorithm 3, Fig. 9).
//! - [`baselines::ucache::UCache`], [`baselines::srac::Srac`]: DRAM plus a
//!   RAID-1 pair of WO-SSDs.

pub mod baselines;
pub mod dram;
pub mod flusher;
pub mod identifier;
pub mod models;
pub mod profile;
pub mod sim;
pub mod smbi;
pub mod tica;

pub use flusher::{FlushConfig, FlushScheduler};
pub use profile::{DeviceSpec, LevelsProfile};
pub use sim::{run, Arch, LevelsReport, SimConfig};

/// A cached page (a `page_bytes` block of the backing device).
pub type Page = u64;

/// The devices an architecture issues operations to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dev {
    /// Battery-backed DRAM level.
    Dram,
    /// Read-optimized SSD (TICA only).
    RoSsd,
    /// Write-optimized SSD; the first mirror of a RAID-1 pair in the baselines.
    WoSsd,
    /// Second WO-SSD of the baselines' RAID-1 pair.
    WoSsdMirror,
    /// Backing HDD.
    Hdd,
}

/// What an operation does to one page on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    /// Tell an SSD the page is no longer in use.
    Trim,
    /// The request waits until the in-flight DRAM-to-RO-SSD flush of this
    /// page completes (its slot in the DRAM write partition is then free).
    WaitFlush,
}

/// One device operation emitted by a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    pub dev: Dev,
    pub kind: OpKind,
    pub page: Page,
    /// The request is acknowledged only after this op (foreground).
    pub fg: bool,
    /// Dependency stage: a foreground op of stage `s` starts after every
    /// foreground op of the same request with a lower stage has completed.
    pub stage: u8,
}

impl Op {
    pub(crate) fn fg(dev: Dev, kind: OpKind, page: Page, stage: u8) -> Op {
        Op {
            dev,
            kind,
            page,
            fg: true,
            stage,
        }
    }
    pub(crate) fn bg(dev: Dev, kind: OpKind, page: Page) -> Op {
        Op {
            dev,
            kind,
            page,
            fg: false,
            stage: 0,
        }
    }
}

/// What TICA does with a page evicted from the DRAM read partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Endurance-friendly: drop it.
    Ef,
    /// Write to endurance disk: copy it to the WO-SSD.
    Wed,
}

/// TICA policy as the user selects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    Ef,
    Wed,
    /// TICA-A: WED while Algorithm 2 or Algorithm 3 asks for it, EF otherwise.
    Adaptive,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ef" => Ok(Policy::Ef),
            "wed" => Ok(Policy::Wed),
            "adaptive" | "a" => Ok(Policy::Adaptive),
            x => Err(format!(
                "unknown TICA policy '{x}' (allowed: ef, wed, adaptive)"
            )),
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Ef => "ef",
            Policy::Wed => "wed",
            Policy::Adaptive => "adaptive",
        })
    }
}

/// Page-level counters every architecture keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LevelStats {
    pub read_pages: u64,
    pub write_pages: u64,
    pub trim_pages: u64,
    /// Read pages served by DRAM, by the RO-SSD, by a WO-SSD (either mirror
    /// in the baselines), or by the HDD (misses).
    pub dram_hits: u64,
    pub ro_ssd_hits: u64,
    pub wo_ssd_hits: u64,
    pub misses: u64,
    /// Dirty pages written back to the HDD on SSD eviction.
    pub writebacks: u64,
    /// Pages evicted from DRAM and copied to the WO-SSD (TICA-WED) or
    /// admitted to the SSD pair on eviction/ghost hit (baselines).
    pub promotions: u64,
    /// Page accesses made while the policy was in WED mode (TICA).
    pub wed_accesses: u64,
}

/// A cache architecture as the simulator drives it.
pub trait Architecture {
    /// Read (`write == false`) or write one page; pushes the ops to `out`.
    fn access(&mut self, page: Page, write: bool, out: &mut Vec<Op>);
    /// The page's data is no longer needed: drop it everywhere.
    fn trim(&mut self, page: Page, out: &mut Vec<Op>);
    /// Start up to `max` asynchronous flushes (DRAM to RO-SSD in TICA);
    /// returns `(page, generation)` tokens for [`Architecture::flush_done`].
    fn start_flushes(&mut self, _max: usize, _out: &mut Vec<Op>) -> Vec<(Page, u64)> {
        Vec::new()
    }
    /// A flush started by `start_flushes` completed. Stale tokens (the page
    /// was rewritten or evicted since) are ignored.
    fn flush_done(&mut self, _page: Page, _gen: u64) {}
    /// Flushes started and not yet completed.
    fn flushes_in_flight(&self) -> usize {
        0
    }
    /// Counters.
    fn stats(&self) -> LevelStats;
    /// Devices holding the newest copy of each dirty page (data not yet on
    /// the HDD). Used to check that dirty data survives any single failure.
    fn dirty_copies(&self) -> Vec<(Page, Vec<Dev>)>;
    /// Time-weighted share of dirty-page residency whose second copy is on
    /// the RO-SSD rather than DRAM (the `alpha` of eq. 4; 0 for baselines).
    fn dirty_ro_share(&self) -> f64 {
        0.0
    }
}
