//! Unit tests of the hybrid (log-block) FTL.

use super::*;
use crate::flash::{Geometry, Timing};

fn flash16() -> Flash {
    Flash::new(
        Geometry {
            packages: 1,
            planes_per_package: 1,
            blocks_per_plane: 16,
            pages_per_block: 4,
            page_bytes: 4096,
        },
        Timing::default(),
    )
    .unwrap()
}

fn ssd() -> Hybrid {
    // 16 blocks, 3 log blocks (0.15 * 16 rounded up), 2 reserve, 1 spare:
    // 10 logical blocks.
    assert_eq!(exported_blocks_for(16, 0.15), 10);
    Hybrid::new(
        flash16(),
        HybridConfig {
            log_fraction: 0.15,
            evict_data: false,
            evict_log: false,
            exported_blocks: Some(10),
        },
    )
    .unwrap()
}

#[test]
fn switch_then_partial_merge_by_hand() {
    let mut h = ssd();
    for l in 0..4 {
        h.write(l, false).unwrap(); // in place in lbn 0's data block
    }
    for l in 0..4 {
        h.write(l, false).unwrap(); // sequential log block for lbn 0
    }
    h.write(4, false).unwrap(); // lbn 1's data block, in place
    assert_eq!(h.flash().stats.erases, 0);
    // Offset 0 again: the full sequential log switches into the data
    // block; the old data block (all superseded) is erased.
    h.write(0, false).unwrap();
    let s = &h.flash().stats;
    assert_eq!(
        (s.switch_merges, s.partial_merges, s.full_merges),
        (1, 0, 0)
    );
    assert_eq!((s.erases, s.gc_page_copies), (1, 0));
    // Offset 0 of lbn 1: the SW block (lbn 0, only page 0) is merged
    // partially: pages 1..3 are copied from the data block, which is erased.
    h.write(4, false).unwrap();
    let s = &h.flash().stats;
    assert_eq!(
        (s.switch_merges, s.partial_merges, s.full_merges),
        (1, 1, 0)
    );
    assert_eq!((s.erases, s.gc_page_copies), (2, 3));
    for l in 0..5 {
        assert!(h.contains(l), "lpn {l}");
    }
    assert_eq!(h.mapped(), 5);
    assert_eq!(h.flash().stats.host_page_writes, 11);
}

#[test]
fn full_merge_sequence_by_hand() {
    let mut h = ssd();
    for l in 0..12 {
        h.write(l, false).unwrap(); // data blocks for lbns 0, 1, 2
    }
    // RW1 = [1, 5, 9, 2]; RW2 = [3, 6, 7, 10]; RW3 = [11, 3, 6, 7].
    for l in [1, 5, 9, 2, 3, 6, 7, 10, 11, 3, 6, 7] {
        h.write(l, false).unwrap();
    }
    assert_eq!(h.flash().stats.collections, 0);
    assert_eq!(h.log_blocks(), 3);
    // Overwrite 9: a 4th log block is needed, the log limit is 3, so RW1
    // is reclaimed. Its valid pages 1, 5, 2 belong to lbns 0 and 1: two
    // full merges copy 4 pages each (lpn 0 and 4 from the data blocks,
    // the rest from RW1 and RW3) and erase both data blocks, then RW1.
    h.write(9, false).unwrap();
    let s = &h.flash().stats;
    assert_eq!(s.collections, 1);
    assert_eq!(s.full_merges, 2);
    assert_eq!(s.gc_page_copies, 8);
    assert_eq!(s.erases, 3);
    assert_eq!(s.host_page_writes, 25);
    assert_eq!(h.log_blocks(), 3); // RW2, RW3 and the new RW4
    assert_eq!(h.mapped(), 12);
    for l in 0..12 {
        assert!(h.contains(l), "lpn {l}");
    }
    // Write amplification of this sequence: (25 + 8) / 25.
    let wa = (s.host_page_writes + s.gc_page_copies) as f64 / s.host_page_writes as f64;
    assert!((wa - 33.0 / 25.0).abs() < 1e-12);
}

#[test]
fn ssc_silently_evicts_oldest_clean_data_block() {
    let mut h = Hybrid::new(
        flash16(),
        HybridConfig {
            log_fraction: 0.15,
            evict_data: true,
            evict_log: false,
            exported_blocks: None,
        },
    )
    .unwrap();
    // One page in each of 15 sparse logical blocks; lpn 0 is dirty. Each
    // write (offset 0) starts a sequential log block and the previous one
    // becomes its logical block's data block (a partial merge with nothing
    // to copy). Erased blocks run out at the 15th: the clean data block with
    // the least clean-pages/age is evicted: lbn 1 (lbn 0 is dirty).
    for i in 0..15u64 {
        h.write(i * 4 * 1000, i == 0).unwrap();
    }
    let s = &h.flash().stats;
    assert_eq!(s.silent_evictions, 1);
    assert_eq!(s.erases, 1);
    assert_eq!(s.gc_page_copies, 0);
    assert!(h.contains(0));
    assert!(!h.contains(4000));
    assert!(h.contains(8000) && h.contains(14 * 4000));
}

#[test]
fn ssc_v_drops_clean_log_pages_instead_of_merging() {
    let mut h = Hybrid::new(
        flash16(),
        HybridConfig {
            log_fraction: 0.15,
            evict_data: true,
            evict_log: true,
            exported_blocks: None,
        },
    )
    .unwrap();
    // New data goes to the log: each run of 4 sequential pages fills the
    // sequential log block of its logical block, and offset 0 of the next
    // one switches it into a data block (no copy, no erase).
    for l in 0..13 {
        h.write(l, false).unwrap();
    }
    let s = &h.flash().stats;
    assert_eq!((s.switch_merges, s.full_merges, s.erases), (3, 0, 0));
    assert_eq!(h.data_blocks(), 3);
    // RW1 = [1, 5, 9, 2], RW2 = [3, 6, 7, 10] (lpn 5 dirty); with the
    // sequential block of lbn 3 that is the log limit of 3, so writing 11
    // reclaims RW1: clean 1, 2 (lbn 0) and 9 (lbn 2) are dropped; lbn 1
    // keeps a dirty page, so it alone is merged (4 copies: 4 from its data
    // block, 5 from RW1, 6 and 7 from RW2), erasing its old data block and
    // then RW1.
    for l in [1, 5, 9, 2, 3, 6, 7, 10, 11] {
        h.write(l, l == 5).unwrap();
    }
    let s = &h.flash().stats;
    assert_eq!(s.silent_evictions, 3);
    assert_eq!(s.full_merges, 1);
    assert_eq!(s.gc_page_copies, 4);
    assert_eq!(s.erases, 2);
    assert!(!h.contains(1) && !h.contains(2) && !h.contains(9));
    assert!(h.contains(5) && h.contains(0) && h.contains(12));
    assert_eq!(h.is_dirty(5), Some(true));
}
