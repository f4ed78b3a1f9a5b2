//! Synthetic zipfian overwrites: requests drawn from a Zipf distribution over
//! extents of consecutive blocks, mostly writes. Popular extents are
//! neighbours in groups of four (files of similar popularity), and groups are
//! scattered over a disk range much larger than the footprint, so the disk
//! address space is sparse as in FlashTier's Fig. 1.

use tiercache_block::IoKind;
use tiercache_trace::Record;

/// Parameters of [`zipf_overwrites`].
#[derive(Clone, Debug, PartialEq)]
pub struct ZipfParams {
    /// Requests to generate.
    pub requests: u64,
    /// Distinct extents.
    pub extents: u64,
    /// Blocks per extent (and per request).
    pub extent_blocks: u32,
    /// Block size in bytes.
    pub block_bytes: u32,
    /// Zipf exponent (0.99 is typical of storage).
    pub theta: f64,
    /// Share of writes (the rest are reads).
    pub write_share: f64,
    /// Disk range is this many times the footprint.
    pub spread: u64,
    /// Seed of the generator.
    pub seed: u64,
    /// Extents of similar popularity placed next to each other on disk (4 by
    /// default); 1 scatters every extent on its own, which with
    /// `extent_blocks: 1` gives single-block writes spread over the disk range
    /// ([`ZipfParams::scattered`]).
    pub group: u64,
}

impl ZipfParams {
    /// A scattered, write-heavy workload: single 4-KiB blocks drawn from a
    /// Zipf(0.99) over `blocks` distinct blocks, each placed on its own in a
    /// disk range `spread` times the footprint, 90 % writes.
    pub fn scattered(requests: u64, blocks: u64, spread: u64) -> Self {
        ZipfParams {
            requests,
            extents: blocks,
            extent_blocks: 1,
            spread,
            group: 1,
            ..ZipfParams::default()
        }
    }
}

impl Default for ZipfParams {
    fn default() -> Self {
        ZipfParams {
            requests: 400_000,
            extents: 32_768,
            extent_blocks: 16,
            block_bytes: 4096,
            theta: 0.99,
            write_share: 0.9,
            spread: 16,
            seed: 42,
            group: 4,
        }
    }
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Generate the requests (deterministic for a seed).
pub fn zipf_overwrites(p: &ZipfParams) -> impl Iterator<Item = Record> {
    let n = p.extents.max(1);
    // Cumulative weights 1/k^theta.
    let mut cdf = Vec::with_capacity(n as usize);
    let mut acc = 0.0;
    for k in 1..=n {
        acc += 1.0 / (k as f64).powf(p.theta);
        cdf.push(acc);
    }
    let total = acc;
    let per = p.group.max(1);
    let groups = n.div_ceil(per);
    let slots = groups * p.spread.max(1);
    let mut state = p.seed;
    let ext_bytes = u64::from(p.extent_blocks) * u64::from(p.block_bytes);
    let p = p.clone();
    (0..p.requests).map(move |i| {
        let u = (splitmix(&mut state) >> 11) as f64 / (1u64 << 53) as f64 * total;
        let rank = cdf.partition_point(|&c| c < u) as u64;
        let group = rank / per;
        // Scatter groups: a multiplicative permutation of the slot space
        // (odd multiplier modulo a power of two would need one; use a hash
        // and accept rare collisions of groups, which only merge extents).
        let h = {
            let mut s = group ^ 0xA076_1D64_78BD_642F;
            splitmix(&mut s)
        };
        let slot = h % slots;
        let extent = slot * per + rank % per;
        let w = ((splitmix(&mut state) >> 11) as f64 / (1u64 << 53) as f64) < p.write_share;
        Record {
            time_ns: i * 1000,
            offset: extent * ext_bytes,
            len: p.extent_blocks * p.block_bytes,
            kind: if w { IoKind::Write } else { IoKind::Read },
            class: None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_deterministic_and_mostly_writes() {
        let p = ZipfParams {
            requests: 50_000,
            ..ZipfParams::default()
        };
        let a: Vec<Record> = zipf_overwrites(&p).collect();
        let b: Vec<Record> = zipf_overwrites(&p).collect();
        assert_eq!(a, b);
        let writes = a.iter().filter(|r| r.kind == IoKind::Write).count() as f64;
        assert!((writes / 50_000.0 - 0.9).abs() < 0.01);
        // Under Zipf(0.99) over 32768 items the top item takes about
        // 1 / H(32768, 0.99) ~ 9 % of requests.
        let mut counts = std::collections::HashMap::new();
        for r in &a {
            *counts.entry(r.offset).or_insert(0u64) += 1;
        }
        let top = *counts.values().max().unwrap() as f64 / 50_000.0;
        let h: f64 = (1..=32768).map(|k| 1.0 / (k as f64).powf(0.99)).sum();
        assert!((top - 1.0 / h).abs() < 0.01, "top {top} vs {}", 1.0 / h);
    }
}
