//! Unit tests of the log-structured cache: requests, cleaning and recovery round trips.

use super::*;
use crate::layout::{format, FormatOptions};
use crate::recovery::open_with_devices;
use crate::segment::BLOCK;
use tiercache_io::{FileDev, FileDevOptions};

fn dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
}

/// Block `b` at version `v`.
fn block(b: u64, v: u64) -> Vec<u8> {
    let mut d = vec![0u8; BLOCK as usize];
    for w in d.chunks_mut(16) {
        w[..8].copy_from_slice(&b.to_le_bytes());
        w[8..].copy_from_slice(&v.to_le_bytes());
    }
    d
}
fn version(b: u64, d: &[u8]) -> u64 {
    assert_eq!(&d[..8], &b.to_le_bytes(), "block {b} holds another block");
    u64::from_le_bytes(d[8..16].try_into().unwrap())
}

/// A write-back cache (64 KiB segments: 14 slots) over 1024 blocks at version 0.
fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let backing = dir.join("backing.img");
    let data: Vec<u8> = (0..1024).flat_map(|b| block(b, 0)).collect();
    std::fs::write(&backing, data).unwrap();
    let cache = dir.join("cache.img");
    format(&FormatOptions {
        cache: cache.clone(),
        backing: backing.clone(),
        create_size: Some(1 << 20),
        write_policy: WritePolicy::WriteBack,
        dirty_target: 0.9,
        seg_bytes: 64 << 10,
        force: false,
    })
    .unwrap();
    (cache, backing)
}

fn write(c: &LogCache, first: u64, n: u64, v: u64) {
    let d: Vec<u8> = (first..first + n).flat_map(|b| block(b, v)).collect();
    c.write(first * BLOCK, &d, false).unwrap();
}

/// Block 32 is written (v1, segment A), overwritten and flushed (v2,
/// segment B), written back by write-back cleaning; segment cleaning then
/// drops its clean copy from B and B is reused. A crash must not bring
/// back A's older dirty copy: the backing device holds v2. With
/// `restart`, the cache is killed and recovered between the flush and
/// the cleaning (recovery replays both copies, B's last); with
/// `checkpoint`, A's copy is in the checkpoint rather than the journal.
fn older_dirty_copy_stays_buried(restart: bool, checkpoint: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path());
    let mut c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    write(&c, 32, 1, 1); // segment A: 32 v1 ...
    write(&c, 100, 13, 1); // ... and 13 more: A is full
    if checkpoint {
        let mut st = c.lock().unwrap();
        c.checkpoint(&mut st).unwrap();
    }
    write(&c, 32, 1, 2); // segment B: 32 v2 ...
    write(&c, 200, 13, 1); // ... B is full
    write(&c, 300, 1, 1); // B sealed
    c.flush().unwrap();
    if restart {
        drop(c); // kill -9
        c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
        assert_eq!(version(32, &c.read(32 * BLOCK, BLOCK as usize).unwrap()), 2);
    }
    {
        let mut st = c.lock().unwrap();
        let st = &mut *st;
        let b = st.map.get(32).unwrap().slot / c.data_blocks;
        // Write-back cleaning: everything clean (no checkpoint).
        while c.write_back_some(st, 1024).unwrap() > 0 {}
        assert_eq!(st.map.dirty(), 0);
        // Segment cleaning of B drops its clean copy of block 32.
        c.clean_segment(st, b).unwrap();
        assert!(st.map.get(32).is_none());
        // Open segments until B's next life begins.
        while st.free.front() != Some(&b) {
            c.roll(st).unwrap();
        }
        c.roll(st).unwrap();
        assert_eq!(st.open, Some(b));
    }
    assert_eq!(version(32, &c.read(32 * BLOCK, BLOCK as usize).unwrap()), 2);
    drop(c); // kill -9
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let got = version(32, &c.read(32 * BLOCK, BLOCK as usize).unwrap());
    assert_eq!(got, 2, "block 32 after the crash: stale version {got}");
}

#[test]
fn reusing_a_segment_never_resurrects_an_older_dirty_copy() {
    older_dirty_copy_stays_buried(false, false);
}

#[test]
fn reusing_a_segment_never_resurrects_an_older_checkpointed_copy() {
    older_dirty_copy_stays_buried(false, true);
}

#[test]
fn reusing_a_segment_after_a_restart_never_resurrects_an_older_dirty_copy() {
    older_dirty_copy_stays_buried(true, false);
}
