//! SHARDS: spatially hashed sampling (Waldspurger et al., FAST'15).

use crate::curve::Curve;
use crate::stack::StackDistance;
use crate::Kind;
use std::collections::BTreeSet;

/// Hash values are taken modulo this (2^24, as in the paper): a line is in
/// the sample when its hash is below the threshold, rate = threshold / MODULUS.
pub const MODULUS: u64 = 1 << 24;

/// The line's spatial hash, in `0..MODULUS` (a 64-bit mixer: every line
/// number lands anywhere, so a sample is a fixed random subset of lines).
pub fn hash(line: u64) -> u64 {
    let mut x = line.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) & (MODULUS - 1)
}

/// The spatial hash of `line` under `seed`: seed 0 is [`hash`]; another
/// seed draws another random subset of lines (an independent sample, to see
/// how much an estimate depends on which lines were drawn).
pub fn hash_seeded(line: u64, seed: u64) -> u64 {
    hash(line ^ seed)
}

/// Whether `line` is in the sample of `rate` (the same lines for every use:
/// SHARDS and the miniature simulations sample alike).
pub fn sampled(line: u64, rate: f64) -> bool {
    sampled_seeded(line, rate, 0)
}

/// Whether `line` is in the sample of `rate` drawn with `seed`.
pub fn sampled_seeded(line: u64, rate: f64, seed: u64) -> bool {
    hash_seeded(line, seed) < threshold(rate)
}

fn threshold(rate: f64) -> u64 {
    ((rate * MODULUS as f64).round() as u64).clamp(1, MODULUS)
}

/// How lines are sampled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// A fixed share of the lines (0 < rate <= 1); memory grows with rate x lines.
    Rate(f64),
    /// At most `max_lines` lines: the rate starts at 1 and falls as lines
    /// with the largest hashes leave the sample; fixed memory.
    Size { max_lines: usize },
}

/// A sampled miss-ratio curve of LRU.
#[derive(Debug)]
pub struct Shards {
    sampling: Sampling,
    /// The sample's seed ([`hash_seeded`]).
    seed: u64,
    threshold: u64,
    stack: StackDistance,
    curve: Curve,
    /// Fixed size: the sampled lines by hash.
    members: BTreeSet<(u64, u64)>,
    /// Every access seen, sampled or not, [read, write].
    seen: [u64; 2],
}

impl Shards {
    pub fn new(sampling: Sampling) -> Self {
        Self::with_seed(sampling, 0)
    }

    /// The sample drawn with `seed` ([`hash_seeded`]).
    pub fn with_seed(sampling: Sampling, seed: u64) -> Self {
        let threshold = match sampling {
            Sampling::Rate(r) => threshold(r),
            Sampling::Size { .. } => MODULUS,
        };
        Shards {
            sampling,
            seed,
            threshold,
            stack: StackDistance::new(),
            curve: Curve::quantized(),
            members: BTreeSet::new(),
            seen: [0; 2],
        }
    }

    /// The current sampling rate.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / MODULUS as f64
    }

    /// Lines in the sample.
    pub fn sampled_lines(&self) -> usize {
        self.stack.lines()
    }

    /// Estimated lines an unbounded cache holds (sampled lines / rate).
    pub fn working_set_lines(&self) -> u64 {
        (self.stack.lines() as f64 / self.rate()).round() as u64
    }

    /// Bytes of memory held (sample, hash order and histogram).
    pub fn memory_bytes(&self) -> usize {
        self.stack.memory_bytes() + self.members.len() * 40 + self.curve.memory_bytes()
    }

    /// One access to `line`.
    pub fn access(&mut self, line: u64, kind: Kind) {
        self.seen[kind as usize] += 1;
        let h = hash_seeded(line, self.seed);
        if h >= self.threshold {
            return;
        }
        let rate = self.rate();
        let d = self.stack.access(line);
        // A sampled distance d stands for d / rate lines of the whole trace.
        self.curve
            .add(kind, d.map(|d| (d as f64 / rate).ceil() as u64), 1.0);
        if let Sampling::Size { max_lines } = self.sampling {
            if d.is_none() {
                self.members.insert((h, line));
            }
            while self.members.len() > max_lines.max(1) {
                // Lower the threshold to the largest hash: every line with it leaves.
                let top = self.members.last().expect("non-empty").0;
                while let Some(&(hh, l)) = self.members.last() {
                    if hh != top {
                        break;
                    }
                    self.members.pop_last();
                    self.stack.forget(l);
                }
                let old = self.rate();
                self.threshold = top;
                // The counts so far stand for the old rate: rescale to the new one.
                self.curve.scale(self.rate() / old);
            }
        }
    }

    /// One access to `line` that, if `line` is not cached, no cache keeps
    /// ([`StackDistance::miss_unkept`]).
    pub fn access_unkept(&mut self, line: u64, kind: Kind) {
        if hash_seeded(line, self.seed) < self.threshold && !self.stack.contains(line) {
            self.seen[kind as usize] += 1;
            self.stack.miss_unkept();
            self.curve.add(kind, None, 1.0);
        } else {
            self.access(line, kind);
        }
    }

    /// `line` is removed from every cache (a trim).
    pub fn remove(&mut self, line: u64) {
        let h = hash_seeded(line, self.seed);
        if h < self.threshold && self.stack.remove(line) {
            self.members.remove(&(h, line));
        }
    }

    /// The curve, in the whole trace's units (distances and accesses
    /// scaled by 1 / rate), with the paper's adjustment: the difference
    /// between the expected sampled accesses (all accesses x rate) and the
    /// sampled ones goes to the first bucket.
    pub fn curve(&self) -> Curve {
        let rate = self.rate();
        let mut c = self.curve.clone();
        for (k, kind) in [Kind::Read, Kind::Write].into_iter().enumerate() {
            let expected = self.seen[k] as f64 * rate;
            let diff = expected - c.total(kind);
            if diff != 0.0 {
                c.add(kind, Some(1), diff);
            }
        }
        c.scale(1.0 / rate);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_one_is_exact() {
        let mut s = Shards::new(Sampling::Rate(1.0));
        let mut e = StackDistance::new();
        let mut c = Curve::exact();
        for i in 0..20_000u64 {
            let l = (i * i + 7 * i) % 911;
            s.access(l, Kind::Read);
            c.add(Kind::Read, e.access(l), 1.0);
        }
        let sizes = [1, 10, 100, 500, 911];
        let (a, b) = (s.curve().points(&sizes), c.points(&sizes));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.hits, y.hits);
        }
    }

    #[test]
    fn fixed_size_keeps_at_most_its_lines() {
        let mut s = Shards::new(Sampling::Size { max_lines: 100 });
        for i in 0..100_000u64 {
            s.access(i % 10_000, Kind::Write);
            assert!(s.sampled_lines() <= 100);
        }
        assert!(s.rate() < 0.02 && s.rate() > 0.005, "rate {}", s.rate());
        // 10 loops over 10,000 lines: LRU misses below 10,000 lines, hits at it.
        let p = s.curve().points(&[5_000, 11_000]);
        assert!(p[0].write_hit_ratio() < 0.05, "{:?}", p[0]);
        assert!(p[1].write_hit_ratio() > 0.85, "{:?}", p[1]);
    }
}
