//! FlashTier's Table VI and VII directions on write-heavy workloads: SSC and
//! SSC-V write less and erase less than an SSD cache; the FlashTier manager
//! needs far less host memory than the native one.

use std::path::Path;
use tiercache_flashtier_policy::reproduce::{
    format_vi, format_vii, table_vi, table_vii, RecordIter, Workload,
};
use tiercache_flashtier_policy::workload::ZipfParams;
use tiercache_flashtier_policy::FtlKind;

const IOZONE: &str = "../../../../../shared/traces/disksim/ssd-iozone-aligned2-100K.trace";

fn iozone() -> Option<Workload> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(IOZONE);
    if !p.exists() {
        eprintln!("SKIP: shared trace {} is absent", p.display());
        return None;
    }
    Some(
        Workload::new("iozone", move || {
            let r =
                tiercache_trace::open(&p, None, &Default::default()).map_err(|e| e.to_string())?;
            Ok(Box::new(r.map(|x| x.map_err(|e| e.to_string()))) as RecordIter)
        })
        .unwrap(),
    )
}

fn zipf() -> Workload {
    Workload::zipf(ZipfParams {
        requests: 150_000,
        extents: 16_384,
        ..ZipfParams::default()
    })
    .unwrap()
}

fn check_vii(w: &Workload, ftl: FtlKind) {
    let rows = table_vii(w, ftl, 0.25).unwrap();
    let named: Vec<(String, _)> = rows.iter().map(|r| (w.name.clone(), r.clone())).collect();
    eprintln!("{}", format_vii(&named));
    let (ssd, ssc, sscv) = (&rows[0], &rows[1], &rows[2]);
    for r in [ssc, sscv] {
        assert!(
            r.ftl.write_amplification < ssd.ftl.write_amplification,
            "{} {}: WA {} not below SSD {}",
            w.name,
            r.mode,
            r.ftl.write_amplification,
            ssd.ftl.write_amplification
        );
        assert!(
            r.ftl.erases < ssd.ftl.erases,
            "{} {}: erases",
            w.name,
            r.mode
        );
        assert!(r.ftl.silent_evictions > 0);
        eprintln!(
            "{} {} {}: miss rate change vs SSD {:+.2} points",
            w.name,
            ftl,
            r.mode,
            (r.miss_rate - ssd.miss_rate) * 100.0
        );
    }
    assert_eq!(ssd.ftl.silent_evictions, 0);
}

#[test]
fn iozone_ssc_and_ssc_v_write_and_erase_less_than_ssd() {
    let Some(w) = iozone() else { return };
    check_vii(&w, FtlKind::Hybrid);
    check_vii(&w, FtlKind::PageLog);
}

#[test]
fn zipf_ssc_and_ssc_v_write_and_erase_less_than_ssd() {
    let w = zipf();
    check_vii(&w, FtlKind::Hybrid);
    check_vii(&w, FtlKind::Page);
    check_vii(&w, FtlKind::PageLog);
}

#[test]
fn table_vi_memory_directions_on_zipf() {
    let w = zipf();
    let rows = table_vi(&w, 0.25).unwrap();
    let named: Vec<(String, _)> = rows.iter().map(|r| (w.name.clone(), r.clone())).collect();
    eprintln!("{}", format_vi(&named));
    let (ssd, ssc, sscv) = (&rows[0], &rows[1], &rows[2]);
    // Host: the FlashTier write-back manager tracks only dirty blocks (at most
    // 20 % of the cache), the native one every cached block.
    for r in [ssc, sscv] {
        assert!(
            r.host_memory_bytes * 4 < ssd.host_memory_bytes,
            "{}",
            r.mode
        );
        // The sparse map costs bytes per cached block independent of the disk
        // range; a dense map over the disk range costs far more.
        assert!(
            r.map_comparison.sparse_bytes_per_block
                < r.map_comparison.dense_disk_range_bytes_per_block
        );
        assert!(r
            .persistence
            .as_ref()
            .is_some_and(|p| p.log_records > 0 && p.recovery_ms > 0.0));
    }
    // Device: SSC-V reserves page-level translations for a 20 % log.
    assert!(sscv.device_memory_bytes > ssc.device_memory_bytes);
    assert!(ssd.persistence.is_none());
}
