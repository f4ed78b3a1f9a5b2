//! kill -9 crash tests of the live log-structured cache: `tiercache serve`
//! on a cache of 6 MiB (256 KiB segments) in front of 16 MiB of data is
//! killed with SIGKILL at random points of a random write/read/flush load
//! (`common`), restarted, and every block is checked against the client's
//! ledger: at least the version the last completed FLUSH (or FUA write)
//! covered, one that was actually written, never garbage or misdirected.
//! Reads during the load never go behind what was acknowledged. The cache
//! is much smaller than the data, so segment cleaning (silent eviction of
//! clean blocks, moves of dirty ones) and write-back cleaning run all the
//! time; in write-back the restart must be warm (dirty blocks recovered),
//! and after `tiercache detach` the backing file alone holds the newest data.
//!
//! `TIERCACHE_CRASH_ROUNDS` overrides the rounds and `TIERCACHE_CRASH_SEED`
//! the seed.

mod common;

use common::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// 16 MiB of data.
const BLOCKS: u64 = 4096;

fn crash_rounds(label: &str, policy: &str, default_rounds: u64, default_seed: u64) {
    let rounds = env_u64("TIERCACHE_CRASH_ROUNDS").unwrap_or(default_rounds);
    let seed = env_u64("TIERCACHE_CRASH_SEED").unwrap_or(default_seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    let backing = root.join("backing.img");
    let cache = root.join("cache.img");
    let sock = root.join("nbd.sock");
    let log = root.join("serve.log");
    init_backing(&backing, BLOCKS);
    let formatted = tiercache(&[
        "format",
        "--layout",
        "log-structured",
        "--cache",
        cache.to_str().unwrap(),
        "--backing",
        backing.to_str().unwrap(),
        "--size",
        "6MiB",
        "--segment-size",
        "256KiB",
        "--write-policy",
        policy,
    ]);
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
    let (mut recovered_dirty, mut survived_newer, mut max_recovery_ms) = (0u64, 0u64, 0f64);
    for round in 0..=rounds {
        let mut srv = ServeProc::start(&cache, &sock, &log);
        let st = srv.stats();
        if st["mode"] != "log-structured" || st["status"] != "ok" {
            fail(format!("round {round}: unexpected stats: {st}"), &log);
        }
        let r = &st["recovery"];
        if round > 0 {
            if r["clean_shutdown"] != false {
                fail(format!("round {round}: a kill -9 looks clean: {st}"), &log);
            }
            recovered_dirty += r["dirty_blocks"].as_u64().unwrap_or(0);
            max_recovery_ms = max_recovery_ms.max(r["ms"].as_f64().unwrap_or(0.0));
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
        if round == rounds {
            let until = Instant::now() + Duration::from_millis(1500);
            match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
                Ok(LoadEnd::Done) => {}
                Ok(LoadEnd::Broken(e)) => fail(format!("final load: connection broke: {e}"), &log),
                Err(e) => fail(format!("final load: {e}"), &log),
            }
            c.disconnect();
            let st = srv.stats();
            let cl = &st["cleaning"];
            assert!(
                cl["segments_cleaned"].as_u64().unwrap() > 0
                    && cl["silent_evictions"].as_u64().unwrap() > 0,
                "segment cleaning with silent eviction ran: {st}"
            );
            if policy == "write-back" {
                assert!(
                    recovered_dirty > 0,
                    "restarts after kill -9 were never warm"
                );
                assert!(
                    cl["moved_dirty_blocks"].as_u64().unwrap()
                        + cl["cleaning_written_back"].as_u64().unwrap()
                        > 0,
                    "cleaning met dirty blocks: {st}"
                );
            }
            tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
            let status = srv.wait_exit();
            assert!(status.success(), "server after detach exited with {status}");
            check_file_latest(&backing, &ledger)
                .unwrap_or_else(|e| fail(format!("after detach: {e}"), &log));
            eprintln!(
                "[{label}] done: {} writes acked, {} flushes, {} reads checked live; {recovered_dirty} dirty \
                 blocks recovered over {rounds} kills (slowest recovery {max_recovery_ms:.1} ms), \
                 {survived_newer} unflushed blocks survived; final stats: hit ratio {:.3}, {} segments \
                 cleaned, {} silent evictions, {} dirty moved, {} written back",
                ledger.writes_acked,
                ledger.flushes_done,
                ledger.reads_checked,
                st["hit_ratio"].as_f64().unwrap_or(0.0),
                cl["segments_cleaned"],
                cl["silent_evictions"],
                cl["moved_dirty_blocks"],
                cl["written_back"]
            );
            return;
        }
        let kill_after = Duration::from_millis(150 + rng.below(1350));
        let pid = srv.child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        });
        let until = Instant::now() + kill_after + Duration::from_secs(30);
        match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
            Ok(LoadEnd::Broken(_)) => {}
            Ok(LoadEnd::Done) => fail("load ended before the kill".into(), &log),
            Err(e) => fail(format!("round {round}: during load: {e}"), &log),
        }
        killer.join().expect("killer thread");
        srv.kill9();
        // The metadata left by the kill is consistent (read-only check).
        tiercache(&["check", cache.to_str().unwrap()]);
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
fn kill9_log_structured_write_back() {
    crash_rounds("ls-write-back", "write-back", 24, 0x15_0001);
}

#[test]
fn kill9_log_structured_write_through() {
    crash_rounds("ls-write-through", "write-through", 8, 0x15_0002);
}
