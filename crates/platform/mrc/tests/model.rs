//! The stack distances against a brute-force model: one LRU cache per size,
//! each a list, under accesses, trims and unkept misses.

use proptest::prelude::*;
use tiercache_mrc::{Curve, Kind, StackDistance};

#[derive(Clone, Copy, Debug)]
enum Op {
    Access(u64),
    /// Removed from every cache (a trim).
    Remove(u64),
    /// A miss no cache keeps, to a line not cached anywhere.
    Unkept(u64),
}

const SIZES: u64 = 12;

/// Hits per cache size 1..=SIZES of a plain LRU cache of that many lines.
fn brute(ops: &[Op]) -> Vec<u64> {
    (1..=SIZES)
        .map(|c| {
            let mut lru: Vec<u64> = Vec::new(); // front = most recent
            let mut hits = 0;
            for &op in ops {
                match op {
                    Op::Access(x) => {
                        if let Some(i) = lru.iter().position(|&y| y == x) {
                            hits += 1;
                            lru.remove(i);
                        } else if lru.len() as u64 == c {
                            lru.pop();
                        }
                        lru.insert(0, x);
                    }
                    Op::Remove(x) => lru.retain(|&y| y != x),
                    Op::Unkept(x) => {
                        assert!(!lru.contains(&x));
                        if lru.len() as u64 == c {
                            lru.pop();
                        }
                    }
                }
            }
            hits
        })
        .collect()
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u64..20).prop_map(Op::Access),
        1 => (0u64..20).prop_map(Op::Remove),
        2 => (0u64..20).prop_map(Op::Unkept),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn distances_give_every_size_its_lru_hits(raw in proptest::collection::vec(op(), 1..1500)) {
        let mut s = StackDistance::new();
        let mut curve = Curve::exact();
        let mut ops = Vec::new();
        for op in raw {
            // An unkept miss is to a line no cache holds; otherwise an access.
            let op = match op {
                Op::Unkept(x) if s.contains(x) => Op::Access(x),
                o => o,
            };
            match op {
                Op::Access(x) => curve.add(Kind::Read, s.access(x), 1.0),
                Op::Remove(x) => {
                    s.remove(x);
                }
                Op::Unkept(_) => {
                    s.miss_unkept();
                    curve.add(Kind::Read, None, 1.0);
                }
            }
            ops.push(op);
        }
        let sizes: Vec<u64> = (1..=SIZES).collect();
        let got: Vec<u64> = curve.points(&sizes).iter().map(|p| p.hits[0] as u64).collect();
        prop_assert_eq!(got, brute(&ops));
    }
}
