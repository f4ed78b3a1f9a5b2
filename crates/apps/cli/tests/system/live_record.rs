//! The request recorder: `serve --record FILE` writes the requests the SSD
//! cache's policy takes, in the order it takes them, as a native trace.
//! - A recorded fio run (nbd engine, random mixed reads and writes at queue
//!   depth 16, crc32c verify, then a Zipf-skewed mix), run through `sim --like` of the same cache,
//!   counts exactly the live hits, misses, fills and evictions.
//! - `--record-max` and `--record-keep` bound the files (rotation); `sim
//!   --trace FILE` and `mrc --trace FILE` read the rotated files as one trace.
//! - `tiercache record start|stop|status` over the control socket.
//!
//! Skips with a `SKIPPED:` message when fio is missing.

use crate::clients_util;
use crate::common;

use clients_util::{bin, fio, output, run, Setup};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use tiercache_block::{Class, IoKind};

const MIB: u64 = 1 << 20;

/// The records of a native trace.
fn records(p: &Path) -> Vec<tiercache_trace::Record> {
    tiercache_trace::open(p, None, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .map(|r| r.unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("bad JSON ({e}): {s}"))
}

/// `tiercache record --cache C ARGS... --json`.
fn record_ctl(cache: &Path, args: &[&str]) -> Value {
    json(&run(Command::new(bin())
        .arg("record")
        .args(args)
        .arg("--cache")
        .arg(cache)
        .arg("--json")))
}

/// fio over `size` bytes at queue depth 16: random reads and writes of
/// 4-32 KiB, every block verified (crc32c) by a read after the writes; then
/// 4 KiB random reads and writes (80/20) drawn from a Zipf distribution
/// (1.1), so that blocks are used again (fio cannot verify overwritten
/// blocks, so this part is not verified).
fn fio_workload(uri: &str, size: u64) {
    let size = format!("--size={size}");
    let v = fio(
        uri,
        "randrw",
        &[
            "--rw=randrw",
            "--bsrange=4k-32k",
            &size,
            "--iodepth=16",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--randseed=11",
        ],
    );
    assert!(v["jobs"][0]["write"]["io_bytes"].as_u64().unwrap() > 0);
    fio(
        uri,
        "zipf",
        &[
            "--rw=randrw",
            "--rwmixread=80",
            "--bs=4k",
            &size,
            "--norandommap",
            "--random_distribution=zipf:1.1",
            "--iodepth=16",
            "--randseed=12",
        ],
    );
}

/// The SSD cache's decision counters, named alike in `stats --json` and `sim --json`.
const COUNTERS: [&str; 5] = ["hits", "misses", "fills", "evictions", "admission_rejects"];

/// A fio run recorded from the first request, then `sim --trace FILE
/// --like CACHE --json`: the live counters exactly, in write-back (timed
/// cleaning on, which decides no hit, miss, fill or eviction) and in
/// write-through with 16 KiB lines of 4 KiB sub-blocks, 4-way, ARC.
#[test]
fn recorded_fio_run_through_sim_like_gives_the_live_counters() {
    require_tools!("fio");
    for opts in [
        &[][..],
        &[
            "--write-policy",
            "write-through",
            "--line-size",
            "16KiB",
            "--sub-block",
            "4KiB",
            "--assoc",
            "4-way",
            "--eviction",
            "arc",
        ][..],
    ] {
        let s = Setup::new(64 * MIB, "8MiB", opts);
        let trace = s.path("run.trace");
        let mut srv = s.serve(&["--record", trace.to_str().unwrap()]);
        fio_workload(&srv.uri(), 16 * MIB);
        let live = s.stats();
        assert_eq!(live["recording"]["recording"], true, "{live:#}");
        let stopped = record_ctl(&s.cache, &["stop"]);
        assert_eq!(stopped["ok"], true, "{stopped:#}");
        srv.stop();
        let what = format!("{opts:?}");
        assert!(
            live["evictions"].as_u64().unwrap() > 0 && live["hits"].as_u64().unwrap() > 0,
            "{what}: the cache must be under pressure and hit: {live:#}"
        );
        let recs = records(&trace);
        assert_eq!(recs.len() as u64, stopped["requests"].as_u64().unwrap());
        assert!(recs.iter().all(|r| r.class == Some(Class::Data)));
        let sim = json(&run(Command::new(bin())
            .args(["sim", "--trace"])
            .arg(&trace)
            .arg("--like")
            .arg(&s.cache)
            .arg("--json")));
        for k in COUNTERS {
            assert!(live[k].is_u64(), "{what}: stats --json has no {k}");
            assert_eq!(
                live[k], sim[k],
                "{what}: {k} differs (live {live:#}\nsim {sim:#})"
            );
        }
    }
}

/// `--record-max 16KiB --record-keep 2`: FILE, FILE.1 and FILE.2 each at
/// most 16 KiB, nothing older; together the newest requests, in time order.
#[test]
fn recording_rotates_within_its_bound() {
    require_tools!("fio");
    let s = Setup::new(64 * MIB, "8MiB", &[]);
    let trace = s.path("rot.trace");
    let mut srv = s.serve(&[
        "--record",
        trace.to_str().unwrap(),
        "--record-max",
        "16KiB",
        "--record-keep",
        "2",
    ]);
    fio_workload(&srv.uri(), 16 * MIB);
    let st = record_ctl(&s.cache, &["status"]);
    srv.stop();
    assert!(st["rotations"].as_u64().unwrap() >= 3, "{st:#}");
    assert_eq!(st["files"].as_array().unwrap().len(), 3, "{st:#}");
    let file = |n: u32| -> PathBuf {
        if n == 0 {
            trace.clone()
        } else {
            PathBuf::from(format!("{}.{n}", trace.display()))
        }
    };
    assert!(!file(3).exists(), "only 2 older files are kept");
    let mut older = Vec::new();
    for n in [2, 1, 0] {
        let len = std::fs::metadata(file(n)).unwrap().len();
        assert!(len <= 16 << 10, "{} is {len} bytes", file(n).display());
    }
    for n in [2, 1] {
        let r = records(&file(n));
        assert!(!r.is_empty(), "{} is empty", file(n).display());
        older.extend(r);
    }
    // FILE reads as the whole recording kept: FILE.2, FILE.1, then FILE's own.
    let all = records(&trace);
    assert!(all.len() > older.len() && all[..older.len()] == older[..]);
    assert!(all.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    // The files that were rotated out are full (16-byte records up to the bound).
    for n in [2, 1] {
        assert!(std::fs::metadata(file(n)).unwrap().len() > (16 << 10) - 64);
    }
}

/// A recording rotated many times (`--record-max 16KiB`, every file kept)
/// reads as one trace: `sim --trace FILE --like CACHE` counts exactly the
/// live hits, misses, fills and evictions, and `mrc --trace FILE` sees every
/// recorded request (its exact LRU curve at the cache's size is `sim`'s hits).
#[test]
fn a_rotated_recording_runs_through_sim_and_mrc_as_one_trace() {
    require_tools!("fio");
    let s = Setup::new(64 * MIB, "8MiB", &[]);
    let trace = s.path("rot.trace");
    let mut srv = s.serve(&[
        "--record",
        trace.to_str().unwrap(),
        "--record-max",
        "16KiB",
        "--record-keep",
        "1000",
    ]);
    fio_workload(&srv.uri(), 16 * MIB);
    let live = s.stats();
    let stopped = record_ctl(&s.cache, &["stop"]);
    srv.stop();
    assert!(stopped["rotations"].as_u64().unwrap() >= 3, "{stopped:#}");
    assert!(PathBuf::from(format!("{}.3", trace.display())).exists());
    let recs = records(&trace);
    assert_eq!(recs.len() as u64, stopped["requests"].as_u64().unwrap());
    let sim = json(&run(Command::new(bin())
        .args(["sim", "--trace"])
        .arg(&trace)
        .arg("--like")
        .arg(&s.cache)
        .arg("--json")));
    for k in COUNTERS {
        assert_eq!(live[k], sim[k], "{k} differs (live {live:#}\nsim {sim:#})");
    }
    let rows = json(&run(Command::new(bin())
        .args(["mrc", "--trace"])
        .arg(&trace)
        .args(["--sizes", &format!("{}lines", live["slots"]), "--json"])));
    let row = &rows[0];
    let lines: u64 = recs
        .iter()
        .filter(|r| matches!(r.kind, IoKind::Read | IoKind::Write))
        .map(|r| (r.offset + u64::from(r.len) - 1) / 4096 - r.offset / 4096 + 1)
        .sum();
    assert_eq!(row["block_accesses"], lines, "{row:#}");
    assert_eq!(row["hits"], sim["hits"], "{row:#}\nsim {sim:#}");
}

/// The tiered volume (OODT) records too: a fio run at queue depth 1 (a
/// Zipf-skewed random mix, so blocks migrate), with the planner on the
/// request clock (`--plan-clock requests`: a round runs right after the
/// request that made it due, as the simulator runs it). `sim --trace FILE
/// --like VOLUME` gives exactly the live counters the tiering simulator also
/// keeps: requests, planning rounds, migrations, promotions, demotions,
/// exchanges, migrated bytes, and the share of block accesses the fast tier
/// served (response times are the device model's, not compared).
#[test]
fn a_recorded_tiered_volume_run_through_sim_like_gives_the_live_counters() {
    require_tools!("fio");
    let tmp = tempfile::tempdir().unwrap();
    let (fast, slow) = (tmp.path().join("fast.img"), tmp.path().join("slow.img"));
    clients_util::sparse_file(&slow, 64 * MIB);
    let tiers = format!("{},{}", fast.display(), slow.display());
    run(Command::new(bin()).args([
        "format",
        "--design",
        "oodt",
        "--tiers",
        &tiers,
        "--size",
        "8MiB",
        "--tier-block",
        "4KiB",
        "--capacity",
        "slow",
        "--plan-every",
        "50",
        "--moves-per-round",
        "16",
        "--plan-clock",
        "requests",
    ]));
    let trace = tmp.path().join("tier.trace");
    let mut srv = clients_util::Server::start(
        &fast,
        &tmp.path().join("nbd.sock"),
        &["--record", trace.to_str().unwrap()],
    );
    fio(
        &srv.uri(),
        "zipf",
        &[
            "--rw=randrw",
            "--rwmixread=70",
            "--bs=4k",
            "--size=32M",
            "--norandommap",
            "--random_distribution=zipf:1.1",
            "--iodepth=1",
            "--number_ios=4000",
            "--randseed=21",
        ],
    );
    let live = json(&run(Command::new(bin())
        .args(["stats", "--json", "--cache"])
        .arg(&fast)));
    let stopped = record_ctl(&fast, &["stop"]);
    srv.stop();
    assert_eq!(live["design"], "oodt", "{live:#}");
    let sim = json(&run(Command::new(bin())
        .args(["sim", "--trace"])
        .arg(&trace)
        .arg("--like")
        .arg(&fast)
        .args(["--no-timing", "--no-baseline", "--json"])));
    let sim = if sim.is_array() { sim[0].clone() } else { sim };
    assert_eq!(sim["requests"], stopped["requests"], "{sim:#}");
    assert_eq!(
        live["planner_rounds"], sim["planning_rounds"],
        "planning rounds (live {live:#}\nsim {sim:#})"
    );
    for k in [
        "migrations",
        "promotions",
        "demotions",
        "exchanges",
        "migrated_bytes",
    ] {
        assert_eq!(live[k], sim[k], "{k} differs (live {live:#}\nsim {sim:#})");
    }
    let hits = |t: usize| {
        let x = &live["tiers"][t];
        x["read_hits"].as_u64().unwrap() + x["write_hits"].as_u64().unwrap()
    };
    let share = hits(0) as f64 / (hits(0) + hits(1)) as f64;
    assert_eq!(
        share.to_bits(),
        sim["fast_tier_access_share"].as_f64().unwrap().to_bits(),
        "fast tier access share live {share}, sim {}",
        sim["fast_tier_access_share"]
    );
    eprintln!(
        "oodt: {} requests, {} rounds, {} promotions, {} demotions, fast-tier accesses {} of {} (live = sim)",
        sim["requests"],
        live["planner_rounds"],
        live["promotions"],
        live["demotions"],
        hits(0),
        hits(0) + hits(1)
    );
    // The run exercised what it compares.
    assert!(live["planner_rounds"].as_u64().unwrap() >= 50, "{live:#}");
    assert!(live["promotions"].as_u64().unwrap() > 20, "{live:#}");
    assert!(hits(0) > 0, "{live:#}");
}

/// `tiercache record start FILE` on a running server records exactly the
/// requests sent after it, in order, until `record stop`; a second start
/// while recording, a stop with none running, and a FILE that is not a
/// trace are refused with one clear line.
#[test]
fn record_starts_and_stops_over_the_control_socket() {
    let s = Setup::new(16 * MIB, "8MiB", &[]);
    let srv = s.serve(&[]);
    let mut c = common::NbdClient::connect(&srv.socket).unwrap();
    c.write(0, &[1u8; 4096], false).unwrap().unwrap(); // before: not recorded
    let st = s.stats();
    assert_eq!(st["recording"]["recording"], false, "{st:#}");
    let trace = s.path("ctl.trace");
    let started = record_ctl(&s.cache, &["start", trace.to_str().unwrap()]);
    assert_eq!(started["recording"], true, "{started:#}");
    let mut sent = Vec::new();
    for i in 0..20u64 {
        let off = (i * 7 % 16) * 8192;
        if i % 3 == 0 {
            c.read(off, 8192).unwrap().unwrap();
            sent.push((IoKind::Read, off, 8192));
        } else {
            c.write(off, &vec![i as u8; 4096], false).unwrap().unwrap();
            sent.push((IoKind::Write, off, 4096));
        }
    }
    c.flush().unwrap().unwrap();
    sent.push((IoKind::Flush, 0, 0));
    let again = Command::new(bin())
        .args(["record", "start"])
        .arg(s.path("other.trace"))
        .arg("--cache")
        .arg(&s.cache)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && err.contains("already recording to"),
        "{err}"
    );
    let stopped = record_ctl(&s.cache, &["stop"]);
    assert_eq!(stopped["requests"], sent.len(), "{stopped:#}");
    c.write(4096, &[2u8; 4096], false).unwrap().unwrap(); // after: not recorded
    let got: Vec<(IoKind, u64, u64)> = records(&trace)
        .iter()
        .map(|r| (r.kind, r.offset, u64::from(r.len)))
        .collect();
    assert_eq!(got, sent);
    for (args, why) in [
        (vec!["stop".to_string()], "no recording is running"),
        (
            vec!["start".to_string(), s.backing.to_str().unwrap().to_string()],
            "not a tiercache trace",
        ),
    ] {
        let o = output(
            Command::new(bin())
                .arg("record")
                .args(&args)
                .arg("--cache")
                .arg(&s.cache),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(
            err.starts_with("tiercache: error: ") && err.contains(why) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    c.disconnect();
}

/// A design that cannot record (the log-structured cache) refuses
/// `serve --record` with one clear line, and leaves no file behind.
#[test]
fn serve_record_is_refused_by_a_design_that_cannot_record() {
    let tmp = tempfile::tempdir().unwrap();
    let (cache, backing) = (tmp.path().join("c.img"), tmp.path().join("b.img"));
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    common::format_cache(
        &cache,
        &backing,
        "8MiB",
        &["--layout", "log-structured", "--segment-size", "256KiB"],
    );
    let trace = tmp.path().join("ls.trace");
    let o = output(
        Command::new(bin())
            .args(["serve", "--cache"])
            .arg(&cache)
            .arg("--listen")
            .arg(format!("unix:{}", tmp.path().join("s.sock").display()))
            .arg("--record")
            .arg(&trace),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "serve --record succeeded: {err}");
    assert!(
        err.contains("tiercache: error: --record: the flashtier design cannot record"),
        "{err}"
    );
    assert!(!trace.exists());
}

/// GET `url` (plain HTTP/1.1); the body.
fn http_get(url: &str) -> String {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(host).expect("connect to the metrics endpoint");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    buf.split_once("\r\n\r\n")
        .expect("an HTTP answer")
        .1
        .to_string()
}

/// The value of the gauge line of `name` whose labels include every one of `labels`.
fn gauge(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The live what-if estimates (`stats`' `what_if`, the Prometheus gauges)
/// against `tiercache mrc` of a recording of the same run: a cache of 768
/// lines (the miniature caches hold every line) and a working set of 4096
/// lines (SHARDS' sample holds every line), so both are exact and must
/// agree to rounding: ARC by miniature simulation, LRU by SHARDS, at 0.25x,
/// 0.5x, 1x, 2x and 4x. Then `set --what-if off|reset|on`.
#[test]
fn what_if_estimates_agree_with_mrc_of_a_recording() {
    require_tools!("fio");
    let s = Setup::new(64 * MIB, "8MiB", &["--eviction", "arc"]);
    let trace = s.path("whatif.trace");
    let mut srv = s.serve(&[
        "--record",
        trace.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ]);
    fio_workload(&srv.uri(), 16 * MIB);
    let st = s.stats();
    let w = &st["what_if"];
    assert_eq!(w["on"], true, "{w:#}");
    assert_eq!(w["eviction"], "arc", "{w:#}");
    assert_eq!(w["minisim_sampling_rate"], 1.0, "{w:#}");
    assert_eq!(w["lru_sampling_rate"], 1.0, "{w:#}");
    assert!(w["memory_bytes"].as_u64().unwrap() <= w["memory_bound_bytes"].as_u64().unwrap());
    let body = http_get(st["runtime"]["metrics"].as_str().unwrap());
    record_ctl(&s.cache, &["stop"]);
    let rows = w["sizes"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 5, "{w:#}");
    // The 1x miniature cache is the cache itself.
    assert_eq!(rows[2]["scale"], 1.0);
    assert_eq!(rows[2]["cache_lines"], st["slots"]);
    let live_hr = st["hit_ratio"].as_f64().unwrap();
    assert!(
        (rows[2]["hit_ratio"].as_f64().unwrap() - live_hr).abs() < 1e-9,
        "{w:#} {live_hr}"
    );
    let sizes: Vec<String> = rows
        .iter()
        .map(|r| format!("{}lines", r["cache_lines"]))
        .collect();
    let sizes = sizes.join(",");
    let mrc = |extra: &[&str]| -> Vec<Value> {
        let v = json(&run(Command::new(bin())
            .args(["mrc", "--trace"])
            .arg(&trace)
            .args(["--sizes", &sizes, "--json"])
            .args(extra)));
        v.as_array().unwrap().clone()
    };
    let arc = mrc(&["--policy", "arc", "--method", "minisim", "--rate", "1"]);
    let lru = mrc(&["--method", "shards", "--sample-size", "8192"]);
    for (i, r) in rows.iter().enumerate() {
        let scale = r["scale"].as_f64().unwrap().to_string();
        for (key, method, offline) in [
            ("hit_ratio", "minisim", &arc),
            ("lru_hit_ratio", "lru", &lru),
        ] {
            let live = r[key].as_f64().unwrap();
            let off = offline[i]["hit_ratio"].as_f64().unwrap();
            assert!(
                (live - off).abs() < 1e-9,
                "{method} at {scale}x: live {live}, mrc {off}: {w:#}"
            );
            let g = gauge(
                &body,
                "tiercache_what_if_hit_ratio",
                &[
                    &format!("scale=\"{scale}\""),
                    &format!("method=\"{method}\""),
                ],
            )
            .unwrap_or_else(|| panic!("no gauge for {method} at {scale}x:\n{body}"));
            assert!((g - live).abs() < 1e-9, "gauge {g}, stats {live}");
        }
    }
    // A bigger cache would hit more, a smaller one less.
    let h = |i: usize| rows[i]["hit_ratio"].as_f64().unwrap();
    assert!(h(0) < h(2) && h(2) < h(4), "{w:#}");
    let set = |what: &str| {
        run(Command::new(bin())
            .args(["set", "--what-if", what, "--cache"])
            .arg(&s.cache))
    };
    assert!(set("off").contains("what-if: off"));
    assert_eq!(s.stats()["what_if"]["on"], false);
    let body = http_get(st["runtime"]["metrics"].as_str().unwrap());
    assert!(
        gauge(&body, "tiercache_what_if_hit_ratio", &[]).is_none(),
        "{body}"
    );
    set("on");
    let w = s.stats()["what_if"].clone();
    assert_eq!(
        (w["on"].clone(), w["requests"].clone()),
        (Value::Bool(true), 0.into())
    );
    let text = run(Command::new(bin()).args(["stats", "--cache"]).arg(&s.cache));
    assert!(
        text.contains("hit ratio if this cache were 0.25x: "),
        "{text}"
    );
    srv.stop();
}

/// The stated error (docs/operations.md, "What-if"): the largest absolute
/// difference, at any of the five scales, between a live what-if estimate
/// made on a sample and the exact figure of the same requests; for LRU
/// (SHARDS of 8,192 lines) and for the cache's own policy (miniature caches
/// of 2,048 lines at 1x).
const WHAT_IF_LRU_ERROR: f64 = 0.01;
const WHAT_IF_POLICY_ERROR: f64 = 0.05;

/// The live what-if where sampling is partial: a 32 MiB cache (about 5,600
/// lines after its metadata: the miniature caches sample about 36 % of the
/// lines) and a working set of 64 MiB (16,384 lines: SHARDS keeps 8,192). The estimates equal
/// offline `mrc` with the same sample (`--method shards --sample-size 8192`,
/// `--method minisim --rate R`) to rounding, and are within
/// [`WHAT_IF_LRU_ERROR`] and [`WHAT_IF_POLICY_ERROR`] of the exact curves of
/// the recording (`mrc --method exact` for LRU, `--method minisim --rate 1`
/// for ARC).
#[test]
fn sampled_what_if_estimates_are_within_the_stated_error() {
    require_tools!("fio");
    let s = Setup::new(128 * MIB, "32MiB", &["--eviction", "arc"]);
    let trace = s.path("whatif.trace");
    let mut srv = s.serve(&["--record", trace.to_str().unwrap()]);
    fio_workload(&srv.uri(), 64 * MIB);
    let st = s.stats();
    record_ctl(&s.cache, &["stop"]);
    srv.stop();
    let w = &st["what_if"];
    let (mini_rate, lru_rate) = (
        w["minisim_sampling_rate"].as_f64().unwrap(),
        w["lru_sampling_rate"].as_f64().unwrap(),
    );
    assert!(mini_rate < 0.6 && lru_rate < 0.6, "not sampled: {w:#}");
    let rows = w["sizes"].as_array().unwrap().clone();
    let sizes: Vec<String> = rows
        .iter()
        .map(|r| format!("{}lines", r["cache_lines"]))
        .collect();
    let sizes = sizes.join(",");
    let mrc = |extra: &[&str]| -> Vec<f64> {
        let v = json(&run(Command::new(bin())
            .args(["mrc", "--trace"])
            .arg(&trace)
            .args(["--sizes", &sizes, "--json"])
            .args(extra)));
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["hit_ratio"].as_f64().unwrap())
            .collect()
    };
    let rate = mini_rate.to_string();
    let same_arc = mrc(&["--policy", "arc", "--method", "minisim", "--rate", &rate]);
    let same_lru = mrc(&["--method", "shards", "--sample-size", "8192"]);
    let exact_arc = mrc(&["--policy", "arc", "--method", "minisim", "--rate", "1"]);
    let exact_lru = mrc(&["--method", "exact"]);
    for (i, r) in rows.iter().enumerate() {
        let scale = &r["scale"];
        for (key, same, exact, bound) in [
            ("hit_ratio", &same_arc, &exact_arc, WHAT_IF_POLICY_ERROR),
            ("lru_hit_ratio", &same_lru, &exact_lru, WHAT_IF_LRU_ERROR),
        ] {
            let live = r[key].as_f64().unwrap();
            assert!(
                (live - same[i]).abs() < 1e-9,
                "{key} at {scale}x: live {live}, mrc of the same sample {}: {w:#}",
                same[i]
            );
            let err = (live - exact[i]).abs();
            eprintln!(
                "{key} at {scale}x: live {live:.4}, exact {:.4}, error {err:.4}",
                exact[i]
            );
            assert!(
                err <= bound,
                "{key} at {scale}x: live {live}, exact {}: error {err} above {bound}",
                exact[i]
            );
        }
    }
}

/// A resize starts the what-if estimates again, at multiples of the new size.
#[test]
fn resize_starts_the_what_if_estimates_again() {
    let s = Setup::new(64 * MIB, "8MiB", &["--max-size", "16MiB"]);
    let srv = s.serve(&[]);
    let mut c = common::NbdClient::connect(&srv.socket).unwrap();
    for i in 0..64u64 {
        c.write(i * 4096, &[i as u8; 4096], false).unwrap().unwrap();
    }
    let before = s.stats();
    assert_eq!(before["what_if"]["requests"], 64, "{:#}", before["what_if"]);
    run(Command::new(bin())
        .args(["resize", "--size", "12MiB", "--cache"])
        .arg(&s.cache));
    let after = s.stats();
    let w = &after["what_if"];
    assert_eq!(w["requests"], 0, "{w:#}");
    assert_ne!(after["slots"], before["slots"]);
    assert_eq!(w["sizes"][2]["cache_lines"], after["slots"], "{w:#}");
    assert_eq!(
        w["sizes"][4]["cache_lines"],
        after["slots"].as_u64().unwrap() * 4
    );
    c.disconnect();
}
