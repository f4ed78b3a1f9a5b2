//! Victim selection for garbage collection.
//!
//! Greedy picks the block with the fewest valid pages. Cost-benefit is the
//! log-structured file system's rule (Rosenblum and Ousterhout 1992): clean
//! the block maximising `(1 - u) * age / (1 + u)`, with `u` the valid share.
//! The same rule ([`pick_victim`]) picks the log-structured store's
//! segments; [`reclaim`] says what happens to a victim's live blocks (silent
//! eviction of clean ones). The hybrid layer's eviction of whole clean data
//! blocks (FlashTier 4.3) uses its own cost/benefit: cost = clean valid pages
//! it would drop, benefit = age; see [`eviction_victim`].

use crate::flash::Flash;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// How a collector picks its victim block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GcPolicy {
    /// Fewest valid pages.
    #[default]
    Greedy,
    /// LFS cost-benefit: maximise (1 - u) * age / (1 + u).
    CostBenefit,
}

impl FromStr for GcPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "greedy" => Ok(GcPolicy::Greedy),
            "cost-benefit" | "cb" => Ok(GcPolicy::CostBenefit),
            _ => Err(format!(
                "unknown GC policy '{s}' (allowed: greedy, cost-benefit)"
            )),
        }
    }
}

impl fmt::Display for GcPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GcPolicy::Greedy => "greedy",
            GcPolicy::CostBenefit => "cost-benefit",
        })
    }
}

/// What the victim rule knows about one candidate: an erase block of the
/// flash model or a segment of the log-structured store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Block or segment number (the last tie-break: lower first).
    pub id: u32,
    /// Live (valid) blocks in it.
    pub valid: u32,
    /// When it was written (a clock value: older is smaller).
    pub stamp: u64,
}

/// The one victim rule of FlashTier's collection and of the log-structured
/// store's segment cleaning: among `candidates` (each of `capacity` blocks),
/// greedy takes the fewest valid blocks, cost-benefit the highest
/// `(1 - u) * age / (1 + u)` with `u = valid / capacity` and
/// `age = now - stamp + 1`. Ties go to the older candidate, then the lower
/// number, so runs are deterministic.
pub fn pick_victim(
    policy: GcPolicy,
    capacity: u32,
    now: u64,
    candidates: impl Iterator<Item = Candidate>,
) -> Option<u32> {
    let cap = f64::from(capacity.max(1));
    let mut best: Option<(f64, u64, u32)> = None;
    for c in candidates {
        let score = match policy {
            // Lower is better: minimise valid blocks.
            GcPolicy::Greedy => f64::from(c.valid),
            GcPolicy::CostBenefit => {
                let u = f64::from(c.valid) / cap;
                let age = (now.saturating_sub(c.stamp) + 1) as f64;
                -((1.0 - u) * age / (1.0 + u))
            }
        };
        let key = (score, c.stamp, c.id);
        if best.is_none_or(|x| key.partial_cmp(&x) == Some(std::cmp::Ordering::Less)) {
            best = Some(key);
        }
    }
    best.map(|x| x.2)
}

/// Pick a victim erase block among `candidates` under `policy`
/// ([`pick_victim`] on the blocks' valid pages and write stamps).
pub fn pick(flash: &Flash, policy: GcPolicy, candidates: impl Iterator<Item = u32>) -> Option<u32> {
    pick_victim(
        policy,
        flash.ppb(),
        flash.now(),
        candidates.map(|b| {
            let blk = flash.block(b);
            Candidate {
                id: b,
                valid: blk.valid,
                stamp: blk.stamp,
            }
        }),
    )
}

/// What collection does with one live block of its victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaim {
    /// Dropped, not copied: the backing device holds it (FlashTier's silent
    /// eviction of clean data).
    Evict,
    /// Copied (moved) to a new location: dirty data, or any data where
    /// silent eviction is off (a plain SSD).
    Move,
}

/// FlashTier's silent eviction, the one rule for the flash model's
/// collections and the log-structured store's segment cleaning: with
/// `silent_evict`, a clean live block is evicted and a dirty one moved;
/// without it every live block is moved.
pub fn reclaim(dirty: bool, silent_evict: bool) -> Reclaim {
    if silent_evict && !dirty {
        Reclaim::Evict
    } else {
        Reclaim::Move
    }
}

/// FlashTier's silent-eviction victim: the candidate with the minimum
/// (clean valid pages) / age. Empty blocks (cost 0) come first.
pub fn eviction_victim(flash: &Flash, candidates: impl Iterator<Item = u32>) -> Option<u32> {
    let now = flash.now();
    let mut best: Option<(f64, u64, u32)> = None;
    for b in candidates {
        let blk = flash.block(b);
        let cost = f64::from(blk.valid - blk.dirty);
        let age = (now.saturating_sub(blk.stamp) + 1) as f64;
        let key = (cost / age, blk.stamp, b);
        if best.is_none_or(|x| key.partial_cmp(&x) == Some(std::cmp::Ordering::Less)) {
            best = Some(key);
        }
    }
    best.map(|x| x.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_blocks_and_segments_with_deterministic_ties() {
        let c = |id, valid, stamp| Candidate { id, valid, stamp };
        // Equal scores: the older candidate wins, then the lower number.
        let same = [c(3, 10, 5), c(1, 10, 5), c(2, 10, 4)];
        for p in [GcPolicy::Greedy, GcPolicy::CostBenefit] {
            assert_eq!(pick_victim(p, 64, 100, same.into_iter()), Some(2));
            assert_eq!(pick_victim(p, 64, 100, same[..2].iter().copied()), Some(1));
        }
        // Cost-benefit at now 101: (1 - u) * age / (1 + u) with u = valid / 254.
        let segs = [c(0, 100, 100), c(1, 100, 10), c(2, 20, 99)];
        assert_eq!(
            pick_victim(GcPolicy::CostBenefit, 254, 101, segs.into_iter()),
            Some(1)
        );
        assert_eq!(
            pick_victim(GcPolicy::Greedy, 254, 101, segs.into_iter()),
            Some(2)
        );
        assert_eq!(
            pick_victim(GcPolicy::Greedy, 254, 101, std::iter::empty()),
            None
        );
        // Silent eviction: clean blocks are evicted only where it is on.
        assert_eq!(reclaim(false, true), Reclaim::Evict);
        assert_eq!(reclaim(true, true), Reclaim::Move);
        assert_eq!(reclaim(false, false), Reclaim::Move);
    }
    use crate::flash::{Cause, Geometry, Timing};

    #[test]
    fn greedy_and_cost_benefit_choose_as_computed_by_hand() {
        let g = Geometry {
            packages: 1,
            planes_per_package: 1,
            blocks_per_plane: 8,
            pages_per_block: 4,
            page_bytes: 4096,
        };
        let mut f = Flash::new(g, Timing::default()).unwrap();
        // Block a: written first (old), 2 of 4 pages valid.
        let a = f.alloc().unwrap();
        let pa: Vec<u32> = (0..4)
            .map(|i| f.append(a, i, false, Cause::Host).unwrap())
            .collect();
        // Block b: written last (young), 1 of 4 valid.
        let b = f.alloc().unwrap();
        let pb: Vec<u32> = (10..14)
            .map(|i| f.append(b, i, false, Cause::Host).unwrap())
            .collect();
        f.invalidate(pa[0]);
        f.invalidate(pa[1]);
        f.invalidate(pb[0]);
        f.invalidate(pb[1]);
        f.invalidate(pb[2]);
        // Greedy: b has 1 valid page < 2.
        assert_eq!(pick(&f, GcPolicy::Greedy, [a, b].into_iter()), Some(b));
        // Cost-benefit at clock 8: a: u=0.5, age=8-4+1=5 -> 0.5*5/1.5=1.667;
        // b: u=0.25, age=1 -> 0.75/1.25=0.6. a wins.
        assert_eq!(f.now(), 8);
        assert_eq!(pick(&f, GcPolicy::CostBenefit, [a, b].into_iter()), Some(a));
        // Eviction: a: 2 clean / 5 = 0.4; b: 1 clean / 1 = 1.0 -> a.
        assert_eq!(eviction_victim(&f, [a, b].into_iter()), Some(a));
    }
}
