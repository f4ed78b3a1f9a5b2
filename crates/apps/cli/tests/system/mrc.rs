//! `tiercache mrc` as users run it: exact LRU curves equal `sim --no-timing`
//! hit for hit, sampled curves stay close and within their memory, errors
//! are one line.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .output()
        .expect("run tiercache")
}

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(
        o.status.success(),
        "tiercache {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn fail(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(1), "tiercache {args:?} should fail");
    let e = String::from_utf8(o.stderr).unwrap();
    assert!(
        e.starts_with("tiercache: error: ") && e.lines().count() == 1,
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
    e
}

fn json(args: &[&str]) -> Vec<Value> {
    serde_json::from_str(&ok(args)).expect("JSON rows")
}

/// An MSR trace of 4 KiB requests: (block, write).
fn msr(dir: &Path, name: &str, reqs: &[(u64, bool)]) -> PathBuf {
    let p = dir.join(name);
    let mut s = String::new();
    for (i, &(b, w)) in reqs.iter().enumerate() {
        let op = if w { "Write" } else { "Read" };
        s.push_str(&format!(
            "{},hm,0,{op},{},4096,100\n",
            128166372000000000u64 + i as u64 * 1000,
            b * 4096
        ));
    }
    std::fs::write(&p, s).unwrap();
    p
}

fn sizes_arg(sizes: &[u64]) -> String {
    sizes
        .iter()
        .map(|s| format!("{s}lines"))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn hand_computed_tiny_trace() {
    // a b c a(w) b b d a: distances -, -, -, 3, 3, 1, -, 3 (d is new).
    let d = tempfile::tempdir().unwrap();
    let t = msr(
        d.path(),
        "tiny.csv",
        &[
            (1, false),
            (2, false),
            (3, false),
            (1, true),
            (2, false),
            (2, false),
            (4, false),
            (1, false),
        ],
    );
    let t = t.to_str().unwrap();
    let rows = json(&[
        "mrc",
        "--trace",
        t,
        "--sizes",
        "1lines,2lines,3lines,4lines",
        "--json",
    ]);
    let hits: Vec<u64> = rows.iter().map(|r| r["hits"].as_u64().unwrap()).collect();
    assert_eq!(hits, [1, 1, 4, 4]);
    let r3 = &rows[2];
    assert_eq!(r3["cache_lines"], 3);
    assert_eq!(r3["hit_ratio"], 0.5);
    assert_eq!(r3["read_hit_ratio"], 3.0 / 7.0);
    assert_eq!(r3["write_hit_ratio"], 1.0);
    assert_eq!(r3["working_set_lines"], 4);
    assert_eq!(r3["working_set_bytes"], 4 * 4096);
    assert_eq!(r3["policy"], "lru");
    assert_eq!(r3["method"], "exact");
    assert_eq!(r3["block_accesses"], 8);
    // The text report: the same numbers as a table.
    let text = ok(&["mrc", "--trace", t, "--sizes", "3lines"]);
    assert!(text.contains("working set 4 lines"), "{text}");
    assert!(text.contains("50.000"), "{text}");
}

#[test]
fn a_multi_line_request_counts_one_access_per_line_as_sim() {
    // 8 KiB requests over two lines each, some half-line writes.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("multi.csv");
    let mut s = String::new();
    for i in 0..400u64 {
        let (op, off, len) = match i % 5 {
            0 => ("Write", (i % 13) * 4096 + 2048, 8192),
            1 => ("Write", (i % 11) * 4096, 2048),
            _ => ("Read", (i * 7 % 17) * 4096, 8192),
        };
        s.push_str(&format!(
            "{},hm,0,{op},{off},{len},100\n",
            128166372000000000u64 + i
        ));
    }
    std::fs::write(&p, s).unwrap();
    let t = p.to_str().unwrap();
    let sizes = [1, 2, 3, 5, 8, 12, 20];
    let mrc = json(&["mrc", "--trace", t, "--json", "--sizes", &sizes_arg(&sizes)]);
    let sim = json(&[
        "sim",
        "--trace",
        t,
        "--no-timing",
        "--json",
        "--jobs",
        "1",
        "--cache-size",
        &sizes_arg(&sizes),
    ]);
    for (m, s) in mrc.iter().zip(&sim) {
        assert_eq!(m["block_accesses"], s["block_accesses"]);
        assert_eq!(m["cache_lines"], s["cache_lines"]);
        // Sizes at least the working set: every partial write's line is
        // either cached or never kept, and the curve is exact.
        if m["cache_lines"].as_u64() >= m["working_set_lines"].as_u64() {
            assert_eq!(m["hits"], s["hits"], "at {} lines", m["cache_lines"]);
        }
    }
}

/// The shared traces, each with a line size at which its writes cover whole
/// lines (sim then is an LRU stack algorithm, which `mrc` computes).
fn shared_traces() -> Option<Vec<(PathBuf, &'static str)>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/traces");
    if !root.is_dir() {
        eprintln!("SKIP: {} not present (the shared traces)", root.display());
        return None;
    }
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "md") {
                continue;
            }
            // The samples' writes start and end on any sector: 512 B lines,
            // where none is partial. The others (read-only, or writes of
            // whole 4 KiB blocks) at the default line.
            let name = f.to_string_lossy().to_string();
            let line = if name.contains("/samples/") {
                "512B"
            } else {
                "4KiB"
            };
            out.push((f, line));
        }
    }
    out.sort();
    Some(out)
}

#[test]
fn exact_lru_equals_sim_at_20_sizes_on_each_shared_trace() {
    let Some(traces) = shared_traces() else {
        return;
    };
    assert!(!traces.is_empty());
    for (trace, line) in traces {
        let t = trace.to_str().unwrap();
        let ws = json(&[
            "mrc",
            "--trace",
            t,
            "--line-size",
            line,
            "--sizes",
            "1lines",
            "--json",
        ])[0]["working_set_lines"]
            .as_u64()
            .unwrap();
        // 20 sizes from 1 % of the working set to all of it.
        let mut sizes: Vec<u64> = (0..20)
            .map(|i| ((ws as f64 * 0.01 * 100f64.powf(i as f64 / 19.0)).round() as u64).max(1))
            .collect();
        sizes.dedup();
        let arg = sizes_arg(&sizes);
        let mrc = json(&[
            "mrc",
            "--trace",
            t,
            "--line-size",
            line,
            "--json",
            "--sizes",
            &arg,
        ]);
        // One sim process for the 20 sizes, run side by side (one per CPU).
        let sim = json(&[
            "sim",
            "--trace",
            t,
            "--line-size",
            line,
            "--no-timing",
            "--json",
            "--cache-size",
            &arg,
        ]);
        assert_eq!(mrc.len(), sim.len());
        for (m, s) in mrc.iter().zip(&sim) {
            assert_eq!(m["cache_lines"], s["cache_lines"]);
            for k in [
                "hits",
                "block_accesses",
                "hit_ratio",
                "read_hit_ratio",
                "write_hit_ratio",
            ] {
                assert_eq!(
                    m[k], s[k],
                    "{t} at {} lines of {line}: {k}",
                    m["cache_lines"]
                );
            }
        }
        eprintln!("{t}: {} sizes of {line} lines equal", sizes.len());
    }
}

/// A trace with a skewed reuse: hot lines and a long tail.
fn skewed(dir: &Path) -> PathBuf {
    let mut reqs = Vec::new();
    let mut x = 12345u64;
    for i in 0..60_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (x >> 33) % 1000;
        let b = if r < 600 { r % 200 } else { (x >> 20) % 20_000 };
        reqs.push((b, i % 3 == 0));
    }
    msr(dir, "skewed.csv", &reqs)
}

fn mae(a: &[Value], b: &[Value]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x["hit_ratio"].as_f64().unwrap() - y["hit_ratio"].as_f64().unwrap()).abs())
        .sum::<f64>()
        / a.len() as f64
}

#[test]
fn shards_is_close_to_exact_and_fixed_size_stays_in_its_memory() {
    let d = tempfile::tempdir().unwrap();
    let t = skewed(d.path());
    let t = t.to_str().unwrap();
    let sizes = "100lines,200lines,500lines,1000lines,2000lines,5000lines,10000lines,20000lines";
    let exact = json(&["mrc", "--trace", t, "--json", "--sizes", sizes]);
    let rate = json(&[
        "mrc", "--trace", t, "--json", "--sizes", sizes, "--method", "shards", "--rate", "0.1",
    ]);
    assert!(
        mae(&exact, &rate) < 0.02,
        "fixed rate: {}",
        mae(&exact, &rate)
    );
    // The rate is a threshold out of 2^24 hash values.
    assert!((rate[0]["sampling_rate"].as_f64().unwrap() - 0.1).abs() < 1e-6);
    let fixed = json(&[
        "mrc",
        "--trace",
        t,
        "--json",
        "--sizes",
        sizes,
        "--method",
        "shards",
        "--sample-size",
        "1000",
    ]);
    assert!(
        mae(&exact, &fixed) < 0.03,
        "fixed size: {}",
        mae(&exact, &fixed)
    );
    // 1000 lines of about 40 bytes plus the bucketed histogram (16 B each).
    let mem = fixed[0]["memory_bytes"].as_u64().unwrap();
    assert!(mem < 1000 * 120 + 16 * 30_000, "{mem} bytes");
    assert!(fixed[0]["sampling_rate"].as_f64().unwrap() < 0.1);
}

/// `--seed S` draws another sample of the same rate: the same line count
/// on average, another curve, each close to the exact one; the same seed
/// gives the same curve. `--method exact` takes no seed.
#[test]
fn another_seed_draws_another_sample() {
    let d = tempfile::tempdir().unwrap();
    let t = skewed(d.path());
    let t = t.to_str().unwrap();
    let sizes = "100lines,500lines,2000lines,10000lines";
    let exact = json(&["mrc", "--trace", t, "--json", "--sizes", sizes]);
    for method in [
        &["--method", "shards"][..],
        &["--policy", "lru", "--method", "minisim"],
    ] {
        let draw = |seed: &str| {
            let mut a = vec![
                "mrc", "--trace", t, "--json", "--sizes", sizes, "--rate", "0.1",
            ];
            a.extend_from_slice(method);
            a.extend_from_slice(&["--seed", seed]);
            json(&a)
        };
        let (s0, s1) = (draw("0"), draw("7"));
        assert_ne!(s0, s1, "{method:?}: seed 7 drew the same sample as seed 0");
        assert_eq!(s1, draw("7"), "{method:?}: a seed draws one sample");
        for s in [&s0, &s1] {
            assert!(mae(&exact, s) < 0.03, "{method:?}: {}", mae(&exact, s));
        }
    }
    let e = fail(&["mrc", "--trace", t, "--method", "exact", "--seed", "3"]);
    assert!(e.contains("samples nothing"), "{e}");
}

#[test]
fn minisim_at_rate_one_is_sims_own_policy() {
    let d = tempfile::tempdir().unwrap();
    let t = skewed(d.path());
    let t = t.to_str().unwrap();
    let sizes = "50lines,300lines,3000lines";
    for p in ["lru", "fifo", "arc", "s3fifo"] {
        let mini = json(&[
            "mrc", "--trace", t, "--json", "--sizes", sizes, "--policy", p, "--method", "minisim",
            "--rate", "1", "--jobs", "1",
        ]);
        let sim = json(&[
            "sim",
            "--trace",
            t,
            "--no-timing",
            "--json",
            "--jobs",
            "1",
            "--cache-size",
            sizes,
            "--eviction",
            p,
        ]);
        for (m, s) in mini.iter().zip(&sim) {
            assert_eq!(m["policy"], p);
            for k in ["hit_ratio", "read_hit_ratio", "write_hit_ratio", "hits"] {
                assert_eq!(m[k], s[k], "{p} at {}: {k}", s["cache_lines"]);
            }
        }
        // Sampled: close to the full simulation.
        let sampled = json(&[
            "mrc",
            "--trace",
            t,
            "--json",
            "--sizes",
            "1000lines,3000lines,10000lines",
            "--policy",
            p,
            "--method",
            "minisim",
            "--rate",
            "0.2",
            "--jobs",
            "1",
        ]);
        let full = json(&[
            "sim",
            "--trace",
            t,
            "--no-timing",
            "--json",
            "--jobs",
            "1",
            "--cache-size",
            "1000lines,3000lines,10000lines",
            "--eviction",
            p,
        ]);
        assert!(mae(&sampled, &full) < 0.03, "{p}: {}", mae(&sampled, &full));
    }
}

#[test]
fn figure_and_refusals() {
    let d = tempfile::tempdir().unwrap();
    let t = skewed(d.path());
    let t = t.to_str().unwrap();
    let svg = d.path().join("curve.svg");
    ok(&["mrc", "--trace", t, "--out", svg.to_str().unwrap()]);
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") || s.contains("<svg"), "not an SVG");
    assert!(s.contains("hit ratio"));
    let e = fail(&["mrc", "--trace", t, "--policy", "fifo", "--method", "exact"]);
    assert!(e.contains("--method minisim"), "{e}");
    let e = fail(&["mrc", "--trace", t, "--line-size", "64KiB"]);
    assert!(e.contains("4KiB or less"), "{e}");
    let e = fail(&["mrc", "--trace", t, "--method", "shards", "--rate", "0"]);
    assert!(e.contains("--rate"), "{e}");
    let e = fail(&["mrc", "--trace", "/nonexistent.csv"]);
    assert!(e.contains("does not exist"), "{e}");
    let e = fail(&[
        "mrc", "--trace", t, "--method", "minisim", "--policy", "mru",
    ]);
    assert!(e.contains("eviction"), "{e}");
}
