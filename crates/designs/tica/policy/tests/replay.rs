//! Timed replay of synthetic traces through every architecture.

use tiercache_block::IoKind;
use tiercache_tica_policy::sim::{Replay, SimConfig};
use tiercache_tica_policy::{Arch, Policy};
use tiercache_trace::Record;

const ARCHS: [Arch; 5] = [
    Arch::UCache,
    Arch::Srac,
    Arch::Tica(Policy::Ef),
    Arch::Tica(Policy::Wed),
    Arch::Tica(Policy::Adaptive),
];

fn rec(page: u64, kind: IoKind) -> tiercache_trace::Result<Record> {
    Ok(Record {
        time_ns: 0,
        offset: page * 4096,
        len: 4096,
        kind,
        class: None,
    })
}

/// A deterministic pseudo-random mix of reads, writes and trims.
fn mixed(n: u64) -> Vec<tiercache_trace::Result<Record>> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let page = (x >> 8) % 300;
            let kind = match x % 10 {
                0..=5 => IoKind::Read,
                6..=8 => IoKind::Write,
                _ => IoKind::Trim,
            };
            rec(page, kind)
        })
        .collect()
}

#[test]
fn dirty_data_is_never_on_a_single_device_during_a_timed_replay() {
    for arch in ARCHS {
        let mut cfg = SimConfig::new(arch, 8, 40);
        cfg.check_dirty_copies = true;
        let r = tiercache_tica_policy::run(mixed(5000), &cfg)
            .unwrap_or_else(|e| panic!("{}: {e}", arch.name()));
        assert_eq!(r.requests, 5000);
        assert!(r.mean_response_us > 0.0);
    }
}

#[test]
fn a_working_set_that_fits_in_dram_hits_dram_after_the_first_pass() {
    // 4 pages read 10 times, DRAM of 16 pages: 4 misses, 36 DRAM hits.
    for arch in ARCHS {
        let recs: Vec<_> = (0..40).map(|i| rec(i % 4, IoKind::Read)).collect();
        let r = tiercache_tica_policy::run(recs, &SimConfig::new(arch, 16, 64)).unwrap();
        assert_eq!(r.stats.misses, 4, "{}", arch.name());
        assert_eq!(r.stats.dram_hits, 36, "{}", arch.name());
        assert_eq!(r.hdd_reads, 4);
        assert!((r.dram_hit_ratio - 0.9).abs() < 1e-12);
    }
}

#[test]
fn mirrored_baselines_write_each_page_twice_tica_once_per_ssd() {
    // 20 distinct page writes, everything fits: the mirrors write 40 pages;
    // TICA writes 20 to the WO-SSD and, once the flusher drains, 20 to the
    // RO-SSD.
    let recs = || (0..20).map(|p| rec(p, IoKind::Write)).collect::<Vec<_>>();
    let u = tiercache_tica_policy::run(recs(), &SimConfig::new(Arch::UCache, 64, 64)).unwrap();
    assert_eq!((u.wo_ssd_writes, u.ro_ssd_writes), (40, 0));
    let t = tiercache_tica_policy::run(recs(), &SimConfig::new(Arch::Tica(Policy::Ef), 64, 64))
        .unwrap();
    assert_eq!(t.wo_ssd_writes, 20);
    assert_eq!(t.ro_ssd_writes, 20);
    assert_eq!(t.ssd_writes, 40);
    // Table I: TICA's SSD pair is (0.74 + 0.842) / (2 * 0.842) of the mirror's.
    let dram_usd = 7.875 * (64.0 * 4096.0) / 1e9;
    let ratio = (t.cost_usd - dram_usd) / (u.cost_usd - dram_usd);
    assert!((ratio - 1.582 / 1.684).abs() < 1e-9);
}

#[test]
fn open_replay_waits_for_trace_timestamps() {
    // Two reads 1 s apart: the elapsed time covers the gap.
    let recs = vec![
        rec(1, IoKind::Read),
        Ok(Record {
            time_ns: 1_000_000_000,
            ..rec(2, IoKind::Read).unwrap()
        }),
    ];
    let mut cfg = SimConfig::new(Arch::Tica(Policy::Ef), 16, 64);
    cfg.replay = Replay::Open;
    let r = tiercache_tica_policy::run(recs, &cfg).unwrap();
    assert!(r.elapsed_s >= 1.0);
}

#[test]
fn bad_sizes_are_refused_with_a_reason() {
    let mut cfg = SimConfig::new(Arch::UCache, 1, 64);
    let e = tiercache_tica_policy::run(Vec::new(), &cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("too small"), "{e}");
    cfg.dram_pages = 16;
    cfg.page_bytes = 1000;
    let e = tiercache_tica_policy::run(Vec::new(), &cfg)
        .unwrap_err()
        .to_string();
    assert!(e.contains("power of two"), "{e}");
}
