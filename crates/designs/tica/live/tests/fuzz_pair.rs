//! Fuzzing the three-level cache's on-disk state with the seeded mutation
//! driver of `tiercache-fuzz`: a crashed pair (writes flushed, never shut
//! down) whose RO-SSD or WO-SSD has one metadata block damaged (superblock
//! with the pair description, checkpoint, log) or is truncated. Reading the
//! pair description and opening the pair must never panic; a pair that
//! opens serves every page as zeros or as a version written to that page
//! (never garbage, never another page's data).
//!
//! Long run: `TIERCACHE_FUZZ_CASES=1000000 cargo test -p tiercache-tica-live --test fuzz_pair`.

use std::sync::Arc;

use tiercache_fuzz::Rng;
use tiercache_io::MemDev;
use tiercache_tica_live::pair::{log_bytes, read_info, MetaDev};
use tiercache_tica_live::{format, open_with_devices, FormatOptions, PAGE};
use tiercache_tica_policy::Policy;

const PAGES: u64 = 1024;
const SSD: u64 = 4 << 20;

fn page(p: u64, v: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE as usize];
    for (i, c) in b.chunks_mut(16).enumerate() {
        c[..8].copy_from_slice(&p.to_le_bytes());
        c[8..].copy_from_slice(&(v ^ (i as u64) << 32).to_le_bytes());
    }
    b
}

fn is_page(p: u64, d: &[u8]) -> bool {
    let v = u64::from_le_bytes(d[8..16].try_into().unwrap());
    d.iter().all(|b| *b == 0) || d == page(p, v)
}

/// RO-SSD, WO-SSD and backing images of a crashed pair, and the directory
/// holding the backing file the pair was formatted for (its identity is
/// checked by path).
fn crashed_pair() -> ([Vec<u8>; 3], tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("backing"), vec![0u8; (PAGES * PAGE) as usize]).unwrap();
    format(&FormatOptions {
        ro_ssd: p("ro"),
        wo_ssd: p("wo"),
        backing: p("backing"),
        dram_bytes: 16 * PAGE,
        policy: Policy::Adaptive,
        create_size: Some(SSD),
        force: false,
        max_size: None,
    })
    .unwrap();
    let mem = |n: &str| Arc::new(MemDev::from_vec(n, std::fs::read(p(n)).unwrap()));
    let (ro, wo, bk) = (mem("ro"), mem("wo"), mem("backing"));
    let c = open_with_devices(ro.clone(), wo.clone(), bk.clone(), &p("backing")).unwrap();
    let mut rng = Rng(3);
    for v in 1..=400u64 {
        let pg = rng.below(PAGES / 4);
        c.write(pg * PAGE, &page(pg, v), v % 9 == 0).unwrap();
        if v % 25 == 0 {
            c.flush().unwrap();
        }
        if v % 40 == 0 {
            c.flusher_step(8).unwrap();
        }
    }
    c.flush().unwrap();
    drop(c);
    ([ro.snapshot(), wo.snapshot(), bk.snapshot()], dir)
}

#[test]
fn fuzz_damaged_pairs() {
    let (images, dir) = crashed_pair();
    let backing = dir.path().join("backing");
    // Superblocks, checkpoint and log lie in the first part of each SSD.
    let meta = (log_bytes(SSD) * 2 + (64 << 10)) as usize;
    let cfg = tiercache_fuzz::Config::from_env(200);
    let mut opened = 0u64;
    tiercache_fuzz::run_with(
        "tica-pair",
        cfg,
        |rng| {
            let which = rng.below(2) as usize;
            let mut img = images[which].clone();
            let what = tiercache_fuzz::corrupt_block(rng, &mut img, 0..meta, 4096);
            (img, (which, what))
        },
        |(img, (which, what))| {
            let dev = |b: &Vec<u8>| Arc::new(MemDev::from_vec("ssd", b.clone()));
            let damaged = dev(img);
            let _ = read_info(&MetaDev(damaged.clone())); // must not panic
            let (ro, wo) = if *which == 0 {
                (damaged, dev(&images[1]))
            } else {
                (dev(&images[0]), damaged)
            };
            let bk = dev(&images[2]);
            let Ok(c) = open_with_devices(ro, wo, bk, &backing) else {
                return;
            };
            opened += 1;
            for p in 0..PAGES / 4 {
                if let Ok(d) = c.read(p * PAGE, PAGE as usize) {
                    assert!(is_page(p, &d), "{what}: page {p} reads garbage");
                }
            }
        },
    );
    eprintln!("tica-pair: {opened} damaged pairs opened");
}

#[test]
fn the_undamaged_pair_opens_with_its_data() {
    let (images, dir) = crashed_pair();
    let dev = |b: &Vec<u8>| Arc::new(MemDev::from_vec("ssd", b.clone()));
    let c = open_with_devices(
        dev(&images[0]),
        dev(&images[1]),
        dev(&images[2]),
        &dir.path().join("backing"),
    )
    .unwrap();
    let written = (0..PAGES / 4)
        .filter(|p| {
            c.read(p * PAGE, PAGE as usize)
                .unwrap()
                .iter()
                .any(|b| *b != 0)
        })
        .count();
    assert!(written > 100, "only {written} pages hold data");
}

#[test]
fn a_wiped_checkpoint_header_is_not_taken_for_a_young_store() {
    // Found by fuzz_damaged_pairs (case 237): a zeroed block at 8 KiB (the
    // header of checkpoint region A) on the WO-SSD read as "never written",
    // so recovery took the older checkpoint in region B without checking
    // the log for a newer epoch, and served other pages' data.
    let (images, dir) = crashed_pair();
    let backing = dir.path().join("backing");
    for which in [0usize, 1] {
        let dev = |b: &Vec<u8>| Arc::new(MemDev::from_vec("ssd", b.clone()));
        let mut img = images[which].clone();
        img[8192..12288].fill(0);
        let (ro, wo) = if which == 0 {
            (dev(&img), dev(&images[1]))
        } else {
            (dev(&images[0]), dev(&img))
        };
        if let Ok(c) = open_with_devices(ro, wo, dev(&images[2]), &backing) {
            for p in 0..PAGES / 4 {
                let d = c.read(p * PAGE, PAGE as usize).unwrap();
                assert!(is_page(p, &d), "SSD {which}: page {p} reads garbage");
            }
        }
    }
}
