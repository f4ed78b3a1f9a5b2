//! Placement policies: what goes on the fast tier. Each observes the
//! sub-requests the dispatcher routes and, when the planner runs, scores the
//! blocks it wants ranked. [`oodt`] is the paper's; [`frequency`],
//! [`hystor`] and [`raf`] are the baselines of section 4.

use crate::characterize::Weights;
use crate::mapping::{BlockId, TierError};
use std::fmt;
use std::str::FromStr;

pub mod frequency;
pub mod hystor;
pub mod oodt;
pub mod raf;

/// One sub-request as the policies see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub block: BlockId,
    /// The part: byte offset in the volume and length.
    pub offset: u64,
    pub len: u32,
    pub read: bool,
    /// Filesystem metadata (from the trace's class, when it has one).
    pub meta: bool,
    /// The whole request the part belongs to.
    pub request_offset: u64,
    pub request_len: u64,
    /// First part of its request.
    pub first_part: bool,
}

/// A block the planner should rank, with its scores (higher is hotter).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub block: BlockId,
    /// Score for the fastest tier.
    pub score: f32,
    /// Score once the fastest tier is full (OODT drops the read term, 3.2.2).
    pub score_without_read: f32,
}

/// A placement policy.
pub trait TierPolicy: Send {
    /// Name as given to `--tier-policy`.
    fn name(&self) -> &'static str;
    /// Observe one routed sub-request.
    fn observe(&mut self, a: &Access);
    /// Append the blocks to rank; `fast_slots` is the fastest tier's size.
    fn candidates(&mut self, fast_slots: u64, out: &mut Vec<Candidate>);
    /// Bytes of per-block statistics the policy keeps.
    fn stats_bytes(&self) -> u64;
}

/// The policies `--tier-policy` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    Oodt,
    Frequency,
    Hystor,
    Raf,
}

impl PolicyKind {
    /// All policies, in table order.
    pub const ALL: [PolicyKind; 4] = [
        PolicyKind::Oodt,
        PolicyKind::Frequency,
        PolicyKind::Hystor,
        PolicyKind::Raf,
    ];
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyKind::Oodt => "oodt",
            PolicyKind::Frequency => "frequency",
            PolicyKind::Hystor => "hystor",
            PolicyKind::Raf => "raf",
        })
    }
}

impl FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "oodt" => Ok(PolicyKind::Oodt),
            "frequency" | "freq" => Ok(PolicyKind::Frequency),
            "hystor" => Ok(PolicyKind::Hystor),
            "raf" => Ok(PolicyKind::Raf),
            _ => Err(format!(
                "unknown tier policy '{s}' (allowed: oodt, frequency, hystor, raf)"
            )),
        }
    }
}

impl PolicyKind {
    /// Host bytes of per-block statistics the policy keeps with its
    /// default configuration ([`TierPolicy::stats_bytes`] per block): a
    /// dense table of two `f32` (OODT) or one 4-byte counter or score.
    pub fn stats_bytes_per_block(self) -> u64 {
        match self {
            PolicyKind::Oodt => 8,
            PolicyKind::Frequency | PolicyKind::Hystor | PolicyKind::Raf => 4,
        }
    }
}

/// Parameters of the policies.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// OODT: equation 1's weights.
    pub weights: Weights,
    /// OODT: access queue length (paper: 8).
    pub queue_len: usize,
    /// OODT: largest request the access queue builds by merging.
    pub max_merge_bytes: u64,
    /// OODT: bounded statistics table of this many blocks (5.1); `None`: dense.
    pub stats_entries: Option<usize>,
    /// Hystor: share of the fast tier reserved for metadata blocks.
    pub hystor_metadata_share: f64,
    /// RAF: requests of at least this many bytes are sequential.
    pub raf_sequential_bytes: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            weights: Weights::default(),
            queue_len: 8,
            max_merge_bytes: 512 << 10,
            stats_entries: None,
            hystor_metadata_share: 0.25,
            raf_sequential_bytes: 64 << 10,
        }
    }
}

/// Build a policy for a volume of `blocks` blocks of `block_bytes`.
pub fn build(
    kind: PolicyKind,
    cfg: &PolicyConfig,
    blocks: u64,
    block_bytes: u32,
) -> Result<Box<dyn TierPolicy>, TierError> {
    Ok(match kind {
        PolicyKind::Oodt => Box::new(oodt::Oodt::new(cfg, blocks, block_bytes)?),
        PolicyKind::Frequency => Box::new(frequency::Frequency::new(blocks)),
        PolicyKind::Hystor => Box::new(hystor::Hystor::new(cfg, blocks)?),
        PolicyKind::Raf => Box::new(raf::Raf::new(cfg, blocks)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_bytes_per_block_is_what_each_policy_keeps() {
        for kind in PolicyKind::ALL {
            let p = build(kind, &PolicyConfig::default(), 1000, 4096).unwrap();
            assert_eq!(
                p.stats_bytes(),
                1000 * kind.stats_bytes_per_block(),
                "{kind}"
            );
        }
    }
}
