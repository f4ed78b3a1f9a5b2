//! FlashTier on a scattered, write-heavy workload of our own making: single
//! 4-KiB blocks (Zipf 0.99 over 131,072 blocks, 90 % writes) each placed on
//! its own over a disk range 4 x the footprint, so nearly every 64-page disk
//! extent holds a block or two.
//!
//! Checked against Table VII's directions: SSC-V and the page-mapped SSC
//! (SSC-P) erase less and write less than the SSD cache; SSC-V misses less
//! than SSC. The hybrid SSC keeps the paper's extent-aligned data blocks and
//! its fixed log, which must be merged (no silent eviction of log blocks), so
//! here it erases more than the SSD (docs/reproduction.md explains why; the
//! test records it so a change of that direction is noticed).

use tiercache_flash::reproduce::{format_vii, table_vii, Workload};
use tiercache_flash::workload::ZipfParams;
use tiercache_flash::{FlashReport, FtlKind};

fn scattered() -> Workload {
    let mut w = Workload::zipf(ZipfParams::scattered(400_000, 131_072, 4)).unwrap();
    w.name = "scattered".into();
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
    for r in [ssc, sscv, pssc, psscv] {
        eprintln!(
            "{} {}: miss rate {:+.2} points vs the SSD on the same layer",
            r.ftl_kind,
            r.mode,
            (r.miss_rate - if r.ftl_kind == "page" { pssd } else { ssd }.miss_rate) * 100.0
        );
    }
}
