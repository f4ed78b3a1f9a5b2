//! Frequency only: the number of requests that touched each block (the cost
//! function the paper normalizes Fig. 2 to).

use super::{Access, Candidate, TierPolicy};

/// Access counts, 4 bytes per block.
pub struct Frequency {
    counts: Vec<u32>,
}

impl Frequency {
    /// Counts for `blocks` blocks.
    pub fn new(blocks: u64) -> Self {
        Frequency {
            counts: vec![0; blocks as usize],
        }
    }
}

impl TierPolicy for Frequency {
    fn name(&self) -> &'static str {
        "frequency"
    }

    fn observe(&mut self, a: &Access) {
        if let Some(c) = self.counts.get_mut(a.block as usize) {
            *c = c.saturating_add(1);
        }
    }

    fn candidates(&mut self, _fast_slots: u64, out: &mut Vec<Candidate>) {
        for (b, &c) in self.counts.iter().enumerate() {
            if c > 0 {
                out.push(Candidate {
                    block: b as u64,
                    score: c as f32,
                    score_without_read: c as f32,
                });
            }
        }
    }

    fn stats_bytes(&self) -> u64 {
        self.counts.len() as u64 * 4
    }
}
