//! Sorted, merged sets of block ranges.

/// A set of blocks stored as sorted, disjoint, non-adjacent `(first, count)`
/// runs; membership is a binary search.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockRanges {
    runs: Vec<(u64, u64)>,
}

impl BlockRanges {
    /// Build from runs in any order, possibly overlapping; empty runs are dropped.
    pub fn from_runs(mut runs: Vec<(u64, u64)>) -> Self {
        runs.retain(|r| r.1 > 0);
        runs.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
        for (s, n) in runs {
            let e = s.saturating_add(n);
            if let Some(last) = out.last_mut() {
                let le = last.0 + last.1;
                if s <= le {
                    last.1 = le.max(e) - last.0;
                    continue;
                }
            }
            out.push((s, e - s));
        }
        BlockRanges { runs: out }
    }

    /// Whether `block` is in the set.
    pub fn contains(&self, block: u64) -> bool {
        let i = self.runs.partition_point(|r| r.0 <= block);
        i > 0 && {
            let (s, n) = self.runs[i - 1];
            block - s < n
        }
    }

    /// Whether any block of `[first, first + count)` is in the set.
    pub fn overlaps(&self, first: u64, count: u64) -> bool {
        let end = first.saturating_add(count);
        let i = self.runs.partition_point(|r| r.0 + r.1 <= first);
        self.runs.get(i).is_some_and(|r| r.0 < end)
    }

    /// The runs, sorted and merged.
    pub fn runs(&self) -> &[(u64, u64)] {
        &self.runs
    }

    /// Total number of blocks.
    pub fn block_count(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Blocks in `self` but not in `other`.
    pub fn minus(&self, other: &BlockRanges) -> BlockRanges {
        let mut out = Vec::new();
        for &(s, n) in &self.runs {
            let mut cur = s;
            let end = s + n;
            let mut i = other.runs.partition_point(|r| r.0 + r.1 <= s);
            while cur < end {
                match other.runs.get(i) {
                    Some(&(os, on)) if os < end => {
                        if os > cur {
                            out.push((cur, os - cur));
                        }
                        cur = cur.max(os + on);
                        i += 1;
                    }
                    _ => {
                        out.push((cur, end - cur));
                        break;
                    }
                }
            }
        }
        BlockRanges::from_runs(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn model(runs: &[(u64, u64)]) -> BTreeSet<u64> {
        runs.iter().flat_map(|&(s, n)| s..s + n).collect()
    }

    #[test]
    fn merge_contains_and_minus_agree_with_a_set_model() {
        // Deterministic pseudo-random runs checked against a BTreeSet.
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let a: Vec<(u64, u64)> = (0..8).map(|_| (next() % 100, next() % 10)).collect();
            let b: Vec<(u64, u64)> = (0..8).map(|_| (next() % 100, next() % 10)).collect();
            let (ra, rb) = (
                BlockRanges::from_runs(a.clone()),
                BlockRanges::from_runs(b.clone()),
            );
            let (ma, mb) = (model(&a), model(&b));
            for blk in 0..120 {
                assert_eq!(ra.contains(blk), ma.contains(&blk));
                assert_eq!(ra.overlaps(blk, 3), (blk..blk + 3).any(|x| ma.contains(&x)));
            }
            assert_eq!(ra.block_count(), ma.len() as u64);
            let diff: BTreeSet<u64> = ma.difference(&mb).copied().collect();
            assert_eq!(model(ra.minus(&rb).runs()), diff);
            // Runs are disjoint and non-adjacent.
            for w in ra.runs().windows(2) {
                assert!(w[0].0 + w[0].1 < w[1].0);
            }
        }
    }
}
