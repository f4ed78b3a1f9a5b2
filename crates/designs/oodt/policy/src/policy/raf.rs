//! RAF-like (Liu et al., NAS 2010, "random access first"): requests are
//! classified sequential when they continue one of the recent streams or are
//! at least `raf_sequential_bytes` long; only random requests earn blocks a
//! score, random reads more than random writes (RAF favours read-intensive
//! random data for the SSD).

use super::{Access, Candidate, PolicyConfig, TierPolicy};
use std::collections::VecDeque;

const STREAMS: usize = 8;
const RANDOM_READ: f32 = 1.0;
const RANDOM_WRITE: f32 = 0.5;

/// Random-access score, 4 bytes per block.
pub struct Raf {
    score: Vec<f32>,
    streams: VecDeque<u64>,
    threshold: u64,
    random: bool,
}

impl Raf {
    /// Scores for `blocks` blocks.
    pub fn new(cfg: &PolicyConfig, blocks: u64) -> Self {
        Raf {
            score: vec![0.0; blocks as usize],
            streams: VecDeque::with_capacity(STREAMS),
            threshold: cfg.raf_sequential_bytes.max(1),
            random: true,
        }
    }

    /// Classify one request and remember where it ends; `true` if random.
    pub fn classify(&mut self, offset: u64, len: u64) -> bool {
        let end = offset + len;
        let continues = self.streams.iter().position(|&e| e == offset);
        match continues {
            Some(i) => {
                self.streams.remove(i);
            }
            None if self.streams.len() == STREAMS => {
                self.streams.pop_front();
            }
            None => {}
        }
        self.streams.push_back(end);
        continues.is_none() && len < self.threshold
    }
}

impl TierPolicy for Raf {
    fn name(&self) -> &'static str {
        "raf"
    }

    fn observe(&mut self, a: &Access) {
        if a.first_part {
            self.random = self.classify(a.request_offset, a.request_len);
        }
        if self.random {
            if let Some(s) = self.score.get_mut(a.block as usize) {
                *s += if a.read { RANDOM_READ } else { RANDOM_WRITE };
            }
        }
    }

    fn candidates(&mut self, _fast_slots: u64, out: &mut Vec<Candidate>) {
        for (b, &s) in self.score.iter().enumerate() {
            if s > 0.0 {
                out.push(Candidate {
                    block: b as u64,
                    score: s,
                    score_without_read: s,
                });
            }
        }
    }

    fn stats_bytes(&self) -> u64 {
        self.score.len() as u64 * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_continuations_and_large_requests_are_sequential() {
        let mut r = Raf::new(&PolicyConfig::default(), 1);
        assert!(r.classify(0, 4096)); // first request: random
        assert!(!r.classify(4096, 4096)); // continues it
        assert!(r.classify(1 << 30, 4096)); // a jump
        assert!(!r.classify(8192, 4096)); // the first stream goes on
        assert!(!r.classify(5 << 30, 64 << 10)); // large: sequential
    }
}
