//! Crash tests of the live server: `tiercache serve` in write-back mode with a
//! cache 1/16 of the data is killed with SIGKILL at random points of a random
//! write/read/flush load, restarted on the same cache, and every block is
//! checked against the client's ledger: it holds a version at least as new as
//! the last one a completed FLUSH (or FUA write) covered, and one that was
//! actually written (self-checking blocks: never garbage, never misdirected,
//! never older). Reads during the load never go behind what was acknowledged.
//! The restart must be warm (recovered lines in `tiercache stats --json`), and
//! after `tiercache detach` the backing file alone holds the newest data.
//!
//! `TIERCACHE_CRASH_ROUNDS` overrides the rounds per test and
//! `TIERCACHE_CRASH_SEED` the seed (scripts/crash_soak.sh runs many more).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// 16 MiB of data.
const BLOCKS: u64 = 4096;

fn kill9(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
}

/// The files of one crash test: a backing file of `blocks` versioned blocks
/// and a 6 MiB write-back cache formatted with `policy`, in a temporary
/// directory (TIERCACHE_CRASH_KEEP=1 keeps them for a post-mortem).
struct CrashFiles {
    _keep: Option<tempfile::TempDir>,
    backing: PathBuf,
    cache: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    /// What `format` printed.
    formatted: String,
}

fn crash_files(label: &str, policy: &[&str], blocks: u64) -> CrashFiles {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    let _keep = if std::env::var_os("TIERCACHE_CRASH_KEEP").is_some() {
        eprintln!("[{label}] files kept in {}", tmp.keep().display());
        None
    } else {
        Some(tmp)
    };
    let (backing, cache) = (root.join("backing.img"), root.join("cache.img"));
    init_backing(&backing, blocks);
    let formatted = format_cache(
        &cache,
        &backing,
        "6MiB",
        &[&["--write-policy", "write-back"], policy].concat(),
    );
    CrashFiles {
        _keep,
        sock: root.join("nbd.sock"),
        log: root.join("serve.log"),
        backing,
        cache,
        formatted,
    }
}

/// Run `rounds` kill -9 rounds on a cache formatted with `policy`, then a
/// clean round ending in detach; panics with the seed on any violation.
fn crash_rounds(label: &str, policy: &[&str], default_rounds: u64, default_seed: u64) {
    let rounds = env_u64("TIERCACHE_CRASH_ROUNDS").unwrap_or(default_rounds);
    let seed = env_u64("TIERCACHE_CRASH_SEED").unwrap_or(default_seed);
    let CrashFiles {
        _keep,
        backing,
        cache,
        sock,
        log,
        formatted,
    } = crash_files(label, policy, BLOCKS);
    eprintln!(
        "[{label}] seed {seed}, {rounds} rounds: {}",
        formatted.trim()
    );

    let fail = |msg: String, log: &Path| -> ! {
        panic!(
            "[{label}] seed {seed}: {msg}\n--- server log (tail) ---\n{}",
            tail(log)
        )
    };
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(seed);
    let shape = LoadShape::default();
    let (mut recovered_lines, mut survived_newer) = (0u64, 0u64);
    for round in 0..=rounds {
        let mut srv = ServeProc::start(&cache, &sock, &log);
        let st = srv.stats();
        let occupied = st["occupied_lines"].as_u64().unwrap_or(0);
        let dirty = st["dirty_lines"].as_u64().unwrap_or(0);
        let rec_ms = st["live"]["recovery_ms"].as_f64().unwrap_or(-1.0);
        if rec_ms <= 0.0 {
            fail(
                format!("round {round}: stats report no recovery time: {st}"),
                &log,
            );
        }
        if round > 0 {
            // The kill came after load and committed lines: the restart is warm.
            if occupied == 0 {
                fail(
                    format!(
                        "round {round}: restart after kill -9 is cold (no lines recovered): {st}"
                    ),
                    &log,
                );
            }
            recovered_lines += occupied;
        }
        let mut c =
            NbdClient::connect(&sock).unwrap_or_else(|e| fail(format!("connect: {e}"), &log));
        assert_eq!(
            c.size,
            BLOCKS * BLOCK as u64,
            "export size is the backing size"
        );
        let newer = verify_all(&mut c, &mut ledger)
            .unwrap_or_else(|e| fail(format!("round {round}: after restart: {e}"), &log));
        survived_newer += newer;
        eprintln!(
            "[{label}] round {round}: recovered {occupied} lines ({dirty} dirty) in {rec_ms:.1} ms; \
             {newer} blocks newer than their last flush survived"
        );
        if round == rounds {
            // Last round: a load without a crash, then detach.
            let until = Instant::now() + Duration::from_millis(500);
            match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
                Ok(LoadEnd::Done) => {}
                Ok(LoadEnd::Broken(e)) => fail(
                    format!(
                        "final load: connection broke: {e}; server state: {}",
                        srv.debug()
                    ),
                    &log,
                ),
                Err(e) => fail(format!("final load: {e}"), &log),
            }
            c.disconnect();
            let st = srv.stats();
            tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
            let status = srv.wait_exit();
            assert!(status.success(), "server after detach exited with {status}");
            check_file_latest(&backing, &ledger)
                .unwrap_or_else(|e| fail(format!("after detach: {e}"), &log));
            eprintln!(
                "[{label}] done: {} writes acked, {} flushes, {} reads checked live ({} overlapped a write and mixed two versions); \
                 {recovered_lines} lines recovered over {rounds} restarts, {survived_newer} unflushed blocks survived; \
                 final stats: evictions {}, writebacks {}, hits {}",
                ledger.writes_acked, ledger.flushes_done, ledger.reads_checked, ledger.reads_mixed,
                st["evictions"], st["writebacks"], st["hits"]
            );
            return;
        }
        // Load, and kill -9 at a random point of it.
        let kill_after = Duration::from_millis(150 + rng.below(1350));
        let pid = srv.child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            kill9(pid);
        });
        let until = Instant::now() + kill_after + Duration::from_secs(30);
        match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
            Ok(LoadEnd::Broken(_)) => {}
            Ok(LoadEnd::Done) => fail("load ended before the kill".into(), &log),
            Err(e) => fail(format!("round {round}: during load: {e}"), &log),
        }
        killer.join().expect("killer thread");
        srv.kill9();
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .and_then(|mut f| {
                use std::io::Write;
                writeln!(f, "=== killed after {kill_after:?} (round {round}) ===")
            });
    }
}

#[test]
fn kill9_write_back_4k_lines_full_lru() {
    crash_rounds("4k-full-lru", &[], 8, 0x5eed_0001);
}

#[test]
fn kill9_write_back_4k_lines_full_s3fifo() {
    crash_rounds("4k-full-s3fifo", &["--eviction", "s3fifo"], 4, 0x5eed_0005);
}

// (N-way associativity cannot be formatted at the moment: `tiercache format`
// checks N against a one-line cache before it knows the real size.)
#[test]
fn kill9_write_back_16k_lines_4k_sub_blocks() {
    crash_rounds(
        "16k-full-lru",
        &["--line-size", "16KiB", "--sub-block", "4KiB"],
        8,
        0x5eed_0002,
    );
}

#[test]
fn kill9_write_back_direct_mapped_fifo() {
    crash_rounds(
        "4k-direct-fifo",
        &[
            "--assoc",
            "direct",
            "--eviction",
            "fifo",
            "--dirty-target",
            "0.5",
        ],
        4,
        0x5eed_0003,
    );
}

#[test]
fn kill9_write_back_8k_lines_arc() {
    crash_rounds(
        "8k-full-arc",
        &["--line-size", "8KiB", "--eviction", "arc"],
        4,
        0x5eed_0004,
    );
}

/// Data set of the clean-overwrite test: 2 MiB, well inside the 6 MiB cache.
const HOT_BLOCKS: u64 = 512;

/// Rule 3b (write-back overwrites clean sub-blocks of their own line in place
/// with no invalidation commit; recovery after kill -9 makes every valid
/// sub-block dirty). Each round: write the whole data set, write it all back
/// (`tiercache flush`) and FLUSH, so every line is cached clean and the
/// backing device holds a flushed version; then overwrite random blocks in
/// place (with flushes and FUA writes among them) and kill -9. After the
/// restart every block must be at least its last flushed version (flushed
/// writes survive) and, after `tiercache flush`, the backing file must hold
/// exactly what the client reads (a clean slot whose bytes changed was
/// written back; a version flushed earlier was never overwritten by older
/// cache data).
fn clean_overwrite_rounds(label: &str, policy: &[&str], default_rounds: u64, default_seed: u64) {
    let rounds = env_u64("TIERCACHE_CRASH_ROUNDS").unwrap_or(default_rounds);
    let seed = env_u64("TIERCACHE_CRASH_SEED").unwrap_or(default_seed);
    let CrashFiles {
        _keep,
        backing,
        cache,
        sock,
        log,
        ..
    } = crash_files(label, policy, HOT_BLOCKS);
    let fail = |msg: String, log: &Path| -> ! {
        panic!(
            "[{label}] seed {seed}: {msg}\n--- server log (tail) ---\n{}",
            tail(log)
        )
    };
    let cache_s = cache.to_str().unwrap().to_string();
    let mut ledger = Ledger::new(HOT_BLOCKS);
    let mut rng = Rng(seed);
    let (mut dirtied, mut newer_total) = (0u64, 0u64);
    for round in 0..=rounds {
        let mut srv = ServeProc::start(&cache, &sock, &log);
        let st = srv.stats();
        let d = st["live"]["recovery_dirtied_lines"]
            .as_u64()
            .unwrap_or_else(|| fail(format!("no recovery_dirtied_lines in stats: {st}"), &log));
        if round == 0 && d != 0 {
            fail(format!("a fresh cache reports dirtied lines: {st}"), &log);
        }
        dirtied += d;
        let mut c =
            NbdClient::connect(&sock).unwrap_or_else(|e| fail(format!("connect: {e}"), &log));
        newer_total += verify_all(&mut c, &mut ledger)
            .unwrap_or_else(|e| fail(format!("round {round}: after restart: {e}"), &log));
        // Whatever the client now reads is what the backing device gets once
        // everything dirty is written back: no stale clean slot, no older data.
        tiercache(&["flush", "--cache", &cache_s]);
        check_file_latest(&backing, &ledger).unwrap_or_else(|e| {
            fail(
                format!("round {round}: after restart and flush, backing vs reads: {e}"),
                &log,
            )
        });
        // Every line cached, clean, and flushed to the backing device.
        for b in 0..HOT_BLOCKS {
            let s = &mut ledger.blocks[b as usize];
            let v = s.next;
            s.next += 1;
            s.issued.push(v);
            match c.write(b * BLOCK as u64, &make_block(b, v), false) {
                Ok(Ok(())) => {
                    s.acked = v;
                    ledger.writes_acked += 1;
                }
                r => fail(format!("round {round}: write of block {b}: {r:?}"), &log),
            }
        }
        tiercache(&["flush", "--cache", &cache_s]);
        match c.flush() {
            Ok(Ok(())) => {
                for s in &mut ledger.blocks {
                    s.durable = s.acked;
                }
            }
            r => fail(format!("round {round}: flush: {r:?}"), &log),
        }
        check_file_latest(&backing, &ledger)
            .unwrap_or_else(|e| fail(format!("round {round}: after flush: {e}"), &log));
        let shape = LoadShape {
            depth: 8,
            hot_blocks: HOT_BLOCKS,
            read_share: 0.15,
            flush_share: 0.03,
            fua_share: 0.03,
            max_blocks: 2,
        };
        if round == rounds {
            let until = Instant::now() + Duration::from_millis(400);
            match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
                Ok(LoadEnd::Done) => {}
                r => fail(format!("final load: {r:?}"), &log),
            }
            c.disconnect();
            tiercache(&["detach", "--cache", &cache_s]);
            let status = srv.wait_exit();
            assert!(status.success(), "server after detach exited with {status}");
            check_file_latest(&backing, &ledger)
                .unwrap_or_else(|e| fail(format!("after detach: {e}"), &log));
            // A clean detach: the next start trusts clean bits again.
            let mut srv = ServeProc::start(&cache, &sock, &log);
            let st = srv.stats();
            assert_eq!(
                st["live"]["recovery_dirtied_lines"].as_u64(),
                Some(0),
                "[{label}] a start after a clean detach made lines dirty: {st}"
            );
            let mut c = NbdClient::connect(&sock).expect("connect");
            verify_all(&mut c, &mut ledger)
                .unwrap_or_else(|e| fail(format!("after detach and restart: {e}"), &log));
            c.disconnect();
            srv.kill9();
            // Each kill came after a load on a cache whose lines were all clean.
            assert!(
                dirtied > 0,
                "[{label}] no unclean recovery made a clean line dirty"
            );
            eprintln!(
                "[{label}] done: {} writes acked, {} flushes, {} reads checked live \
                 ({} overlapped a write and mixed two versions); \
                 {dirtied} lines made dirty by {rounds} unclean recoveries, {newer_total} unflushed blocks survived",
                ledger.writes_acked, ledger.flushes_done, ledger.reads_checked, ledger.reads_mixed
            );
            return;
        }
        let kill_after = Duration::from_millis(100 + rng.below(700));
        let pid = srv.child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            kill9(pid);
        });
        let until = Instant::now() + kill_after + Duration::from_secs(30);
        match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
            Ok(LoadEnd::Broken(_)) => {}
            Ok(LoadEnd::Done) => fail("load ended before the kill".into(), &log),
            Err(e) => fail(format!("round {round}: during load: {e}"), &log),
        }
        killer.join().expect("killer thread");
        srv.kill9();
    }
}

#[test]
fn kill9_write_back_clean_overwrites_4k_lines() {
    clean_overwrite_rounds("clean-overwrite-4k", &[], 6, 0x5eed_0101);
}

/// 8 KiB sub-blocks: every 4 KiB write is a partial sub-block write (in place
/// into a valid sub-block, or to the backing device for an invalid one).
///
/// A read of a block that a write overlaps (sent while the read was in
/// flight) may return a mix of the two versions: a partial write to an
/// invalid sub-block goes to the backing file, and the read miss before it
/// reads that file concurrently. NBD, like a disk, does not order
/// overlapping requests; the checker accepts such a mix word by word.
#[test]
fn kill9_write_back_clean_overwrites_partial_sub_blocks() {
    clean_overwrite_rounds(
        "clean-overwrite-8k-sub",
        &["--line-size", "16KiB", "--sub-block", "8KiB"],
        4,
        0x5eed_0102,
    );
}
