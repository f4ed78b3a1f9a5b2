//! Conformance: the simulated policy is the deployed policy.
//!
//! A real trace (the MSR Cambridge sample in ../shared/traces/samples: 1000
//! requests, reads and writes; the tests skip with a message when it is
//! absent) is replayed at queue depth 1 through a live server with
//! `tiercache replay --queue-depth 1`, and `tiercache sim` runs the same
//! trace with the same configuration and capacity; the decision counters
//! must be exactly equal. The backing file is sparse and larger than the
//! trace's last byte, so `replay` sends every record at its own offset (it
//! wraps offsets modulo the export size), and every record of the sample is
//! 512-byte aligned, as `replay` sends them. The SSD cache is served with
//! `--fs-classify off` (the replay's payloads are patterns, not a
//! filesystem; the trace carries no classes either). The tiered volume is
//! formatted with `--plan-clock requests`: its planning rounds follow the
//! request count, as the simulator's do with `--no-timing`.
//!
//! Also here: the SSD cache's one configuration builder: the same options
//! through `format` (then `stats --json` of the served cache) and `sim`
//! give the same configuration, and a bad value the same error.

use crate::common;

use common::{format_cache, sample_trace, sim_json, tiercache, ServeProc};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A sparse backing file past the sample's last byte (13.6 GB).
fn backing(dir: &Path) -> PathBuf {
    let b = dir.join("backing.img");
    std::fs::File::create(&b)
        .expect("backing")
        .set_len(16 << 30)
        .expect("size backing");
    b
}

fn uri(sock: &Path) -> String {
    format!("nbd+unix:///?socket={}", sock.display())
}

/// Replay `trace` at queue depth 1 through the server on `sock`; checks it
/// sent every record without an error.
fn replay_qd1(trace: &Path, sock: &Path) {
    let r: Value = serde_json::from_str(&tiercache(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--uri",
        &uri(sock),
        "--queue-depth",
        "1",
        "--json",
    ]))
    .expect("replay --json");
    assert_eq!(r["errors"], 0, "{r:#}");
    assert_eq!(r["skipped"]["total"], 0, "{r:#}");
    assert_eq!(r["requests"], r["records"], "{r:#}");
}

/// The SSD cache formatted with `opts` (a 7 MiB file: 512 lines of 4 KiB),
/// the sample replayed through it at queue depth 1; returns its
/// `stats --json` and `sim --like` of the cache, `--no-timing`.
fn ssd_cache_run(trace: &Path, opts: &[&str]) -> (Value, Value) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache.img");
    let sock = tmp.path().join("s.sock");
    format_cache(&cache, &backing(tmp.path()), "7MiB", opts);
    let srv = ServeProc::start_with(
        &cache,
        &sock,
        &tmp.path().join("serve.log"),
        &["--fs-classify", "off"],
    );
    replay_qd1(trace, &sock);
    let live = srv.stats();
    drop(srv);
    let sim = sim_json(trace, &["--like", cache.to_str().unwrap(), "--no-timing"]);
    (live, sim)
}

/// The SSD cache's decision counters, named alike in `stats --json` and
/// `sim --json`.
const DECISIONS: [&str; 5] = ["hits", "misses", "fills", "evictions", "admission_rejects"];
/// What cleaning decides: equal when no cleaning depends on the wall clock.
const CLEANING: [&str; 2] = ["dirty_evictions", "writebacks"];

fn assert_equal(live: &Value, sim: &Value, keys: &[&str], what: &str) {
    for k in keys {
        assert!(
            live[k].is_u64(),
            "{what}: stats --json has no {k}: {live:#}"
        );
        assert_eq!(
            live[k], sim[k],
            "{what}: {k} differs (live {live:#}\nsim {sim:#})"
        );
    }
}

/// Read-side and admission decisions over several policies. Write-through
/// and write-hdd-upd leave nothing dirty, so every counter must match; in
/// write-back with the time-driven cleaner on (the default), *when* lines
/// are cleaned follows the wall clock live and the trace's time in the
/// simulator, which changes which victims are dirty (`dirty_evictions`,
/// `writebacks`) but no hit, miss, fill, eviction or admission decision.
#[test]
fn ssd_cache_decisions_match_sim() {
    let Some(trace) = sample_trace() else { return };
    for (opts, all) in [
        (
            &["--write-policy", "write-through", "--eviction", "arc"][..],
            true,
        ),
        (
            &[
                "--write-policy",
                "write-hdd-upd",
                "--admission",
                "nhit",
                "--nhit-trigger",
                "0.5",
                "--nhit-threshold",
                "2",
            ][..],
            true,
        ),
        (
            &[
                "--write-policy",
                "write-through",
                "--assoc",
                "8-way",
                "--eviction",
                "s3fifo",
                "--line-size",
                "8KiB",
            ][..],
            true,
        ),
        (
            &[
                "--eviction",
                "arc",
                "--admission",
                "2lbs",
                "--2lbs-window",
                "500",
            ][..],
            false,
        ),
    ] {
        let (live, sim) = ssd_cache_run(&trace, opts);
        let what = format!("{opts:?}");
        assert_equal(&live, &sim, &DECISIONS, &what);
        assert!(
            live["evictions"].as_u64().unwrap() > 0
                || live["admission_rejects"].as_u64().unwrap() > 0,
            "{what}: the cache must be under pressure for the test to mean anything: {live:#}"
        );
        if all {
            assert_equal(&live, &sim, &CLEANING, &what);
        }
        assert_eq!(live["slots"], sim["cache_lines"], "{what}");
    }
}

/// Write-back where cleaning matters: a small cache, dirty victims, and the
/// shared scheduler's pressure cleaning (after a dirty eviction each of the
/// next 1024 requests cleans `--clean-rate` lines) run by both drivers. The
/// time-driven part is off (`--timed-cleaning off`), recorded in the
/// format: it is the one part that follows a clock (wall live, the trace's
/// virtual time in the simulator), so at queue depth 1 every cleaning
/// decision is then a function of the request sequence alone, the same in
/// both. `dirty_evictions` and `writebacks` must then match exactly too.
#[test]
fn ssd_cache_write_back_cleaning_matches_sim() {
    let Some(trace) = sample_trace() else { return };
    for opts in [
        &[
            "--timed-cleaning",
            "off",
            "--dirty-target",
            "0.1",
            "--clean-rate",
            "2",
        ][..],
        &[
            "--timed-cleaning",
            "off",
            "--dirty-target",
            "0.05",
            "--clean-rate",
            "8",
            "--eviction",
            "fifo",
        ][..],
    ] {
        let (live, sim) = ssd_cache_run(&trace, opts);
        let what = format!("{opts:?}");
        assert_equal(&live, &sim, &DECISIONS, &what);
        assert_equal(&live, &sim, &CLEANING, &what);
        assert!(
            live["dirty_evictions"].as_u64().unwrap() > 0,
            "{what}: no dirty victim, cleaning did not matter: {live:#}"
        );
        assert!(
            live["live"]["pressure_cleaned_lines"].as_u64().unwrap() > 0,
            "{what}: pressure cleaning never ran: {live:#}"
        );
    }
}

/// Every policy option, none at its default; the fractions as percentages
/// (`format` and `sim` take `N%` or a share for each).
const ALL_OPTIONS: [&str; 29] = [
    "--line-size",
    "8KiB",
    "--sub-block",
    "4KiB",
    "--assoc",
    "4-way",
    "--eviction",
    "arc",
    "--write-policy",
    "write-back",
    "--no-write-allocate",
    "--admission",
    "nhit",
    "--seq-cutoff",
    "1MiB",
    "--nhit-threshold",
    "2",
    "--nhit-trigger",
    "50%",
    "--2lbs-levels",
    "frequency",
    "--2lbs-window",
    "1000",
    "--dirty-target",
    "30%",
    "--clean-rate",
    "3",
    "--timed-cleaning",
    "off",
];

/// `format` takes every policy option `sim` takes; `stats --json` of the
/// served cache reports each (and `slots`); `sim` with the same options and
/// `--cache-size SLOTS` gives exactly what `sim --like` of the formatted
/// cache gives (the configuration the format recorded).
#[test]
fn one_config_from_sim_format_and_stats() {
    let Some(trace) = sample_trace() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache.img");
    let sock = tmp.path().join("s.sock");
    format_cache(&cache, &backing(tmp.path()), "12MiB", &ALL_OPTIONS);
    let srv = ServeProc::start_with(&cache, &sock, &tmp.path().join("serve.log"), &[]);
    let st = srv.stats();
    drop(srv);
    let slots = st["slots"].as_u64().expect("slots");
    let c = &st["config"];
    assert_eq!(c["cache_bytes"], slots * 8192, "{st:#}");
    assert_eq!(c["line_bytes"], 8192);
    assert_eq!(c["sub_block_bytes"], 4096);
    assert_eq!(c["assoc"], serde_json::json!({"ways": 4}), "{c:#}");
    assert_eq!(c["eviction"], "arc");
    assert_eq!(c["write_policy"], "write-back");
    assert_eq!(c["write_allocate"], false);
    let a = &c["admission"];
    assert_eq!(a["kind"], "nhit");
    assert_eq!(a["seq_cutoff_bytes"], 1 << 20);
    assert_eq!(a["nhit_threshold"], 2);
    assert_eq!(a["nhit_trigger"], 0.5);
    assert_eq!(a["twolbs_metadata"], false);
    assert_eq!(a["twolbs_frequency"], true);
    assert_eq!(a["twolbs_window"], 1000);
    assert_eq!(c["dirty_target"], 0.3);
    assert_eq!(
        c["cleaning"],
        serde_json::json!({"pressure_lines": 3, "timed": false})
    );
    let p = &st["policy"];
    assert_eq!(p["nhit_trigger"], 0.5, "{p:#}");
    assert_eq!(p["2lbs_window"], 1000, "{p:#}");
    assert_eq!(p["timed_cleaning"], "off", "{p:#}");
    let like = sim_json(&trace, &["--like", cache.to_str().unwrap(), "--no-timing"]);
    let mut args: Vec<&str> = ALL_OPTIONS.to_vec();
    let lines = format!("{slots}lines");
    args.extend_from_slice(&["--cache-size", &lines, "--no-timing"]);
    let given = sim_json(&trace, &args);
    assert_eq!(
        like, given,
        "sim --like and sim with the same options differ"
    );
    assert_eq!(like["cache_lines"], slots);
    // --like refuses policy options: the device decides them.
    let o = Command::new(common::bin())
        .args(["sim", "--trace", trace.to_str().unwrap(), "--like"])
        .arg(&cache)
        .args(["--eviction", "lru"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--eviction"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A device that holds no SSD cache: one clear error.
    let o = Command::new(common::bin())
        .args(["sim", "--trace", trace.to_str().unwrap(), "--like"])
        .arg(tmp.path().join("backing.img"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err
                .contains("sim --like reads an SSD cache, a log-structured cache, a tiered volume"),
        "{err}"
    );
}

/// A bad value gets the same message from `sim` and from `format`, naming
/// the option and what is allowed.
#[test]
fn bad_values_give_the_same_error_in_sim_and_format() {
    let Some(trace) = sample_trace() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let b = backing(tmp.path());
    for (flag, value, says) in [
        (
            "--eviction",
            "mru",
            "--eviction: unknown eviction policy 'mru' (allowed: lru, fifo, arc, s3fifo)",
        ),
        (
            "--nhit-trigger",
            "1.5",
            "'--nhit-trigger <NHIT_TRIGGER>': 1.5 is not a share (allowed: a percentage from 0% to 100% such as 10%, or a share from 0.0 to 1.0 such as 0.1)",
        ),
        (
            "--dirty-target",
            "2",
            "'--dirty-target <DIRTY_TARGET>': 2 is not a share (allowed: a percentage",
        ),
        (
            "--2lbs-levels",
            "recency",
            "--2lbs-levels: unknown 2LBS level 'recency'",
        ),
        (
            "--timed-cleaning",
            "sometimes",
            "--timed-cleaning: 'sometimes' is not understood (allowed: on, off)",
        ),
        ("--assoc", "0-way", "--assoc: unknown associativity '0-way'"),
    ] {
        let sim = Command::new(common::bin())
            .args([
                "sim",
                "--trace",
                trace.to_str().unwrap(),
                "--cache-size",
                "100lines",
                flag,
                value,
            ])
            .output()
            .unwrap();
        let format = Command::new(common::bin())
            .args(["format", "--cache"])
            .arg(tmp.path().join("c.img"))
            .arg("--backing")
            .arg(&b)
            .args(["--size", "8MiB", flag, value])
            .output()
            .unwrap();
        let (se, fe) = (
            String::from_utf8_lossy(&sim.stderr).into_owned(),
            String::from_utf8_lossy(&format.stderr).into_owned(),
        );
        assert!(
            !sim.status.success() && !format.status.success(),
            "{flag} {value}"
        );
        assert!(se.contains(says), "sim {flag} {value}: {se}");
        assert_eq!(se, fe, "sim and format disagree on {flag} {value}");
        // The argument parser's errors read like every other error.
        assert!(se.starts_with("tiercache: error: "), "{se}");
        assert!(!se.contains("panicked"), "{se}");
    }
}

/// A three-level cache formatted on two files of `ssd` bytes with a DRAM
/// level of `dram` and the flusher's timed part off (`--timed-flush off`),
/// the sample replayed through it at queue depth 1; returns its
/// `stats --json` and `sim --mode tica --no-timing` with its capacity
/// (`policy.ssd_pages`, `policy.dram_pages`): both run the policy crate's
/// `FlushScheduler`, flushing after each request, before the next.
fn tica_run(trace: &Path, ssd: u64, dram: &str, policy: &str) -> (Value, Value) {
    let tmp = tempfile::tempdir().unwrap();
    let (ro, wo) = (tmp.path().join("ro.img"), tmp.path().join("wo.img"));
    for p in [&ro, &wo] {
        std::fs::File::create(p).unwrap().set_len(ssd).unwrap();
    }
    let b = backing(tmp.path());
    tiercache(&[
        "format",
        "--mode",
        "tica",
        "--ro-ssd",
        ro.to_str().unwrap(),
        "--wo-ssd",
        wo.to_str().unwrap(),
        "--backing",
        b.to_str().unwrap(),
        "--dram-size",
        dram,
        "--tica-policy",
        policy,
        "--timed-flush",
        "off",
    ]);
    let sock = tmp.path().join("s.sock");
    let srv = ServeProc::start_with(&wo, &sock, &tmp.path().join("serve.log"), &[]);
    replay_qd1(trace, &sock);
    let live = srv.stats();
    drop(srv);
    let p = &live["policy"];
    let (ssd_pages, dram_pages) = (
        format!("{}lines", p["ssd_pages"]),
        format!("{}lines", p["dram_pages"]),
    );
    let sim = sim_json(
        trace,
        &[
            "--mode",
            "tica",
            "--tica-policy",
            policy,
            "--cache-size",
            &ssd_pages,
            "--dram-size",
            &dram_pages,
            "--queue-depth",
            "1",
            "--no-timing",
        ],
    );
    assert_eq!(p["timed_flush"], "off", "{live:#}");
    assert_eq!(sim["ssd_bytes"], p["ssd_pages"].as_u64().unwrap() * 4096);
    (live, sim)
}

/// TICA's hits per level, its WO-SSD page writes, write-backs and
/// promotions, live and simulated, with a large DRAM level (1 MiB).
#[test]
fn tica_decisions_match_sim() {
    let Some(trace) = sample_trace() else { return };
    for policy in ["adaptive", "wed", "ef"] {
        let (live, sim) = tica_run(&trace, 8 << 20, "1MiB", policy);
        let st = &sim["stats"];
        for k in [
            "dram_hits",
            "ro_ssd_hits",
            "wo_ssd_hits",
            "misses",
            "writebacks",
            "promotions",
        ] {
            assert!(live[k].is_u64(), "{policy}: stats --json has no {k}");
            assert_eq!(
                live[k], st[k],
                "{policy}: {k} differs (live {live:#}\nsim {sim:#})"
            );
        }
        assert_eq!(
            live["wo_ssd_writes"], sim["wo_ssd_writes"],
            "{policy}: WO-SSD page writes"
        );
        assert!(
            live["dram_hits"].as_u64().unwrap() > 0,
            "{policy}: {live:#}"
        );
    }
}

/// The DRAM-to-RO-SSD flusher: with a small DRAM level (256 KiB) requests
/// wait for flushes, and *when* the flusher runs decides the RO-SSD's page
/// writes and DRAM hits. Live and simulated, the policy crate's
/// `FlushScheduler` flushes after each request, before the next; the
/// simulator's final drain (`drained_pages`, after the last request) is
/// the one difference, and is reported apart.
#[test]
fn tica_ro_ssd_page_writes_match_sim() {
    let Some(trace) = sample_trace() else { return };
    for policy in ["adaptive", "wed", "ef"] {
        let (live, sim) = tica_run(&trace, 3 << 20, "256KiB", policy);
        let ro_sim =
            sim["ro_ssd_writes"].as_u64().unwrap() - sim["drained_pages"].as_u64().unwrap();
        assert_eq!(
            live["ro_ssd_writes"].as_u64().unwrap(),
            ro_sim,
            "{policy}: RO-SSD page writes (live {live:#}\nsim {sim:#})"
        );
        assert_eq!(
            live["flusher_pages"], sim["flusher_pages"],
            "{policy}: flusher pages"
        );
        assert!(live["flusher_pages"].as_u64().unwrap() > 0, "{live:#}");
        for k in [
            "dram_hits",
            "ro_ssd_hits",
            "wo_ssd_hits",
            "misses",
            "writebacks",
        ] {
            assert_eq!(live[k], sim["stats"][k], "{policy}: {k}");
        }
        assert_eq!(live["wo_ssd_writes"], sim["wo_ssd_writes"], "{policy}");
    }
}

/// A tiered volume of capacity `capacity` on a 16 GiB sparse slow tier and
/// a fast tier file of 33280 KiB (its mapping checkpoints and log, then
/// 44 to 60 data slots of 4 KiB), formatted with `--plan-clock requests
/// --plan-every 50 --moves-per-round 16`; the sample replayed through it
/// at queue depth 1; returns its `stats --json` and `sim --like` of the
/// volume, `--no-timing`. Both run the tiering crate's `plan_round` every
/// 50 requests, right after the request that made the round due and
/// before the next: live on the request path, simulated in the replay loop.
fn tier_run(trace: &Path, capacity: &str) -> (Value, Value) {
    let tmp = tempfile::tempdir().unwrap();
    let fast = tmp.path().join("fast.img");
    let slow = backing(tmp.path());
    let tiers = format!("{},{}", fast.display(), slow.display());
    tiercache(&[
        "format",
        "--mode",
        "tier",
        "--tiers",
        &tiers,
        "--size",
        "33280KiB",
        "--tier-block",
        "4KiB",
        "--capacity",
        capacity,
        "--plan-every",
        "50",
        "--moves-per-round",
        "16",
        "--plan-clock",
        "requests",
    ]);
    let sock = tmp.path().join("s.sock");
    let srv = ServeProc::start_with(&fast, &sock, &tmp.path().join("serve.log"), &[]);
    replay_qd1(trace, &sock);
    let live = srv.stats();
    drop(srv);
    let sim = sim_json(
        trace,
        &[
            "--like",
            fast.to_str().unwrap(),
            "--no-timing",
            "--no-baseline",
        ],
    );
    assert_eq!(live["policy"]["plan_clock"], "requests", "{live:#}");
    assert_eq!(live["capacity"], capacity, "{live:#}");
    (live, sim)
}

/// OODT's migrations up and down (and exchanges, rounds and the blocks
/// accessed on the fast tier), live and simulated, in both capacity modes:
/// `slow` (homes on the slow tier, single moves) and `sum` (every block in
/// one place, moves are exchanges).
#[test]
fn tiered_volume_migrations_match_sim() {
    let Some(trace) = sample_trace() else { return };
    for capacity in ["slow", "sum"] {
        let (live, sim) = tier_run(&trace, capacity);
        let what = format!("tier {capacity}");
        assert_eq!(sim["capacity"], capacity, "{sim:#}");
        assert_eq!(sim["requests"], 1000, "{sim:#}");
        assert_eq!(live["tiers"][0]["slots"], sim["fast_tier_blocks"], "{what}");
        assert_eq!(live["blocks"], sim["volume_blocks"], "{what}");
        assert_equal(
            &live,
            &sim,
            &[
                "migrations",
                "promotions",
                "demotions",
                "exchanges",
                "migrated_bytes",
            ],
            &what,
        );
        assert_eq!(
            live["planner_rounds"], sim["planning_rounds"],
            "{what}: planning rounds (live {live:#}\nsim {sim:#})"
        );
        assert_eq!(live["migration_errors"], 0, "{what}: {live:#}");
        // Routing: the share of block accesses the fast tier served.
        let hits = |t: usize| {
            let x = &live["tiers"][t];
            x["read_hits"].as_u64().unwrap() + x["write_hits"].as_u64().unwrap()
        };
        let share = hits(0) as f64 / (hits(0) + hits(1)) as f64;
        assert_eq!(
            share.to_bits(),
            sim["fast_tier_access_share"].as_f64().unwrap().to_bits(),
            "{what}: fast tier access share live {share}, sim {}",
            sim["fast_tier_access_share"]
        );
        // The run exercised what it compares.
        assert_eq!(live["planner_rounds"], 20, "{what}");
        assert!(
            live["promotions"].as_u64().unwrap() > 20,
            "{what}: {live:#}"
        );
        assert!(live["demotions"].as_u64().unwrap() > 20, "{what}: {live:#}");
        assert!(hits(0) > 0, "{what}: {live:#}");
        if capacity == "sum" {
            assert!(live["exchanges"].as_u64().unwrap() > 0, "{what}");
        }
        eprintln!(
            "tier {capacity}: promotions {}, demotions {}, exchanges {}, rounds {}, fast-tier accesses {} of {} (live = sim)",
            live["promotions"],
            live["demotions"],
            live["exchanges"],
            live["planner_rounds"],
            hits(0),
            hits(0) + hits(1)
        );
    }
}

/// `reproduce` takes sizes, shares and durations with units like every other
/// command; its old bare-number spellings still work, with a deprecation note.
#[test]
fn reproduce_options_take_units() {
    let run = |args: &[&str]| {
        let o = Command::new(common::bin())
            .arg("reproduce")
            .args(args)
            .args(["--traces", "/nonexistent/traces"])
            .output()
            .unwrap();
        assert!(!o.status.success(), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    // Accepted spellings get as far as the missing traces folder.
    for args in [
        &["tica", "--dram-share", "1%", "--ssd-share", "0.1"][..],
        &["flashtier", "--cache-share", "25%"],
        &[
            "oodt",
            "--out",
            "/nonexistent/out",
            "--live-size",
            "64MiB",
            "--live-runtime",
            "1m",
            "--live-warmup",
            "10s",
        ],
        &[
            "azor",
            "--out",
            "/nonexistent/out",
            "--live-time",
            "2m",
            "--pgbench-time",
            "30s",
        ],
        &[
            "azor",
            "--out",
            "/nonexistent/out",
            "--live-seconds",
            "30",
            "--pgbench-seconds",
            "30",
        ],
    ] {
        let e = run(args);
        assert!(
            e.contains("traces folder /nonexistent/traces not found"),
            "{args:?}: {e}"
        );
        assert!(!e.contains("deprecated"), "{args:?}: {e}");
    }
    let e = run(&["tica", "--dram-percent", "1"]);
    assert!(
        e.contains("--dram-percent is deprecated; use --dram-share 1%")
            && e.contains("traces folder"),
        "{e}"
    );
    for (args, says) in [
        (
            &["azor", "--out", "/nonexistent/out", "--live-time", "1.5s"][..],
            "not a whole number of seconds",
        ),
        (
            &["flashtier", "--cache-share", "150%"],
            "150% is not a share",
        ),
        (
            &["oodt", "--out", "/nonexistent/out", "--live-size", "1.5B"],
            "not a whole number of bytes",
        ),
    ] {
        let e = run(args);
        assert!(
            e.starts_with("tiercache: error: ") && e.contains(says),
            "{args:?}: {e}"
        );
    }
}

/// `tiercache ARGS`, expected to fail: its stderr.
fn refused(args: &[&str]) -> String {
    let o = Command::new(common::bin()).args(args).output().unwrap();
    assert!(!o.status.success(), "{args:?} must fail");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `tiercache ARGS`, expected to succeed: its stderr (warnings).
fn warnings(args: &[&str]) -> String {
    let o = Command::new(common::bin()).args(args).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{args:?}: {e}");
    e
}

/// The `[default: N]` of `--OPT` in `tiercache CMD --help`.
fn help_default(cmd: &[&str], opt: &str) -> String {
    let mut args = cmd.to_vec();
    args.push("--help");
    let help = tiercache(&args);
    let at = help
        .find(&format!("--{opt} "))
        .unwrap_or_else(|| panic!("{cmd:?}: no --{opt}"));
    let rest = &help[at..];
    let next = rest[2..].find("\n  -").map_or(rest.len(), |n| n + 2);
    let d = rest[..next].split("[default: ").nth(1).expect("a default");
    d[..d.find(']').unwrap()].to_string()
}

/// Each option means one thing in every command, spelled one way; the old
/// spellings still work and say what replaces them.
#[test]
fn options_mean_the_same_in_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    // A bare number is bytes in `format --size` ...
    std::fs::File::create(p("b.img"))
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    format_cache(
        Path::new(&p("c.img")),
        Path::new(&p("b.img")),
        "8388608",
        &[],
    );
    assert_eq!(std::fs::metadata(p("c.img")).unwrap().len(), 8 << 20);
    // ... and never lines: the simulator's sizes refuse it, naming both spellings.
    let t = tmp.path().join("t.csv");
    std::fs::write(&t, "0,h,0,Read,0,4096,10\n1,h,0,Write,4096,4096,10\n").unwrap();
    let t = t.to_str().unwrap();
    for args in [
        &["--cache-size", "64"][..],
        &["--mode", "tier", "--fast-tier-size", "64"],
        &["--mode", "tica", "--cache-size", "10%", "--dram-size", "64"],
    ] {
        let mut a = vec!["sim", "--trace", t, "--format", "msr"];
        a.extend_from_slice(args);
        let e = refused(&a);
        assert!(
            e.starts_with("tiercache: error: ")
                && e.contains("64lines for 64 cache lines, 64B for bytes"),
            "{args:?}: {e}"
        );
    }
    let v = sim_json(Path::new(t), &["--cache-size", "2lines"]);
    assert_eq!(v["cache_lines"], 2, "{v}");
    // One queue-depth default for the simulator and the live replay.
    assert_eq!(help_default(&["sim"], "queue-depth"), "1");
    assert_eq!(help_default(&["replay"], "queue-depth"), "1");
    // Bytes per trace block id: one default wherever a trace is read.
    for cmd in [
        &["sim"][..],
        &["replay"],
        &["trace", "convert"],
        &["trace", "stats"],
    ] {
        assert_eq!(help_default(cmd, "block-size"), "512B", "{cmd:?}");
    }
    // `check` takes the device as --cache like every command; the positional
    // form still works and says so.
    assert!(!warnings(&["check", "--cache", &p("c.img")]).contains("deprecated"));
    let e = warnings(&["check", &p("c.img")]);
    assert!(
        e.contains("`check CACHE` is deprecated; use `check --cache"),
        "{e}"
    );
    assert!(!tiercache(&["check", "--help"]).contains("[CACHE]"));
    // The tiered volume's block is --tier-block, as in `sim`; `--block-size`
    // (a trace's bytes per block id elsewhere) still works, with a warning.
    for n in ["fast.img", "slow.img"] {
        std::fs::File::create(p(n))
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
    }
    let tiers = format!("{},{}", p("fast.img"), p("slow.img"));
    let fmt = ["format", "--mode", "tier", "--tiers", &tiers, "--force"];
    let e = warnings(&[&fmt[..], &["--tier-block", "64KiB"]].concat());
    assert!(!e.contains("deprecated"), "{e}");
    let e = warnings(&[&fmt[..], &["--block-size", "64KiB"]].concat());
    assert!(
        e.contains("--block-size is deprecated; use --tier-block 64KiB"),
        "{e}"
    );
    let e = refused(
        &[
            &fmt[..],
            &["--block-size", "64KiB", "--tier-block", "64KiB"],
        ]
        .concat(),
    );
    assert!(
        e.starts_with("tiercache: error: ") && e.contains("cannot be used with"),
        "{e}"
    );
    // Line sizes: the live cache takes 4KiB and up, the simulator 512B and
    // up; each command's refusal and help say both.
    let e = refused(&[
        "format",
        "--cache",
        &p("c512.img"),
        "--backing",
        &p("b.img"),
        "--size",
        "8MiB",
        "--line-size",
        "512B",
    ]);
    assert!(
        e.contains("too small for a live cache")
            && e.contains("the simulator also takes 512B to 2KiB"),
        "{e}"
    );
    // One definition of the SSD cache's policy options: `format` and `sim`
    // show each with the same help text and default.
    let (format_help, sim_help) = (
        tiercache(&["format", "--help"]),
        tiercache(&["sim", "--help"]),
    );
    for h in [&format_help, &sim_help] {
        assert!(h.contains("from 4KiB to 1MiB; `sim` also takes 512B to 2KiB"));
    }
    let option_help = |h: &str, opt: &str| -> String {
        let mut lines = h.lines().skip_while(|l| !l.trim_start().starts_with(opt));
        let first = lines.next().unwrap_or_default().to_string();
        let rest: Vec<&str> = lines
            .take_while(|l| !l.trim_start().starts_with('-'))
            .collect();
        format!("{first}\n{}", rest.join("\n"))
    };
    for opt in [
        "--line-size",
        "--assoc",
        "--eviction",
        "--write-policy",
        "--admission",
        "--seq-cutoff",
        "--nhit-threshold",
        "--nhit-trigger",
        "--2lbs-levels",
        "--dirty-target",
        "--clean-rate",
        "--timed-cleaning",
    ] {
        let (f, s) = (option_help(&format_help, opt), option_help(&sim_help, opt));
        assert!(f.contains("[default: "), "format --help {opt}: {f}");
        assert_eq!(f, s, "{opt}: format and sim --help differ");
    }
    // Output: `-o`/`--out` in every command that writes files.
    for cmd in [
        &["sim"][..],
        &["reproduce", "azor"],
        &["reproduce", "flashtier"],
        &["trace", "convert"],
        &["trace", "compressibility"],
    ] {
        let mut a = cmd.to_vec();
        a.push("--help");
        assert!(tiercache(&a).contains("-o, --out <"), "{cmd:?}");
    }
    // `trace convert --output`: the old spelling still works.
    let out = p("t.tct");
    tiercache(&["trace", "convert", t, "--format", "msr", "--output", &out]);
    assert!(std::fs::metadata(&out).unwrap().len() > 0);
}

/// One name per design: `format --design NAME` makes a device whose
/// `stats` reports `design: NAME`, and `sim --design NAME` is the mode it
/// stands for (the same JSON as the older spelling).
#[test]
fn one_name_per_design_in_format_stats_and_sim() {
    use common::designs::{DesignSetup, ALL_DESIGNS};
    for d in ALL_DESIGNS {
        let st = DesignSetup::new(d, |b| {
            std::fs::File::create(b).unwrap().set_len(32 << 20).unwrap()
        });
        let srv = st.serve(&[]);
        assert_eq!(srv.stats()["design"], d.name(), "{d:?}");
    }
    let e = refused(&[
        "format",
        "--design",
        "bcache",
        "--cache",
        "/nonexistent/c",
        "--backing",
        "/nonexistent/b",
    ]);
    assert!(
        e.starts_with("tiercache: error: unknown design 'bcache' (allowed: azor: the SSD cache")
            && e.contains("flashtier")
            && e.contains("oodt")
            && e.contains("tica"),
        "{e}"
    );
    let e = refused(&[
        "format",
        "--design",
        "azor",
        "--mode",
        "tier",
        "--cache",
        "c",
        "--backing",
        "b",
    ]);
    assert!(e.contains("cannot be used with"), "{e}");
    let Some(trace) = sample_trace() else { return };
    for (design, old) in [
        ("azor", &["--mode", "cache", "--cache-size", "5%"][..]),
        (
            "flashtier",
            &[
                "--mode",
                "ssc",
                "--ftl",
                "log",
                "--cache-size",
                "50%",
                "--segment-size",
                "64KiB",
            ],
        ),
        ("oodt", &["--mode", "tier", "--fast-tier-size", "5%"]),
        ("tica", &["--mode", "tica", "--cache-size", "5%"]),
    ] {
        let by_mode = sim_json(&trace, &[old, &["--no-timing"]].concat());
        let mut named = vec!["--design", design, "--no-timing"];
        named.extend_from_slice(&old[2..]);
        if design == "flashtier" {
            named.retain(|a| *a != "--ftl" && *a != "log");
        }
        assert_eq!(sim_json(&trace, &named), by_mode, "{design}");
    }
}
