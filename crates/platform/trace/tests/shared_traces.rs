//! Every shared trace parses fully, with counts matching
//! `/work/shared/notes/traces.md` (figures computed independently with
//! zstd/xz and awk when the notes were written). Skips when the shared folder
//! is absent.

use std::path::{Path, PathBuf};

use rustc_hash::FxHashSet;
use tiercache_block::IoKind;
use tiercache_trace::{open, Format, ReadOptions, Record};

const TRACES: &str = "/work/shared/traces";

fn trace(rel: &str) -> Option<PathBuf> {
    let p = Path::new(TRACES).join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIP: shared trace {} is absent", p.display());
        None
    }
}

fn read_all(path: &Path, format: Option<Format>) -> Vec<Record> {
    open(path, format, &ReadOptions::default())
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

fn pages(recs: &[Record]) -> u64 {
    recs.iter().map(|r| u64::from(r.len / 512)).sum()
}

fn unique_pages(recs: &[Record]) -> usize {
    let mut set = FxHashSet::default();
    for r in recs {
        let first = r.offset / 512;
        for p in first..first + u64::from(r.len / 512) {
            set.insert(p);
        }
    }
    set.len()
}

#[test]
fn arc_oltp_pages_and_footprint() {
    let Some(p) = trace("arc/OLTP.lis.zst") else {
        return;
    };
    let recs = read_all(&p, None);
    assert_eq!(recs.len(), 914_145, "OLTP: every line is one page");
    assert_eq!(pages(&recs), 914_145);
    assert_eq!(unique_pages(&recs), 186_880);
    assert!(recs
        .iter()
        .all(|r| r.kind == IoKind::Read && r.time_ns == 0));
}

#[test]
fn arc_p2_lines_and_pages() {
    let Some(p) = trace("arc/P2.lis.zst") else {
        return;
    };
    let recs = read_all(&p, Some(Format::ArcLis));
    assert_eq!(recs.len(), 666_176);
    assert_eq!(pages(&recs), 12_729_495);
    assert_eq!(unique_pages(&recs), 913_347);
}

#[test]
fn arc_p3_lines_and_pages() {
    let Some(p) = trace("arc/P3.lis.zst") else {
        return;
    };
    let recs = read_all(&p, None);
    assert_eq!(recs.len(), 238_578);
    assert_eq!(pages(&recs), 3_912_296);
    assert_eq!(unique_pages(&recs), 762_543);
}

#[test]
fn cloudphysics_w106_requests_and_unique_ids() {
    let Some(p) = trace("cloudphysics/w106.trace.xz") else {
        return;
    };
    let recs = read_all(&p, Some(Format::Cloudphysics));
    assert_eq!(recs.len(), 5_292_456);
    let ids: FxHashSet<u64> = recs.iter().map(|r| r.offset / 512).collect();
    assert_eq!(ids.len(), 275_171);
    assert!(recs.iter().all(|r| r.len == 512 && r.kind == IoKind::Read));
}

#[test]
fn cloudphysics_w106_detected() {
    let Some(p) = trace("cloudphysics/w106.trace.xz") else {
        return;
    };
    assert_eq!(tiercache_trace::detect(&p).unwrap(), Format::Cloudphysics);
}

fn reads(recs: &[Record]) -> usize {
    recs.iter().filter(|r| r.kind == IoKind::Read).count()
}

fn pct(part: usize, all: usize) -> f64 {
    100.0 * part as f64 / all as f64
}

#[test]
fn disksim_postmark() {
    let Some(p) = trace("disksim/ssd-postmark-aligned2.trace") else {
        return;
    };
    let recs = read_all(&p, None);
    assert_eq!(recs.len(), 62_257);
    let r = pct(reads(&recs), recs.len());
    assert!((82.5..83.5).contains(&r), "read share {r}");
    // t = 8.0 .. 498.4 s in the notes: duration about 490.4 s.
    let last = recs.iter().map(|r| r.time_ns).max().unwrap();
    assert!(
        (490.0e9..491.0e9).contains(&(last as f64)),
        "duration {last}"
    );
    let mean = pages(&recs) as f64 / recs.len() as f64;
    assert!((444.0..446.0).contains(&mean), "mean sectors {mean}");
}

#[test]
fn disksim_iozone() {
    let Some(p) = trace("disksim/ssd-iozone-aligned2-100K.trace") else {
        return;
    };
    let recs = read_all(&p, Some(Format::Disksim));
    assert_eq!(recs.len(), 100_000);
    assert_eq!(reads(&recs), 0);
    let mean = pages(&recs) as f64 / recs.len() as f64;
    assert!((719.0..721.0).contains(&mean), "mean sectors {mean}");
}

#[test]
fn vscsi_sample() {
    let Some(p) = trace("samples/cloudPhysicsIO.vscsi") else {
        return;
    };
    let recs = read_all(&p, None);
    assert_eq!(recs.len(), 113_872);
    let r = pct(reads(&recs), recs.len());
    assert!((40.5..41.5).contains(&r), "read share {r}");
    let lbns: FxHashSet<u64> = recs.iter().map(|r| r.offset / 512).collect();
    assert_eq!(lbns.len(), 48_974);
}

#[test]
fn msr_sample() {
    let Some(p) = trace("samples/msr-cambridge1-sample.csv") else {
        return;
    };
    let recs = read_all(&p, None);
    assert_eq!(recs.len(), 1_000);
    assert_eq!(reads(&recs), 508);
    let span = recs.iter().map(|r| r.time_ns).max().unwrap();
    assert!(
        (120e9..135e9).contains(&(span as f64)),
        "~127 s window, got {span}"
    );
    let mean = recs.iter().map(|r| u64::from(r.len)).sum::<u64>() as f64 / 1000.0;
    assert!((9.0e3..10.5e3).contains(&mean), "mean size {mean}");
}

#[test]
fn tencent_sample() {
    let Some(p) = trace("samples/cloud_storage-sample.bz2") else {
        return;
    };
    let recs = read_all(&p, Some(Format::Tencent));
    assert_eq!(recs.len(), 50_000);
    let r = pct(reads(&recs), recs.len());
    assert!((48.5..49.5).contains(&r), "read share {r}");
    let mean = pages(&recs) as f64 / recs.len() as f64;
    assert!((58.5..59.5).contains(&mean), "mean sectors {mean}");
}

#[test]
fn systor_samples() {
    for (file, read_pct) in [
        ("samples/systor17-traces-sample.csv.gz", 83.0),
        ("samples/systor17-additional-sample.csv.gz", 70.0),
    ] {
        let Some(p) = trace(file) else { return };
        assert_eq!(tiercache_trace::detect(&p).unwrap(), Format::Systor);
        let recs = read_all(&p, None);
        assert_eq!(recs.len(), 999, "{file}");
        let r = pct(reads(&recs), recs.len());
        assert!((r - read_pct).abs() < 1.0, "{file}: read share {r}");
    }
}

#[test]
fn blkparse_sample_uses_queue_events() {
    let Some(p) = trace("samples/blktrace.txt") else {
        return;
    };
    let recs = read_all(&p, None);
    // Reference: awk '$6=="Q"' counts 15,524 queue events, all with data:
    // 80 R, 15,174 W, 2 WBS, 268 WS, none with M.
    assert_eq!(recs.len(), 15_524);
    assert_eq!(reads(&recs), 80);
    assert!(recs
        .iter()
        .all(|r| r.class == Some(tiercache_block::Class::Data)));
    let span = recs.iter().map(|r| r.time_ns).max().unwrap();
    assert!(
        (9.0e9..9.5e9).contains(&(span as f64)),
        "~9.4 s, got {span}"
    );
}

#[test]
fn every_shared_trace_is_detected() {
    let cases = [
        ("arc/OLTP.lis.zst", Format::ArcLis),
        ("arc/P2.lis.zst", Format::ArcLis),
        ("arc/P3.lis.zst", Format::ArcLis),
        ("cloudphysics/w106.trace.xz", Format::Cloudphysics),
        ("disksim/ssd-postmark-aligned2.trace", Format::Disksim),
        ("disksim/ssd-iozone-aligned2-100K.trace", Format::Disksim),
        ("samples/msr-cambridge1-sample.csv", Format::Msr),
        ("samples/cloud_storage-sample.bz2", Format::Tencent),
        ("samples/systor17-traces-sample.csv.gz", Format::Systor),
        ("samples/systor17-additional-sample.csv.gz", Format::Systor),
        ("samples/blktrace.txt", Format::Blkparse),
        ("samples/cloudPhysicsIO.vscsi", Format::Vscsi),
    ];
    for (rel, want) in cases {
        let Some(p) = trace(rel) else { continue };
        assert_eq!(tiercache_trace::detect(&p).unwrap(), want, "{rel}");
    }
}

#[test]
fn stats_footprints_match_the_notes() {
    use tiercache_trace::trace_stats;
    let opts = ReadOptions::default();
    if let Some(p) = trace("arc/OLTP.lis.zst") {
        let s = trace_stats(open(&p, None, &opts).unwrap(), 512).unwrap();
        assert_eq!(
            (s.requests, s.reads, s.unique_blocks),
            (914_145, 914_145, 186_880)
        );
        assert_eq!(s.footprint_bytes, 186_880 * 512);
        assert_eq!(s.duration_ns, 0, "ARC traces carry no time");
    }
    if let Some(p) = trace("arc/P2.lis.zst") {
        let s = trace_stats(open(&p, None, &opts).unwrap(), 512).unwrap();
        assert_eq!(s.bytes_read, 12_729_495 * 512);
        assert_eq!(s.unique_blocks, 913_347);
    }
    if let Some(p) = trace("cloudphysics/w106.trace.xz") {
        let s = trace_stats(open(&p, None, &opts).unwrap(), 512).unwrap();
        assert_eq!((s.requests, s.unique_blocks), (5_292_456, 275_171));
    }
    if let Some(p) = trace("samples/cloudPhysicsIO.vscsi") {
        let s = trace_stats(open(&p, None, &opts).unwrap(), 512).unwrap();
        assert_eq!(s.requests, 113_872);
        // ~2 h capture.
        let hours = s.duration_ns as f64 / 3.6e12;
        assert!((1.5..2.5).contains(&hours), "duration {hours} h");
    }
    if let Some(p) = trace("disksim/ssd-iozone-aligned2-100K.trace") {
        let s = trace_stats(open(&p, None, &opts).unwrap(), 4096).unwrap();
        assert_eq!((s.requests, s.writes, s.reads), (100_000, 100_000, 0));
        // t = 5.3 .. 941.7 s in the notes.
        let secs = s.duration_ns as f64 / 1e9;
        assert!((936.0..937.0).contains(&secs), "duration {secs} s");
    }
}
