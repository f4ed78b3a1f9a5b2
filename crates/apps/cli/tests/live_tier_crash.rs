//! kill -9 crash tests of the live tiered volume during migrations.
//!
//! A 16 MiB volume of 16 KiB tiering blocks on a 1 MiB fast tier (46 slots)
//! and a slow tier holding version 0 of every 4 KiB checked block. A random
//! write/read/flush load with a hot set keeps the planner moving blocks in
//! both directions; `tiercache serve` is killed with SIGKILL at a random
//! moment, restarted, and every block is checked against the client's ledger
//! (`common`): it holds a version that was written, at least as new as the
//! last completed FLUSH or FUA write covered; reads during the load never go
//! behind what was acknowledged. Across the rounds recovery must have
//! completed migrations from their logged switch (the mapping change exists
//! only in the log: replaying it wrong reads stale data) and rolled back
//! migrations that had begun without a switch; it reports how many were
//! caught between their switch and their end (a window of microseconds under
//! kill -9, which keeps written data; `tiered-volume/tests/power_loss.rs` cuts
//! the power exactly there). The last round stops cleanly (SIGTERM) and the
//! restart verifies once more.
//!
//! `TIERCACHE_CRASH_ROUNDS` and `TIERCACHE_CRASH_SEED` override rounds and seed.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

/// 16 MiB of checked 4 KiB blocks.
const BLOCKS: u64 = 4096;

fn crash_rounds(label: &str, policy: &str, default_rounds: u64, default_seed: u64) {
    let rounds = env_u64("TIERCACHE_CRASH_ROUNDS").unwrap_or(default_rounds);
    let seed = env_u64("TIERCACHE_CRASH_SEED").unwrap_or(default_seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_path_buf();
    let fast = root.join("fast.img");
    let slow = root.join("slow.img");
    let sock = root.join("nbd.sock");
    let log = root.join("serve.log");
    init_backing(&slow, BLOCKS);
    let tiers = format!("{},{}", fast.display(), slow.display());
    let formatted = tiercache(&[
        "format",
        "--mode",
        "tier",
        "--tiers",
        &tiers,
        "--size",
        "1MiB",
        "--block-size",
        "16KiB",
        "--tier-policy",
        policy,
        "--plan-every",
        "40",
    ]);
    eprintln!(
        "[{label}] seed {seed}, {rounds} rounds: {}",
        formatted.trim()
    );
    let fail = |msg: String| -> ! {
        panic!(
            "[{label}] seed {seed}: {msg}\n--- server log (tail) ---\n{}",
            tail(&log)
        )
    };
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(seed);
    let shape = LoadShape {
        hot_blocks: 256,
        ..LoadShape::default()
    };
    let (mut completed, mut after_switch, mut rolled_back, mut migrations) = (0, 0, 0, 0);
    for round in 0..=rounds {
        let mut srv = ServeProc::start(&fast, &sock, &log);
        let st = srv.stats();
        let rec = &st["recovery"];
        completed += rec["completed"].as_u64().unwrap_or(0);
        after_switch += rec["completed_after_switch"].as_u64().unwrap_or(0);
        rolled_back += rec["rolled_back"].as_u64().unwrap_or(0);
        let mut c = NbdClient::connect(&sock).unwrap_or_else(|e| fail(format!("connect: {e}")));
        assert_eq!(
            c.size,
            BLOCKS * BLOCK as u64,
            "export size is the slow tier's"
        );
        let newer = verify_all(&mut c, &mut ledger)
            .unwrap_or_else(|e| fail(format!("round {round}: after restart ({rec}): {e}")));
        eprintln!(
            "[{label}] round {round}: recovery {rec}; {newer} blocks newer than their last flush"
        );
        if round == rounds {
            let until = Instant::now() + Duration::from_millis(500);
            match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
                Ok(LoadEnd::Done) => {}
                Ok(LoadEnd::Broken(e)) => fail(format!("final load: connection broke: {e}")),
                Err(e) => fail(format!("final load: {e}")),
            }
            c.disconnect();
            migrations = srv.stats()["migrations"].as_u64().unwrap_or(0);
            let _ = Command::new("kill")
                .args(["-TERM", &srv.child.id().to_string()])
                .status();
            let status = srv.wait_exit();
            assert!(
                status.success(),
                "server after SIGTERM exited with {status}"
            );
            let srv = ServeProc::start(&fast, &sock, &log);
            let st = srv.stats();
            assert_eq!(
                st["recovery"]["log_records"], 0,
                "a clean shutdown leaves an empty log: {st}"
            );
            let mut c = NbdClient::connect(&sock).unwrap_or_else(|e| fail(format!("connect: {e}")));
            verify_all(&mut c, &mut ledger)
                .unwrap_or_else(|e| fail(format!("after a clean restart: {e}")));
            c.disconnect();
            break;
        }
        let kill_after = Duration::from_millis(150 + rng.below(1350));
        let pid = srv.child.id();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(kill_after);
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        });
        let until = Instant::now() + kill_after + Duration::from_secs(30);
        match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
            Ok(LoadEnd::Broken(_)) => {}
            Ok(LoadEnd::Done) => fail("load ended before the kill".into()),
            Err(e) => fail(format!("round {round}: during load: {e}")),
        }
        killer.join().expect("killer thread");
        srv.kill9();
    }
    eprintln!(
        "[{label}] done: {} writes acked, {} flushes, {} reads checked live; {migrations} migrations in the last round; \
         recovery completed {completed} switched migrations ({after_switch} caught after their switch) and rolled back {rolled_back}",
        ledger.writes_acked, ledger.flushes_done, ledger.reads_checked
    );
    assert!(
        migrations > 0,
        "[{label}] no migration ran in the last round"
    );
    assert!(
        completed > 0 && rolled_back > 0,
        "[{label}] seed {seed}: both recovery paths must occur: {completed} completed, {rolled_back} rolled back"
    );
}

#[test]
fn kill9_during_migrations_oodt() {
    crash_rounds("tier-oodt", "oodt", 14, 0x71e2_0001);
}

#[test]
fn kill9_during_migrations_frequency() {
    crash_rounds("tier-frequency", "frequency", 8, 0x71e2_0002);
}
