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
//! the power exactly there). A `--capacity slow` volume ends with `detach`,
//! which evacuates every block to the slow tier: that file alone must then
//! hold the newest data. A `--capacity sum` volume (larger than either tier,
//! every move an exchange of two blocks under one log transaction) refuses
//! detach: its last round stops cleanly (SIGTERM); each restart verifies once
//! more. The loop is the shared harness of `common::crash`.
//!
//! `TIERCACHE_CRASH_ROUNDS` and `TIERCACHE_CRASH_SEED` override rounds and seed.

use crate::common;

use common::crash::{crash_rounds, tiercache_in, CrashDesign};
use common::*;

fn tier_rounds(label: &str, policy: &str, capacity: &str, rounds: u64, seed: u64) {
    // Each migration copy waits 5 ms after its `Begin` is durable, so that
    // kills land between a `Begin` and its `Switch` often enough for the
    // rolled-back path to occur (CI runs twice saw none in 8 and 14 rounds:
    // the copy and flush take well under a millisecond). The servers the
    // harness starts inherit it.
    std::env::set_var("TIERCACHE_TIER_COPY_PAUSE_MS", "5");
    let sum = capacity == "sum";
    let design = CrashDesign {
        backing: "slow.img",
        // sum: a 12 MiB slow tier, about 12.7 MiB exported.
        backing_bytes: sum.then_some(12 << 20),
        format: Box::new(|d| {
            let args = "format --mode tier --tiers fast.img,slow.img --size 1MiB \
                        --tier-block 16KiB --plan-every 40 --tier-policy";
            tiercache_in(d, &format!("{args} {policy} --capacity {capacity}"))
        }),
        serve: &["fast.img"],
        detach: !sum,
        shape: LoadShape {
            hot_blocks: 256,
            ..LoadShape::default()
        },
        on_start: Box::new(|run, st| {
            let rec = &st["recovery"];
            for k in ["completed", "completed_after_switch", "rolled_back"] {
                run.add(k, rec[k].as_u64().unwrap_or(0) as f64);
            }
            Ok(format!("recovery {rec}"))
        }),
        before_stop: Box::new(move |_, st| {
            if st["capacity"] != capacity {
                return Err(format!("capacity {capacity} expected: {st}"));
            }
            if sum && st["exchanges"].as_u64().unwrap_or(0) == 0 {
                return Err(format!("no exchange ran in the last round: {st}"));
            }
            match st["migrations"].as_u64().unwrap_or(0) {
                0 => Err("no migration ran in the last round".into()),
                n => Ok(format!("{n} migrations in the last round")),
            }
        }),
        after_stop: Box::new(move |run| {
            let (_srv, st) = run.restart_and_verify("after a clean restart");
            if st["recovery"]["log_records"] != 0 {
                return Err(format!("a clean shutdown leaves an empty log: {st}"));
            }
            if !sum && st["tiers"][0]["used_slots"] != 0 {
                return Err(format!("detach left blocks on the fast tier: {st}"));
            }
            let (completed, rolled_back) = (run.get("completed"), run.get("rolled_back"));
            if completed == 0.0 || rolled_back == 0.0 {
                return Err(format!(
                    "both recovery paths must occur: {completed} completed, {rolled_back} rolled back"
                ));
            }
            Ok(())
        }),
        ..CrashDesign::default()
    };
    crash_rounds(design, label, rounds, seed);
}

#[test]
fn kill9_during_migrations_oodt() {
    tier_rounds("tier-oodt", "oodt", "slow", 14, 0x71e2_0001);
}

#[test]
fn kill9_during_migrations_frequency() {
    // 14 rounds like the others: with 8, a CI run once saw no kill land
    // between a migration's Begin and its Switch (1132 completed, 0 rolled
    // back), and the test wants both recovery paths.
    tier_rounds("tier-frequency", "frequency", "slow", 14, 0x71e2_0002);
}

#[test]
fn kill9_during_exchanges_of_a_sum_volume() {
    tier_rounds("tier-sum", "oodt", "sum", 14, 0x71e2_0003);
}
