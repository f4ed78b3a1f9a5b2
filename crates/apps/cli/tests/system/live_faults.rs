//! Fault tests of the live server, in process: the cache and backing files are
//! wrapped in `FaultyDev`s that inject EIO by rule, the cache is opened with
//! `open_with_devices` and exported with `tiercache_nbd::Server` on a Unix
//! socket, and a small NBD client checks every block it reads against what it
//! wrote (self-checking versioned blocks, see `common`).
//!
//! What a user relies on: an error on the cache device never
//! loses data that is safe on the backing device (failed cache reads of clean
//! data are served from the backing device; repeated errors degrade the
//! cache, visibly in stats); an error on the backing device reaches the
//! client as EIO for that request only, and the server keeps serving.

use crate::common;

use common::inproc::{write_blocks, InProcess};
use common::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tiercache_azor_live::design::SsdCache;
use tiercache_azor_live::live::LiveCache;
use tiercache_io::{FaultRule, FaultyDev, OpKinds};

/// 4 MiB of data; the cache (6 MiB file, most of it metadata) holds 256 lines of 4 KiB.
const BLOCKS: u64 = 1024;

struct Fixture {
    served: InProcess,
    backing: PathBuf,
    cache_fault: Arc<FaultyDev>,
    backing_fault: Arc<FaultyDev>,
    live: Arc<LiveCache>,
}

impl Fixture {
    /// Format a cache with `policy` (CLI spelling) and serve it in process behind faulty devices.
    fn new(policy: &[&str]) -> Fixture {
        let served = InProcess::new();
        let (backing, cache) = (served.path("backing.img"), served.path("cache.img"));
        init_backing(&backing, BLOCKS);
        format_cache(&cache, &backing, "6MiB", policy);
        Fixture::open(served)
    }

    /// Open (recover) the formatted cache of `served` behind fresh fault
    /// injectors (no faults) and serve it.
    fn open(mut served: InProcess) -> Fixture {
        let (backing, cache) = (served.path("backing.img"), served.path("cache.img"));
        let cache_fault = served.faulty("cache.img", 7);
        let backing_fault = served.faulty("backing.img", 11);
        let (c, b) = (cache_fault.clone(), backing_fault.clone());
        let design = served.serve(|| {
            let live = tiercache_azor_live::open_with_devices(&cache, c, b, &backing)
                .expect("open cache")
                .cache;
            live.set_op_tracking(true);
            live.start_background();
            let backing = backing.clone();
            Arc::new(SsdCache {
                cache: live,
                backing,
            })
        });
        Fixture {
            served,
            backing,
            cache_fault,
            backing_fault,
            live: Arc::clone(&design.cache),
        }
    }

    fn client(&self) -> NbdClient {
        self.served.client()
    }

    /// The serving process crashes (see `InProcess::crash`), with whatever
    /// fault is on; it restarts with the device back (no faults): recovery
    /// from the files.
    fn crash_and_restart(self) -> Fixture {
        let Fixture {
            mut served, live, ..
        } = self;
        drop(live);
        served.crash();
        Fixture::open(served)
    }

    fn stats(&self) -> serde_json::Value {
        tiercache_azor_live::design::stats_json(&self.live)
    }

    /// `tiercache flush`: write back every dirty line (bounded: fails the test after 60 s).
    fn flush_all(&self) -> Result<(), String> {
        let live = Arc::clone(&self.live);
        self.served.rt.block_on(async move {
            tokio::time::timeout(Duration::from_secs(60), live.flush_all())
                .await
                .map_err(|_| "flush_all did not finish within 60 s".to_string())?
                .map_err(|e| e.0)
        })
    }
}

/// Read one block and check it holds the newest acknowledged version.
fn read_latest(c: &mut NbdClient, ledger: &Ledger, b: u64) -> Result<(), String> {
    let data = c
        .read(b * BLOCK as u64, BLOCK)
        .map_err(|e| format!("socket: {e}"))?
        .map_err(|e| format!("read of block {b} failed with NBD error {e}"))?;
    let got = parse_block(b, &data).map_err(|e| format!("block {b}: {e}"))?;
    let want = ledger.blocks[b as usize].acked;
    if got != want {
        return Err(format!(
            "block {b}: read version {got}, newest acknowledged is {want}"
        ));
    }
    Ok(())
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("stats lack {k}: {v}"))
}

fn status(f: &Fixture) -> String {
    f.stats()["status"].as_str().unwrap_or("").to_string()
}

#[test]
fn failed_cache_reads_of_clean_data_are_served_from_backing() {
    let f = Fixture::new(&["--write-policy", "write-back"]);
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    write_blocks(&mut c, &mut ledger, 0..64);
    f.flush_all().expect("flush");
    assert_eq!(u(&f.stats(), "dirty_lines"), 0, "flush cleaned everything");
    let hits0 = u(&f.stats(), "read_hits");
    // Three single failures, each on a cached clean block: fewer than the degrade threshold.
    for b in [3u64, 17, 40] {
        f.cache_fault
            .add_rule(FaultRule::always(OpKinds::READ))
            .unwrap();
        read_latest(&mut c, &ledger, b)
            .expect("a failed cache read of clean data is served from backing");
        f.cache_fault.clear_rules();
    }
    assert_eq!(
        f.cache_fault.injected().reads,
        3,
        "each read hit the cache and failed there"
    );
    let st = f.stats();
    assert_eq!(u(&st["live"], "cache_errors"), 3);
    assert_eq!(
        st["status"], "degraded: device errors: 3 read errors on the cache device",
        "the errors are reported, and only they: the cache still caches"
    );
    assert_eq!(st["device_errors"]["cache"]["read"], 3, "{st}");
    assert_eq!(st["device_errors"]["backing"]["read"], 0, "{st}");
    assert!(
        u(&st, "read_hits") >= hits0 + 3,
        "the reads were cache hits"
    );
    // The failed sub-blocks were dropped from the cache, the others still hit; all data is right.
    for b in 0..64 {
        read_latest(&mut c, &ledger, b).unwrap();
    }
}

#[test]
fn repeated_cache_errors_degrade_write_through_to_pass_through() {
    let f = Fixture::new(&["--write-policy", "write-through"]);
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    write_blocks(&mut c, &mut ledger, 0..100);
    for b in 0..100 {
        read_latest(&mut c, &ledger, b).unwrap();
    }
    assert!(u(&f.stats(), "occupied_lines") >= 100);
    // The cache device dies: every data read and write fails.
    f.cache_fault.fail_all();
    for b in 0..100 {
        read_latest(&mut c, &ledger, b)
            .unwrap_or_else(|e| panic!("with the cache device failing: {e}"));
    }
    let st = f.stats();
    assert!(
        st["status"].as_str().unwrap().starts_with("degraded"),
        "after {} cache errors the status says degraded: {st}",
        st["live"]["cache_errors"]
    );
    // Writes and reads keep working and are correct, without touching the cache.
    write_blocks(&mut c, &mut ledger, (0..40).chain(500..560));
    let injected = f.cache_fault.injected().total();
    for b in (0..100).chain(500..560) {
        read_latest(&mut c, &ledger, b).unwrap();
    }
    let fills = u(&f.stats(), "fills");
    for b in 600..700 {
        read_latest(&mut c, &ledger, b).unwrap();
    }
    assert_eq!(
        u(&f.stats(), "fills"),
        fills,
        "a degraded write-through cache fills nothing"
    );
    assert_eq!(
        f.cache_fault.injected().total(),
        injected,
        "a degraded write-through cache no longer touches the cache device"
    );
    // Write-through: the backing file alone has everything.
    f.cache_fault.restore();
    c.flush().unwrap().unwrap();
    check_file_latest(&f.backing, &ledger).unwrap();
}

#[test]
fn repeated_cache_write_errors_degrade_write_back_which_keeps_and_cleans_dirty_data() {
    let f = Fixture::new(&["--write-policy", "write-back", "--dirty-target", "0.9"]);
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    write_blocks(&mut c, &mut ledger, 0..150);
    c.flush().unwrap().unwrap();
    assert!(u(&f.stats(), "dirty_lines") > 0, "some lines are dirty");
    // Cache writes start failing (reads still work, so the dirty data can be cleaned).
    f.cache_fault
        .add_rule(FaultRule::always(OpKinds::WRITE))
        .unwrap();
    // New writes: to cached lines and to new ones; none may fail or be lost.
    write_blocks(&mut c, &mut ledger, (100..200).chain(700..760));
    let st = f.stats();
    assert!(
        st["status"].as_str().unwrap().starts_with("degraded"),
        "repeated cache write errors degrade the cache: {st}"
    );
    for b in (0..200).chain(700..760) {
        read_latest(&mut c, &ledger, b)
            .unwrap_or_else(|e| panic!("degraded write-back cache: {e}"));
    }
    // Dirty data is kept and cleaned: after flush the backing file alone holds everything.
    f.flush_all().expect("flush of a degraded cache");
    assert_eq!(u(&f.stats(), "dirty_lines"), 0);
    check_file_latest(&f.backing, &ledger).unwrap();
}

#[test]
fn random_cache_write_errors_lose_no_data_under_load() {
    let f = Fixture::new(&["--write-policy", "write-back"]);
    f.cache_fault
        .add_rule(FaultRule::always(OpKinds::WRITE).with_probability(0.05))
        .unwrap();
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(42);
    let shape = LoadShape {
        hot_blocks: 200,
        read_share: 0.3,
        ..LoadShape::default()
    };
    let end = run_load(
        &mut c,
        &mut ledger,
        &mut rng,
        shape,
        Until::WritesAcked(1500),
    )
    .unwrap_or_else(|e| panic!("with 5% cache write errors: {e}"));
    assert!(
        matches!(end, LoadEnd::Done),
        "{end:?}; ops in flight: {:#}",
        f.live.debug_state()
    );
    assert!(f.cache_fault.injected().writes > 0, "faults were injected");
    for b in 0..BLOCKS {
        read_latest(&mut c, &ledger, b).unwrap();
    }
    f.cache_fault.clear_rules();
    f.flush_all().expect("flush");
    check_file_latest(&f.backing, &ledger).unwrap();
    eprintln!(
        "{} writes, {} reads checked, {} cache write errors injected, status {}",
        ledger.writes_acked,
        ledger.reads_checked,
        f.cache_fault.injected().writes,
        status(&f)
    );
}

#[test]
fn random_cache_read_errors_on_write_through_never_reach_the_client() {
    let f = Fixture::new(&["--write-policy", "write-through"]);
    f.cache_fault
        .add_rule(FaultRule::always(OpKinds::READ).with_probability(0.1))
        .unwrap();
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(43);
    let shape = LoadShape {
        hot_blocks: 128,
        read_share: 0.6,
        ..LoadShape::default()
    };
    let end = run_load(
        &mut c,
        &mut ledger,
        &mut rng,
        shape,
        Until::WritesAcked(1000),
    )
    .unwrap_or_else(|e| panic!("with 10% cache read errors on clean data: {e}"));
    assert!(matches!(end, LoadEnd::Done), "{end:?}");
    assert!(f.cache_fault.injected().reads > 0, "faults were injected");
    for b in 0..BLOCKS {
        read_latest(&mut c, &ledger, b).unwrap();
    }
    check_file_latest(&f.backing, &ledger).unwrap();
}

#[test]
fn backing_read_error_is_eio_for_that_request_and_the_server_keeps_serving() {
    let f = Fixture::new(&["--write-policy", "write-back"]);
    let mut c = f.client();
    let ledger = Ledger::new(BLOCKS);
    let bad = 300u64;
    let range = bad * BLOCK as u64..(bad + 1) * BLOCK as u64;
    f.backing_fault
        .add_rule(FaultRule::always(OpKinds::READ).in_range(range))
        .unwrap();
    // A second connection keeps working while the first gets errors.
    let mut other = f.client();
    for _ in 0..3 {
        let r = c
            .read(bad * BLOCK as u64, BLOCK)
            .expect("the connection survives");
        assert_eq!(r.err(), Some(NBD_EIO), "a backing read error is EIO");
        read_latest(&mut other, &ledger, bad + 1).unwrap();
        read_latest(&mut c, &ledger, bad - 1).unwrap();
    }
    assert_eq!(u(&f.stats()["live"], "backing_errors"), 3);
    assert_eq!(
        status(&f),
        "degraded: device errors: 3 read errors on the backing device",
        "backing errors are reported (the cache still serves)"
    );
    // Once the device recovers, the block reads correctly (the failed fill left nothing behind).
    f.backing_fault.clear_rules();
    read_latest(&mut c, &ledger, bad).unwrap();
    read_latest(&mut c, &ledger, bad).unwrap();
}

#[test]
fn backing_write_error_in_write_through_is_eio_and_leaves_old_or_new_data() {
    let f = Fixture::new(&["--write-policy", "write-through"]);
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    write_blocks(&mut c, &mut ledger, 0..20);
    let bad = 5u64;
    f.backing_fault
        .add_rule(FaultRule::always(OpKinds::WRITE).in_range(bad * 4096..bad * 4096 + 4096))
        .unwrap();
    let s = &mut ledger.blocks[bad as usize];
    let v = s.next;
    s.next += 1;
    s.issued.push(v);
    let r = c
        .write(bad * 4096, &make_block(bad, v), false)
        .expect("connection survives");
    assert_eq!(r.err(), Some(NBD_EIO), "a failed write-through is EIO");
    // The block holds the old or the new version, never anything else.
    let data = c.read(bad * 4096, 4096).unwrap().unwrap();
    ledger
        .check_live(bad, &data, ledger.blocks[bad as usize].acked)
        .unwrap();
    for b in (0..20).filter(|&b| b != bad) {
        read_latest(&mut c, &ledger, b).unwrap();
    }
    f.backing_fault.clear_rules();
    write_blocks(&mut c, &mut ledger, [bad]);
    read_latest(&mut c, &ledger, bad).unwrap();
    c.flush().unwrap().unwrap();
    check_file_latest(&f.backing, &ledger).unwrap();
}

#[test]
fn backing_write_errors_during_writeback_keep_dirty_data() {
    // Write-back: dirty data is only in the cache until written back; when the
    // backing device refuses the writeback, the data must stay (dirty) and readable.
    let f = Fixture::new(&["--write-policy", "write-back"]);
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    // The rule comes first: the idle cleaner would otherwise write the lines
    // back before the test looks (it runs after 10 ms without a request).
    f.backing_fault
        .add_rule(FaultRule::always(OpKinds::WRITE))
        .unwrap();
    write_blocks(&mut c, &mut ledger, 0..64);
    c.flush().unwrap().unwrap();
    // Cleaning fails in the background; nothing may be lost.
    let flushed = f.flush_all();
    assert!(
        flushed.is_err(),
        "flush reports that the backing device refuses writes"
    );
    for b in 0..64 {
        read_latest(&mut c, &ledger, b).unwrap();
    }
    // A failed writeback is retried (about 130 ms) before its lines are
    // dirty again; until then they count as being cleaned.
    wait_until("the lines to be dirty again", READY_TIMEOUT, || {
        u(&f.stats(), "dirty_lines") > 0
    });
    f.backing_fault.clear_rules();
    f.flush_all().expect("flush once the device recovered");
    check_file_latest(&f.backing, &ledger).unwrap();
}

#[test]
fn client_disconnects_mid_request_and_bad_handshakes_leave_the_server_serving() {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let f = Fixture::new(&["--write-policy", "write-back"]);
    let mut ledger = Ledger::new(BLOCKS);
    let mut good = f.client();
    write_blocks(&mut good, &mut ledger, 0..8);
    // 1. Garbage instead of client flags, then close.
    {
        let mut s = UnixStream::connect(&f.served.sock).unwrap();
        let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n");
    }
    // 2. A handshake that stops half way through an option.
    {
        let mut s = UnixStream::connect(&f.served.sock).unwrap();
        let _ = s.write_all(&3u32.to_be_bytes());
        let _ = s.write_all(&0x4948_4156_454F_5054u64.to_be_bytes());
        let _ = s.write_all(&7u32.to_be_bytes());
        let _ = s.write_all(&100u32.to_be_bytes());
        let _ = s.write_all(b"short");
    }
    // 3. An option with an absurd length.
    {
        let mut s = UnixStream::connect(&f.served.sock).unwrap();
        let _ = s.write_all(&3u32.to_be_bytes());
        let _ = s.write_all(&0x4948_4156_454F_5054u64.to_be_bytes());
        let _ = s.write_all(&7u32.to_be_bytes());
        let _ = s.write_all(&u32::MAX.to_be_bytes());
        // The server refuses it and closes the connection.
        s.set_read_timeout(Some(READY_TIMEOUT)).unwrap();
        let _ = std::io::Read::read_to_end(&mut s, &mut Vec::new());
    }
    // 4. A write whose payload never fully arrives, then the client vanishes.
    {
        let mut c = f.client();
        let mut h = Vec::new();
        h.extend_from_slice(&0x2560_9513u32.to_be_bytes());
        h.extend_from_slice(&0u16.to_be_bytes());
        h.extend_from_slice(&CMD_WRITE.to_be_bytes());
        h.extend_from_slice(&1u64.to_be_bytes());
        h.extend_from_slice(&(2 * 4096u64).to_be_bytes());
        h.extend_from_slice(&(4 * 4096u32).to_be_bytes());
        h.extend_from_slice(&make_block(2, 999)[..1000]);
        let raw = c.raw();
        let _ = raw.write_all(&h);
    }
    // 5. Many requests in flight, then the client vanishes without reading replies.
    {
        let mut c = f.client();
        for i in 0..64u64 {
            let b = 100 + i;
            let s = &mut ledger.blocks[b as usize];
            let v = s.next;
            s.next += 1;
            s.issued.push(v);
            let _ = c.send_write(b * 4096, &make_block(b, v), false);
            let _ = c.send_read((200 + i) * 4096, 4096 * 4);
        }
    }
    // Once the server is done with what the vanished clients sent (no op in
    // flight), the old connection and new ones work; every block holds a
    // written version.
    wait_until("the vanished clients' ops to end", READY_TIMEOUT, || {
        f.live.debug_state()["ops"]
            .as_array()
            .is_some_and(|ops| ops.is_empty())
    });
    for b in 0..8 {
        read_latest(&mut good, &ledger, b).unwrap();
    }
    let mut fresh = f.client();
    for b in 0..BLOCKS {
        let data = fresh.read(b * 4096, 4096).unwrap().unwrap();
        ledger
            .check_live(b, &data, ledger.blocks[b as usize].acked)
            .unwrap_or_else(|e| panic!("after abrupt disconnects: {e}"));
    }
    fresh.flush().unwrap().unwrap();
    assert_eq!(status(&f), "ok");
}

#[test]
fn direct_mapped_write_back_answers_every_request_under_load() {
    let f = Fixture::new(&[
        "--write-policy",
        "write-back",
        "--assoc",
        "direct",
        "--eviction",
        "fifo",
        "--dirty-target",
        "0.5",
    ]);
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(44);
    for round in 0..6 {
        let until = Until::WritesAcked(ledger.writes_acked + 500);
        let end = run_load(&mut c, &mut ledger, &mut rng, LoadShape::default(), until)
            .unwrap_or_else(|e| panic!("{e}; ops in flight: {:#}", f.live.debug_state()));
        assert!(
            matches!(end, LoadEnd::Done),
            "round {round}: {end:?}; stats {}; ops in flight: {:#}",
            f.stats(),
            f.live.debug_state()
        );
    }
}

#[test]
fn reads_queued_behind_a_failed_miss_never_return_unfilled_data() {
    // A read miss whose backing read fails leaves no data for its fill. A
    // second read of the same line sent at once (pipelined) may find the
    // line valid in the core and queue behind that fill: it must then fail
    // too (or read the device), never return the slot's stale bytes.
    let f = Fixture::new(&["--write-policy", "write-back"]);
    let mut c = f.client();
    let (first, n) = (200u64, 300u64);
    f.backing_fault
        .add_rule(
            FaultRule::always(OpKinds::READ)
                .in_range(first * BLOCK as u64..(first + n) * BLOCK as u64),
        )
        .unwrap();
    let mut wrong = Vec::new();
    for b in first..first + n {
        let off = b * BLOCK as u64;
        let c1 = c.send_read(off, BLOCK).unwrap();
        let c2 = c.send_read(off, BLOCK).unwrap();
        for _ in 0..2 {
            let r = c.recv().expect("the connection survives");
            assert!(r.cookie == c1 || r.cookie == c2);
            if r.error == 0 {
                // Only the device's own bytes may come back.
                if parse_block(b, &r.data) != Ok(0) {
                    wrong.push(b);
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "reads returned bytes that are not the block's (unfilled slots) for blocks {wrong:?}"
    );
    f.backing_fault.clear_rules();
    let ledger = Ledger::new(BLOCKS);
    for b in first..first + n {
        read_latest(&mut c, &ledger, b).unwrap();
    }
}

#[test]
fn writes_after_the_shutdown_started_get_eshutdown_not_eio() {
    let f = Fixture::new(&["--write-policy", "write-back"]);
    let mut c = f.client();
    let live = Arc::clone(&f.live);
    f.served
        .rt
        .block_on(async move { live.shutdown().await })
        .expect("clean shutdown");
    let r = c.write(0, &make_block(0, 1), false).expect("connection");
    assert_eq!(
        r.err(),
        Some(108),
        "NBD_ESHUTDOWN for a write refused while stopping"
    );
}

/// A fault of the SSD cache's cells of the fault matrix (the other
/// designs' cells are `fault_matrix_*` in their `tests/dst.rs`).
#[derive(Clone, Copy, Debug)]
enum CacheFault {
    /// Every data write to the cache device fails with ENOSPC (a full
    /// thin-provisioned device, or a file on a full filesystem).
    Enospc,
    /// Every data read and write fails (the device was pulled).
    Removal,
    /// Every data op is delayed 200 µs (a slow or stalling device).
    Slow,
}

fn inject_cache_fault(f: &FaultyDev, fault: CacheFault) {
    const ENOSPC: i32 = 28;
    match fault {
        CacheFault::Enospc => {
            f.set_errno(ENOSPC);
            f.add_rule(FaultRule::always(OpKinds::WRITE)).unwrap();
        }
        CacheFault::Removal => f.fail_all(),
        CacheFault::Slow => f.set_delay(Duration::from_micros(200)),
    }
}

/// What a seeded load saw.
#[derive(Debug, Default)]
struct LoadCounts {
    writes_acked: u64,
    writes_failed: u64,
    reads_checked: u64,
    reads_failed: u64,
    flushes: u64,
    flushes_failed: u64,
}

/// `ops` seeded requests, one at a time: writes (some FUA), reads (checked
/// against the ledger: acknowledged data or an error, never stale or
/// garbage) and FLUSHes; error replies are counted, and the ledger keeps
/// what was acknowledged and what a completed FLUSH or FUA made durable.
fn seeded_load(c: &mut NbdClient, ledger: &mut Ledger, rng: &mut Rng, ops: u64) -> LoadCounts {
    let mut n = LoadCounts::default();
    for _ in 0..ops {
        let b = if rng.chance(0.7) {
            rng.below(128)
        } else {
            rng.below(BLOCKS)
        };
        match rng.below(10) {
            0..=4 => {
                let fua = rng.chance(0.15);
                let s = &mut ledger.blocks[b as usize];
                let v = s.next;
                s.next += 1;
                s.issued.push(v);
                match c
                    .write(b * BLOCK as u64, &make_block(b, v), fua)
                    .expect("socket")
                {
                    Ok(()) => {
                        s.acked = v;
                        if fua {
                            s.durable = v;
                        }
                        n.writes_acked += 1;
                    }
                    Err(_) => n.writes_failed += 1,
                }
            }
            5..=8 => {
                let acked = ledger.blocks[b as usize].acked;
                match c.read(b * BLOCK as u64, BLOCK).expect("socket") {
                    Ok(d) => {
                        ledger.check_live(b, &d, acked).unwrap();
                        n.reads_checked += 1;
                    }
                    Err(_) => n.reads_failed += 1,
                }
            }
            _ => {
                let snap = ledger.acked_snapshot();
                match c.flush().expect("socket") {
                    Ok(()) => {
                        for (s, a) in ledger.blocks.iter_mut().zip(snap) {
                            s.durable = s.durable.max(a);
                        }
                        n.flushes += 1;
                    }
                    Err(_) => n.flushes_failed += 1,
                }
            }
        }
    }
    n
}

/// One cell: a load and a FLUSH, then `fault` on the cache device under a
/// seeded load, then a crash of the serving process with the fault still
/// on and a restart with the device back: every block holds its version
/// covered by a FLUSH or FUA or a newer one written (0 acknowledged lost);
/// then a load without faults, a FLUSH, a second crash and the same check.
/// Returns what the load saw under the fault and the status then.
fn ssd_cache_fault_cell(policy: &str, fault: CacheFault, seed: u64) -> (LoadCounts, String) {
    let f = Fixture::new(&["--write-policy", policy]);
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(seed);
    seeded_load(&mut c, &mut ledger, &mut rng, 200);
    c.flush().unwrap().unwrap();
    for s in &mut ledger.blocks {
        s.durable = s.acked;
    }
    inject_cache_fault(&f.cache_fault, fault);
    let during = seeded_load(&mut c, &mut ledger, &mut rng, 300);
    let status_during = status(&f);
    let injected = f.cache_fault.injected().total();
    drop(c);
    let f = f.crash_and_restart();
    let mut c = f.client();
    let newer = verify_all(&mut c, &mut ledger)
        .unwrap_or_else(|e| panic!("{policy}, {fault:?}: after the crash: {e}"));
    let after = seeded_load(&mut c, &mut ledger, &mut rng, 150);
    assert_eq!(
        (
            after.writes_failed,
            after.reads_failed,
            after.flushes_failed
        ),
        (0, 0, 0),
        "{policy}, {fault:?}: the restarted cache serves without errors: {after:?}"
    );
    c.flush().unwrap().unwrap();
    drop(c);
    let f = f.crash_and_restart();
    let mut c = f.client();
    verify_all(&mut c, &mut ledger)
        .unwrap_or_else(|e| panic!("{policy}, {fault:?}: after the second crash: {e}"));
    eprintln!(
        "fault matrix | ssd cache ({policy}) | Cache | {fault:?} | {} writes acknowledged, {} failed; {} reads checked, {} failed; {} flushes, {} failed | {injected} faults injected | status: {status_during} | {BLOCKS} blocks verified after each of 2 crashes ({newer} newer than durable) | acknowledged lost: 0",
        during.writes_acked,
        during.writes_failed,
        during.reads_checked,
        during.reads_failed,
        during.flushes,
        during.flushes_failed,
    );
    (during, status_during)
}

#[test]
fn fault_matrix_ssd_cache_enospc() {
    for (policy, seed) in [("write-back", 71), ("write-through", 72)] {
        let (n, status) = ssd_cache_fault_cell(policy, CacheFault::Enospc, seed);
        assert_eq!(
            (n.writes_failed, n.reads_failed, n.flushes_failed),
            (0, 0, 0),
            "{policy}: a full cache device fails no request: {n:?}"
        );
        assert!(status.starts_with("degraded"), "{policy}: {status}");
    }
}

#[test]
fn fault_matrix_ssd_cache_removal() {
    for (policy, seed) in [("write-back", 73), ("write-through", 74)] {
        let (n, status) = ssd_cache_fault_cell(policy, CacheFault::Removal, seed);
        assert!(
            n.writes_acked > 0 && n.writes_failed == 0,
            "{policy}: writes go on to the backing device: {n:?}"
        );
        if policy == "write-through" {
            // The backing device holds everything: losing the cache device
            // fails no read and no FLUSH.
            assert_eq!(
                (n.reads_failed, n.flushes_failed),
                (0, 0),
                "{policy}: a pulled cache device fails no read or FLUSH: {n:?}"
            );
            assert!(n.flushes > 0, "{policy}: the load flushed: {n:?}");
        }
        assert!(status.starts_with("degraded"), "{policy}: {status}");
    }
}

#[test]
fn fault_matrix_ssd_cache_slow() {
    for (policy, seed) in [("write-back", 75), ("write-through", 76)] {
        let (n, status) = ssd_cache_fault_cell(policy, CacheFault::Slow, seed);
        assert_eq!(
            (n.writes_failed, n.reads_failed, n.flushes_failed),
            (0, 0, 0),
            "{policy}: a slow device fails nothing: {n:?}"
        );
        assert_eq!(status, "ok", "{policy}");
    }
}
