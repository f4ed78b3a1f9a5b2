//! `tiercache sim` and `tiercache trace` as users run them: output contract,
//! sweeps, and refusal of bad input with useful messages (never a panic).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run tiercache")
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
    assert_eq!(
        o.status.code(),
        Some(1),
        "tiercache {args:?} should fail with status 1: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let e = String::from_utf8(o.stderr).unwrap();
    assert!(!e.contains("panicked"), "panic: {e}");
    e
}

/// A small MSR-format trace: reads and writes over 64 blocks of 4 KiB, repeated.
fn msr_trace(dir: &Path) -> PathBuf {
    let p = dir.join("small.csv");
    let mut s = String::new();
    for i in 0..2000u64 {
        // A hot set of 8 blocks interleaved with a scan over all 64.
        let block = if i % 2 == 0 { i % 8 } else { (i / 2 * 37) % 64 };
        let op = if i % 4 == 0 { "Write" } else { "Read" };
        s.push_str(&format!(
            "{},hm,0,{op},{},4096,100\n",
            128166372000000000u64 + i * 1000,
            block * 4096
        ));
    }
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn json_has_the_documented_fields() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let out = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--cache-size",
        "32",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in [
        "requests",
        "block_accesses",
        "hits",
        "hit_ratio",
        "read_hit_ratio",
        "write_hit_ratio",
        "fills",
        "evictions",
        "writebacks",
        "hdd_ops",
        "ssd_reads",
        "ssd_writes",
        "cwaf",
        "mean_response_us",
        "p50_response_us",
        "p99_response_us",
        "hdd_utilization",
        "metadata_bytes_per_gib",
        "baseline",
        "speedup",
    ] {
        assert!(v.get(k).is_some(), "missing field {k}");
    }
    assert_eq!(v["requests"], 2000);
    // 64 distinct blocks, 32 lines: the hit ratio is strictly between 0 and 1, and the counters add up.
    let (h, a) = (
        v["hits"].as_u64().unwrap(),
        v["block_accesses"].as_u64().unwrap(),
    );
    assert!(h > 0 && h < a);
    assert_eq!(v["misses"].as_u64().unwrap(), a - h);
    assert!(
        v["speedup"].as_f64().unwrap() > 1.0,
        "a cache of half the footprint beats the HDD"
    );
    // --no-timing: the same cache behaviour, no timing fields.
    let out = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--cache-size",
        "32",
        "--json",
        "--no-timing",
    ]);
    let w: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(w["hits"], v["hits"]);
    assert!(w["mean_response_us"].is_null());
}

#[test]
fn percent_sizes_resolve_against_the_footprint() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    // Footprint: 64 blocks of 4 KiB; 50 % is 32 lines.
    let out = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--cache-size",
        "50%",
        "--json",
        "--no-timing",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cache_lines"], 32);
    let out = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--cache-size",
        "128KiB",
        "--json",
        "--no-timing",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cache_lines"], 32);
}

#[test]
fn sweep_writes_json_array_csv_and_svg() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let prefix = d.path().join("sw");
    let out = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--cache-size",
        "8,16,32",
        "--eviction",
        "lru,arc",
        "--json",
        "--out",
        prefix.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 6);
    // Larger caches never hit less under LRU on the same trace (LRU has the inclusion property).
    let lru: Vec<f64> = rows
        .iter()
        .filter(|r| r["eviction"] == "lru")
        .map(|r| r["hit_ratio"].as_f64().unwrap())
        .collect();
    assert!(lru.windows(2).all(|w| w[0] <= w[1]), "{lru:?}");
    let csv = std::fs::read_to_string(prefix.with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 7, "header plus six rows");
    assert!(csv.lines().next().unwrap().contains("hit_ratio"));
    let svg = std::fs::read_to_string(prefix.with_extension("svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("hit ratio (%)") && svg.contains("cache size (MiB)")
    );
}

#[test]
fn malformed_trace_line_names_file_and_line_and_skip_bad_counts() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("bad.csv");
    std::fs::write(&p, "128166372000000000,hm,0,Read,0,4096,100\n128166372000001000,hm,0,Read,garbage\n128166372000002000,hm,0,Read,4096,4096,100\n").unwrap();
    let e = fail(&[
        "sim",
        "--trace",
        p.to_str().unwrap(),
        "--format",
        "msr",
        "--cache-size",
        "4",
    ]);
    assert!(e.contains("bad.csv:2"), "error names file and line: {e}");
    let out = ok(&[
        "sim",
        "--trace",
        p.to_str().unwrap(),
        "--format",
        "msr",
        "--cache-size",
        "4",
        "--skip-bad",
        "--json",
        "--no-timing",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 2);
}

/// Minimal gzip writer via the system `gzip` (keeps the test free of extra crates).
fn flate2_like_gzip(buf: &mut Vec<u8>) -> GzipPipe<'_> {
    GzipPipe {
        out: buf,
        data: Vec::new(),
    }
}

struct GzipPipe<'a> {
    out: &'a mut Vec<u8>,
    data: Vec<u8>,
}

impl std::io::Write for GzipPipe<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.data.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for GzipPipe<'_> {
    fn drop(&mut self) {
        use std::io::Write;
        let mut c = Command::new("gzip")
            .arg("-c")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(&self.data).unwrap();
        *self.out = c.wait_with_output().unwrap().stdout;
    }
}

#[test]
fn truncated_compressed_trace_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let mut enc = Vec::new();
    {
        use std::io::Write;
        let mut z = flate2_like_gzip(&mut enc);
        z.write_all(&std::fs::read(&t).unwrap()).unwrap();
    }
    let gz = d.path().join("cut.csv.gz");
    std::fs::write(&gz, &enc[..enc.len() / 2]).unwrap();
    let e = fail(&[
        "sim",
        "--trace",
        gz.to_str().unwrap(),
        "--format",
        "msr",
        "--cache-size",
        "4",
        "--no-timing",
    ]);
    assert!(e.contains("cut.csv.gz"), "{e}");
}

#[test]
fn impossible_configurations_say_what_is_allowed() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let t = t.to_str().unwrap();
    let cases: [(&[&str], &str); 8] = [
        (
            &["--cache-size", "2KiB", "--line-size", "4KiB"],
            "larger than the cache size",
        ),
        (&["--cache-size", "0"], "zero"),
        (
            &["--cache-size", "64", "--line-size", "3000B"],
            "power of two from 512 B to 1 MiB",
        ),
        (
            &["--cache-size", "64", "--eviction", "lfu"],
            "allowed: lru, fifo, arc, s3fifo",
        ),
        (
            &["--cache-size", "64", "--write-policy", "sideways"],
            "allowed: write-back",
        ),
        (
            &["--cache-size", "64", "--assoc", "0-way"],
            "allowed: direct",
        ),
        (
            &["--cache-size", "64", "--admission", "maybe"],
            "allowed: always, seq-cutoff, nhit, 2lbs",
        ),
        (
            &["--cache-size", "4", "--assoc", "8-way"],
            "8-way needs at least 8 lines",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["sim", "--trace", t];
        args.extend_from_slice(extra);
        let e = fail(&args);
        assert!(e.contains(want), "{extra:?}: expected '{want}' in: {e}");
    }
    let e = fail(&[
        "sim",
        "--trace",
        "/nonexistent/trace.csv",
        "--cache-size",
        "4",
    ]);
    assert!(e.contains("does not exist"), "{e}");
    let e = fail(&[
        "sim",
        "--trace",
        t,
        "--format",
        "nosuch",
        "--cache-size",
        "4",
    ]);
    assert!(e.contains("allowed"), "{e}");
}

#[test]
fn trace_stats_and_convert_round_trip() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let out = ok(&["trace", "stats", t.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 2000);
    assert_eq!(v["writes"], 500);
    assert_eq!(v["unique_blocks"], 64);
    let native = d.path().join("t.tct");
    ok(&[
        "trace",
        "convert",
        t.to_str().unwrap(),
        "-o",
        native.to_str().unwrap(),
    ]);
    // The same simulation on the converted trace gives the same counters.
    let a = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--cache-size",
        "16",
        "--json",
        "--no-timing",
    ]);
    let b = ok(&[
        "sim",
        "--trace",
        native.to_str().unwrap(),
        "--format",
        "native",
        "--cache-size",
        "16",
        "--json",
        "--no-timing",
    ]);
    let (a, b): (serde_json::Value, serde_json::Value) = (
        serde_json::from_str(&a).unwrap(),
        serde_json::from_str(&b).unwrap(),
    );
    assert_eq!(a["hits"], b["hits"]);
    assert_eq!(a["writebacks"], b["writebacks"]);
}
