//! FileDev against a plain in-memory reference: unaligned round trips with
//! and without O_DIRECT, concurrent read-modify-write of shared blocks, trim,
//! and range errors. (Block devices: the `block_dev` tests.)

use crate::common;

use std::io;
use std::path::Path;
use std::sync::Arc;

use common::{assert_same, random_bytes, rng, scratch_dir, BUFFERED, DIRECT};
use rand::RngExt;
use tiercache_io::{BlockDev, FileDev, FileDevOptions};

/// Open with O_DIRECT, or say why the direct variant of a test is skipped.
fn open_direct(path: &Path, len: u64) -> Option<FileDev> {
    let dev = FileDev::create(path, len, DIRECT).expect("create test file");
    if dev.is_direct() {
        Some(dev)
    } else {
        eprintln!(
            "SKIP O_DIRECT variant: the file system under {} refuses O_DIRECT",
            path.display()
        );
        None
    }
}

/// Random writes and reads at unaligned offsets, lengths and buffer
/// addresses, checked against a Vec; then the whole file read back with
/// std::fs (an independent path) must equal the reference.
fn round_trips(dev: &FileDev, path: &Path, seed: u64) {
    let len = dev.len() as usize;
    let mut reference = vec![0u8; len];
    let mut r = rng(seed);
    // Hand-picked edges: inside one block, across a block boundary, exactly
    // aligned, the last bytes of the device, a single byte, empty.
    let mut cases: Vec<(usize, usize)> = vec![
        (1, 10),
        (4090, 12),
        (4096, 4096),
        (8192, 3 * 4096),
        (len - 7, 7),
        (len - 4096, 4096),
        (0, 1),
        (12345, 0),
        (511, 1026),
    ];
    for _ in 0..400 {
        let l = r.random_range(1..20_000usize);
        cases.push((r.random_range(0..len - l), l));
    }
    for (i, &(off, l)) in cases.iter().enumerate() {
        // Misalign the buffer address on purpose half of the time.
        let shift = i % 2;
        let backing = random_bytes(&mut r, l + shift);
        let data = &backing[shift..];
        dev.write_at(data, off as u64).unwrap();
        reference[off..off + l].copy_from_slice(data);

        let (roff, rl) = if l > 2 && i % 3 == 0 {
            (off + 1, l - 2) // a strict sub-range
        } else {
            (
                off.saturating_sub(100),
                (l + 200).min(len - off.saturating_sub(100)),
            )
        };
        let mut out = vec![0u8; rl + 1];
        dev.read_at(&mut out[1..], roff as u64).unwrap();
        assert_same(
            &out[1..],
            &reference[roff..roff + rl],
            &format!("read after write #{i}"),
        );
    }
    dev.flush().unwrap();
    let on_disk = std::fs::read(path).unwrap();
    assert_same(&on_disk, &reference, "file contents read with std::fs");
}

#[test]
fn buffered_round_trips_at_unaligned_offsets() {
    let dir = scratch_dir();
    let path = dir.path().join("buffered.img");
    let dev = FileDev::create(&path, 1 << 20, BUFFERED).unwrap();
    assert!(!dev.is_direct());
    round_trips(&dev, &path, 1);
}

#[test]
fn direct_round_trips_at_unaligned_offsets() {
    let dir = scratch_dir();
    let path = dir.path().join("direct.img");
    let Some(dev) = open_direct(&path, 1 << 20) else {
        return;
    };
    let a = dev.direct_alignment().unwrap();
    assert!(a.is_power_of_two() && a >= 512, "alignment {a}");
    round_trips(&dev, &path, 2);
}

#[test]
fn direct_falls_back_to_buffered_when_size_is_unaligned() {
    let dir = scratch_dir();
    let path = dir.path().join("odd.img");
    let dev = FileDev::create(&path, 10_000, DIRECT).unwrap();
    assert!(
        !dev.is_direct(),
        "a 10000-byte file cannot be used with O_DIRECT"
    );
    dev.write_at(b"tail", 9_996).unwrap();
    let mut b = [0u8; 4];
    dev.read_at(&mut b, 9_996).unwrap();
    assert_eq!(&b, b"tail");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 10_000);
}

/// Many threads write disjoint byte ranges that share blocks; with O_DIRECT
/// each write read-modify-writes whole blocks, so without per-block locking
/// some writes would be lost.
fn concurrent_shared_blocks(dev: Arc<FileDev>) {
    const THREADS: usize = 8;
    const PIECE: usize = 24; // bytes per write, not a divisor of 4096
    const ROUNDS: usize = 400;
    let span = THREADS * PIECE * ROUNDS; // about 19 blocks of 4 KiB
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let dev = Arc::clone(&dev);
            s.spawn(move || {
                for k in 0..ROUNDS {
                    let off = 1000 + (k * THREADS + t) * PIECE;
                    let byte = (t * 31 + k) as u8 | 1;
                    dev.write_at(&[byte; PIECE], off as u64).unwrap();
                }
            });
        }
    });
    let mut out = vec![0u8; span];
    dev.read_at(&mut out, 1000).unwrap();
    let mut expected = vec![0u8; span];
    for k in 0..ROUNDS {
        for t in 0..THREADS {
            let at = (k * THREADS + t) * PIECE;
            expected[at..at + PIECE].fill((t * 31 + k) as u8 | 1);
        }
    }
    assert_same(&out, &expected, "concurrent writes sharing blocks");
}

#[test]
fn direct_concurrent_writes_sharing_blocks_are_all_kept() {
    let dir = scratch_dir();
    let path = dir.path().join("shared.img");
    let Some(dev) = open_direct(&path, 1 << 20) else {
        return;
    };
    concurrent_shared_blocks(Arc::new(dev));
}

#[test]
fn buffered_concurrent_writes_sharing_blocks_are_all_kept() {
    let dir = scratch_dir();
    let path = dir.path().join("shared-buffered.img");
    concurrent_shared_blocks(Arc::new(FileDev::create(&path, 1 << 20, BUFFERED).unwrap()));
}

/// Whether this file system punches holes (checked directly with fallocate).
fn punch_hole_supported(dir: &Path) -> bool {
    let probe = dir.join("probe");
    let f = std::fs::File::create(&probe).unwrap();
    f.set_len(8192).unwrap();
    let flags = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    match rustix::fs::fallocate(&f, flags, 0, 4096) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("SKIP trim-reads-zeros check: fallocate(PUNCH_HOLE) unsupported here ({e})");
            false
        }
    }
}

fn trim_reads_zeros(options: FileDevOptions, name: &str) {
    let dir = scratch_dir();
    if !punch_hole_supported(dir.path()) {
        return;
    }
    let path = dir.path().join(name);
    let len = 256 * 1024;
    let dev = FileDev::create(&path, len, options).unwrap();
    let mut reference = vec![0xABu8; len as usize];
    dev.write_at(&reference, 0).unwrap();
    // Unaligned on both ends, then an aligned range, then the very end.
    for (off, l) in [
        (3 * 4096 + 100, 10_000u64),
        (64 * 1024, 32 * 1024),
        (len - 5, 5),
    ] {
        dev.trim(off, l).unwrap();
        reference[off as usize..(off + l) as usize].fill(0);
    }
    let mut out = vec![0u8; len as usize];
    dev.read_at(&mut out, 0).unwrap();
    assert_same(&out, &reference, "contents after trim");
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        len,
        "trim keeps the size"
    );
    assert_same(
        &std::fs::read(&path).unwrap(),
        &reference,
        "file after trim (std::fs)",
    );
}

#[test]
fn trim_of_a_file_range_reads_back_zeros_buffered() {
    trim_reads_zeros(BUFFERED, "trim-buffered.img");
}

#[test]
fn trim_of_a_file_range_reads_back_zeros_direct() {
    trim_reads_zeros(DIRECT, "trim-direct.img");
}

#[test]
fn out_of_range_requests_fail_without_side_effects() {
    let dir = scratch_dir();
    let path = dir.path().join("bounds.img");
    let dev = FileDev::create(&path, 8192, BUFFERED).unwrap();
    let mut buf = [0u8; 16];
    let e = dev.read_at(&mut buf, 8190).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    let e = dev.write_at(&buf, 8190).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("0..8192"), "{e}");
    let e = dev.trim(8000, 1000).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    // The file did not grow.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192);
}

#[test]
fn read_only_devices_refuse_writes() {
    let dir = scratch_dir();
    let path = dir.path().join("ro.img");
    std::fs::write(&path, vec![7u8; 4096]).unwrap();
    let dev = FileDev::open(
        &path,
        FileDevOptions {
            direct: false,
            read_only: true,
        },
    )
    .unwrap();
    let mut b = [0u8; 4];
    dev.read_at(&mut b, 10).unwrap();
    assert_eq!(b, [7; 4]);
    assert!(dev.write_at(b"x", 0).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 4096]);
}

#[test]
fn opening_a_directory_or_missing_file_says_what_is_wrong() {
    let dir = scratch_dir();
    let e = FileDev::open(dir.path(), BUFFERED)
        .err()
        .expect("a directory is refused");
    assert!(
        e.to_string().contains(&dir.path().display().to_string()),
        "{e}"
    );
    let missing = dir.path().join("missing.img");
    let e = FileDev::open(&missing, BUFFERED)
        .err()
        .expect("missing file");
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert!(e.to_string().contains("missing.img"), "{e}");
}
