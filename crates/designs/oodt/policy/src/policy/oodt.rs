//! OODT: equation 1 over the access queue's merged requests (3.2).

use super::{Access, Candidate, PolicyConfig, TierPolicy};
use crate::characterize::Characterizer;
use crate::mapping::TierError;

/// The paper's policy: [`Characterizer`] scores, read term dropped for the
/// tiers below the fastest.
pub struct Oodt {
    pub chr: Characterizer,
}

impl Oodt {
    /// See [`PolicyConfig`] for the parameters used.
    pub fn new(cfg: &PolicyConfig, blocks: u64, block_bytes: u32) -> Result<Self, TierError> {
        Ok(Oodt {
            chr: Characterizer::new(
                blocks,
                block_bytes,
                cfg.weights,
                cfg.queue_len,
                cfg.max_merge_bytes,
                cfg.stats_entries,
            )?,
        })
    }
}

impl TierPolicy for Oodt {
    fn name(&self) -> &'static str {
        "oodt"
    }

    fn observe(&mut self, a: &Access) {
        self.chr.observe(a.offset, u64::from(a.len), a.read, a.meta);
    }

    fn candidates(&mut self, _fast_slots: u64, out: &mut Vec<Candidate>) {
        self.chr.stats.for_each(|block, [base, read]| {
            out.push(Candidate {
                block,
                score: base + read,
                score_without_read: base,
            })
        });
    }

    fn stats_bytes(&self) -> u64 {
        self.chr.stats.memory_bytes()
    }
}
