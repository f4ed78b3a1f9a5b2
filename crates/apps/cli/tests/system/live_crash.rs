//! Crash tests of the live server: `tiercache serve` in write-back mode with a
//! cache 1/16 of the data is killed with SIGKILL at random points of a random
//! write/read/flush load, restarted on the same cache, and every block is
//! checked against the client's ledger: it holds a version at least as new as
//! the last one a completed FLUSH (or FUA write) covered, and one that was
//! actually written (self-checking blocks: never garbage, never misdirected,
//! never older). Reads during the load never go behind what was acknowledged.
//! The restart must be warm (recovered lines in `tiercache stats --json`), and
//! after `tiercache detach` the backing file alone holds the newest data.
//! The loop is the shared harness of `common::crash`.
//!
//! `TIERCACHE_CRASH_ROUNDS` overrides the rounds per test and
//! `TIERCACHE_CRASH_SEED` the seed (scripts/crash_soak.sh runs many more).

use crate::common;

use common::crash::{crash_rounds, tiercache_in, CrashDesign, CrashRun};
use common::*;

/// The SSD cache: a 6 MiB write-back cache formatted with `policy` (CLI
/// options) in front of `blocks` checked blocks.
fn ssd_cache(policy: &str, blocks: u64) -> CrashDesign<'_> {
    CrashDesign {
        blocks,
        format: Box::new(move |d| {
            let args = "format --cache cache.img --backing backing.img --size 6MiB";
            tiercache_in(d, &format!("{args} --write-policy write-back {policy}"))
        }),
        ..CrashDesign::default()
    }
}

/// Run `rounds` kill -9 rounds on a cache formatted with `policy`, then a
/// clean round ending in detach. Every restart is timed, and after a kill warm.
fn kill9_rounds(label: &str, policy: &str, rounds: u64, seed: u64) {
    let design = CrashDesign {
        on_start: Box::new(|run, st| {
            let occupied = st["occupied_lines"].as_u64().unwrap_or(0);
            let rec_ms = st["live"]["recovery_ms"].as_f64().unwrap_or(-1.0);
            if rec_ms <= 0.0 {
                return Err(format!("stats report no recovery time: {st}"));
            }
            if run.round > 0 {
                // The kill came after load and committed lines: the restart is warm.
                if occupied == 0 {
                    return Err(format!(
                        "restart after kill -9 is cold (no lines recovered): {st}"
                    ));
                }
                run.add("lines recovered", occupied as f64);
            }
            Ok(format!(
                "recovered {occupied} lines ({} dirty) in {rec_ms:.1} ms",
                st["dirty_lines"]
            ))
        }),
        before_stop: Box::new(|_, st| {
            Ok(format!(
                "final stats: evictions {}, writebacks {}, hits {}",
                st["evictions"], st["writebacks"], st["hits"]
            ))
        }),
        ..ssd_cache(policy, 4096)
    };
    crash_rounds(design, label, rounds, seed);
}

#[test]
fn kill9_write_back_4k_lines_full_lru() {
    kill9_rounds("4k-full-lru", "", 8, 0x5eed_0001);
}

#[test]
fn kill9_write_back_4k_lines_full_s3fifo() {
    kill9_rounds("4k-full-s3fifo", "--eviction s3fifo", 4, 0x5eed_0005);
}

// (N-way associativity cannot be formatted at the moment: `tiercache format`
// checks N against a one-line cache before it knows the real size.)
#[test]
fn kill9_write_back_16k_lines_4k_sub_blocks() {
    let policy = "--line-size 16KiB --sub-block 4KiB";
    kill9_rounds("16k-full-lru", policy, 8, 0x5eed_0002);
}

#[test]
fn kill9_write_back_direct_mapped_fifo() {
    let policy = "--assoc direct --eviction fifo --dirty-target 0.5";
    kill9_rounds("4k-direct-fifo", policy, 4, 0x5eed_0003);
}

#[test]
fn kill9_write_back_8k_lines_arc() {
    kill9_rounds(
        "8k-full-arc",
        "--line-size 8KiB --eviction arc",
        4,
        0x5eed_0004,
    );
}

/// Data set of the clean-overwrite test: 2 MiB, well inside the 6 MiB cache.
const HOT_BLOCKS: u64 = 512;

/// Rule 3b (write-back overwrites clean sub-blocks of their own line in place
/// with no invalidation commit; recovery after kill -9 makes every valid
/// sub-block dirty). Each round: write the whole data set, write it all back
/// (`tiercache flush`) and FLUSH, so every line is cached clean and the
/// backing device holds a flushed version; then overwrite random blocks in
/// place (with flushes and FUA writes among them) and kill -9. After the
/// restart every block must be at least its last flushed version (flushed
/// writes survive) and, after `tiercache flush`, the backing file must hold
/// exactly what the client reads (a clean slot whose bytes changed was
/// written back; a version flushed earlier was never overwritten by older
/// cache data).
fn clean_overwrite_rounds(label: &str, policy: &str, rounds: u64, seed: u64) {
    let backing = |run: &CrashRun| run.dir.join("backing.img");
    let design = CrashDesign {
        shape: LoadShape {
            depth: 8,
            hot_blocks: HOT_BLOCKS,
            read_share: 0.15,
            flush_share: 0.03,
            fua_share: 0.03,
            max_blocks: 2,
        },
        kill_writes: 300..4000,
        final_writes: 2000,
        on_start: Box::new(|run, st| {
            let d = st["live"]["recovery_dirtied_lines"]
                .as_u64()
                .ok_or_else(|| format!("no recovery_dirtied_lines in stats: {st}"))?;
            if run.round == 0 && d != 0 {
                return Err(format!("a fresh cache reports dirtied lines: {st}"));
            }
            run.add("lines dirtied by unclean recoveries", d as f64);
            Ok(format!("{d} lines made dirty"))
        }),
        before_load: Box::new(move |run, c| {
            // Whatever the client now reads is what the backing device gets once
            // everything dirty is written back: no stale clean slot, no older data.
            run.tiercache_on(&["flush"]);
            check_file_latest(&backing(run), &run.ledger)
                .map_err(|e| format!("after restart and flush, backing vs reads: {e}"))?;
            // Every line cached, clean, and flushed to the backing device.
            inproc::write_blocks(c, &mut run.ledger, 0..HOT_BLOCKS);
            run.tiercache_on(&["flush"]);
            c.flush()
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("flush: {e}"))?;
            for s in &mut run.ledger.blocks {
                s.durable = s.acked;
            }
            check_file_latest(&backing(run), &run.ledger).map_err(|e| format!("after flush: {e}"))
        }),
        after_stop: Box::new(|run| {
            // A clean detach: the next start trusts clean bits again.
            let (mut srv, st) = run.restart_and_verify("after detach and restart");
            srv.kill9();
            if st["live"]["recovery_dirtied_lines"].as_u64() != Some(0) {
                return Err(format!(
                    "a start after a clean detach made lines dirty: {st}"
                ));
            }
            // Each kill came after a load on a cache whose lines were all clean.
            if run.get("lines dirtied by unclean recoveries") == 0.0 {
                return Err("no unclean recovery made a clean line dirty".into());
            }
            Ok(())
        }),
        ..ssd_cache(policy, HOT_BLOCKS)
    };
    crash_rounds(design, label, rounds, seed);
}

#[test]
fn kill9_write_back_clean_overwrites_4k_lines() {
    clean_overwrite_rounds("clean-overwrite-4k", "", 6, 0x5eed_0101);
}

/// 8 KiB sub-blocks: every 4 KiB write is a partial sub-block write (in place
/// into a valid sub-block, or to the backing device for an invalid one).
///
/// A read of a block that a write overlaps (sent while the read was in
/// flight) may return a mix of the two versions: a partial write to an
/// invalid sub-block goes to the backing file, and the read miss before it
/// reads that file concurrently. NBD, like a disk, does not order
/// overlapping requests; the checker accepts such a mix word by word.
#[test]
fn kill9_write_back_clean_overwrites_partial_sub_blocks() {
    let policy = "--line-size 16KiB --sub-block 8KiB";
    clean_overwrite_rounds("clean-overwrite-8k-sub", policy, 4, 0x5eed_0102);
}
