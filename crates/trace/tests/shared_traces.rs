//! Every shared trace parses fully, with counts matching
//! `/work/shared/notes/traces.md` (figures computed independently with
//! zstd/xz and awk when the notes were written). Skips when the shared folder
//! is absent.

use std::path::{Path, PathBuf};

use rustc_hash::FxHashSet;
use tiercache_core::IoKind;
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
