//! Conformance of FlashTier's live store with its simulation: the policy
//! measured in simulation is the policy deployed.
//!
//! A real trace (the first 1000 requests of the shared DiskSim PostMark
//! trace: writes and reads of 4 KiB to 250 KiB) is replayed at queue depth 1
//! through `tiercache serve` on a log-structured cache (`tiercache replay
//! --queue-depth 1`), and `tiercache sim --mode ssc --ftl log --no-timing
//! --json` runs the same trace on a store of the same size (`--cache-size` =
//! the live store's segments x segment size, read from its `stats --json`),
//! segment size, write policy, dirty target and victim rule. Both run the
//! FlashTier policy crate's `logstore::Log` (the unified sparse map, the
//! one victim rule, silent eviction in segment cleaning, write-back to the
//! dirty target); the live store adds only I/O. Nothing in that policy
//! depends on time, so no clock is involved: at queue depth 1 the server
//! sees the requests in trace order, one at a time, exactly as the
//! simulator does. The decision counters must be equal exactly: blocks
//! appended, silent evictions, dirty blocks moved (and the other cleaning
//! counters, hits and misses, fills), under the same names in both JSONs.
//! The server runs with its background cleaner off (`TIERCACHE_LS_CLEANER=0`):
//! the cleaner cleans when its thread gets to it, which no trace order fixes.
//!
//! The backing device is a sparse file larger than the trace's extent, so
//! that `replay` sends every record at its own offset (it wraps offsets
//! modulo the export size). Skips with a message when the trace is absent.

use crate::common;

use common::{format_cache, tiercache, ServeProc};
use std::path::{Path, PathBuf};

/// Requests of the trace replayed (a few seconds at queue depth 1).
const REQUESTS: usize = 1000;

/// The first `REQUESTS` lines of a shared DiskSim trace, copied into `dir`.
fn trace_head(dir: &Path, name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("repository root")
        .join("../shared/traces/disksim")
        .join(name);
    let Ok(text) = std::fs::read_to_string(&p) else {
        eprintln!(
            "skipping: shared trace {} is absent (see ../shared/notes/traces.md)",
            p.display()
        );
        return None;
    };
    let head: String = text
        .lines()
        .take(REQUESTS)
        .flat_map(|l| [l, "\n"])
        .collect();
    let out = dir.join(name);
    std::fs::write(&out, head).expect("write the trace head");
    Some(out)
}

/// Bytes past the end of the trace's last request.
fn trace_extent(trace: &Path) -> u64 {
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(2)
                .take(2)
                .map(|x| x.parse().unwrap())
                .collect();
            (f[0] + f[1]) * 512
        })
        .max()
        .unwrap_or(0)
}

fn replay_qd1(trace: &Path, sock: &Path) -> serde_json::Value {
    let out = tiercache(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "disksim",
        "--uri",
        &format!("nbd+unix:///?socket={}", sock.display()),
        "--queue-depth",
        "1",
        "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&out).expect("replay --json");
    assert_eq!(r["errors"].as_u64(), Some(0), "{r:#}");
    assert_eq!(r["skipped"]["total"].as_u64(), Some(0), "{r:#}");
    r
}

fn sim_json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&tiercache(args)).expect("sim --json")
}

/// One configuration of the log-structured store: live and simulated
/// decision counters are equal.
fn ssc_case(write_policy: &str, seg: &str, cache_size: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let Some(trace) = trace_head(tmp.path(), "ssd-postmark-aligned2.trace") else {
        return;
    };
    let backing = tmp.path().join("backing.img");
    let extent = trace_extent(&trace);
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(extent.next_multiple_of(1 << 20) + (1 << 20))
        .unwrap();
    let cache = tmp.path().join("cache.img");
    format_cache(
        &cache,
        &backing,
        cache_size,
        &[
            "--layout",
            "log-structured",
            "--segment-size",
            seg,
            "--write-policy",
            write_policy,
            "--dirty-target",
            "0.2",
        ],
    );
    let sock = tmp.path().join("nbd.sock");
    // The background cleaner runs when the server's clock says so; off,
    // requests clean inline exactly where the simulator does.
    let srv = ServeProc::start_env(
        &cache,
        &sock,
        &tmp.path().join("serve.log"),
        &[],
        &[("TIERCACHE_LS_CLEANER", "0")],
    );
    let r = replay_qd1(&trace, &sock);
    let live = srv.stats();
    drop(srv);
    let seg_bytes = live["segments"]["bytes"].as_u64().unwrap();
    let area = live["segments"]["total"].as_u64().unwrap() * seg_bytes;
    let sim = sim_json(&[
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "disksim",
        "--mode",
        "ssc",
        "--ftl",
        "log",
        "--segment-size",
        &format!("{seg_bytes}B"),
        "--cache-size",
        &format!("{area}B"),
        "--write-policy",
        write_policy,
        "--dirty-target",
        "0.2",
        "--victim",
        "cost-benefit",
        "--no-timing",
        "--json",
    ]);
    assert_eq!(sim["requests"].as_u64(), r["requests"].as_u64(), "{sim:#}");
    assert_eq!(
        sim["slots"], live["slots"],
        "same capacity: {sim:#}\n{live:#}"
    );
    for k in [
        "appended_blocks",
        "fills",
        "read_hits",
        "read_misses",
        "write_hits",
        "write_misses",
        "mapped_blocks",
        "dirty_blocks",
    ] {
        assert_eq!(sim[k], live[k], "{k}: sim {sim:#}\nlive {live:#}");
    }
    for k in [
        "segments_cleaned",
        "silent_evictions",
        "moved_dirty_blocks",
        "cleaning_written_back",
        "written_back",
    ] {
        assert_eq!(
            sim["cleaning"][k], live["cleaning"][k],
            "cleaning.{k}: sim {sim:#}\nlive {live:#}"
        );
    }
    // The run exercised what it claims to compare.
    let c = &live["cleaning"];
    assert!(c["segments_cleaned"].as_u64().unwrap() > 10, "{live:#}");
    assert!(c["silent_evictions"].as_u64().unwrap() > 100, "{live:#}");
    if write_policy == "write-back" {
        assert!(c["moved_dirty_blocks"].as_u64().unwrap() > 0, "{live:#}");
    }
    eprintln!(
        "ssc {write_policy}: appended {}, silent evictions {}, moved dirty {}, segments cleaned {} (live = sim)",
        live["appended_blocks"], c["silent_evictions"], c["moved_dirty_blocks"], c["segments_cleaned"]
    );
}

#[test]
fn flashtier_log_store_write_back_matches_simulation() {
    ssc_case("write-back", "256KiB", "4MiB");
}

#[test]
fn flashtier_log_store_write_through_matches_simulation() {
    ssc_case("write-through", "256KiB", "4MiB");
}
