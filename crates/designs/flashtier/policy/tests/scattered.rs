//! FlashTier on scattered, write-heavy workloads of our own making: single
//! 4-KiB blocks (Zipf 0.99 over 131,072 blocks, 90 % writes) each placed on
//! its own over a disk range 4 x the footprint, so nearly every 64-page disk
//! extent holds a block or two; and a second one with another seed, footprint,
//! spread and write share (1,000,000 requests over 65,536 blocks, spread 8,
//! 95 % writes, seed 7).
//!
//! Checked against Table VII's directions: SSC-V and the page-mapped SSCs
//! erase less and write less than the SSD cache; SSC-V misses less than SSC.
//! The hybrid SSC keeps the paper's extent-aligned data blocks and its fixed
//! log, which must be merged (no silent eviction of log blocks), so here it
//! erases more than the SSD (docs/reproduction.md explains why; the test
//! records it so a change of that direction is noticed).
//!
//! The hit-ratio target (within a few points of the SSD cache):
//!
//! - The prototype's page-mapped SSC (`page`, SSC-P) misses 9.6 and 11.5
//!   points more: silent eviction drops every clean valid page of its victim
//!   and copies none (FlashTier 6.2), so the stale copies left by overwrites
//!   are never compacted away and take about half the flash.
//! - Section 4.3's log/data split on the page-mapped layer (`page-log`: log
//!   blocks garbage-collected by copying, only data blocks silently evicted)
//!   compacts the log and comes to +3.8 / +3.2 points (SSC / SSC-V) on
//!   "scattered" and +5.1 / +4.3 on "scattered-b" (2026-11-26), with erases
//!   and write amplification about a quarter of the SSD's. It does not reach
//!   3 points on "scattered-b": the data region, which is only evicted, keeps
//!   the stale copies of blocks rewritten after they left the log (a third of
//!   its pages).
//!
//! The tests check those explanations: an SSD cache holding only as many
//! blocks as the SSC keeps mapped misses about as often as the SSC.

use tiercache_flashtier_policy::reproduce::{format_vii, simulate, table_vii, Workload};
use tiercache_flashtier_policy::workload::ZipfParams;
use tiercache_flashtier_policy::{DeviceKind, FlashReport, FtlKind, ManagerKind};

/// Most points the page-log SSC (7 % log) and SSC-V (20 % log) may miss
/// above the SSD cache on "scattered" (measured +3.83 and +3.16).
const SCATTERED_BOUNDS: [f64; 2] = [4.0, 3.5];
/// The same on "scattered-b" (measured +5.13 and +4.29).
const SCATTERED_B_BOUNDS: [f64; 2] = [5.5, 4.5];

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

/// SSC and SSC-V on the page-log layer (their SSD is the page layer's).
fn page_log_rows(w: &Workload) -> Vec<FlashReport> {
    let cap = w.capacity_for(0.25);
    let rows: Vec<FlashReport> = [DeviceKind::Ssc, DeviceKind::SscV]
        .into_iter()
        .map(|k| {
            simulate(
                w,
                k,
                FtlKind::PageLog,
                ManagerKind::WriteThrough,
                cap,
                false,
            )
            .unwrap()
        })
        .collect();
    let named: Vec<(String, _)> = rows.iter().map(|r| (w.name.clone(), r.clone())).collect();
    eprintln!("{}", format_vii(&named));
    rows
}

/// Section 4.3's split on the page-mapped layer (`r`) against the
/// page-mapped SSD `ssd` and the prototype's SSC `proto` of the same device
/// kind: it erases and writes less than the SSD, compacts the log (copies,
/// so far more blocks stay cached than in the prototype's SSC), evicts data
/// blocks silently, misses more than the SSD by at most `bound` points, and
/// the excess is mostly capacity (an SSD cache of its size misses within 1
/// point of it).
fn split_within(
    w: &Workload,
    r: &FlashReport,
    ssd: &FlashReport,
    proto: &FlashReport,
    bound: f64,
) -> f64 {
    less_wear(r, ssd);
    assert!(r.ftl.gc_page_copies > 0 && r.ftl.silent_evictions > 0);
    assert!(
        r.ftl.mapped_pages as f64 > 1.3 * proto.ftl.mapped_pages as f64,
        "{} holds {} blocks, the prototype's {}",
        r.mode,
        r.ftl.mapped_pages,
        proto.ftl.mapped_pages
    );
    let gap = (r.miss_rate - ssd.miss_rate) * 100.0;
    eprintln!(
        "{} {}: miss {gap:+.2} points vs the SSD",
        r.ftl_kind, r.mode
    );
    assert!(
        gap > 0.0 && gap <= bound,
        "{} {}: {gap:+.2}",
        r.ftl_kind,
        r.mode
    );
    assert!(gap < proto_gap(proto, ssd) - 4.0);
    let same_size = capacity_explains_misses(w, r, ssd, 0.8);
    assert!(same_size < 1.0, "{same_size}");
    gap
}

fn proto_gap(proto: &FlashReport, ssd: &FlashReport) -> f64 {
    (proto.miss_rate - ssd.miss_rate) * 100.0
}

/// SSC-V's larger log helps, as in Table VII: fewer erases, less write
/// amplification and fewer misses than SSC.
fn variable_log_helps(ssc: &FlashReport, sscv: &FlashReport) {
    assert!(sscv.ftl.erases < ssc.ftl.erases);
    assert!(sscv.ftl.write_amplification < ssc.ftl.write_amplification);
    assert!(sscv.miss_rate < ssc.miss_rate);
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
/// Returns the SSC's miss-rate excess over that smaller SSD, in points.
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
    same_size
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
        capacity_explains_misses(&w, r, pssd, 0.6);
        // The prototype's SSC misses the hit-ratio target by far
        // (docs/reproduction.md, "Scattered writes"); a change of that is a
        // model change to document.
        assert!(proto_gap(r, pssd) > 8.0, "{}", proto_gap(r, pssd));
    }
    let pl = page_log_rows(&w);
    split_within(&w, &pl[0], pssd, pssc, SCATTERED_BOUNDS[0]);
    split_within(&w, &pl[1], pssd, psscv, SCATTERED_BOUNDS[1]);
    variable_log_helps(&pl[0], &pl[1]);
    for r in [ssc, sscv, pssc, psscv, &pl[0], &pl[1]] {
        eprintln!(
            "{} {}: miss rate {:+.2} points vs the SSD on the same layer",
            r.ftl_kind,
            r.mode,
            (r.miss_rate - if r.ftl_kind == "hybrid" { ssd } else { pssd }.miss_rate) * 100.0
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
        capacity_explains_misses(&w, r, ssd, 0.6);
        assert!(proto_gap(r, ssd) > 8.0, "{}", proto_gap(r, ssd));
    }
    let pl = page_log_rows(&w);
    split_within(&w, &pl[0], ssd, ssc, SCATTERED_B_BOUNDS[0]);
    split_within(&w, &pl[1], ssd, sscv, SCATTERED_B_BOUNDS[1]);
    variable_log_helps(&pl[0], &pl[1]);
}
