//! Shared by the exactness tests: the libCacheSim reference and the traces.

#![allow(dead_code)] // each test binary uses a subset

use serde::Deserialize;
use std::path::{Path, PathBuf};
use tiercache_trace::{Format, ReadOptions};

/// libCacheSim's results, as written by `scripts/libcachesim_reference.py`.
#[derive(Deserialize)]
pub struct Reference {
    pub libcachesim_version: String,
    pub results: Vec<Entry>,
}

/// One (trace, policy, cache size) hit ratio.
#[derive(Deserialize)]
pub struct Entry {
    pub trace: String,
    pub trace_path: String,
    pub requests: usize,
    pub policy: String,
    pub cache_size_objects: u32,
    pub hit_ratio: f64,
}

/// The shared trace folder, or `None` (after saying so) when it is absent.
pub fn trace_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TIERCACHE_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/work/shared/traces"));
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: trace directory {} not found (set TIERCACHE_TRACES to the shared traces)",
            dir.display()
        );
        None
    }
}

/// `tests/reference/libcachesim.json`.
pub fn reference() -> Reference {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../tests/reference/libcachesim.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Bytes per line: ARC pages and CloudPhysics blocks are counted in 512-byte
/// units by the trace readers.
pub const LINE: u64 = 512;

/// The trace's requests as (byte offset, byte length).
pub fn records(path: &Path) -> Vec<(u64, u64)> {
    let format = if path.to_string_lossy().contains(".lis") {
        Format::ArcLis
    } else {
        Format::Cloudphysics
    };
    let reader = tiercache_trace::open(path, Some(format), &ReadOptions::default())
        .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    reader
        .map(|rec| {
            let rec = rec.unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (rec.offset, u64::from(rec.len))
        })
        .collect()
}

/// One line number per request, each multi-block request expanded into
/// single-line requests.
pub fn lines(path: &Path) -> Vec<u64> {
    let mut out = Vec::new();
    for (offset, len) in records(path) {
        out.extend(offset / LINE..(offset + len) / LINE);
    }
    out
}
