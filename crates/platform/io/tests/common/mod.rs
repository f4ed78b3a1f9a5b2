//! Shared test helpers: scratch files on a disk file system, random data.
#![allow(dead_code)]

use std::path::Path;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use tempfile::TempDir;
use tiercache_io::FileDevOptions;

/// Read-write with O_DIRECT.
pub const DIRECT: FileDevOptions = FileDevOptions {
    direct: true,
    read_only: false,
};
/// Read-write through the page cache.
pub const BUFFERED: FileDevOptions = FileDevOptions {
    direct: false,
    read_only: false,
};

/// A scratch directory on a real disk file system. tmpfs (usually `/tmp`)
/// refuses `O_DIRECT`, so prefer `/var/tmp`, then the target directory.
pub fn scratch_dir() -> TempDir {
    for base in ["/var/tmp", env!("CARGO_TARGET_TMPDIR")] {
        if Path::new(base).is_dir() {
            if let Ok(d) = tempfile::Builder::new()
                .prefix("tiercache-io-test-")
                .tempdir_in(base)
            {
                return d;
            }
        }
    }
    tempfile::tempdir().expect("create a temporary directory")
}

pub fn rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

pub fn random_bytes(rng: &mut Xoshiro256PlusPlus, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// Index of the first differing byte, for readable failures.
pub fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or(if a.len() == b.len() {
            None
        } else {
            Some(a.len().min(b.len()))
        })
}

#[track_caller]
pub fn assert_same(actual: &[u8], expected: &[u8], what: &str) {
    if let Some(i) = first_diff(actual, expected) {
        panic!(
            "{what}: first difference at byte {i} (lengths {} and {}): got {:?}, expected {:?}",
            actual.len(),
            expected.len(),
            actual.get(i),
            expected.get(i)
        );
    }
}
