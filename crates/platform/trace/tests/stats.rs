//! `trace_stats` against a brute-force model and hand-computed cases.

use std::collections::{BTreeMap, HashSet};

use proptest::prelude::*;
use tiercache_block::{Class, IoKind};
use tiercache_trace::{trace_stats, Record};

fn r(offset: u64, len: u32, kind: IoKind, time_ns: u64) -> Record {
    Record {
        time_ns,
        offset,
        len,
        kind,
        class: None,
    }
}

#[test]
fn hand_computed_case() {
    let recs = vec![
        r(0, 4096, IoKind::Read, 10),
        r(4096, 4096, IoKind::Read, 20), // sequential read
        r(100, 8192, IoKind::Write, 30),
        r(8192, 512, IoKind::Read, 40), // sequential read
        Record {
            class: Some(Class::Metadata),
            ..r(8292, 1000, IoKind::Write, 50) // 100 + 8192: sequential write
        },
        r(1 << 20, 4096, IoKind::Trim, 60),
    ];
    let s = trace_stats(recs.into_iter().map(Ok), 4096).unwrap();
    assert_eq!((s.requests, s.reads, s.writes, s.trims), (6, 3, 2, 1));
    assert_eq!(s.bytes_read, 8704);
    assert_eq!(s.bytes_written, 9192);
    assert_eq!(s.bytes_trimmed, 4096);
    // Blocks: reads 0,1,2; write [100, 8292) -> 0,1,2; write [8292, 9292) -> 2;
    // trim block 256.
    assert_eq!(s.unique_blocks, 4);
    assert_eq!(s.footprint_bytes, 4 * 4096);
    assert_eq!(s.unique_blocks_read, 3);
    assert_eq!(s.unique_blocks_written, 3);
    assert!((s.sequential_fraction - 3.0 / 6.0).abs() < 1e-12);
    assert_eq!(s.metadata_requests, 1);
    assert_eq!(s.duration_ns, 50);
    let hist: Vec<(u64, u64)> = s
        .size_histogram
        .iter()
        .map(|b| (b.min_bytes, b.count))
        .collect();
    assert_eq!(hist, vec![(512, 2), (4096, 3), (8192, 1)]);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["unique_blocks"], 4);
}

fn arb_rec() -> impl Strategy<Value = Record> {
    let kind = prop_oneof![Just(IoKind::Read), Just(IoKind::Write), Just(IoKind::Trim)];
    (0u64..64, 1u32..5000, kind, 0u64..1000).prop_map(|(o, l, k, t)| r(o * 512, l, k, t))
}

proptest! {
    #[test]
    fn matches_brute_force(recs in prop::collection::vec(arb_rec(), 0..100), line in prop::sample::select(vec![512u32, 4096, 1000])) {
        let s = trace_stats(recs.iter().copied().map(Ok), line).unwrap();
        // Brute force: walk every byte, map to its block.
        let mut blocks = HashSet::new();
        let mut hist: BTreeMap<u64, u64> = BTreeMap::new();
        for x in &recs {
            for byte in x.offset..x.offset + u64::from(x.len) {
                blocks.insert(byte / u64::from(line));
            }
            let mut b = 1u64;
            while b * 2 <= u64::from(x.len) { b *= 2; }
            *hist.entry(b).or_default() += 1;
        }
        prop_assert_eq!(s.unique_blocks, blocks.len() as u64);
        prop_assert_eq!(s.requests, recs.len() as u64);
        let got: BTreeMap<u64, u64> = s.size_histogram.iter().map(|b| (b.min_bytes, b.count)).collect();
        prop_assert_eq!(got, hist);
        let mut last: [Option<u64>; 3] = [None; 3];
        let mut n = 0;
        for x in &recs {
            let k = match x.kind { IoKind::Read => 0, IoKind::Write => 1, _ => 2 };
            if last[k] == Some(x.offset) { n += 1; }
            last[k] = Some(x.offset + u64::from(x.len));
        }
        let want = if recs.is_empty() { 0.0 } else { n as f64 / recs.len() as f64 };
        prop_assert!((s.sequential_fraction - want).abs() < 1e-12);
    }
}
