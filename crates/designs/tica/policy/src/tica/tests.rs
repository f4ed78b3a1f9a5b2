//! Unit tests of the TICA policy.

use super::*;

fn tica(dram: usize, ssd: usize, policy: Policy) -> Tica {
    Tica::new(TicaConfig::new(dram, ssd, policy))
}

fn count(ops: &[Op], dev: Dev, kind: OpKind) -> usize {
    ops.iter()
        .filter(|o| o.dev == dev && o.kind == kind)
        .count()
}

#[test]
fn write_goes_to_dram_and_wo_ssd_and_flushes_to_ro_ssd() {
    let mut t = tica(8, 8, Policy::Ef);
    let mut out = Vec::new();
    t.access(5, true, &mut out);
    assert_eq!(count(&out, Dev::Dram, OpKind::Write), 1);
    assert_eq!(count(&out, Dev::WoSsd, OpKind::Write), 1);
    assert_eq!(
        count(&out, Dev::RoSsd, OpKind::Write),
        0,
        "RO-SSD copy is asynchronous"
    );
    assert!(out.iter().all(|o| o.fg));
    assert_eq!(t.dirty_copies(), vec![(5, vec![Dev::Dram, Dev::WoSsd])]);
    out.clear();
    let started = t.start_flushes(4, &mut out);
    assert_eq!(started.len(), 1);
    assert_eq!(count(&out, Dev::RoSsd, OpKind::Write), 1);
    assert!(out.iter().all(|o| !o.fg));
    let (p, g) = started[0];
    t.flush_done(p, g);
    assert_eq!(t.dram().write_len(), 0, "the flushed page leaves DRAM");
    assert_eq!(t.dirty_copies(), vec![(5, vec![Dev::RoSsd, Dev::WoSsd])]);
    // A read now hits the RO-SSD, the fastest SSD reader.
    out.clear();
    t.access(5, false, &mut out);
    assert_eq!(out, vec![Op::fg(Dev::RoSsd, OpKind::Read, 5, 0)]);
}

#[test]
fn rewrite_invalidates_and_trims_older_copies() {
    let mut t = tica(8, 8, Policy::Ef);
    let mut out = Vec::new();
    t.access(5, true, &mut out);
    let started = t.start_flushes(4, &mut out);
    t.flush_done(started[0].0, started[0].1);
    out.clear();
    t.access(5, true, &mut out);
    assert_eq!(count(&out, Dev::RoSsd, OpKind::Trim), 1);
    assert_eq!(count(&out, Dev::WoSsd, OpKind::Trim), 1);
    assert!(!t.on_ro(5), "the RO-SSD copy is stale");
    // A rewrite during an in-flight flush makes that flush stale.
    let started = t.start_flushes(4, &mut out);
    t.access(5, true, &mut out);
    t.flush_done(started[0].0, started[0].1);
    assert!(!t.on_ro(5));
    assert_eq!(t.dram().write_len(), 1);
}

#[test]
fn read_lookup_order_and_miss_fill() {
    let mut t = tica(4, 8, Policy::Ef);
    let mut out = Vec::new();
    t.access(1, false, &mut out);
    assert_eq!(
        out,
        vec![
            Op::fg(Dev::Hdd, OpKind::Read, 1, 0),
            Op::fg(Dev::Dram, OpKind::Write, 1, 1)
        ]
    );
    out.clear();
    t.access(1, false, &mut out);
    assert_eq!(out, vec![Op::fg(Dev::Dram, OpKind::Read, 1, 0)]);
    let s = t.stats();
    assert_eq!((s.misses, s.dram_hits), (1, 1));
}

#[test]
fn ef_drops_and_wed_copies_dram_victims() {
    // DRAM of 4 pages: write baseline 1, read partition 3.
    for (policy, copies) in [(Policy::Ef, 0), (Policy::Wed, 1)] {
        let mut t = tica(4, 8, policy);
        let mut out = Vec::new();
        for p in 1..=4 {
            t.access(p, false, &mut out);
        }
        assert_eq!(count(&out, Dev::WoSsd, OpKind::Write), copies, "{policy}");
        assert_eq!(t.on_wo(1), copies == 1);
        out.clear();
        t.access(1, false, &mut out);
        let hit = if copies == 1 { Dev::WoSsd } else { Dev::Hdd };
        assert_eq!(out[0], Op::fg(hit, OpKind::Read, 1, 0));
    }
}

#[test]
fn wo_victim_is_written_back_and_discarded_from_both_ssds() {
    let mut t = tica(8, 2, Policy::Ef);
    let mut out = Vec::new();
    t.access(1, true, &mut out);
    let s = t.start_flushes(4, &mut out);
    t.flush_done(s[0].0, s[0].1);
    t.access(2, true, &mut out);
    out.clear();
    t.access(3, true, &mut out); // WO-SSD full: victim 1 (LRU)
    assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::Read, 1, 0)));
    assert!(out.contains(&Op::fg(Dev::Hdd, OpKind::Write, 1, 1)));
    assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::Trim, 1, 1)));
    assert!(out.contains(&Op::fg(Dev::WoSsd, OpKind::Trim, 1, 1)));
    assert!(!t.on_wo(1) && !t.on_ro(1));
    assert_eq!(t.stats().writebacks, 1);
    // Victim 2 still in DRAM (not flushed): written back from DRAM and
    // dropped from DRAM too.
    out.clear();
    t.access(4, true, &mut out);
    assert!(out.contains(&Op::fg(Dev::Dram, OpKind::Read, 2, 0)));
    assert!(t.dram().write_slot(2).is_none());
    for (p, devs) in t.dirty_copies() {
        assert!(devs.len() >= 2, "page {p} on {devs:?}");
    }
}

#[test]
fn full_write_partition_grows_then_waits_for_a_flush() {
    // DRAM 8 pages, write baseline 2. Growth credit per full event is
    // 2 / W: page 2 finds W = 2 full, credit 1 -> W = 3; page 3 finds
    // W = 3 full, credit 2/3 -> no growth: the oldest pending page (0)
    // has no flush in flight, so it is flushed in the foreground.
    let mut t = tica(8, 64, Policy::Ef);
    let mut out = Vec::new();
    for p in 0..3 {
        t.access(p, true, &mut out);
    }
    assert_eq!(t.dram().write_cap(), 3);
    out.clear();
    t.access(3, true, &mut out);
    assert_eq!(t.dram().write_cap(), 3);
    assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::Write, 0, 1)));
    assert!(t.on_ro(0));
    // Page 4: credit 2/3 + 2/3 >= 1 -> W = 4, no wait.
    out.clear();
    t.access(4, true, &mut out);
    assert_eq!(t.dram().write_cap(), 4);
    assert!(!out.iter().any(|o| o.dev == Dev::RoSsd));
    // Page 5: credit 1/3 + 2/4 < 1 and page 1's flush is in flight:
    // the write waits for it.
    let s = t.start_flushes(1, &mut Vec::new());
    assert_eq!(s[0].0, 1);
    out.clear();
    t.access(5, true, &mut out);
    assert_eq!(t.dram().write_cap(), 4);
    assert!(out.contains(&Op::fg(Dev::RoSsd, OpKind::WaitFlush, 1, 0)));
    assert!(t.on_ro(1));
    assert_eq!(t.dram().write_len(), 4);
}

#[test]
fn read_miss_shrinks_an_extended_write_partition() {
    let mut t = tica(8, 64, Policy::Ef);
    let mut out = Vec::new();
    for p in 0..3 {
        t.access(p, true, &mut out);
    }
    assert_eq!(t.dram().write_cap(), 3);
    let s = t.start_flushes(8, &mut out);
    for (p, g) in s {
        t.flush_done(p, g);
    }
    for p in 100..105 {
        t.access(p, false, &mut out); // read partition 8 - 3 = 5 pages
    }
    assert_eq!(t.dram().write_cap(), 3);
    t.access(105, false, &mut out); // read partition full: shrink
    assert_eq!(t.dram().write_cap(), 2);
    assert_eq!(
        t.dram().read_len(),
        6,
        "the freed slot went to the read page"
    );
    t.access(106, false, &mut out); // at baseline: evict instead
    assert_eq!(t.dram().write_cap(), 2);
    assert_eq!(t.dram().read_len(), 6);
}

#[test]
fn adaptive_switches_to_wed_when_dram_thrashes() {
    // DRAM of 4 pages (read partition 3), window 8: a loop over 5 pages.
    // Window 1: 0..4 cold misses, then 0, 1, 2 miss DRAM but hit the EQ:
    // gain 3/8 > 0.15 -> WED.
    let mut t = tica(4, 64, Policy::Adaptive);
    let mut out = Vec::new();
    assert_eq!(t.mode(), Mode::Ef);
    for i in 0..8u64 {
        t.access(i % 5, false, &mut out);
    }
    assert_eq!(t.identifier().mode(), Mode::Wed);
    assert_eq!(t.mode(), Mode::Wed);
    assert_eq!(t.stats().misses, 8);
    // In WED DRAM victims go to the WO-SSD, where the loop then hits.
    for i in 8..24u64 {
        t.access(i % 5, false, &mut out);
    }
    assert!(t.stats().promotions > 0);
    assert!(t.stats().wo_ssd_hits > 0);
    // EF alone never leaves the HDD on the same loop.
    let mut ef = tica(4, 64, Policy::Ef);
    for i in 0..24u64 {
        ef.access(i % 5, false, &mut out);
    }
    assert_eq!(ef.stats().misses, 24);
    assert!(t.stats().misses < 24);
}

#[test]
fn trim_drops_dirty_data_everywhere() {
    let mut t = tica(8, 8, Policy::Ef);
    let mut out = Vec::new();
    t.access(9, true, &mut out);
    t.trim(9, &mut out);
    assert!(t.dirty_copies().is_empty());
    assert!(!t.on_wo(9));
    assert_eq!(t.dram().write_len(), 0);
}

#[test]
fn warm_finds_pages_anywhere_and_changes_nothing() {
    // Two policies see the same accesses; one is warmed before each.
    let (mut a, mut b) = (tica(8, 16, Policy::Adaptive), tica(8, 16, Policy::Adaptive));
    let (mut oa, mut ob) = (Vec::new(), Vec::new());
    let mut x = 12345u64;
    for i in 0..2000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (p, write) = ((x >> 33) % 40, (x >> 20).is_multiple_of(3));
        for q in 0..40 {
            b.warm(q);
        }
        a.access(p, write, &mut oa);
        b.access(p, write, &mut ob);
        if i % 7 == 0 {
            let (sa, sb) = (a.start_flushes(2, &mut oa), b.start_flushes(2, &mut ob));
            assert_eq!(sa, sb);
            for (q, g) in sa {
                a.flush_done(q, g);
                b.flush_done(q, g);
            }
        }
        assert_eq!(oa, ob, "access {i}");
        assert!(b.warm(p), "page {p} was just accessed");
    }
    assert_eq!(a.stats(), b.stats());
    assert_eq!(a.dirty_copies(), b.dirty_copies());
    assert!(!b.warm(1000), "a page never accessed");
}

/// Shrinking the SSDs' capacity evicts the least recently used pages (a
/// dirty one written back first), keeps every other dirty page on two
/// devices, and growing it back lets more pages in without a victim.
#[test]
fn set_ssd_pages_evicts_the_lru_pages_and_grows_without_victims() {
    let mut t = tica(8, 6, Policy::Ef);
    let mut out = Vec::new();
    for p in 1..=5 {
        t.access(p, true, &mut out);
    }
    let s = t.start_flushes(8, &mut out);
    for (p, gen) in s {
        t.flush_done(p, gen);
    }
    out.clear();
    t.set_ssd_pages(3, &mut out);
    assert_eq!(t.config().ssd_pages, 3);
    assert_eq!(t.wo_len(), 3);
    for p in [1, 2] {
        assert!(!t.on_wo(p), "LRU page {p} evicted");
        assert!(out.contains(&Op::bg(Dev::Hdd, OpKind::Write, p)));
        assert!(out.contains(&Op::bg(Dev::WoSsd, OpKind::Trim, p)));
    }
    assert!(out.iter().all(|o| !o.fg), "background ops only: {out:?}");
    for (p, devs) in t.dirty_copies() {
        assert!(devs.len() >= 2, "page {p} on {devs:?}");
    }
    out.clear();
    t.set_ssd_pages(6, &mut out);
    assert!(out.is_empty(), "growing needs no op: {out:?}");
    for p in 10..13 {
        t.access(p, true, &mut out);
    }
    assert_eq!(count(&out, Dev::Hdd, OpKind::Write), 0, "no victim");
    assert_eq!(t.wo_len(), 6);
}
