//! The log-structured cache under concurrent requests: many
//! writers with FUA writes and FLUSHes sharing group commits while the
//! background cleaner cleans segments and writes back, then power loss with
//! torn writes (every write a FUA or a FLUSH covered survives, nothing is
//! stale or torn that was durable); and the cleaner's steps by hand (they
//! keep free segments and the dirty target, and a power loss in the middle
//! of them loses nothing).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use tiercache_flashtier_live::{
    format, open_with_devices, FormatOptions, LogCache, WritePolicy, BLOCK,
};
use tiercache_io::{BlockDev, CrashDev, CrashMode, FileDev, FileDevOptions};

/// Blocks of the backing device.
const BLOCKS: u64 = 1024;
/// Writer threads; thread `t` owns blocks `t * BLOCKS / WRITERS..`.
const WRITERS: u64 = 4;

mod common;
use common::{block, sectors, Rng};

fn file_dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
}

/// A 2 MiB write-back cache of 64 KiB segments (about 500 slots) over a
/// backing file of BLOCKS blocks at version 0: writes keep cleaning busy.
fn setup(dir: &Path) -> (Arc<CrashDev>, Arc<CrashDev>, std::path::PathBuf) {
    let backing = dir.join("backing.img");
    let data: Vec<u8> = (0..BLOCKS).flat_map(|b| block(b, 0)).collect();
    std::fs::write(&backing, data).unwrap();
    let cache = dir.join("cache.img");
    format(&FormatOptions {
        cache: cache.clone(),
        backing: backing.clone(),
        create_size: Some(2 << 20),
        write_policy: WritePolicy::WriteBack,
        dirty_target: 0.3,
        seg_bytes: 64 << 10,
        force: false,
        max_size: None,
        compress: Default::default(),
    })
    .unwrap();
    (
        Arc::new(CrashDev::new(file_dev(&cache))),
        Arc::new(CrashDev::new(file_dev(&backing))),
        backing,
    )
}

/// What the test knows of one block: versions written, the newest
/// acknowledged, the newest a FUA or FLUSH made durable.
#[derive(Clone)]
struct Known {
    written: BTreeSet<u64>,
    next: u64,
    acked: u64,
    durable: u64,
}

/// Check every block after recovery: whole (a torn unflushed write is
/// rewritten), at least its durable version, a version once written.
/// Then everything read is acknowledged and flushed.
fn verify(c: &LogCache, known: &mut [Known], round: u64) {
    for b in 0..BLOCKS {
        let k = &mut known[b as usize];
        let d = c.read(b * BLOCK, BLOCK as usize).unwrap();
        let vs = sectors(b, &d).unwrap_or_else(|e| panic!("round {round}: {e}"));
        for &v in &vs {
            assert!(
                v >= k.durable,
                "round {round}: block {b} holds {vs:?}, a FUA or FLUSH covered {}",
                k.durable
            );
            assert!(
                k.written.contains(&v),
                "round {round}: block {b} holds {v}, never written"
            );
        }
        if vs.iter().any(|&v| v != vs[0]) {
            let v = k.next;
            k.next += 1;
            k.written.insert(v);
            c.write(b * BLOCK, &block(b, v), false).unwrap();
            k.acked = v;
        } else {
            k.acked = vs[0];
        }
    }
    c.flush().unwrap();
    for k in known.iter_mut() {
        k.durable = k.acked;
    }
}

/// One writer's requests on its own blocks `lo..hi`: writes of 1-4
/// blocks (one in 8 with FUA), reads checked against its own acks, FLUSHes.
fn writer(c: &LogCache, known: &mut [Known], lo: u64, seed: u64, ops: u64) {
    let mut rng = Rng(seed | 1);
    let span = known.len() as u64;
    for _ in 0..ops {
        let n = 1 + rng.below(4);
        let first = rng.below(span - n + 1);
        match rng.below(10) {
            0..=6 => {
                let fua = rng.below(8) == 0;
                let mut d = Vec::new();
                for i in first..first + n {
                    let k = &mut known[i as usize];
                    let v = k.next;
                    k.next += 1;
                    k.written.insert(v);
                    d.extend_from_slice(&block(lo + i, v));
                }
                c.write((lo + first) * BLOCK, &d, fua).unwrap();
                for (j, i) in (first..first + n).enumerate() {
                    let k = &mut known[i as usize];
                    k.acked = u64::from_le_bytes(
                        d[j * BLOCK as usize + 8..j * BLOCK as usize + 16]
                            .try_into()
                            .unwrap(),
                    );
                    if fua {
                        k.durable = k.acked;
                    }
                }
            }
            7..=8 => {
                let d = c.read((lo + first) * BLOCK, (n * BLOCK) as usize).unwrap();
                for (j, ch) in d.chunks(BLOCK as usize).enumerate() {
                    let i = (first + j as u64) as usize;
                    let vs = sectors(lo + i as u64, ch).unwrap();
                    assert!(
                        vs.iter().all(|&v| v == known[i].acked),
                        "live read of block {}: {vs:?}, acknowledged {}",
                        lo + i as u64,
                        known[i].acked
                    );
                }
            }
            _ => {
                c.flush().unwrap();
                for k in known.iter_mut() {
                    k.durable = k.acked;
                }
            }
        }
    }
}

#[test]
fn concurrent_fua_writers_with_the_background_cleaner_survive_power_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (cdev, bdev, backing) = setup(dir.path());
    let mut known = vec![
        Known {
            written: [0].into(),
            next: 1,
            acked: 0,
            durable: 0,
        };
        BLOCKS as usize
    ];
    let (mut cleaned, mut commits, mut requests) = (0, 0, 0);
    let rounds = 8;
    for round in 0..rounds {
        let c = open_with_devices(cdev.clone(), bdev.clone(), &backing).unwrap();
        if round > 0 {
            assert!(!c.recovery().clean_shutdown);
        }
        verify(&c, &mut known, round);
        c.start_cleaner().unwrap();
        let per = (BLOCKS / WRITERS) as usize;
        std::thread::scope(|s| {
            for (t, part) in known.chunks_mut(per).enumerate() {
                let c = &c;
                s.spawn(move || {
                    let seed = 0x9e37_79b9 ^ (round << 8) ^ t as u64;
                    writer(c, part, t as u64 * per as u64, seed, 300)
                });
            }
        });
        let st = c.stats_json();
        cleaned += st["background"]["cleaner_segments_cleaned"]
            .as_u64()
            .unwrap();
        commits += st["background"]["commits"].as_u64().unwrap();
        requests += st["background"]["commit_requests"].as_u64().unwrap();
        // Power loss: the cleaner stops between two steps (its last step's
        // writes possibly unflushed), the devices lose unflushed writes,
        // torn per sector.
        c.stop_cleaner();
        drop(c);
        let s = 0x5eed ^ round;
        cdev.crash(CrashMode::Torn { seed: s }).unwrap();
        bdev.crash(CrashMode::Torn { seed: s ^ 1 }).unwrap();
    }
    let c = open_with_devices(cdev.clone(), bdev.clone(), &backing).unwrap();
    verify(&c, &mut known, rounds);
    c.shutdown(false).unwrap();
    eprintln!(
        "{rounds} rounds: the cleaner cleaned {cleaned} segments; {requests} FLUSH/FUA callers, {commits} commits"
    );
    assert!(
        cleaned > 0,
        "the background cleaner never cleaned a segment"
    );
    assert!(commits <= requests);
}

#[test]
fn cleaner_steps_keep_free_segments_and_a_crash_between_them_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cdev, bdev, backing) = setup(dir.path());
    let c = open_with_devices(cdev.clone(), bdev.clone(), &backing).unwrap();
    // Fill the log with dirty and clean blocks, inline cleaning only (no
    // cleaner thread): free segments fall to the policy's reserve.
    let mut rng = Rng(0xc1ea);
    let mut version = vec![0u64; BLOCKS as usize];
    for i in 0..3000u64 {
        let b = rng.below(BLOCKS);
        if i % 3 == 0 {
            c.read(b * BLOCK, BLOCK as usize).unwrap();
        } else {
            version[b as usize] += 1;
            c.write(b * BLOCK, &block(b, version[b as usize]), false)
                .unwrap();
        }
    }
    c.flush().unwrap();
    let st = c.stats_json();
    let target = st["background"]["free_segments_target"].as_u64().unwrap();
    let limit = st["background"]["dirty_limit"].as_u64().unwrap();
    assert!(
        st["segments"]["free"].as_u64().unwrap() < target,
        "setup: the log should be short of free segments: {st}"
    );
    // Two cleaner steps (segments cleaned, moves unflushed), then power
    // loss. Requests keep at least RESERVE (2) free, the target is more.
    for _ in 0..2 {
        assert!(c.background_step().unwrap(), "the cleaner found no work");
    }
    drop(c);
    cdev.crash(CrashMode::Torn { seed: 7 }).unwrap();
    bdev.crash(CrashMode::Torn { seed: 8 }).unwrap();
    let c = open_with_devices(cdev.clone(), bdev.clone(), &backing).unwrap();
    let check = |c: &LogCache| {
        for b in 0..BLOCKS {
            let d = c.read(b * BLOCK, BLOCK as usize).unwrap();
            let vs = sectors(b, &d).unwrap();
            assert!(
                vs.iter().all(|&v| v == version[b as usize]),
                "block {b}: {vs:?}, flushed {}",
                version[b as usize]
            );
        }
    };
    check(&c);
    // Steps until the cleaner has nothing left: free segments at its
    // target, dirty blocks at the dirty target, nothing lost.
    let mut steps = 0;
    while c.background_step().unwrap() {
        steps += 1;
        assert!(steps < 10_000, "the cleaner does not converge");
    }
    let st = c.stats_json();
    assert!(st["segments"]["free"].as_u64().unwrap() >= target, "{st}");
    assert!(st["dirty_blocks"].as_u64().unwrap() <= limit, "{st}");
    check(&c);
    c.flush().unwrap();
    drop(c);
    cdev.crash(CrashMode::Torn { seed: 9 }).unwrap();
    bdev.crash(CrashMode::Torn { seed: 10 }).unwrap();
    let c = open_with_devices(cdev.clone(), bdev.clone(), &backing).unwrap();
    check(&c);
}

/// The fast path under concurrency: two writers overwrite a
/// small set of blocks through `write_fast` (falling back to `write`), so
/// segments are cleaned and reopened all the time (the background cleaner
/// runs too), while two readers read through `read_fast` (falling back to
/// `read`). A fast-path read releases the lock before it reads the slots:
/// every block it returns must be that block's, whole, and a version between
/// the one acknowledged before the read started and the newest issued.
#[test]
fn fast_path_reads_racing_with_cleaning_and_reuse_see_only_their_blocks() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    const SPAN: u64 = 96;
    let dir = tempfile::tempdir().unwrap();
    let (cdev, bdev, backing) = setup(dir.path());
    drop((cdev, bdev));
    let cache_path = dir.path().join("cache.img");
    let c = open_with_devices(file_dev(&cache_path), file_dev(&backing), &backing).unwrap();
    c.start_cleaner().unwrap();
    let issued: Vec<AtomicU64> = (0..SPAN).map(|_| AtomicU64::new(0)).collect();
    let acked: Vec<AtomicU64> = (0..SPAN).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    let fast_reads = AtomicU64::new(0);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let (c, issued, acked) = (&c, &issued, &acked);
                s.spawn(move || {
                    let mut rng = Rng(0x5eed + t);
                    // Writer t owns the blocks b with b % 2 == t.
                    for _ in 0..6000 {
                        let b = rng.below(SPAN / 2) * 2 + t;
                        let v = issued[b as usize].fetch_add(1, SeqCst) + 1;
                        let d = block(b, v);
                        match c.write_fast(b * BLOCK, &d, false) {
                            Some(r) => r.unwrap(),
                            None => c.write(b * BLOCK, &d, false).unwrap(),
                        }
                        acked[b as usize].store(v, SeqCst);
                    }
                })
            })
            .collect();
        for t in 0..2u64 {
            let (c, issued, acked, done, fast_reads) = (&c, &issued, &acked, &done, &fast_reads);
            s.spawn(move || {
                let mut rng = Rng(0xbead + t);
                let mut buf = vec![0u8; 2 * BLOCK as usize];
                while !done.load(SeqCst) {
                    let b = rng.below(SPAN - 1);
                    let before = [acked[b as usize].load(SeqCst), acked[b as usize + 1].load(SeqCst)];
                    if c.read_fast(b * BLOCK, &mut buf) {
                        fast_reads.fetch_add(1, SeqCst);
                    } else {
                        buf = c.read(b * BLOCK, 2 * BLOCK as usize).unwrap();
                    }
                    for (j, ch) in buf.chunks(BLOCK as usize).enumerate() {
                        let k = b + j as u64;
                        let vs = sectors(k, ch).unwrap_or_else(|e| panic!("read of block {k}: {e}"));
                        let newest = issued[k as usize].load(SeqCst);
                        assert!(
                            vs.iter().all(|&v| v == vs[0] && v >= before[j] && v <= newest),
                            "block {k}: read {vs:?}, acknowledged {} before the read, newest issued {newest}",
                            before[j]
                        );
                    }
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, SeqCst);
    });
    let st = c.stats_json();
    assert!(
        st["cleaning"]["segments_cleaned"].as_u64().unwrap() > 20,
        "segments were cleaned: {st}"
    );
    assert!(
        fast_reads.load(SeqCst) > 100,
        "reads took the fast path: {}",
        st["fast_path"]
    );
    assert!(
        st["fast_path"]["writes"].as_u64().unwrap() > 100,
        "writes took the fast path: {}",
        st["fast_path"]
    );
    for b in 0..SPAN {
        let d = c.read(b * BLOCK, BLOCK as usize).unwrap();
        assert_eq!(sectors(b, &d).unwrap()[0], acked[b as usize].load(SeqCst));
    }
    c.shutdown(false).unwrap();
}

/// The background cleaner's write-back is paced, as the SSD
/// cache's: a write burst between the dirty target and the hard limit is
/// absorbed dirty (no request writes back), the requests never let the
/// dirty count past the hard limit, and once the requests stop the cleaner
/// writes back down to the target. Every block then reads its last version.
#[test]
fn the_paced_cleaner_absorbs_a_burst_and_cleans_to_the_target_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (cdev, bdev, backing) = setup(dir.path());
    let c = open_with_devices(cdev, bdev, &backing).unwrap();
    c.start_cleaner().unwrap();
    let st = c.stats_json();
    let target = st["background"]["dirty_limit"].as_u64().unwrap();
    let hard = st["background"]["foreground_dirty_limit"].as_u64().unwrap();
    let slots = st["slots"].as_u64().unwrap();
    assert!(
        target < hard && hard < slots,
        "target {target}, hard limit {hard}, slots {slots}"
    );
    let request_write_backs = |s: &serde_json::Value| {
        // Written back to the dirty target, by requests: not by segment
        // cleaning (a dirty block that could not be moved), not by the cleaner.
        s["cleaning"]["written_back"].as_u64().unwrap()
            - s["cleaning"]["cleaning_written_back"].as_u64().unwrap()
            - s["background"]["cleaner_written_back"].as_u64().unwrap()
    };
    // A burst to just under the hard limit: absorbed.
    let burst = (hard - 8).min(BLOCKS);
    let mut version = vec![0u64; BLOCKS as usize];
    for b in 0..burst {
        version[b as usize] = 1;
        c.write(b * BLOCK, &block(b, 1), false).unwrap();
    }
    let s = c.stats_json();
    assert_eq!(request_write_backs(&s), 0, "a request wrote back: {s}");
    // Past the hard limit the requests write back themselves.
    for round in 2..6u64 {
        for b in 0..BLOCKS {
            version[b as usize] = round;
            c.write(b * BLOCK, &block(b, round), false).unwrap();
            let d = c.stats_json()["dirty_blocks"].as_u64().unwrap();
            assert!(d <= hard, "{d} dirty blocks, hard limit {hard}");
        }
    }
    // Idle: the cleaner writes back to the target (full speed).
    let t0 = std::time::Instant::now();
    loop {
        let d = c.stats_json()["dirty_blocks"].as_u64().unwrap();
        if d <= target {
            break;
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the idle cleaner left {d} dirty blocks, target {target}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for b in 0..BLOCKS {
        let d = c.read(b * BLOCK, BLOCK as usize).unwrap();
        assert_eq!(
            sectors(b, &d).unwrap(),
            vec![version[b as usize]; 8],
            "block {b}"
        );
    }
    c.shutdown(false).unwrap();
}
