//! Fuzzing the log-structured cache's on-disk decoders with the seeded
//! mutation driver of `tiercache-fuzz`:
//! - each decoder (superblock, segment summary, checkpoint, journal
//!   record) on mutated valid encodings, also with the checksum fixed up so
//!   mutations reach the field checks: never a panic; a single flipped bit
//!   is always rejected (every byte is under a CRC);
//! - whole crashed caches with corrupted metadata (superblock copies,
//!   journal, checkpoints, segment summaries; some superblocks with a
//!   recomputed CRC and nonsense geometry), opened and checked: an error or
//!   a cache whose every block reads back as data that was written there
//!   (never garbage), and never a panic.
//!
//! Long run: `TIERCACHE_FUZZ_CASES=1000000 cargo test -p tiercache-flashtier-live --test fuzz_decoders`.

use std::sync::Arc;

use tiercache_flashtier_live::checkpoint::{Checkpoint, CheckpointHead, JournalRecord};
use tiercache_flashtier_live::segment::{entry, Geometry, Summary, EMPTY};
use tiercache_flashtier_live::{format, open_with_devices, FormatOptions, Superblock, BLOCK};
use tiercache_fuzz::Rng;
use tiercache_io::MemDev;

const BACKING_BLOCKS: u64 = 256;
const SEG: u64 = 64 << 10;

/// Block `lba` as written in `version` (version 0: the backing's content).
fn block(lba: u64, version: u64) -> Vec<u8> {
    let mut d = vec![0u8; BLOCK as usize];
    for (i, c) in d.chunks_mut(16).enumerate() {
        c[..8].copy_from_slice(&lba.to_le_bytes());
        c[8..].copy_from_slice(&(version ^ (i as u64) << 32).to_le_bytes());
    }
    d
}

/// Whether `d` is block `lba` of some version.
fn is_block_of(lba: u64, d: &[u8]) -> bool {
    let v = u64::from_le_bytes(d[8..16].try_into().unwrap());
    d == block(lba, v)
}

/// A crashed cache image (writes flushed, never shut down) and its backing.
fn crashed_cache() -> (Vec<u8>, Vec<u8>, Superblock) {
    let dir = tempfile::tempdir().unwrap();
    let backing: Vec<u8> = (0..BACKING_BLOCKS).flat_map(|b| block(b, 0)).collect();
    std::fs::write(dir.path().join("backing"), &backing).unwrap();
    let sb = format(&FormatOptions {
        cache: dir.path().join("cache"),
        backing: dir.path().join("backing"),
        create_size: Some(1 << 20),
        write_policy: tiercache_flashtier_live::WritePolicy::WriteBack,
        dirty_target: 0.5,
        seg_bytes: SEG,
        force: false,
        max_size: None,
        compress: Default::default(),
    })
    .unwrap();
    let cache = Arc::new(MemDev::from_vec(
        "cache",
        std::fs::read(dir.path().join("cache")).unwrap(),
    ));
    let bdev = Arc::new(MemDev::from_vec("backing", backing));
    let lc = open_with_devices(cache.clone(), bdev.clone(), &dir.path().join("backing")).unwrap();
    let mut rng = Rng(7);
    for v in 1..=120u64 {
        let lba = rng.below(BACKING_BLOCKS);
        lc.write(lba * BLOCK, &block(lba, v), v % 7 == 0).unwrap();
        if v % 10 == 0 {
            lc.flush().unwrap();
        }
    }
    lc.flush().unwrap();
    drop(lc);
    (cache.snapshot(), bdev.snapshot(), sb)
}

/// Rewrite the CRC of a superblock copy at `at` after a mutation.
fn fix_superblock_crc(img: &mut [u8], at: usize) {
    let crc = crc32c::crc32c(&img[at..at + 4092]);
    img[at + 4092..at + 4096].copy_from_slice(&crc.to_le_bytes());
}

fn corrupt(rng: &mut Rng, img: &mut Vec<u8>, sb: &Superblock) -> String {
    let g = sb.geometry();
    if rng.one_in(4) {
        // A superblock with a valid CRC and nonsense fields: both copies.
        let field = 12 + 8 * rng.below(12) as usize;
        let v = [0, 1, 4096, u32::MAX as u64, u64::MAX, rng.next_u64()][rng.below(6) as usize];
        for at in [0usize, 4096] {
            img[at + field..at + field + 8].copy_from_slice(&v.to_le_bytes());
            fix_superblock_crc(img, at);
        }
        return format!("superblock field at {field} = {v:#x}, CRC fixed");
    }
    let region = if rng.one_in(2) {
        0..sb.seg_off as usize
    } else {
        let s = sb.seg_off + rng.below(sb.nsegs as u64) * sb.seg_bytes;
        s as usize..(s + 2 * g.summary_offset(1)) as usize
    };
    tiercache_fuzz::corrupt_image(rng, img, region, BLOCK as usize)
}

#[test]
fn fuzz_corrupted_caches() {
    let (image, backing, sb) = crashed_cache();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let cfg = tiercache_fuzz::Config::from_env(300);
    let mut opened = 0u64;
    tiercache_fuzz::run_with(
        "log-structured-image",
        cfg,
        |rng| {
            let mut img = image.clone();
            let what = corrupt(rng, &mut img, &sb);
            (img, (what, rng.one_in(4)))
        },
        |(img, (what, run_check))| {
            if *run_check {
                std::fs::write(&path, img).unwrap();
                let _ = tiercache_flashtier_live::check(&path); // must not panic
            }
            let cache = Arc::new(MemDev::from_vec("cache", img.clone()));
            let bdev = Arc::new(MemDev::from_vec("backing", backing.clone()));
            let Ok(lc) = open_with_devices(cache, bdev, &path) else {
                return;
            };
            opened += 1;
            for lba in 0..BACKING_BLOCKS {
                if let Ok(d) = lc.read(lba * BLOCK, BLOCK as usize) {
                    assert!(is_block_of(lba, &d), "{what}: block {lba} reads garbage");
                }
            }
        },
    );
    eprintln!("log-structured-image: {opened} corrupted caches opened");
}

fn superblock_sample() -> Vec<u8> {
    let mut sb = tiercache_flashtier_live::layout::plan(64 << 20, 1 << 20).unwrap();
    sb.backing_size = 1 << 30;
    sb.backing_path = "/dev/backing".into();
    sb.encode()
}

fn summary_sample(g: &Geometry) -> Vec<u8> {
    let entries = (0..g.data_blocks() as u64)
        .map(|i| {
            if i % 3 == 0 {
                EMPTY
            } else {
                entry(i * 7, i % 2 == 0)
            }
        })
        .collect();
    Summary {
        seg: 3,
        seq: 9,
        version: 2,
        entries,
    }
    .encode(g)
}

fn checkpoint_sample() -> Vec<u8> {
    Checkpoint {
        head: CheckpointHead {
            epoch: 4,
            next_seq: 12,
            open_seg: 1,
            open_seq: 11,
            open_count: 3,
            seg_seqs: vec![10, 11, 0, 5],
        },
        entries: (0..40).map(|i| (i * 3, i % 2 == 0, i as u32)).collect(),
    }
    .encode()
}

fn journal_sample() -> Vec<u8> {
    JournalRecord {
        epoch: 4,
        index: 0,
        seg: 2,
        seq: 12,
    }
    .encode()
}

/// Recompute the CRC(s) of a mutated encoding of decoder `k`, so that
/// mutations reach the checks behind them.
fn fix_crc(k: usize, b: &mut [u8]) {
    match k {
        0 if b.len() >= 4096 => fix_superblock_crc(b, 0),
        1 if b.len() >= 40 => {
            b[28..32].fill(0);
            let crc = crc32c::crc32c(b);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
        }
        2 if b.len() >= 56 => {
            let crc = crc32c::crc32c(&b[..52]);
            b[52..56].copy_from_slice(&crc.to_le_bytes());
        }
        3 if b.len() >= 32 => {
            let crc = crc32c::crc32c(&b[..28]);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
        }
        _ => {}
    }
}

fn decode(k: usize, b: &[u8], g: &Geometry) -> bool {
    match k {
        0 => Superblock::decode(b).is_some(),
        1 => Summary::decode(b, 3, g).is_some() | Summary::pick(&[b, b].concat(), 3, g).is_some(),
        2 => Checkpoint::decode(b).is_some(),
        _ => JournalRecord::decode(b).is_some(),
    }
}

#[test]
fn fuzz_metadata_decoders() {
    let g = Geometry::new(1 << 20).unwrap();
    let samples = [
        superblock_sample(),
        summary_sample(&g),
        checkpoint_sample(),
        journal_sample(),
    ];
    for (k, s) in samples.iter().enumerate() {
        assert!(decode(k, s, &g), "sample {k} does not decode");
    }
    let cfg = tiercache_fuzz::Config::from_env(20_000);
    tiercache_fuzz::run_with(
        "log-structured-decoders",
        cfg,
        |rng| {
            let k = rng.below(4) as usize;
            let s = &samples[k];
            let mut b = s.clone();
            let mode = rng.below(3);
            if mode == 0 {
                // One flipped bit where a CRC covers it: always detected.
                let covered: &[(usize, usize)] = match k {
                    2 => &[(0, 56), (4096, 4096 + 8 * 4 + 12 * 40)],
                    3 => &[(0, 32)],
                    _ => &[(0, usize::MAX)],
                };
                let (start, end) = covered[rng.below(covered.len() as u64) as usize];
                let at = start + rng.below((end.min(b.len()) - start) as u64) as usize;
                b[at] ^= 1 << rng.below(8);
            } else {
                b = tiercache_fuzz::input(rng, std::slice::from_ref(s), s.len() + 64);
                if mode == 2 {
                    fix_crc(k, &mut b);
                }
            }
            (b, (k, mode))
        },
        |(b, (k, mode))| {
            let ok = decode(*k, b, &g);
            if *mode == 0 {
                assert!(!ok, "decoder {k} accepted a flipped bit");
            }
        },
    );
}

// Regressions found by the fuzzers above.

#[test]
fn a_superblock_with_a_valid_crc_and_impossible_geometry_is_no_cache() {
    // Found by fuzz_corrupted_caches: journal_records = u32::MAX under a
    // valid CRC made recovery allocate 16 TiB and abort.
    let (mut image, backing, _) = crashed_cache();
    for at in [0usize, 4096] {
        // journal_records is the 5th u64 field (offset 22 + 8 * 4).
        image[at + 54..at + 62].copy_from_slice(&(u32::MAX as u64).to_le_bytes());
        fix_superblock_crc(&mut image, at);
    }
    let cache = Arc::new(MemDev::from_vec("cache", image));
    assert!(Superblock::read(cache.as_ref()).is_none());
    let bdev = Arc::new(MemDev::from_vec("backing", backing));
    let e = open_with_devices(cache, bdev, std::path::Path::new("/b"))
        .err()
        .expect("refused");
    assert!(
        e.to_string().contains("no log-structured cache superblock"),
        "{e}"
    );
}

#[test]
fn a_superblock_at_the_last_generation_is_not_wrapped() {
    // Found by fuzz_corrupted_caches: generation u64::MAX overflowed (a
    // panic; wrapping to 0 would have let the older copy win).
    let mut sb = Superblock::decode(&superblock_sample()).unwrap();
    sb.generation = u64::MAX;
    let dev = MemDev::new("cache", 64 << 20);
    let e = sb.write(&dev).unwrap_err();
    assert!(e.to_string().contains("generation"), "{e}");
}

#[test]
fn a_short_summary_buffer_is_missing_copies_not_a_panic() {
    // Found by fuzz_metadata_decoders: pick sliced past a short buffer.
    let g = Geometry::new(1 << 20).unwrap();
    let s = summary_sample(&g);
    assert!(Summary::pick(&s[..100], 3, &g).is_none());
    assert_eq!(
        Summary::pick(&s, 3, &g).map(|s| s.seq),
        Some(9),
        "copy 0 alone"
    );
}
