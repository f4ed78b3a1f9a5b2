//! Eviction policies: which resident line of a full set gives way.
//!
//! One module per policy behind the [`Eviction`] trait, in the spirit of
//! libCacheSim's one-file-per-algorithm layout: adding a policy is adding a
//! file and a line in [`EvictionKind`].
//!
//! The cache is organised as `sets × ways` slots; the slots of set `s` are
//! `s*ways .. (s+1)*ways`. A fully associative cache is one set. Policies keep
//! their lists as `u32` slot indices in flat tables (Azor 2.1: indices, not
//! pointers), and ghost histories keyed by line number where they need them.
//!
//! Call protocol, per set, as the engine drives it:
//! - a resident line is accessed: [`Eviction::on_hit`];
//! - a line is about to be inserted: [`Eviction::on_miss`], then, if the set is
//!   full, [`Eviction::evict`], then [`Eviction::on_insert`];
//! - a resident line is dropped for another reason (invalidation, trim):
//!   [`Eviction::on_remove`];
//! - [`Eviction::peek_victim`] tells, without changing anything, which slot the
//!   next `on_miss(key)` + `evict` would free (2LBS compares it with the
//!   incoming line before deciding to admit).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub mod arc;
#[cfg(test)]
mod conformance;
pub mod direct;
pub mod fifo;
mod links;
pub mod lru;
pub mod s3fifo;
#[cfg(test)]
mod testkit;

/// Index of a line slot in the cache's line table.
pub type Slot = u32;

/// Sentinel for "no slot" in index-linked lists.
pub const NIL: Slot = u32::MAX;

/// A replacement policy over `sets × ways` slots.
pub trait Eviction: Send {
    /// Short name as spelled on the command line.
    fn name(&self) -> &'static str;
    /// The line in `slot` (of `set`) was accessed.
    fn on_hit(&mut self, set: u32, slot: Slot);
    /// `key` missed in `set` and will be inserted next. Ghost-history policies
    /// (ARC, S3-FIFO) consult and update their history here.
    fn on_miss(&mut self, set: u32, key: u64);
    /// Remove and return a victim from the full `set`. `key_of` gives the line
    /// number held by a slot (for ghost histories).
    fn evict(&mut self, set: u32, key_of: &dyn Fn(Slot) -> u64) -> Slot;
    /// `key` now lives in the free `slot` of `set`.
    fn on_insert(&mut self, set: u32, slot: Slot, key: u64);
    /// `slot` was invalidated (not evicted): forget it, keep no ghost.
    fn on_remove(&mut self, set: u32, slot: Slot);
    /// The slot that `on_miss(set, incoming)` followed by `evict(set, ..)` would
    /// free, computed without changing any state. Only called on a full set.
    fn peek_victim(&self, set: u32, incoming: u64) -> Slot;
    /// DRAM used by the policy's own structures, in bytes.
    fn metadata_bytes(&self) -> usize;
}

/// The eviction policies tiercache offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EvictionKind {
    Lru,
    Fifo,
    Arc,
    S3fifo,
}

impl EvictionKind {
    /// Every policy, in the order `--help` lists them.
    pub const ALL: [EvictionKind; 4] = [Self::Lru, Self::Fifo, Self::Arc, Self::S3fifo];

    /// Command-line spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lru => "lru",
            Self::Fifo => "fifo",
            Self::Arc => "arc",
            Self::S3fifo => "s3fifo",
        }
    }

    /// Build the policy for a cache of `sets × ways` slots.
    pub fn build(self, sets: u32, ways: u32) -> Box<dyn Eviction> {
        match self {
            Self::Lru => Box::new(lru::Lru::new(sets, ways)),
            Self::Fifo => Box::new(fifo::Fifo::new(sets, ways)),
            Self::Arc => Box::new(arc::Arc::new(sets, ways)),
            Self::S3fifo => Box::new(s3fifo::S3Fifo::new(sets, ways)),
        }
    }
}

impl fmt::Display for EvictionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EvictionKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                format!("unknown eviction policy '{s}' (allowed: lru, fifo, arc, s3fifo)")
            })
    }
}
