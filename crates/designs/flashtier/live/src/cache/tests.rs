//! Unit tests of the log-structured cache: requests, cleaning and recovery round trips.

use super::*;
use crate::compress::Codec;
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
        compress: Default::default(),
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

/// A compressed write-back or write-through cache over 4096 blocks, data
/// area of 1 MiB (64 KiB segments).
fn setup_compressed(dir: &Path, codec: Codec, policy: WritePolicy) -> (PathBuf, PathBuf) {
    let backing = dir.join("backing.img");
    let data: Vec<u8> = (0..4096).flat_map(|b| block(b, 0)).collect();
    std::fs::write(&backing, data).unwrap();
    let cache = dir.join("cache.img");
    format(&FormatOptions {
        cache: cache.clone(),
        backing: backing.clone(),
        create_size: Some(2 << 20),
        write_policy: policy,
        dirty_target: 0.5,
        seg_bytes: 64 << 10,
        force: false,
        compress: codec,
    })
    .unwrap();
    (cache, backing)
}

/// Block `b` at version `v`, incompressible (the version and block number
/// stay readable in its first 16 bytes).
fn random_block(b: u64, v: u64) -> Vec<u8> {
    let mut x = (b * 1_000_003 + v) | 1;
    let mut d: Vec<u8> = (0..BLOCK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    d[..8].copy_from_slice(&b.to_le_bytes());
    d[8..16].copy_from_slice(&v.to_le_bytes());
    d
}

/// Random writes (compressible and not), reads, flushes, cleaning and
/// restarts (after a flush) against a model: every read returns the newest
/// version, and the compressed records never outlive their checksums.
fn compressed_model(codec: Codec, policy: WritePolicy, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup_compressed(dir.path(), codec, policy);
    let mut c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let mut model = vec![(0u64, false); 4096];
    let mut x = seed;
    let mut rnd = |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    for step in 1..3000u64 {
        let b = rnd(3000);
        let n = 1 + rnd(8).min(4095 - b);
        match rnd(10) {
            0..=4 => {
                let raw = rnd(4) == 0;
                let d: Vec<u8> = (b..b + n)
                    .flat_map(|k| {
                        if raw {
                            random_block(k, step)
                        } else {
                            block(k, step)
                        }
                    })
                    .collect();
                c.write(b * BLOCK, &d, rnd(20) == 0).unwrap();
                for k in b..b + n {
                    model[k as usize] = (step, raw);
                }
            }
            5..=8 => {
                let d = c.read(b * BLOCK, (n * BLOCK) as usize).unwrap();
                for (i, k) in (b..b + n).enumerate() {
                    let got = &d[i * BLOCK as usize..(i + 1) * BLOCK as usize];
                    let (v, raw) = model[k as usize];
                    let want = if raw { random_block(k, v) } else { block(k, v) };
                    assert!(got == want, "step {step}: block {k} is not version {v}");
                }
            }
            _ => {
                c.flush().unwrap();
                if rnd(8) == 0 {
                    drop(c); // kill -9 after a flush
                    c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
                }
            }
        }
    }
    let s = c.stats_json();
    let z = &s["compression"];
    assert!(z["stored_compressed_blocks"].as_u64().unwrap() > 0, "{z}");
    assert_eq!(z["checksum_errors"], 0, "{z}");
    assert!(s["mapped_blocks"].as_u64().unwrap() > 0);
    let r = crate::recovery::check(&cache);
    drop(c);
    assert!(r.is_ok());
    let r = crate::recovery::check(&cache).unwrap();
    assert!(r.is_ok(), "{r}");
}

#[test]
fn compressed_write_back_matches_the_model() {
    compressed_model(Codec::Lz4, WritePolicy::WriteBack, 1);
    compressed_model(Codec::Zstd(3), WritePolicy::WriteBack, 2);
}

#[test]
fn compressed_write_through_matches_the_model() {
    compressed_model(Codec::Lz4, WritePolicy::WriteThrough, 3);
}

/// Compressible data: the same data area holds about 4 times more blocks
/// than the plain layout's slots; incompressible data only as many.
#[test]
fn compression_grows_the_effective_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup_compressed(dir.path(), Codec::Lz4, WritePolicy::WriteThrough);
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let phys = {
        let st = c.lock().unwrap();
        st.sb.nsegs as u64 * c.geo.phys_blocks() as u64
    };
    // Read every block once (fills), twice.
    for _ in 0..2 {
        for b in (0..4096).step_by(8) {
            c.read(b * BLOCK, 8 * BLOCK as usize).unwrap();
        }
    }
    let mapped = c.occupancy().mapped;
    assert!(
        mapped > 3 * phys,
        "{mapped} blocks cached in {phys} blocks of data area"
    );
    let z = c.stats_json()["compression"].clone();
    assert!(z["ratio"].as_f64().unwrap() > 3.0, "{z}");
    // Incompressible data: at most one block per 4 KiB of data area.
    let d: Vec<u8> = (0..4096).flat_map(|b| random_block(b, 1)).collect();
    c.write(0, &d, false).unwrap();
    assert!(c.occupancy().mapped <= phys);
    let z = c.stats_json()["compression"].clone();
    assert!(z["stored_raw_blocks"].as_u64().unwrap() > 0, "{z}");
}

/// A flipped byte in a compressed record: a clean block is read from the
/// backing device, a dirty one is an error; never wrong data.
#[test]
fn a_corrupt_record_is_an_error_never_wrong_data() {
    for dirty in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let policy = if dirty {
            WritePolicy::WriteBack
        } else {
            WritePolicy::WriteThrough
        };
        let (cache, backing) = setup_compressed(dir.path(), Codec::Zstd(3), policy);
        let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
        write(&c, 7, 1, 5);
        let off = {
            let st = c.lock().unwrap();
            let slot = st.map.get(7).unwrap().slot;
            c.slot_offset(&st, slot)
        };
        let d = dev(&cache);
        let mut b = [0u8; 16];
        d.read_at(&mut b, off).unwrap();
        b[12] ^= 0x40;
        d.write_at(&b, off).unwrap();
        let r = c.read(7 * BLOCK, BLOCK as usize);
        if dirty {
            let e = r.unwrap_err();
            assert!(e.0.contains("block 7"), "{e}");
        } else {
            assert_eq!(version(7, &r.unwrap()), 5, "the backing device's copy");
            assert!(c.lock().unwrap().map.get(7).is_none(), "dropped");
        }
        assert_eq!(c.stats_json()["compression"]["checksum_errors"], 1);
    }
}
