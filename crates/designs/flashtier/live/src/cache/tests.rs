//! Unit tests of the log-structured cache: requests, cleaning and recovery round trips.

use super::*;
use crate::compress::Codec;
use crate::format::{format, FormatOptions};
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
        max_size: None,
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
        max_size: None,
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

/// The segment and generation of block `b`'s slot.
fn seg_of(c: &LogCache, b: u64) -> (u32, u64) {
    let slot = c.lock().unwrap().map.get(b).unwrap().slot;
    let seg = slot / c.data_blocks;
    (seg, c.gens.get(seg))
}

/// A fast-path read whose blocks' segment is cleaned, reopened and
/// overwritten between its lookup and its read of the slots must not
/// return the new life's bytes: it gives up and the request path reads
/// the current data.
#[test]
fn a_fast_read_racing_with_segment_reuse_gives_up() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path());
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    write(&c, 0, 14, 1); // segment A holds blocks 0..14 at v1
    let (a, gen0) = seg_of(&c, 0);
    let mut buf = vec![0u8; 4 * BLOCK as usize];
    assert!(
        c.read_fast(0, &mut buf),
        "an all-hit read of a cached file takes the fast path"
    );
    assert_eq!(version(3, &buf[3 * BLOCK as usize..]), 1);
    let slot_off = {
        let st = c.lock().unwrap();
        c.slot_offset(&st, st.map.get(0).unwrap().slot)
    };
    let mut reopened = false;
    let fast = c.read_fast_then(0, &mut buf, || {
        // A loses its live blocks (v2 elsewhere), is cleaned and reused for
        // other blocks until new data lands in block 0's old slot.
        write(&c, 0, 14, 2);
        for round in 0..64u64 {
            write(&c, 500 + (round % 20) * 14, 14, 3);
            if c.gens.get(a) != gen0 {
                let mut raw = vec![0u8; BLOCK as usize];
                c.cache.read_at(&mut raw, slot_off).unwrap();
                if raw[..8] != 0u64.to_le_bytes() {
                    reopened = true;
                    break;
                }
            }
        }
    });
    assert!(
        reopened,
        "the test reuses segment {a} and overwrites block 0's old slot"
    );
    assert!(
        !fast,
        "a read across a segment reuse must not return the new life's bytes"
    );
    assert_eq!(
        c.fast.read_raced.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let d = c.read(0, 4 * BLOCK as usize).unwrap();
    for b in 0..4 {
        assert_eq!(version(b, &d[b as usize * BLOCK as usize..]), 2);
    }
    // The fast path reads the new copies too.
    assert!(c.read_fast(0, &mut buf));
    assert_eq!(buf, d);
}

/// Cleaning alone (the segment freed, not reopened) leaves the slots in
/// place: a fast-path read racing with it returns what its lookup found.
#[test]
fn a_fast_read_racing_with_cleaning_returns_the_looked_up_data() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path());
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    write(&c, 0, 14, 1);
    write(&c, 100, 3, 1); // A sealed, another segment open
    let (a, gen0) = seg_of(&c, 5);
    let mut buf = vec![0u8; 2 * BLOCK as usize + 100];
    let fast = c.read_fast_then(5 * BLOCK + 50, &mut buf, || {
        write(&c, 5, 2, 2); // newer copies elsewhere
        let mut st = c.lock().unwrap();
        c.clean_segment(&mut st, a).unwrap();
        assert!(st.free.contains(&a));
    });
    assert_eq!(c.gens.get(a), gen0, "cleaning does not reopen the segment");
    assert!(fast);
    let mut want = block(5, 1);
    want.extend(block(6, 1));
    want.extend(block(7, 1));
    assert_eq!(buf, want[50..50 + buf.len()]);
    // Now the request path and the fast path both see v2 for 5 and 6, v1 for 7.
    let d = c.read(5 * BLOCK, 3 * BLOCK as usize).unwrap();
    assert_eq!(version(5, &d), 2);
    assert_eq!(version(7, &d[2 * BLOCK as usize..]), 1);
}

/// Fast-path writes (plain appends on the caller's thread) and request-path
/// writes interleave into the same log: every block reads back its newest
/// version, through both paths and after a flush and a crash.
#[test]
fn fast_path_writes_match_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path());
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let mut model = vec![0u64; 1024];
    let (mut fast, mut slow) = (0, 0);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for v in 1..3000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (b, n) = (x % 200, 1 + (x >> 20) % 3);
        let d: Vec<u8> = (b..b + n).flat_map(|k| block(k, v)).collect();
        match c.write_fast(b * BLOCK, &d, false) {
            Some(r) => {
                r.unwrap();
                fast += 1;
            }
            None => {
                c.write(b * BLOCK, &d, false).unwrap();
                slow += 1;
            }
        }
        for k in b..b + n {
            model[k as usize] = v;
        }
        if v % 500 == 0 {
            c.flush().unwrap();
        }
    }
    assert!(
        fast > 300 && slow > 10,
        "both paths ran: {fast} fast, {slow} slow"
    );
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(load(&c.fast.writes), fast);
    // Every whole-block write the fast path declined is counted with its
    // reason (none here found the lock held: one thread).
    assert_eq!(load(&c.fast.write_not_plain), slow);
    {
        let _held = c.lock().unwrap();
        assert!(c.write_fast(0, &block(0, 1), false).is_none());
    }
    assert_eq!(load(&c.fast.write_lock_busy), 1, "a held lock is counted");
    assert!(
        c.write_fast(0, &block(0, 1), true).is_none(),
        "FUA takes the request path"
    );
    assert!(
        c.write_fast(10, &block(0, 1), false).is_none(),
        "partial blocks take the request path"
    );
    let check = |c: &LogCache| {
        for b in 0..1024u64 {
            let d = c.read(b * BLOCK, BLOCK as usize).unwrap();
            assert_eq!(version(b, &d), model[b as usize], "block {b}");
            let mut f = vec![0u8; BLOCK as usize];
            if c.read_fast(b * BLOCK, &mut f) {
                assert_eq!(f, d, "block {b} through the fast path");
            }
        }
    };
    check(&c);
    c.flush().unwrap();
    drop(c); // kill -9 after the flush
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    check(&c);
}

/// Write batches (the NBD layer's) append many writes at once:
/// interleaved with single fast-path and request-path writes, every block
/// reads back its newest version, before and after a flush and a crash. A
/// batch that writes a block twice, or a partial block, is declined whole
/// (nothing written).
#[test]
fn fast_path_write_batches_match_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path());
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let mut model = vec![0u64; 1024];
    let (mut batched, mut single) = (0, 0);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for v in 1..1500u64 {
        // 1-6 writes of 1-2 blocks at distinct blocks of 0..300.
        let k = 1 + rnd() % 6;
        let mut writes: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut used = std::collections::HashSet::new();
        for _ in 0..k {
            let (b, n) = (rnd() % 300, 1 + rnd() % 2);
            if (b..b + n).any(|q| used.contains(&q)) {
                continue;
            }
            used.extend(b..b + n);
            writes.push((b, (b..b + n).flat_map(|q| block(q, v)).collect()));
        }
        let refs: Vec<(u64, &[u8])> = writes.iter().map(|(b, d)| (b * BLOCK, &d[..])).collect();
        match c.write_batch_fast(&refs) {
            Some(rs) => {
                assert_eq!(rs.len(), refs.len());
                rs.into_iter().for_each(|r| r.unwrap());
                batched += 1;
            }
            None => {
                for (b, d) in &writes {
                    c.write(b * BLOCK, d, false).unwrap();
                }
                single += 1;
            }
        }
        for q in used {
            model[q as usize] = v;
        }
        if v % 400 == 0 {
            c.flush().unwrap();
        }
    }
    assert!(
        batched > 200 && single > 5,
        "both paths ran: {batched} batches, {single} declined"
    );
    // Declined whole: a block twice, a partial block.
    let twice = [
        (5 * BLOCK, &block(5, 9999)[..]),
        (5 * BLOCK, &block(5, 9998)[..]),
    ];
    assert!(c.write_batch_fast(&twice).is_none());
    let partial = [
        (6 * BLOCK, &block(6, 9999)[..]),
        (7 * BLOCK + 10, &[1u8; 100][..]),
    ];
    assert!(c.write_batch_fast(&partial).is_none());
    let check = |c: &LogCache| {
        for b in 0..1024u64 {
            let d = c.read(b * BLOCK, BLOCK as usize).unwrap();
            assert_eq!(version(b, &d), model[b as usize], "block {b}");
        }
    };
    check(&c);
    c.flush().unwrap();
    drop(c); // kill -9 after the flush
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    check(&c);
}
