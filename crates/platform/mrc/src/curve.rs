//! Hit counts by stack distance, read at any cache size.

use crate::Kind;

/// Buckets of a quantized curve: distances below 1024 exactly, larger ones
/// to 1/512 of their value (9 bits below the leading one), up to 2^64.
pub const QUANT_BUCKETS: usize = 1024 + 54 * 512;

/// Weighted accesses by stack distance, reads and writes apart.
#[derive(Clone, Debug)]
pub struct Curve {
    /// Weight of the accesses at each distance bucket, [read, write].
    buckets: Vec<[f64; 2]>,
    /// Accesses that miss at every size (first accesses).
    cold: [f64; 2],
    quantized: bool,
}

fn idx(k: Kind) -> usize {
    match k {
        Kind::Read => 0,
        Kind::Write => 1,
    }
}

/// Bucket of distance `d` on the quantized scale.
fn quant_bucket(d: u64) -> usize {
    let bits = 64 - d.leading_zeros() as usize;
    if bits <= 10 {
        return d as usize;
    }
    let s = bits - 10;
    let m = (d >> s) as usize; // 512..1024
    1024 + (s - 1) * 512 + (m - 512)
}

/// Smallest distance of a quantized bucket.
fn quant_low(b: usize) -> u64 {
    if b < 1024 {
        return b as u64;
    }
    let s = (b - 1024) / 512 + 1;
    let m = ((b - 1024) % 512 + 512) as u64;
    m << s
}

/// The curve at one cache size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Cache size in lines.
    pub lines: u64,
    /// Accesses, [read, write].
    pub accesses: [f64; 2],
    /// Hits, [read, write].
    pub hits: [f64; 2],
}

impl Point {
    fn ratio(h: f64, a: f64) -> f64 {
        if a <= 0.0 {
            0.0
        } else {
            (h / a).clamp(0.0, 1.0)
        }
    }
    pub fn hit_ratio(&self) -> f64 {
        Self::ratio(
            self.hits[0] + self.hits[1],
            self.accesses[0] + self.accesses[1],
        )
    }
    pub fn read_hit_ratio(&self) -> f64 {
        Self::ratio(self.hits[0], self.accesses[0])
    }
    pub fn write_hit_ratio(&self) -> f64 {
        Self::ratio(self.hits[1], self.accesses[1])
    }
}

impl Curve {
    /// One bucket per distance (exact counts).
    pub fn exact() -> Self {
        Curve {
            buckets: Vec::new(),
            cold: [0.0; 2],
            quantized: false,
        }
    }

    /// At most [`QUANT_BUCKETS`] buckets, whatever the distances.
    pub fn quantized() -> Self {
        Curve {
            buckets: Vec::new(),
            cold: [0.0; 2],
            quantized: true,
        }
    }

    /// Bytes of memory held.
    pub fn memory_bytes(&self) -> usize {
        self.buckets.capacity() * 16
    }

    /// Add `w` accesses of `kind` at distance `d` (`None`: cold).
    pub fn add(&mut self, kind: Kind, d: Option<u64>, w: f64) {
        let k = idx(kind);
        match d {
            None => self.cold[k] += w,
            Some(d) => {
                let b = if self.quantized {
                    quant_bucket(d)
                } else {
                    d as usize
                };
                if self.buckets.len() <= b {
                    self.buckets.resize(b + 1, [0.0; 2]);
                }
                self.buckets[b][k] += w;
            }
        }
    }

    /// Multiply every weight by `f` (SHARDS: the sampling rate fell).
    pub fn scale(&mut self, f: f64) {
        for b in &mut self.buckets {
            b[0] *= f;
            b[1] *= f;
        }
        self.cold[0] *= f;
        self.cold[1] *= f;
    }

    /// Weight of every access of `kind`.
    pub fn total(&self, kind: Kind) -> f64 {
        let k = idx(kind);
        self.cold[k] + self.buckets.iter().map(|b| b[k]).sum::<f64>()
    }

    /// Weight of first accesses (the working set, in lines) of both kinds.
    pub fn cold(&self) -> f64 {
        self.cold[0] + self.cold[1]
    }

    /// The curve at each size of `sizes` (in lines), in the order given.
    pub fn points(&self, sizes: &[u64]) -> Vec<Point> {
        let mut order: Vec<usize> = (0..sizes.len()).collect();
        order.sort_by_key(|&i| sizes[i]);
        let acc = [self.total(Kind::Read), self.total(Kind::Write)];
        let mut out = vec![
            Point {
                lines: 0,
                accesses: acc,
                hits: [0.0; 2],
            };
            sizes.len()
        ];
        let mut hits = [0.0f64; 2];
        let mut b = 0usize;
        for i in order {
            let c = sizes[i];
            while b < self.buckets.len() {
                let low = if self.quantized {
                    quant_low(b)
                } else {
                    b as u64
                };
                if low > c {
                    break;
                }
                hits[0] += self.buckets[b][0];
                hits[1] += self.buckets[b][1];
                b += 1;
            }
            out[i] = Point {
                lines: c,
                accesses: acc,
                hits,
            };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_buckets_are_monotone_and_tight() {
        let mut last = 0;
        for d in (0..4096u64).chain((12..64).map(|s| (1u64 << s) + 12345)) {
            let b = quant_bucket(d);
            assert!(b >= last && b < QUANT_BUCKETS);
            last = b;
            let lo = quant_low(b);
            assert!(
                lo <= d && (d - lo) as f64 <= d as f64 / 512.0,
                "{d} -> {lo}"
            );
        }
        assert!(quant_bucket(u64::MAX) < QUANT_BUCKETS);
    }

    #[test]
    fn hits_at_a_size_count_distances_up_to_it() {
        let mut c = Curve::exact();
        c.add(Kind::Read, Some(1), 1.0);
        c.add(Kind::Read, Some(3), 1.0);
        c.add(Kind::Write, Some(2), 1.0);
        c.add(Kind::Read, None, 1.0);
        let p = c.points(&[3, 1, 2]);
        assert_eq!(p[0].hits, [2.0, 1.0]);
        assert_eq!(p[1].hits, [1.0, 0.0]);
        assert_eq!(p[2].hits, [1.0, 1.0]);
        assert_eq!(p[0].accesses, [3.0, 1.0]);
        assert_eq!(p[0].hit_ratio(), 0.75);
    }
}
