//! FlashTier on scattered, write-heavy workloads of our own making: single
//! 4-KiB blocks (Zipf 0.99 over 131,072 blocks, 90 % writes) each placed on
//! its own over a disk range 4 x the footprint, so nearly every 64-page disk
//! extent holds a block or two; and a second one with another seed, footprint,
//! spread and write share (1,000,000 requests over 65,536 blocks, spread 8,
//! 95 % writes, seed 7).
//!
//! Checked against Table VII's directions: SSC-V and the page-mapped SSC
//! (SSC-P) erase less and write less than the SSD cache; SSC-V misses less
//! than SSC. The hybrid SSC keeps the paper's extent-aligned data blocks and
//! its fixed log, which must be merged (no silent eviction of log blocks), so
//! here it erases more than the SSD (docs/reproduction.md explains why; the
//! test records it so a change of that direction is noticed).
//!
//! The hit-ratio part of issue 21's target (within a few points of the SSD
//! cache) is not met by the page-mapped SSC either: silent eviction drops
//! every clean valid page of its victim and copies none (FlashTier 6.2), so
//! the stale copies left by overwrites are never compacted away and take
//! about half the flash. The tests check that explanation: an SSD cache
//! holding only as many blocks as the SSC keeps mapped misses about as often
//! as the SSC.

use tiercache_flash::reproduce::{format_vii, simulate, table_vii, Workload};
use tiercache_flash::workload::ZipfParams;
use tiercache_flash::{DeviceKind, FlashReport, FtlKind, ManagerKind};

fn scattered() -> Workload {
    let mut w = Workload::zipf(ZipfParams::scattered(400_000, 131_072, 4)).unwrap();
    w.name = "scattered".into();
    w
}

fn scattered_b() -> Workload {
    let p = ZipfParams {
        seed: 7,
        write_share: 0.95,
        ..ZipfParams::scattered(1_000_000, 65_536, 8)
    };
    let mut w = Workload::zipf(p).unwrap();
    w.name = "scattered-b".into();
    w
}

fn rows(w: &Workload, ftl: FtlKind) -> Vec<FlashReport> {
    let rows = table_vii(w, ftl, 0.25).unwrap();
    let named: Vec<(String, _)> = rows.iter().map(|r| (w.name.clone(), r.clone())).collect();
    eprintln!("{}", format_vii(&named));
    rows
}

fn less_wear(r: &FlashReport, ssd: &FlashReport) {
    assert!(
        r.ftl.erases < ssd.ftl.erases,
        "{} {}: {} erases, SSD {}",
        r.ftl_kind,
        r.mode,
        r.ftl.erases,
        ssd.ftl.erases
    );
    assert!(
        r.ftl.write_amplification < ssd.ftl.write_amplification,
        "{} {}: WA {}, SSD {}",
        r.ftl_kind,
        r.mode,
        r.ftl.write_amplification,
        ssd.ftl.write_amplification
    );
}

/// The page-mapped SSC `r` misses more than the SSD cache `ssd` because it
/// holds fewer blocks, not because it picks worse ones: its mapped blocks
/// stay under `max_full` of its capacity while the SSD's fill it, and an SSD
/// cache sized to the SSC's mapped blocks misses within 3 points of the SSC.
/// Returns the SSC's miss-rate excess over `ssd`, in points.
fn capacity_explains_misses(
    w: &Workload,
    r: &FlashReport,
    ssd: &FlashReport,
    max_full: f64,
) -> f64 {
    let full = |x: &FlashReport| x.ftl.mapped_pages as f64 / x.cache_capacity_blocks as f64;
    assert!(full(ssd) > 0.95, "SSD holds {}", full(ssd));
    assert!(full(r) < max_full, "{} holds {}", r.mode, full(r));
    // The SSD exports 93 % of its flash.
    let cap = (r.ftl.mapped_pages as f64 / 0.93).ceil() as u64 * 4096;
    let small = simulate(
        w,
        DeviceKind::Ssd,
        FtlKind::Page,
        ManagerKind::WriteThrough,
        cap,
        false,
    )
    .unwrap();
    assert!(small.cache_capacity_blocks >= r.ftl.mapped_pages);
    let gap = (r.miss_rate - ssd.miss_rate) * 100.0;
    let same_size = (r.miss_rate - small.miss_rate) * 100.0;
    eprintln!(
        "{} {} {}: miss {:+.2} points vs the SSD; an SSD of {} blocks: {:+.2}",
        w.name, r.ftl_kind, r.mode, gap, small.cache_capacity_blocks, same_size
    );
    assert!(small.miss_rate > ssd.miss_rate);
    assert!(same_size.abs() < 3.0, "{same_size}");
    gap
}

#[test]
fn scattered_writes_ssc_v_and_ssc_p_erase_and_write_less_than_ssd() {
    let w = scattered();
    // The workload really is scattered: about 61 k unique blocks over about
    // 8 k disk extents of 64 blocks, under 8 per extent.
    assert!(w.footprint_blocks > 50_000, "{}", w.footprint_blocks);
    let h = rows(&w, FtlKind::Hybrid);
    let (ssd, ssc, sscv) = (&h[0], &h[1], &h[2]);
    less_wear(sscv, ssd);
    // Hybrid SSC: write amplification below the SSD's (silent eviction of
    // data blocks), and SSC-V's variable log misses less than SSC.
    assert!(ssc.ftl.write_amplification < ssd.ftl.write_amplification);
    assert!(
        sscv.miss_rate < ssc.miss_rate,
        "{} {}",
        sscv.miss_rate,
        ssc.miss_rate
    );
    // Data blocks are made by merges, not one per scattered write: SSC-V's
    // merges are nearly all switch or partial merges of sequential log blocks.
    assert!(sscv.ftl.full_merges * 10 < sscv.ftl.partial_merges + sscv.ftl.switch_merges + 1);
    let p = rows(&w, FtlKind::Page);
    let (pssd, pssc, psscv) = (&p[0], &p[1], &p[2]);
    less_wear(pssc, pssd);
    less_wear(psscv, pssd);
    // The page-mapped SSC packs scattered blocks densely: it misses less
    // than either hybrid SSC.
    assert!(pssc.miss_rate < ssc.miss_rate.min(sscv.miss_rate));
    for r in [pssc, psscv] {
        let gap = capacity_explains_misses(&w, r, pssd, 0.6);
        // Issue 21's hit-ratio target is not met here (docs/reproduction.md,
        // "Scattered writes"); a change of that is a model change to document.
        assert!(gap > 2.5, "{gap}");
    }
    for r in [ssc, sscv, pssc, psscv] {
        eprintln!(
            "{} {}: miss rate {:+.2} points vs the SSD on the same layer",
            r.ftl_kind,
            r.mode,
            (r.miss_rate - if r.ftl_kind == "page" { pssd } else { ssd }.miss_rate) * 100.0
        );
    }
}

#[test]
fn second_scattered_workload_page_mapped_sscs_erase_and_write_less_than_ssd() {
    let w = scattered_b();
    assert!(w.footprint_blocks > 50_000, "{}", w.footprint_blocks);
    let p = rows(&w, FtlKind::Page);
    let (ssd, ssc, sscv) = (&p[0], &p[1], &p[2]);
    less_wear(ssc, ssd);
    less_wear(sscv, ssd);
    for r in [ssc, sscv] {
        // No copies: every clean page of a victim is dropped.
        assert_eq!(r.ftl.gc_page_copies, 0);
        let gap = capacity_explains_misses(&w, r, ssd, 0.6);
        assert!(gap > 2.5, "{gap}");
    }
}
