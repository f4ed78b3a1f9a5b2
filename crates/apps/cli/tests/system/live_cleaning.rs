//! Write-back cleaning of the live server under a sustained write load.
//!
//! The cleaner is a rate controller on the dirty line count
//! (`tiercache_azor_policy::cleaning`): it must keep cleaning while requests keep
//! coming (the complaint about dm-cache and Open CAS is that they clean only
//! when the device is idle), absorb a burst above the dirty target without
//! making requests clean, bring the cache back to the target once the load
//! stops, and `tiercache flush` / `detach` must then leave nothing dirty and a
//! backing file equal to what the client wrote.

use crate::common;

use common::*;
use std::time::Duration;

/// 16 MiB of data in 4 KiB blocks.
const BLOCKS: u64 = 4096;

/// Writes of the sustained load (a few seconds).
const LOAD_WRITES: u64 = 20_000;

#[test]
fn cleaning_keeps_going_under_sustained_writes_and_reaches_the_target() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (backing, cache) = (tmp.path().join("backing.img"), tmp.path().join("cache.img"));
    let (sock, log) = (tmp.path().join("nbd.sock"), tmp.path().join("serve.log"));
    init_backing(&backing, BLOCKS);
    // The cache holds the whole data set: no evictions, so no request ever
    // has to clean; all cleaning is the background cleaner's.
    format_cache(&cache, &backing, "32MiB", &["--write-policy", "write-back"]);
    let mut srv = ServeProc::start(&cache, &sock, &log);
    let st0 = srv.stats();
    let target = st0["dirty_target_lines"]
        .as_u64()
        .expect("dirty_target_lines");
    assert!(target > 0 && target < BLOCKS, "target {target} of {BLOCKS}");

    // LOAD_WRITES random writes (a few reads and flushes among them) on one
    // connection, checked against the ledger, while this thread samples stats.
    let sock2 = sock.clone();
    let load = std::thread::spawn(move || {
        let mut c = NbdClient::connect(&sock2).expect("connect");
        let mut ledger = Ledger::new(BLOCKS);
        let mut rng = Rng(0x00c1_ea11);
        let shape = LoadShape {
            depth: 16,
            hot_blocks: BLOCKS,
            read_share: 0.1,
            flush_share: 0.005,
            fua_share: 0.0,
            max_blocks: 1,
        };
        let until = Until::WritesAcked(LOAD_WRITES);
        let r = run_load(&mut c, &mut ledger, &mut rng, shape, until);
        c.disconnect();
        (r, ledger)
    });
    let (mut max_dirty, mut max_rate) = (0u64, 0f64);
    wait_until("the load to end", Duration::from_secs(600), || {
        if let Some(st) = srv.try_stats() {
            max_dirty = max_dirty.max(st["dirty_lines"].as_u64().unwrap_or(0));
            max_rate = max_rate.max(
                st["live"]["cleaning_target_rate_lines_per_s"]
                    .as_f64()
                    .unwrap_or(0.0),
            );
        }
        load.is_finished()
    });
    let (r, ledger) = load.join().expect("load thread");
    match r {
        Ok(LoadEnd::Done) => {}
        other => panic!("load: {other:?}\n{}", tail(&log)),
    }
    let st = srv.stats();
    let l = &st["live"];
    let cleaned = l["cleaned_lines"].as_u64().unwrap();
    let idle = l["idle_cleaned_lines"].as_u64().unwrap();
    let pressure = l["pressure_cleaned_lines"].as_u64().unwrap();
    eprintln!(
        "target {target} lines, peak dirty {max_dirty}, peak paced rate {max_rate:.0} lines/s; \
         cleaned {cleaned} ({idle} idle, {pressure} by requests), writes acked {}",
        ledger.writes_acked
    );
    // The burst went above the target (it was absorbed, not throttled) ...
    assert!(
        max_dirty > target,
        "dirty never exceeded the target {target}"
    );
    // ... no request had to clean (no evictions) ...
    assert_eq!(st["evictions"].as_u64(), Some(0), "{st}");
    assert_eq!(pressure, 0, "requests cleaned with no dirty eviction: {st}");
    // ... and the controller cleaned while requests kept coming.
    assert!(
        max_rate > 0.0,
        "the controller never asked for cleaning: {st}"
    );
    assert!(
        cleaned > idle,
        "all {cleaned} lines were cleaned while idle: no cleaning under load ({st})"
    );

    // Idle now: the cleaner reaches the target (bounded wait, not a timing claim).
    wait_until(
        format!("the dirty lines to reach the target {target} while idle"),
        Duration::from_secs(300),
        || srv.stats()["dirty_lines"].as_u64().unwrap() <= target,
    );
    tiercache(&["flush", "--cache", cache.to_str().unwrap()]);
    assert_eq!(srv.stats()["dirty_lines"].as_u64(), Some(0));
    tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
    assert!(srv.wait_exit().success());
    check_file_latest(&backing, &ledger).expect("backing after detach");
}
