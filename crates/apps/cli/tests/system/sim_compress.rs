//! `sim --compress` (the compressed log-structured layout simulated from a
//! compressibility model) and `trace compressibility IMAGE` as users run
//! them: a case computed by hand, `--compress off` equal to no flag,
//! deterministic block sizes, a measured model used by sim, refusal of bad
//! input (never a panic), and conformance with the live compressed store:
//! a backing image whose blocks compress to the sizes the model gives them,
//! read at queue depth 1 through `tiercache serve`, makes the same decisions
//! as `sim --compress` with that model.

use crate::common;

use common::{format_cache, tiercache, ServeProc};
use std::path::{Path, PathBuf};
use std::process::Command;
use tiercache_flashtier_live::compress::{encode, Codec};
use tiercache_flashtier_policy::sizes::SizeModel;

fn fail(args: &[&str]) -> String {
    let o = Command::new(common::bin()).args(args).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "tiercache {args:?} should fail: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let e = String::from_utf8(o.stderr).unwrap();
    assert!(!e.contains("panicked"), "panic: {e}");
    e
}

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&tiercache(args)).expect("--json")
}

/// An MSR trace of 4 KiB reads of `blocks` (in order).
fn reads(dir: &Path, name: &str, blocks: impl Iterator<Item = u64>) -> PathBuf {
    let p = dir.join(name);
    let text: String = blocks
        .enumerate()
        .map(|(i, b)| {
            format!(
                "{},h,0,Read,{},4096,10\n",
                128166385295514663u64 + i as u64,
                b * 4096
            )
        })
        .collect();
    std::fs::write(&p, text).unwrap();
    p
}

fn sim(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let mut a = vec![
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--mode",
        "ssc",
        "--ftl",
        "log",
        "--no-timing",
        "--json",
    ];
    a.extend_from_slice(extra);
    json(&a)
}

#[test]
fn two_unit_blocks_hold_four_times_as_many_by_hand() {
    // 64 KiB segments: 14 data blocks (56 units of 2), 4 segments, two kept
    // free. Two passes over 112 blocks: uncompressed, at most 42 blocks
    // stay and the store cleans the oldest segment first, so the second
    // pass misses throughout; at 2 units a block the 112 fill two segments
    // of 56 slots and the second pass hits all of them.
    let d = tempfile::tempdir().unwrap();
    let t = reads(d.path(), "t.csv", (0..2).flat_map(|_| 0..112));
    let base = ["--segment-size", "64KiB", "--cache-size", "256KiB"];
    let plain = sim(&t, &base);
    assert_eq!(plain["read_hits"], 0);
    assert!(plain.get("compression").is_none());
    let mut a = base.to_vec();
    a.extend(["--compress", "lz4", "--compressibility", "2:1"]);
    let z = sim(&t, &a);
    assert_eq!(z["read_hits"], 112, "{z:#}");
    assert_eq!(z["read_misses"], 112);
    assert_eq!(z["slots"], 224);
    let c = &z["compression"];
    assert_eq!(c["capacity_factor"], 4.0, "{c:#}");
    assert_eq!(c["plain_slots"], 56);
    assert_eq!(c["ratio"], 4.0);
    assert_eq!(c["cached_stored_bytes"], 112 * 1024);
    assert_eq!(c["codec"], "lz4");
    // --compress off is no flag at all.
    let mut off = base.to_vec();
    off.extend(["--compress", "off"]);
    assert_eq!(sim(&t, &off), plain);
}

#[test]
fn sizes_are_deterministic_and_a_measured_model_drives_sim() {
    let d = tempfile::tempdir().unwrap();
    // An image of 4 KiB blocks: zeros (1 unit) and random bytes (raw),
    // alternating, and a partial last block of zeros.
    let mut img = Vec::new();
    let mut x = 0x1234_5678_9abc_def1u64;
    for i in 0..64 {
        if i % 2 == 0 {
            img.extend([0u8; 4096]);
        } else {
            img.extend((0..4096).map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            }));
        }
    }
    img.extend([0u8; 100]);
    let p = d.path().join("disk.img");
    std::fs::write(&p, &img).unwrap();
    let model = d.path().join("model.json");
    let m = json(&[
        "trace",
        "compressibility",
        p.to_str().unwrap(),
        "--codec",
        "zstd:3",
        "--json",
        "--out",
        model.to_str().unwrap(),
    ]);
    assert_eq!(m["blocks"], 65);
    assert_eq!(m["counts"]["1"], 33, "{m:#}");
    assert_eq!(m["counts"]["8"], 32);
    assert_eq!(m["codec"], "zstd:3");
    let mean = (33.0 + 8.0 * 32.0) / 65.0;
    assert!((m["mean_units"].as_f64().unwrap() - mean).abs() < 1e-9);
    assert!(m["compress_us_per_block"].as_f64().unwrap() > 0.0);
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&model).unwrap()).unwrap();
    assert_eq!(file["distribution"], m["distribution"]);
    // A directory of files: each file padded to whole blocks.
    let dir = d.path().join("tree");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a"), vec![0u8; 5000]).unwrap();
    std::fs::write(dir.join("sub/b"), &img[4096..8192]).unwrap();
    let t = json(&["trace", "compressibility", dir.to_str().unwrap(), "--json"]);
    assert_eq!(
        (t["files"].as_u64(), t["blocks"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(
        (t["counts"]["1"].as_u64(), t["counts"]["8"].as_u64()),
        (Some(2), Some(1))
    );

    // sim with the model file: its CPU costs are the defaults, the sizes
    // the same on every run.
    let tr = reads(
        d.path(),
        "t.csv",
        (0..3000u64).map(|i| (i * 2_654_435_761) % 700),
    );
    let args = [
        "--segment-size",
        "64KiB",
        "--cache-size",
        "1MiB",
        "--compress",
        "zstd",
        "--compressibility",
        model.to_str().unwrap(),
    ];
    let a = sim(&tr, &args);
    let b = sim(&tr, &args);
    assert_eq!(a, b);
    let c = &a["compression"];
    assert_eq!(c["compress_us_per_block"], m["compress_us_per_block"]);
    assert_eq!(c["codec"], "zstd:3");
    // Held blocks' stored sizes follow the model: 1 or 8 units each.
    let held = a["mapped_blocks"].as_u64().unwrap();
    let stored = c["cached_stored_bytes"].as_u64().unwrap();
    assert!(
        held > 0 && (stored - held * 512).is_multiple_of(7 * 512),
        "{c:#}"
    );
    // Given costs override the file's.
    let mut o = args.to_vec();
    o.extend(["--compress-us", "10", "--decompress-us", "2"]);
    let e = sim(&tr, &o);
    let c = &e["compression"];
    let cpu =
        c["compressions"].as_f64().unwrap() * 10.0 + c["decompressions"].as_f64().unwrap() * 2.0;
    assert!((c["cpu_seconds"].as_f64().unwrap() - cpu / 1e6).abs() < 1e-9);
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let d = tempfile::tempdir().unwrap();
    let t = reads(d.path(), "t.csv", 0..10);
    let t = t.to_str().unwrap();
    let log = [
        "sim",
        "--trace",
        t,
        "--mode",
        "ssc",
        "--ftl",
        "log",
        "--cache-size",
        "4MiB",
    ];
    for (extra, want) in [
        (vec!["--compress", "gzip"], "allowed: off, lz4, zstd"),
        (vec!["--compress", "zstd:30"], "allowed: off, lz4, zstd"),
        (
            vec!["--compress", "lz4", "--compressibility", "1:0.5,2:0.4"],
            "sum to",
        ),
        (
            vec!["--compress", "lz4", "--compressibility", "9:1"],
            "allowed: 1 to 8",
        ),
        (
            vec!["--compress", "lz4", "--compressibility", "1:x"],
            "not a number",
        ),
        (
            vec!["--compress", "lz4", "--compressibility", "1=1"],
            "UNITS:FRACTION",
        ),
        (vec!["--compress", "lz4", "--compress-us=-1"], "0 or more"),
        (vec!["--compressibility", "1:1"], "with --compress lz4"),
    ] {
        let mut a = log.to_vec();
        a.extend(extra.iter().copied());
        let e = fail(&a);
        assert!(e.contains(want), "{extra:?}: {e}");
    }
    // A file that is not a model.
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, "{\"x\": 1}").unwrap();
    let mut a = log.to_vec();
    a.extend([
        "--compress",
        "lz4",
        "--compressibility",
        bad.to_str().unwrap(),
    ]);
    assert!(fail(&a).contains("distribution"));
    // Modes that do not model the compressed layout.
    let e = fail(&[
        "sim",
        "--trace",
        t,
        "--cache-size",
        "16lines",
        "--compress",
        "lz4",
    ]);
    assert!(e.contains("--mode ssc --ftl log"), "{e}");
    let e = fail(&[
        "sim",
        "--trace",
        t,
        "--mode",
        "ssc",
        "--cache-size",
        "64MiB",
        "--compress",
        "lz4",
    ]);
    assert!(e.contains("--ftl hybrid"), "{e}");
    // trace compressibility.
    let img = d.path().join("img");
    std::fs::write(&img, [1u8; 8192]).unwrap();
    let img = img.to_str().unwrap();
    let empty = d.path().join("empty");
    std::fs::write(&empty, []).unwrap();
    for (a, want) in [
        (vec![img, "--codec", "gzip"], "allowed: off, lz4"),
        (vec![img, "--codec", "off"], "nothing to measure"),
        (vec![img, "--block-size", "8KiB"], "allowed: 4KiB"),
        (vec!["/nonexistent/image"], "does not exist"),
        (vec![empty.to_str().unwrap()], "empty"),
    ] {
        let mut args = vec!["trace", "compressibility"];
        args.extend(a.iter().copied());
        let e = fail(&args);
        assert!(e.contains(want), "{a:?}: {e}");
    }
}

/// A 4 KiB block that the layout stores in exactly `units` units (lz4).
fn block_of(units: u32, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut rnd = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    if units == 8 {
        return rnd(4096);
    }
    // Random bytes then zeros: the compressed length grows with the prefix.
    for k in (0..4096).step_by(8) {
        let mut b = rnd(k);
        b.resize(4096, 0);
        let u = encode(Codec::Lz4, 0, &b).units;
        if u == units {
            return b;
        }
        assert!(u < units, "no prefix length gives {units} units");
    }
    unreachable!("{units} units")
}

#[test]
fn live_compressed_store_matches_simulation() {
    // Backing blocks sized by the model: block b compresses (lz4) to the
    // units the model gives b, so the live store and the simulator see
    // the same sizes. Reads only, at queue depth 1, over a skewed set of
    // blocks larger than the uncompressed cache.
    let d = tempfile::tempdir().unwrap();
    let spec = "1:0.1,2:0.2,3:0.2,4:0.2,6:0.1,8:0.2";
    let model = SizeModel::parse(spec).unwrap();
    let blocks = 2048u64;
    let sized: Vec<Vec<u8>> = (1..=8).map(|u| block_of(u, u64::from(u) * 77)).collect();
    let mut img = Vec::with_capacity(blocks as usize * 4096);
    for b in 0..blocks {
        img.extend_from_slice(&sized[model.units(b) as usize - 1]);
    }
    let backing = d.path().join("backing.img");
    std::fs::write(&backing, &img).unwrap();
    // 2000 reads of 1 to 4 blocks: half over a hot set of 300 blocks.
    let mut x = 99u64;
    let mut lines = String::new();
    for i in 0..2000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = x >> 33;
        let b = if r.is_multiple_of(2) {
            r / 2 % 300
        } else {
            r / 2 % (blocks - 4)
        };
        let n = 1 + (r >> 20) % 4;
        lines += &format!(
            "{},h,0,Read,{},{},10\n",
            128166385295514663u64 + i,
            b * 4096,
            n * 4096
        );
    }
    let trace = d.path().join("t.csv");
    std::fs::write(&trace, lines).unwrap();
    let cache = d.path().join("cache.img");
    format_cache(
        &cache,
        &backing,
        "2MiB",
        &[
            "--layout",
            "log-structured",
            "--segment-size",
            "256KiB",
            "--write-policy",
            "write-through",
            "--compress",
            "lz4",
        ],
    );
    let sock = d.path().join("nbd.sock");
    // The background cleaner runs when the server's clock says so; off,
    // requests clean inline exactly where the simulator does.
    let srv = ServeProc::start_env(
        &cache,
        &sock,
        &d.path().join("serve.log"),
        &[],
        &[("TIERCACHE_LS_CLEANER", "0")],
    );
    let r = json(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--uri",
        &format!("nbd+unix:///?socket={}", sock.display()),
        "--queue-depth",
        "1",
        "--json",
    ]);
    assert_eq!(r["errors"].as_u64(), Some(0), "{r:#}");
    let live = srv.stats();
    drop(srv);
    let seg_bytes = live["segments"]["bytes"].as_u64().unwrap();
    let area = live["segments"]["total"].as_u64().unwrap() * seg_bytes;
    let sim = sim(
        &trace,
        &[
            "--segment-size",
            &format!("{seg_bytes}B"),
            "--cache-size",
            &format!("{area}B"),
            "--write-policy",
            "write-through",
            "--compress",
            "lz4",
            "--compressibility",
            spec,
        ],
    );
    assert_eq!(sim["slots"], live["slots"], "sim {sim:#}\nlive {live:#}");
    for k in [
        "appended_blocks",
        "fills",
        "read_hits",
        "read_misses",
        "mapped_blocks",
    ] {
        assert_eq!(sim[k], live[k], "{k}: sim {sim:#}\nlive {live:#}");
    }
    for k in ["segments_cleaned", "silent_evictions"] {
        assert_eq!(sim["cleaning"][k], live["cleaning"][k], "cleaning.{k}");
    }
    for k in [
        "stored_compressed_blocks",
        "stored_raw_blocks",
        "cached_bytes",
        "cached_stored_bytes",
    ] {
        assert_eq!(
            sim["compression"][k], live["compression"][k],
            "compression.{k}: sim {sim:#}\nlive {live:#}"
        );
    }
    // The run exercised cleaning, and compression held more than the
    // uncompressed layout's slots would.
    assert!(
        live["cleaning"]["segments_cleaned"].as_u64().unwrap() > 3,
        "{live:#}"
    );
    let plain = sim["compression"]["plain_slots"].as_u64().unwrap();
    assert!(live["mapped_blocks"].as_u64().unwrap() > plain, "{live:#}");
    eprintln!(
        "compressed ssc: {} hits, {} blocks held (plain slots {plain}), live = sim",
        live["read_hits"], live["mapped_blocks"]
    );
}
