//! kill -9 crash tests of the live three-level (TICA) cache: `tiercache
//! serve` on an RO-SSD and a WO-SSD file (each about a third of the data)
//! with a DRAM level of 64 pages is killed with SIGKILL at random points of a
//! random write/read/flush load, restarted, and every block is checked
//! against the client's ledger (`common`): at least the version the last
//! completed FLUSH (or FUA write) covered, one that was actually written,
//! never garbage or misdirected. Reads during the load never go behind what
//! was acknowledged. DRAM is lost at every kill: the WO-SSD copy is what
//! survives. The restart must be warm (WO-SSD pages recovered), and after
//! `tiercache detach` the backing file alone holds the newest data.
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
    let ro = root.join("ro.img");
    let wo = root.join("wo.img");
    let sock = root.join("nbd.sock");
    let log = root.join("serve.log");
    init_backing(&backing, BLOCKS);
    let formatted = tiercache(&[
        "format",
        "--mode",
        "tica",
        "--ro-ssd",
        ro.to_str().unwrap(),
        "--wo-ssd",
        wo.to_str().unwrap(),
        "--backing",
        backing.to_str().unwrap(),
        "--size",
        "6MiB",
        "--dram-size",
        "256KiB",
        "--tica-policy",
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
    let (mut recovered, mut written_back, mut survived_newer) = (0u64, 0u64, 0u64);
    for round in 0..=rounds {
        // Alternate the SSD `serve` is given: either finds the pair.
        let entry = if round.is_multiple_of(2) { &wo } else { &ro };
        let mut srv = ServeProc::start(entry, &sock, &log);
        let st = srv.stats();
        if st["mode"] != "tica" || st["status"] != "ok" {
            fail(format!("round {round}: unexpected stats: {st}"), &log);
        }
        let r = &st["recovery"];
        if round > 0 {
            if r["clean_shutdown"] != false {
                fail(format!("round {round}: a kill -9 looks clean: {st}"), &log);
            }
            let pages = r["wo_pages"].as_u64().unwrap_or(0);
            if pages == 0 {
                fail(
                    format!("round {round}: restart after kill -9 is cold: {st}"),
                    &log,
                );
            }
            recovered += pages;
            written_back += r["written_back"].as_u64().unwrap_or(0);
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
            let until = Instant::now() + Duration::from_millis(500);
            match run_load(&mut c, &mut ledger, &mut rng, shape, until) {
                Ok(LoadEnd::Done) => {}
                Ok(LoadEnd::Broken(e)) => fail(format!("final load: connection broke: {e}"), &log),
                Err(e) => fail(format!("final load: {e}"), &log),
            }
            c.disconnect();
            let st = srv.stats();
            let text = tiercache(&["stats", "--cache", entry.to_str().unwrap()]);
            for want in [
                "status            ok",
                "hit ratio",
                "RO-SSD",
                "WO-SSD",
                "page writes",
            ] {
                assert!(text.contains(want), "stats text lacks {want:?}:\n{text}");
            }
            tiercache(&["detach", "--cache", entry.to_str().unwrap()]);
            let status = srv.wait_exit();
            assert!(status.success(), "server after detach exited with {status}");
            check_file_latest(&backing, &ledger)
                .unwrap_or_else(|e| fail(format!("after detach: {e}"), &log));
            let log_text = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(!log_text.contains("FAILED"), "no device failed: {log_text}");
            eprintln!(
                "[{label}] done: {} writes acked, {} flushes, {} reads checked live; {recovered} WO-SSD \
                 pages recovered over {rounds} kills ({written_back} single-copy dirty pages written \
                 back), {survived_newer} unflushed blocks survived; final stats: hits DRAM {} RO {} WO {}, \
                 misses {}, SSD writes RO {} WO {}, writebacks {}",
                ledger.writes_acked,
                ledger.flushes_done,
                ledger.reads_checked,
                st["dram_hits"],
                st["ro_ssd_hits"],
                st["wo_ssd_hits"],
                st["misses"],
                st["ro_ssd_writes"],
                st["wo_ssd_writes"],
                st["writebacks"]
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
fn kill9_tica_adaptive() {
    crash_rounds("tica-adaptive", "adaptive", 24, 0x71ca_0001);
}

#[test]
fn kill9_tica_wed() {
    crash_rounds("tica-wed", "wed", 8, 0x71ca_0002);
}

#[test]
fn kill9_tica_ef() {
    crash_rounds("tica-ef", "ef", 8, 0x71ca_0003);
}
