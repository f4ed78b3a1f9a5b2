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
//! The loop is the shared harness of `common::crash`.
//!
//! `TIERCACHE_CRASH_ROUNDS` overrides the rounds and `TIERCACHE_CRASH_SEED`
//! the seed.

use crate::common;

use common::crash::{crash_rounds, tiercache_in, CrashDesign};

fn ls_rounds(label: &str, policy: &str, rounds: u64, seed: u64) {
    let design = CrashDesign {
        format: Box::new(|d| {
            let args = "format --layout log-structured --cache cache.img --backing backing.img \
                        --size 6MiB --segment-size 256KiB --write-policy";
            tiercache_in(d, &format!("{args} {policy}"))
        }),
        final_writes: 7500,
        on_start: Box::new(|run, st| {
            if st["mode"] != "log-structured" || st["status"] != "ok" {
                return Err(format!("unexpected stats: {st}"));
            }
            let r = &st["recovery"];
            if run.round > 0 {
                if r["clean_shutdown"] != false {
                    return Err(format!("a kill -9 looks clean: {st}"));
                }
                run.add(
                    "dirty blocks recovered",
                    r["dirty_blocks"].as_u64().unwrap_or(0) as f64,
                );
                run.max("slowest recovery ms", r["ms"].as_f64().unwrap_or(0.0));
            }
            Ok(format!("recovery {r}"))
        }),
        // The metadata left by the kill is consistent (read-only check).
        after_kill: Box::new(|run| {
            tiercache_in(&run.dir, "check cache.img");
            Ok(())
        }),
        before_stop: Box::new(|run, st| {
            let cl = &st["cleaning"];
            let n = |k: &str| {
                cl[k]
                    .as_u64()
                    .unwrap_or_else(|| panic!("stats lack {k}: {st}"))
            };
            if n("segments_cleaned") == 0 || n("silent_evictions") == 0 {
                return Err(format!(
                    "segment cleaning with silent eviction never ran: {st}"
                ));
            }
            if policy == "write-back" {
                if run.get("dirty blocks recovered") == 0.0 {
                    return Err("restarts after kill -9 were never warm".into());
                }
                if n("moved_dirty_blocks") + n("cleaning_written_back") == 0 {
                    return Err(format!("cleaning never met dirty blocks: {st}"));
                }
            }
            Ok(format!(
                "final stats: hit ratio {:.3}, cleaning {cl}",
                st["hit_ratio"].as_f64().unwrap_or(0.0)
            ))
        }),
        ..CrashDesign::default()
    };
    crash_rounds(design, label, rounds, seed);
}

#[test]
fn kill9_log_structured_write_back() {
    ls_rounds("ls-write-back", "write-back", 24, 0x15_0001);
}

#[test]
fn kill9_log_structured_write_through() {
    ls_rounds("ls-write-through", "write-through", 8, 0x15_0002);
}
