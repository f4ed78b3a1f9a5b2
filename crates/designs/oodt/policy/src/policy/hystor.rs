//! Hystor-like (Chen, Koufaty, Zhang, ICS 2011): a block's metric adds an
//! *inverse bitmap* per request, `2^(7 - min(7, floor(log2 N)))` for a
//! request of `N` 4 KiB pages, so it combines frequency and (the logarithm
//! of) request size; blocks accessed as filesystem metadata go first into a
//! reserved region of the fast tier (`hystor_metadata_share` of it). Not
//! modelled: Hystor's write-back region and its three-level table layout.

use super::{Access, Candidate, PolicyConfig, TierPolicy};
use crate::mapping::TierError;

const META: u32 = 1 << 31;

/// Metric and metadata flag in one `u32` per block.
pub struct Hystor {
    metric: Vec<u32>,
    meta_share: f64,
    meta: Vec<(u32, u64)>,
}

impl Hystor {
    /// Metric for `blocks` blocks.
    pub fn new(cfg: &PolicyConfig, blocks: u64) -> Result<Self, TierError> {
        if !(0.0..=1.0).contains(&cfg.hystor_metadata_share) {
            return Err(TierError::Config(format!(
                "Hystor metadata share {} (allowed: 0 to 1)",
                cfg.hystor_metadata_share
            )));
        }
        Ok(Hystor {
            metric: vec![0; blocks as usize],
            meta_share: cfg.hystor_metadata_share,
            meta: Vec::new(),
        })
    }

    /// Inverse bitmap of a request of `bytes`.
    pub fn inverse_bitmap(bytes: u64) -> u32 {
        let pages = bytes.div_ceil(4096).max(1);
        let lg = 63 - pages.leading_zeros();
        1 << (7 - lg.min(7))
    }
}

impl TierPolicy for Hystor {
    fn name(&self) -> &'static str {
        "hystor"
    }

    fn observe(&mut self, a: &Access) {
        if let Some(m) = self.metric.get_mut(a.block as usize) {
            let v = (*m & !META)
                .saturating_add(Self::inverse_bitmap(a.request_len))
                .min(!META);
            *m = v | (*m & META) | if a.meta { META } else { 0 };
        }
    }

    fn candidates(&mut self, fast_slots: u64, out: &mut Vec<Candidate>) {
        self.meta.clear();
        let start = out.len();
        for (b, &m) in self.metric.iter().enumerate() {
            let v = m & !META;
            if v > 0 {
                if m & META != 0 {
                    self.meta.push((v, b as u64));
                }
                out.push(Candidate {
                    block: b as u64,
                    score: v as f32,
                    score_without_read: v as f32,
                });
            }
        }
        // The hottest metadata blocks, up to the region, rank above all data.
        let region = (fast_slots as f64 * self.meta_share) as usize;
        self.meta
            .sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        self.meta.truncate(region);
        self.meta.sort_unstable_by_key(|&(_, b)| b);
        for c in &mut out[start..] {
            if self
                .meta
                .binary_search_by_key(&c.block, |&(_, b)| b)
                .is_ok()
            {
                c.score += 1e12;
                c.score_without_read += 1e12;
            }
        }
    }

    fn stats_bytes(&self) -> u64 {
        self.metric.len() as u64 * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_bitmap_halves_per_doubling_of_the_request() {
        assert_eq!(Hystor::inverse_bitmap(4096), 128);
        assert_eq!(Hystor::inverse_bitmap(8192), 64);
        assert_eq!(Hystor::inverse_bitmap(12288), 64);
        assert_eq!(Hystor::inverse_bitmap(512 << 10), 1);
        assert_eq!(Hystor::inverse_bitmap(4 << 20), 1);
    }
}
