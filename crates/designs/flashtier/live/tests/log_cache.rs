//! The log-structured cache on real files, in process: data integrity
//! against a reference under cleaning (silent eviction of clean blocks,
//! moves of dirty ones), power loss with torn writes at random points
//! (every flushed write survives, nothing stale), device faults, and
//! recovery of a clean shutdown.

use std::path::Path;
use std::sync::Arc;

use tiercache_flashtier_live::cache::Occupancy;
use tiercache_flashtier_live::{
    format, open_with_devices, FormatOptions, LogCache, VictimPolicy, WritePolicy, BLOCK,
};
use tiercache_io::{
    BlockDev, CrashDev, CrashMode, FaultRule, FaultyDev, FileDev, FileDevOptions, OpKinds,
};

const BLOCKS: u64 = 1024;

mod common;
use common::{block, sectors, Rng};

/// The version of block `b` (all sectors the same).
fn parse(b: u64, d: &[u8]) -> Result<u64, String> {
    let v = sectors(b, d)?;
    if v.iter().any(|&x| x != v[0]) {
        return Err(format!("block {b} is torn: sector versions {v:?}"));
    }
    Ok(v[0])
}

fn file_dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
}

/// Format a cache of `cache_bytes` with `seg` byte segments for a backing
/// file of BLOCKS blocks at version 0.
fn setup(
    dir: &Path,
    cache_bytes: u64,
    seg: u64,
    policy: WritePolicy,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let backing = dir.join("backing.img");
    let mut data = Vec::new();
    for b in 0..BLOCKS {
        data.extend_from_slice(&block(b, 0));
    }
    std::fs::write(&backing, data).unwrap();
    let cache = dir.join("cache.img");
    format(&FormatOptions {
        cache: cache.clone(),
        backing: backing.clone(),
        create_size: Some(cache_bytes),
        write_policy: policy,
        dirty_target: 0.3,
        seg_bytes: seg,
        force: false,
        max_size: None,
        compress: Default::default(),
    })
    .unwrap();
    (cache, backing)
}

/// Random block-aligned writes, reads and flushes, checked against a
/// reference, with the cache a small fraction of the data.
fn run_reference(policy: WritePolicy, victim: VictimPolicy) -> tiercache_flashtier_live::Counters {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 2 << 20, 64 << 10, policy);
    let mut c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    c.set_victim_policy(victim);
    let mut total = tiercache_flashtier_live::Counters::default();
    let add = |t: &mut tiercache_flashtier_live::Counters, c: &LogCache| {
        let x = c.counters();
        t.segments_cleaned += x.segments_cleaned;
        t.silent_evictions += x.silent_evictions;
        t.moved_dirty += x.moved_dirty;
        t.written_back += x.written_back;
        t.cleaning_written_back += x.cleaning_written_back;
        t.checkpoints += x.checkpoints;
        t.read_hits += x.read_hits;
    };
    let mut latest = vec![0u64; BLOCKS as usize];
    let mut rng = Rng(0x5eed ^ policy as u64);
    for step in 0..6000 {
        if step % 1500 == 1499 {
            // A clean restart: the segment open at shutdown is cleaned from its summary later.
            add(&mut total, &c);
            c.shutdown(false).unwrap();
            c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
            c.set_victim_policy(victim);
            assert!(c.recovery().clean_shutdown);
        }
        let n = 1 + rng.below(8);
        let first = if rng.below(2) == 0 {
            rng.below(128)
        } else {
            rng.below(BLOCKS - n)
        }
        .min(BLOCKS - n);
        match rng.below(10) {
            0..=4 => {
                let mut d = Vec::new();
                for b in first..first + n {
                    latest[b as usize] += 1;
                    d.extend_from_slice(&block(b, latest[b as usize]));
                }
                c.write(first * BLOCK, &d, rng.below(30) == 0).unwrap();
            }
            5..=8 => {
                let d = c.read(first * BLOCK, (n * BLOCK) as usize).unwrap();
                for (i, ch) in d.chunks(BLOCK as usize).enumerate() {
                    let b = first + i as u64;
                    assert_eq!(
                        parse(b, ch).unwrap(),
                        latest[b as usize],
                        "step {step}: block {b}"
                    );
                }
            }
            _ => c.flush().unwrap(),
        }
    }
    // A sub-block write in the middle of a block reads back merged.
    let mut want = block(5, latest[5]);
    want[100..200].fill(0xab);
    c.write(5 * BLOCK + 100, &[0xab; 100], false).unwrap();
    assert_eq!(c.read(5 * BLOCK, BLOCK as usize).unwrap(), want);
    add(&mut total, &c);
    let counters = total;
    let Occupancy { mapped, dirty } = c.occupancy();
    assert!(
        mapped > 0 && dirty as f64 <= 0.3 * 448.0 + 8.0,
        "mapped {mapped}, dirty {dirty}"
    );
    c.shutdown(true).unwrap();
    // After detach the backing file alone holds the newest data.
    let data = std::fs::read(&backing).unwrap();
    latest[5] = u64::MAX;
    for b in 0..BLOCKS {
        let d = &data[(b * BLOCK) as usize..((b + 1) * BLOCK) as usize];
        if b == 5 {
            assert_eq!(d, &want[..]);
        } else {
            assert_eq!(
                parse(b, d).unwrap(),
                latest[b as usize],
                "backing block {b}"
            );
        }
    }
    counters
}

#[test]
fn write_back_cleaning_drops_clean_and_moves_dirty() {
    for victim in [VictimPolicy::Greedy, VictimPolicy::CostBenefit] {
        let c = run_reference(WritePolicy::WriteBack, victim);
        assert!(c.segments_cleaned > 50, "{c:?}");
        assert!(
            c.silent_evictions > 100,
            "clean blocks dropped silently: {c:?}"
        );
        assert!(c.moved_dirty > 10, "dirty blocks moved: {c:?}");
        assert!(
            c.written_back > 100,
            "write-back cleaning at the dirty target: {c:?}"
        );
        assert!(
            c.checkpoints > 1,
            "the journal filled up and forced checkpoints: {c:?}"
        );
    }
}

#[test]
fn write_through_keeps_no_dirty_data() {
    let c = run_reference(WritePolicy::WriteThrough, VictimPolicy::CostBenefit);
    assert_eq!(
        c.moved_dirty + c.written_back + c.cleaning_written_back,
        0,
        "{c:?}"
    );
    assert!(c.silent_evictions > 100 && c.read_hits > 100, "{c:?}");
}

#[test]
fn cleaning_choice_and_effects_by_hand() {
    // 4 KiB blocks, 64 KiB segments: 14 data blocks each.
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 1 << 20, 64 << 10, WritePolicy::WriteBack);
    let c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    c.set_victim_policy(VictimPolicy::Greedy);
    // Segment A: 14 clean blocks (read fills of 100..114).
    c.read(100 * BLOCK, 14 * BLOCK as usize).unwrap();
    // Segment B: 14 dirty blocks 200..214, then overwrite 12 of them (into C): B keeps 2 live dirty.
    let w = |first: u64, n: u64, v: u64| {
        let d: Vec<u8> = (first..first + n).flat_map(|b| block(b, v)).collect();
        c.write(first * BLOCK, &d, false).unwrap();
    };
    w(200, 14, 1);
    w(202, 12, 2);
    let before = c.counters();
    let st = c.stats_json();
    let free = st["segments"]["free"].as_u64().unwrap() as usize;
    // Clean one segment: greedy picks B (2 live) over A (14 live).
    c.clean_segments(free + 1).unwrap();
    let after = c.counters();
    assert_eq!(after.segments_cleaned - before.segments_cleaned, 1);
    assert_eq!(
        after.moved_dirty - before.moved_dirty,
        2,
        "B's 2 live dirty blocks moved"
    );
    assert_eq!(after.silent_evictions, before.silent_evictions);
    // Next: A (14 live clean) — all dropped silently, nothing moved.
    c.clean_segments(free + 2).unwrap();
    let last = c.counters();
    assert_eq!(
        last.silent_evictions - after.silent_evictions,
        14,
        "A's clean blocks dropped"
    );
    assert_eq!(last.moved_dirty, after.moved_dirty);
    // Dropped clean blocks read from the backing device; moved dirty ones from the cache.
    let d = c.read(100 * BLOCK, 14 * BLOCK as usize).unwrap();
    for i in 0..14 {
        assert_eq!(
            parse(
                100 + i,
                &d[(i * BLOCK) as usize..((i + 1) * BLOCK) as usize]
            )
            .unwrap(),
            0
        );
    }
    let d = c.read(200 * BLOCK, 14 * BLOCK as usize).unwrap();
    for i in 0..14u64 {
        let want = if i < 2 { 1 } else { 2 };
        assert_eq!(
            parse(
                200 + i,
                &d[(i * BLOCK) as usize..((i + 1) * BLOCK) as usize]
            )
            .unwrap(),
            want
        );
    }
    assert_eq!(c.counters().read_misses - last.read_misses, 14);
}

/// Power loss at random points with torn writes on both devices; every
/// write covered by a completed FLUSH or FUA survives, every block holds a
/// version that was written and is not older than the durable one, and
/// recovery after an unclean shutdown drops clean blocks.
fn power_loss(policy: WritePolicy, rounds: u64, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 2 << 20, 64 << 10, policy);
    let cdev = Arc::new(CrashDev::new(file_dev(&cache)));
    let bdev = Arc::new(CrashDev::new(file_dev(&backing)));
    let mut rng = Rng(seed);
    let mut next = vec![1u64; BLOCKS as usize];
    let mut acked = vec![0u64; BLOCKS as usize];
    let mut durable = vec![0u64; BLOCKS as usize];
    let mut written: Vec<std::collections::BTreeSet<u64>> =
        (0..BLOCKS).map(|_| [0u64].into()).collect();
    let mut survived_newer = 0;
    let mut torn_blocks = 0;
    for round in 0..rounds {
        let c: Arc<LogCache> = open_with_devices(cdev.clone(), bdev.clone(), &backing).unwrap();
        let r = c.recovery().clone();
        if round > 0 {
            assert!(!r.clean_shutdown);
        }
        let mut torn = 0;
        for b in 0..BLOCKS {
            let d = c.read(b * BLOCK, BLOCK as usize).unwrap();
            let vs = sectors(b, &d).unwrap_or_else(|e| panic!("round {round}: {e}"));
            for &v in &vs {
                assert!(
                    v >= durable[b as usize],
                    "round {round}: block {b} holds {vs:?}, a FLUSH covered {}",
                    durable[b as usize]
                );
                assert!(
                    written[b as usize].contains(&v),
                    "round {round}: block {b} holds {v}, never written"
                );
            }
            survived_newer += (vs[0] > durable[b as usize]) as u64;
            if vs.iter().any(|&v| v != vs[0]) {
                // An unflushed write torn on the device: rewrite it to restart from a whole version.
                torn += 1;
                let v = next[b as usize];
                next[b as usize] += 1;
                written[b as usize].insert(v);
                c.write(b * BLOCK, &block(b, v), false).unwrap();
                acked[b as usize] = v;
            } else {
                acked[b as usize] = vs[0];
            }
        }
        torn_blocks += torn;
        c.flush().unwrap();
        durable.clone_from(&acked);
        let ops = 50 + rng.below(400);
        for _ in 0..ops {
            let n = 1 + rng.below(6);
            let first = if rng.below(2) == 0 {
                rng.below(96)
            } else {
                rng.below(BLOCKS - n)
            }
            .min(BLOCKS - n);
            match rng.below(12) {
                0..=6 => {
                    let fua = rng.below(20) == 0;
                    let mut d = Vec::new();
                    for b in first..first + n {
                        let v = next[b as usize];
                        next[b as usize] += 1;
                        written[b as usize].insert(v);
                        d.extend_from_slice(&block(b, v));
                    }
                    c.write(first * BLOCK, &d, fua).unwrap();
                    for (i, b) in (first..first + n).enumerate() {
                        acked[b as usize] = u64::from_le_bytes(
                            d[i * BLOCK as usize + 8..i * BLOCK as usize + 16]
                                .try_into()
                                .unwrap(),
                        );
                        if fua {
                            durable[b as usize] = acked[b as usize];
                        }
                    }
                }
                7..=10 => {
                    let d = c.read(first * BLOCK, (n * BLOCK) as usize).unwrap();
                    for (i, ch) in d.chunks(BLOCK as usize).enumerate() {
                        let b = (first + i as u64) as usize;
                        assert_eq!(
                            parse(b as u64, ch).unwrap(),
                            acked[b],
                            "round {round}: live read of block {b}"
                        );
                    }
                }
                _ => {
                    c.flush().unwrap();
                    durable.clone_from(&acked);
                }
            }
        }
        drop(c);
        let s = rng.next();
        cdev.crash(CrashMode::Torn { seed: s }).unwrap();
        bdev.crash(CrashMode::Torn { seed: s ^ 1 }).unwrap();
    }
    eprintln!("{policy}: {rounds} power losses, {survived_newer} unflushed blocks survived, {torn_blocks} torn unflushed blocks");
}

#[test]
fn power_loss_write_back() {
    power_loss(WritePolicy::WriteBack, 40, 0xdead_beef);
}

#[test]
fn power_loss_write_through() {
    power_loss(WritePolicy::WriteThrough, 20, 0xfeed_f00d);
}

#[test]
fn clean_shutdown_keeps_clean_blocks_and_a_crash_drops_them() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 2 << 20, 64 << 10, WritePolicy::WriteBack);
    let c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    c.read(0, 20 * BLOCK as usize).unwrap(); // 20 clean
    let d: Vec<u8> = (50..60).flat_map(|b| block(b, 1)).collect();
    c.write(50 * BLOCK, &d, false).unwrap(); // 10 dirty
    c.shutdown(false).unwrap();
    assert!(c.read(0, 10).is_err(), "a closed cache refuses requests");
    let c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    let r = c.recovery().clone();
    assert!(r.clean_shutdown);
    assert_eq!(
        (r.mapped_blocks, r.dirty_blocks, r.dropped_clean),
        (30, 10, 0)
    );
    drop(c); // a crash: no shutdown
    let c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    let r = c.recovery().clone();
    assert!(!r.clean_shutdown);
    assert_eq!(
        (r.mapped_blocks, r.dirty_blocks, r.dropped_clean),
        (10, 10, 20)
    );
    let got = c.read(50 * BLOCK, 10 * BLOCK as usize).unwrap();
    assert_eq!(got, d);
}

#[test]
fn cache_faults_fall_back_and_backing_faults_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 2 << 20, 64 << 10, WritePolicy::WriteBack);
    let cf = Arc::new(FaultyDev::new(file_dev(&cache), 1));
    let bf = Arc::new(FaultyDev::new(file_dev(&backing), 2));
    let c = open_with_devices(cf.clone(), bf.clone(), &backing).unwrap();
    c.read(0, 8 * BLOCK as usize).unwrap(); // cached clean
    let d: Vec<u8> = (20..24).flat_map(|b| block(b, 1)).collect();
    c.write(20 * BLOCK, &d, false).unwrap();
    c.flush().unwrap();
    // Cache reads fail: clean blocks come from the backing device.
    cf.add_rule(FaultRule::always(OpKinds::READ)).unwrap();
    let got = c.read(0, 8 * BLOCK as usize).unwrap();
    for i in 0..8 {
        assert_eq!(
            parse(i, &got[(i * BLOCK) as usize..((i + 1) * BLOCK) as usize]).unwrap(),
            0
        );
    }
    // A dirty block whose cache copy cannot be read is an error, never stale data.
    assert!(c.read(20 * BLOCK, BLOCK as usize).is_err());
    cf.clear_rules();
    assert_eq!(c.read(20 * BLOCK, 4 * BLOCK as usize).unwrap(), d);
    // Cache writes fail: writes go around the cache to the backing device,
    // and after enough errors no new data is cached.
    cf.add_rule(FaultRule::always(OpKinds::WRITE)).unwrap();
    for i in 0..12u64 {
        let b = 100 + 14 * i;
        c.write(b * BLOCK, &block(b, 7), false).unwrap();
    }
    assert_eq!(c.stats_json()["status"], "degraded");
    assert!(c.counters().bypassed >= 12);
    cf.clear_rules();
    c.flush().unwrap();
    for i in 0..12u64 {
        let b = 100 + 14 * i;
        assert_eq!(
            parse(b, &c.read(b * BLOCK, BLOCK as usize).unwrap()).unwrap(),
            7
        );
    }
    // Degraded: dirty data was written back, reads are not cached any more.
    let Occupancy { dirty, .. } = c.occupancy();
    assert_eq!(dirty, 0);
    let misses = c.counters().read_misses;
    c.read(500 * BLOCK, BLOCK as usize).unwrap();
    c.read(500 * BLOCK, BLOCK as usize).unwrap();
    assert_eq!(c.counters().read_misses - misses, 2);
    // Backing errors are errors.
    bf.add_rule(FaultRule::always(OpKinds::READ)).unwrap();
    assert!(c.read(600 * BLOCK, BLOCK as usize).is_err());
    bf.clear_rules();
    bf.add_rule(FaultRule::always(OpKinds::FLUSH)).unwrap();
    c.write(700 * BLOCK, &block(700, 1), false).unwrap();
    assert!(c.flush().is_err());
    assert!(c.counters().backing_errors >= 2);
}

#[test]
fn bad_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 2 << 20, 64 << 10, WritePolicy::WriteBack);
    let again = FormatOptions {
        cache: cache.clone(),
        backing: backing.clone(),
        create_size: None,
        write_policy: WritePolicy::WriteBack,
        dirty_target: 0.3,
        seg_bytes: 64 << 10,
        force: false,
        max_size: None,
        compress: Default::default(),
    };
    let e = format(&again).unwrap_err().to_string();
    assert!(e.contains("already holds"), "{e}");
    let e = format(&FormatOptions {
        seg_bytes: 1000,
        force: true,
        max_size: None,
        ..again.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("segment size"), "{e}");
    let e = format(&FormatOptions {
        cache: backing.clone(),
        force: true,
        max_size: None,
        ..again.clone()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("different"), "{e}");
    let small = dir.path().join("small.img");
    std::fs::write(&small, vec![0u8; 4096 * 3]).unwrap();
    let e = open_with_devices(file_dev(&cache), file_dev(&small), &small)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("formatted for"), "{e}");
    let e = open_with_devices(file_dev(&small), file_dev(&backing), &backing)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("no log-structured cache"), "{e}");
}

#[test]
fn prefetch_caches_and_trim_unmaps() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 2 << 20, 64 << 10, WritePolicy::WriteBack);
    let c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    c.prefetch(10 * BLOCK + 5, 4 * BLOCK).unwrap(); // blocks 10..=14
    let before = c.counters();
    c.read(10 * BLOCK, 5 * BLOCK as usize).unwrap();
    assert_eq!(
        c.counters().read_hits - before.read_hits,
        5,
        "prefetched blocks hit"
    );
    assert_eq!(
        c.occupancy(),
        Occupancy {
            mapped: 5,
            dirty: 0
        }
    );
    // TRIM drops only whole blocks; the partial ones stay cached.
    c.trim(10 * BLOCK + 1, 3 * BLOCK).unwrap(); // whole: 11, 12
    assert_eq!(
        c.occupancy(),
        Occupancy {
            mapped: 3,
            dirty: 0
        }
    );
}

#[test]
fn check_accepts_a_stopped_cache_and_finds_a_corrupt_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, backing) = setup(dir.path(), 2 << 20, 64 << 10, WritePolicy::WriteBack);
    let c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    for b in 0..200u64 {
        c.write(b * 3 * BLOCK, &block(b * 3, 1), false).unwrap();
    }
    c.read(700 * BLOCK, 40 * BLOCK as usize).unwrap();
    c.flush().unwrap();
    drop(c); // crash
    let r = tiercache_flashtier_live::check(&cache).unwrap();
    assert!(r.is_ok(), "{r}");
    assert!(
        r.mapped_blocks > 0 && r.dirty_blocks == r.mapped_blocks,
        "{r}"
    );
    // After a clean shutdown the map comes from the checkpoint alone.
    let c = open_with_devices(file_dev(&cache), file_dev(&backing), &backing).unwrap();
    c.read(700 * BLOCK, 40 * BLOCK as usize).unwrap();
    c.shutdown(false).unwrap();
    let r = tiercache_flashtier_live::check(&cache).unwrap();
    assert!(
        r.is_ok() && r.clean_shutdown && r.replayed_segments == 0,
        "{r}"
    );
    // Rewrite a summary of a segment holding mapped blocks with the wrong blocks.
    let sb = tiercache_flashtier_live::Superblock::read(file_dev(&cache).as_ref()).unwrap();
    let f = file_dev(&cache);
    let mut both = vec![0u8; 8192];
    let mut hit = false;
    for seg in 0..sb.nsegs {
        let off = sb.seg_off + seg as u64 * sb.seg_bytes;
        f.read_at(&mut both, off).unwrap();
        let g = sb.geometry();
        if let Some(mut s) = tiercache_flashtier_live::segment::Summary::pick(&both, seg, &g) {
            if s.entries.len() > 3 {
                s.entries[0] = tiercache_flashtier_live::segment::entry(4000, true);
                s.version += 10;
                f.write_at(&s.encode(&g), off + g.summary_offset(s.copy()))
                    .unwrap();
                hit = true;
                break;
            }
        }
    }
    assert!(hit);
    let r = tiercache_flashtier_live::check(&cache).unwrap();
    assert!(!r.is_ok(), "the corrupted summary is found: {r}");
}
