//! kill -9 crash tests of the live three-level (TICA) cache: `tiercache
//! serve` on an RO-SSD and a WO-SSD file (each about a third of the data,
//! or twice the data so that pipelined writes run as write batches)
//! with a DRAM level of 64 pages is killed with SIGKILL at random points of a
//! random write/read/flush load, restarted, and every block is checked
//! against the client's ledger (`common`): at least the version the last
//! completed FLUSH (or FUA write) covered, one that was actually written,
//! never garbage or misdirected. Reads during the load never go behind what
//! was acknowledged. DRAM is lost at every kill: the WO-SSD copy is what
//! survives. The restart must be warm (WO-SSD pages recovered), and after
//! `tiercache detach` the backing file alone holds the newest data. The loop
//! is the shared harness of `common::crash`.
//!
//! `TIERCACHE_CRASH_ROUNDS` overrides the rounds and `TIERCACHE_CRASH_SEED`
//! the seed.

use crate::common;

use common::crash::{crash_rounds, tiercache_in, CrashDesign};

/// `ssd`: each SSD's size; with SSDs larger than the data (`batches`),
/// writes never need a victim's write-back, so pipelined writes run as
/// write batches, which the last round's stats must show.
fn tica_rounds(label: &str, policy: &str, ssd: &str, batches: bool, rounds: u64, seed: u64) {
    let design = CrashDesign {
        format: Box::new(|d| {
            let args = "format --mode tica --ro-ssd ro.img --wo-ssd wo.img --backing backing.img \
                        --dram-size 256KiB --tica-policy";
            tiercache_in(d, &format!("{args} {policy} --size {ssd}"))
        }),
        // Alternate the SSD `serve` is given: either finds the pair.
        serve: &["wo.img", "ro.img"],
        on_start: Box::new(|run, st| {
            if st["mode"] != "tica" || st["status"] != "ok" {
                return Err(format!("unexpected stats: {st}"));
            }
            let r = &st["recovery"];
            if run.round > 0 {
                if r["clean_shutdown"] != false {
                    return Err(format!("a kill -9 looks clean: {st}"));
                }
                match r["wo_pages"].as_u64().unwrap_or(0) {
                    0 => return Err(format!("restart after kill -9 is cold: {st}")),
                    pages => run.add("WO-SSD pages recovered", pages as f64),
                }
                let single = r["written_back"].as_u64().unwrap_or(0);
                run.add("single-copy dirty pages written back", single as f64);
            }
            Ok(format!("recovery {r}"))
        }),
        before_stop: Box::new(|run, st| {
            let text = run.tiercache_on(&["stats"]);
            for want in [
                "status            ok",
                "hit ratio",
                "RO-SSD",
                "WO-SSD",
                "page writes",
            ] {
                if !text.contains(want) {
                    return Err(format!("stats text lacks {want:?}:\n{text}"));
                }
            }
            let batched = st["wo_ssd"]["batched_page_writes"].as_u64().unwrap_or(0);
            run.add("WO-SSD pages written in batches", batched as f64);
            if batches && batched == 0 {
                return Err(format!("no write ran in a batch: {st}"));
            }
            let keys =
                "dram_hits ro_ssd_hits wo_ssd_hits misses ro_ssd_writes wo_ssd_writes writebacks";
            let kv: Vec<String> = keys.split(' ').map(|k| format!("{k} {}", st[k])).collect();
            Ok(kv.join(", "))
        }),
        after_stop: Box::new(|run| {
            let log_text = std::fs::read_to_string(&run.log).unwrap_or_default();
            if log_text.contains("FAILED") {
                return Err("a device failed".into());
            }
            Ok(())
        }),
        ..CrashDesign::default()
    };
    crash_rounds(design, label, rounds, seed);
}

#[test]
fn kill9_tica_adaptive() {
    tica_rounds("tica-adaptive", "adaptive", "6MiB", false, 24, 0x71ca_0001);
}

#[test]
fn kill9_tica_wed() {
    tica_rounds("tica-wed", "wed", "6MiB", false, 8, 0x71ca_0002);
}

#[test]
fn kill9_tica_ef() {
    tica_rounds("tica-ef", "ef", "6MiB", false, 8, 0x71ca_0003);
}

/// SSDs twice the data: the pipelined writes run as write batches (both
/// SSDs' pages held and written as runs) between the kills.
#[test]
fn kill9_tica_write_batches() {
    tica_rounds("tica-batches", "adaptive", "40MiB", true, 12, 0x71ca_0004);
}
