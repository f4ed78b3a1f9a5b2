//! CrashDev: unflushed writes are visible before a crash and lost (or torn
//! per sector) by one; flushed and FUA writes survive.

use crate::common;

use std::sync::Arc;

use common::{assert_same, random_bytes, rng, scratch_dir};
use tiercache_io::{BlockDev, CrashDev, CrashMode, FileDev, FileDevOptions, MemDev};

fn read(dev: &dyn BlockDev, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    dev.read_at(&mut b, off).unwrap();
    b
}

#[test]
fn crash_drops_unflushed_writes_and_trims() {
    let media = Arc::new(MemDev::new("media", 1 << 16));
    let dev = CrashDev::new(media.clone());
    dev.write_at(&[b'A'; 1000], 0).unwrap();
    dev.flush().unwrap();
    assert_eq!(dev.unflushed_ops(), 0);
    dev.write_at(&[b'B'; 500], 250).unwrap();
    dev.trim(900, 50).unwrap();
    assert_eq!(dev.unflushed_ops(), 2);
    // Before the crash readers see the volatile cache.
    let mut expected = vec![b'A'; 1000];
    expected[250..750].fill(b'B');
    expected[900..950].fill(0);
    assert_same(&read(&dev, 0, 1000), &expected, "before crash");
    // The media does not have them yet.
    assert_same(&read(&*media, 0, 1000), &[b'A'; 1000], "media before crash");
    let report = dev.crash(CrashMode::DropAll).unwrap();
    assert_eq!(report.unflushed_ops, 2);
    assert_eq!(report.pieces_lost, 2);
    assert_eq!(dev.unflushed_ops(), 0);
    assert_same(&read(&dev, 0, 1000), &[b'A'; 1000], "after crash");
}

#[test]
fn keep_first_applies_a_prefix_in_order() {
    let media = Arc::new(MemDev::new("media", 4096));
    let dev = CrashDev::new(media);
    dev.write_at(&[1; 100], 0).unwrap();
    dev.write_at(&[2; 100], 50).unwrap();
    dev.write_at(&[3; 100], 100).unwrap();
    let report = dev.crash(CrashMode::KeepFirst(2)).unwrap();
    assert_eq!((report.pieces_kept, report.pieces_lost), (2, 1));
    let mut expected = vec![0u8; 200];
    expected[..100].fill(1);
    expected[50..150].fill(2);
    assert_same(&read(&dev, 0, 200), &expected, "first two writes, in order");
}

#[test]
fn flushed_and_fua_writes_survive() {
    let dev = CrashDev::new(Arc::new(MemDev::new("media", 4096)));
    dev.write_at(b"flushed", 0).unwrap();
    dev.flush().unwrap();
    dev.write_at(b"lost", 100).unwrap();
    dev.write_at_fua(b"fua", 200).unwrap();
    dev.write_at(b"lost too", 300).unwrap();
    dev.crash(CrashMode::DropAll).unwrap();
    assert_eq!(read(&dev, 0, 7), b"flushed");
    assert_eq!(read(&dev, 200, 3), b"fua");
    assert_eq!(read(&dev, 300, 8), vec![0; 8]);
}

#[test]
fn torn_crash_keeps_whole_sectors_of_old_or_new_data() {
    let len = 64 * 1024;
    let old = random_bytes(&mut rng(1), len);
    let new = random_bytes(&mut rng(2), len);
    let run = |seed: u64| {
        let dev = CrashDev::new(Arc::new(MemDev::from_vec("media", old.clone())));
        // Unaligned start: the first and last pieces are partial sectors.
        let (off, l) = (100usize, 40 * 512);
        dev.write_at(&new[off..off + l], off as u64).unwrap();
        let report = dev.crash(CrashMode::Torn { seed }).unwrap();
        (read(&dev, 0, len), report)
    };
    let (after, report) = run(9);
    // Pieces: [100, 512), 39 whole sectors, [20480, 20580).
    assert_eq!(report.pieces_kept + report.pieces_lost, 41);
    assert!(
        report.pieces_kept > 0 && report.pieces_lost > 0,
        "{report:?}"
    );
    let mut kept = 0;
    let mut bounds = vec![100usize];
    bounds.extend((1..=40).map(|s| s * 512));
    bounds.push(100 + 40 * 512);
    for w in bounds.windows(2) {
        let (a, b) = (w[0], w[1]);
        if after[a..b] == new[a..b] {
            kept += 1;
        } else {
            assert_same(
                &after[a..b],
                &old[a..b],
                &format!("piece {a}..{b} is old or new"),
            );
        }
    }
    assert_eq!(kept, report.pieces_kept);
    assert_same(&after[..100], &old[..100], "before the write");
    assert_same(&after[20580..], &old[20580..], "after the write");
    assert_eq!(run(9).0, after, "same seed, same tearing");
}

#[test]
fn crash_of_a_real_file_keeps_what_was_flushed() {
    let dir = scratch_dir();
    let path = dir.path().join("crash.img");
    let file = Arc::new(FileDev::create(&path, 1 << 20, FileDevOptions::default()).unwrap());
    let dev = CrashDev::new(file);
    let a = random_bytes(&mut rng(3), 10_000);
    let b = random_bytes(&mut rng(4), 10_000);
    dev.write_at(&a, 5000).unwrap();
    dev.flush().unwrap();
    dev.write_at(&b, 5000).unwrap();
    assert_same(&read(&dev, 5000, 10_000), &b, "unflushed data is readable");
    dev.crash(CrashMode::DropAll).unwrap();
    drop(dev);
    let on_disk = std::fs::read(&path).unwrap();
    assert_same(&on_disk[5000..15_000], &a, "file after crash");
}
