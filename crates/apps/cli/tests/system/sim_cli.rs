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
        "32lines",
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
        "32lines",
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
        "8lines,16lines,32lines",
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
        svg.contains("<svg") && svg.contains("Hit ratio (%)") && svg.contains("Cache size (MiB")
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
        "4lines",
    ]);
    assert!(e.contains("bad.csv:2"), "error names file and line: {e}");
    let out = ok(&[
        "sim",
        "--trace",
        p.to_str().unwrap(),
        "--format",
        "msr",
        "--cache-size",
        "4lines",
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
        "4lines",
        "--no-timing",
    ]);
    assert!(e.contains("cut.csv.gz"), "{e}");
}

#[test]
fn impossible_configurations_say_what_is_allowed() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let t = t.to_str().unwrap();
    let cases: [(&[&str], &str); 9] = [
        (
            &["--cache-size", "2KiB", "--line-size", "4KiB"],
            "larger than the cache size",
        ),
        (&["--cache-size", "0lines"], "zero"),
        // A bare number is bytes in `format --size`: here it is refused,
        // naming both spellings, instead of meaning lines.
        (
            &["--cache-size", "64"],
            "64lines for 64 cache lines, 64B for bytes",
        ),
        (
            &["--cache-size", "64lines", "--line-size", "3000B"],
            "power of two from 512 B to 1 MiB",
        ),
        (
            &["--cache-size", "64lines", "--eviction", "lfu"],
            "allowed: lru, fifo, arc, s3fifo",
        ),
        (
            &["--cache-size", "64lines", "--write-policy", "sideways"],
            "allowed: write-back",
        ),
        (
            &["--cache-size", "64lines", "--assoc", "0-way"],
            "allowed: direct",
        ),
        (
            &["--cache-size", "64lines", "--admission", "maybe"],
            "allowed: always, seq-cutoff, nhit, 2lbs",
        ),
        (
            &["--cache-size", "4lines", "--assoc", "8-way"],
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
        "4lines",
    ]);
    assert!(e.contains("does not exist"), "{e}");
    let e = fail(&[
        "sim",
        "--trace",
        t,
        "--format",
        "nosuch",
        "--cache-size",
        "4lines",
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
        "16lines",
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
        "16lines",
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

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

/// docs/results.md's table: (field, modes, outputs), groups expanded.
fn documented_fields() -> Vec<(String, Vec<String>, Vec<String>)> {
    let doc = std::fs::read_to_string(root().join("docs/results.md")).unwrap();
    let split = |s: &str| -> Vec<String> {
        s.split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect()
    };
    let mut out = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 6 || !cells[1].starts_with('`') {
            continue;
        }
        let field = cells[1].trim_matches('`').to_string();
        let mut modes = Vec::new();
        for m in split(cells[2]) {
            match m.as_str() {
                "flash" => modes.extend(["ssd", "ssc", "ssc-v"].map(String::from)),
                "levels" => modes.extend(["tica", "ucache", "srac"].map(String::from)),
                _ => modes.push(m),
            }
        }
        out.push((field, modes, split(cells[3])));
    }
    assert!(out.len() > 50, "docs/results.md table not found");
    out
}

fn documented(mode: &str, output: &str) -> std::collections::BTreeSet<String> {
    documented_fields()
        .into_iter()
        .filter(|(_, m, o)| m.iter().any(|x| x == mode) && o.iter().any(|x| x == output))
        .map(|(f, _, _)| f)
        .collect()
}

fn json_keys(s: &str) -> std::collections::BTreeSet<String> {
    let v: serde_json::Value = serde_json::from_str(s).unwrap();
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn results_schema_matches_the_doc() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let t = t.to_str().unwrap();
    let cache = ok(&["sim", "--trace", t, "--cache-size", "16lines", "--json"]);
    assert_eq!(
        json_keys(&cache),
        documented("cache", "json"),
        "--mode cache --json"
    );
    let prefix = d.path().join("sweep");
    ok(&[
        "sim",
        "--trace",
        t,
        "--cache-size",
        "8lines,16lines",
        "--no-timing",
        "--out",
        prefix.to_str().unwrap(),
    ]);
    let csv = std::fs::read_to_string(d.path().join("sweep.csv")).unwrap();
    let header: std::collections::BTreeSet<String> = csv
        .lines()
        .next()
        .unwrap()
        .split(',')
        .map(String::from)
        .collect();
    assert_eq!(header, documented("cache", "csv"), "sweep CSV header");
    for (mode, args) in [
        ("ssc", vec!["--cache-size", "64MiB"]),
        ("ssd", vec!["--cache-size", "64MiB"]),
        ("tier", vec!["--fast-tier-size", "25%"]),
        ("tica", vec!["--cache-size", "25%"]),
        ("srac", vec!["--cache-size", "25%"]),
    ] {
        let mut a = vec!["sim", "--trace", t, "--mode", mode, "--json"];
        a.extend(args);
        assert_eq!(
            json_keys(&ok(&a)),
            documented(mode, "json"),
            "--mode {mode} --json"
        );
    }
}

/// `--no-timing` is a property of the timing model: it changes no count.
#[test]
fn no_timing_changes_no_count() {
    let traces = root().join("../shared/traces");
    let t = traces.join("samples/msr-cambridge1-sample.csv");
    if !t.exists() {
        eprintln!(
            "SKIPPED no_timing_changes_no_count: shared trace {} is absent",
            t.display()
        );
        return;
    }
    let t = t.to_str().unwrap();
    for extra in [
        vec!["--cache-size", "5%"],
        vec!["--cache-size", "10%", "--line-size", "64KiB"],
        vec!["--cache-size", "2%", "--write-policy", "write-through"],
    ] {
        let mut a = vec!["sim", "--trace", t, "--json", "--no-baseline"];
        a.extend(extra.iter().copied());
        let timed: serde_json::Value = serde_json::from_str(&ok(&a)).unwrap();
        a.push("--no-timing");
        let untimed: serde_json::Value = serde_json::from_str(&ok(&a)).unwrap();
        for (k, v) in timed.as_object().unwrap() {
            if v.is_u64() {
                assert_eq!(&untimed[k], v, "{k} differs with --no-timing ({extra:?})");
            }
        }
        assert!(untimed["mean_response_us"].is_null());
    }
}

/// The sweep SVG follows the rules of the one renderer (crates/platform/plot).
#[test]
fn sweep_svg_follows_the_plot_rules() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let prefix = d.path().join("fig");
    ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--cache-size",
        "2lines,8lines,64lines,512lines",
        "--eviction",
        "lru,arc",
        "--line-size",
        "512B",
        "--no-timing",
        "--out",
        prefix.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(d.path().join("fig.svg")).unwrap();
    // One panel: one y axis title, no response-time panel.
    assert_eq!(svg.matches("Hit ratio (%)").count(), 1, "{svg}");
    assert!(!svg.contains("response time"));
    // A log x axis: tick labels span decades.
    assert!(svg.contains("log scale"));
    let texts: Vec<&str> = svg
        .split("<text")
        .skip(1)
        .filter_map(|s| s.split('>').nth(1)?.split('<').next())
        .map(str::trim)
        .collect();
    let ticks: Vec<f64> = texts.iter().filter_map(|s| s.trim().parse().ok()).collect();
    for decade in ["0.001", "0.01", "0.1"] {
        assert!(texts.contains(&decade), "tick {decade} missing: {texts:?}");
    }
    assert!(!ticks.is_empty());
    // Legend: only the eviction varies (and is the legend's title).
    assert!(
        texts.contains(&"lru") && texts.contains(&"arc") && texts.contains(&"Eviction"),
        "{texts:?}"
    );
    assert!(
        !texts
            .iter()
            .any(|s| s.contains("write-back") && s.contains("lru")),
        "constant fields in a legend label: {texts:?}"
    );
    // Colours: only the palette (plus black, white and the grid greys).
    let palette = [
        "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000",
    ];
    for c in svg.split('#').skip(1).map(|s| &s[..6.min(s.len())]) {
        let c = format!("#{}", c.to_uppercase());
        let grey = c[1..3] == c[3..5] && c[3..5] == c[5..7];
        assert!(
            palette.contains(&c.as_str()) || grey,
            "colour {c} is not in the palette"
        );
    }
    assert!(!svg.to_uppercase().contains("#F0E442"));
}

/// An MSR trace of the given `(offset, len)` reads, 1 ms apart.
fn msr_reads(dir: &Path, name: &str, reads: &[(u64, u64)]) -> PathBuf {
    let p = dir.join(name);
    let mut s = String::new();
    for (i, (off, len)) in reads.iter().enumerate() {
        s.push_str(&format!(
            "{},hm,0,Read,{off},{len},100\n",
            128166372000000000u64 + i as u64 * 10_000
        ));
    }
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn small_reads_fill_their_whole_line() {
    let d = tempfile::tempdir().unwrap();
    // 512 B reads, default 4 KiB lines (and sub-blocks):
    //   0      miss, fills line 0      4608   miss, fills line 1
    //   512    hit                     4096   hit
    //   1024   hit                     0      hit
    //   11776  miss, fills line 2      8192   hit
    // 8 accesses, 3 misses, 5 hits: 62.5 %; 3 fills of 4 KiB from the HDD.
    let t = msr_reads(
        d.path(),
        "small.csv",
        &[
            (0, 512),
            (512, 512),
            (1024, 512),
            (4608, 512),
            (4096, 512),
            (0, 512),
            (11776, 512),
            (8192, 512),
        ],
    );
    for timing in [&["--no-timing"][..], &[][..]] {
        let mut args = vec![
            "sim",
            "--trace",
            t.to_str().unwrap(),
            "--cache-size",
            "1MiB",
            "--json",
        ];
        args.extend_from_slice(timing);
        let v: serde_json::Value = serde_json::from_str(&ok(&args)).unwrap();
        assert_eq!(v["block_accesses"], 8, "{v}");
        assert_eq!(v["hits"], 5, "{v}");
        assert_eq!(v["fills"], 3, "{v}");
        assert_eq!(v["hit_ratio"].as_f64().unwrap(), 0.625, "{v}");
    }
}

/// Peak resident memory of `tiercache args`, in KiB, measured by
/// /usr/bin/time (`None` without it).
fn peak_rss_kib(args: &[&str]) -> Option<u64> {
    if !Path::new("/usr/bin/time").exists() {
        return None;
    }
    let o = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("maxrss %M")
        .arg(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .output()
        .expect("run /usr/bin/time");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "tiercache {args:?} failed: {err}");
    let line = err.lines().rev().find(|l| l.starts_with("maxrss "))?;
    line["maxrss ".len()..].trim().parse().ok()
}

#[test]
// `--ftl log` refuses a data area this large (its map entries), in one line.
fn memory_follows_the_trace_not_the_cache_size() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    let t = t.to_str().unwrap();
    const LIMIT_KIB: u64 = 200 << 10;
    let runs: Vec<Vec<&str>> = vec![
        vec!["--mode", "cache", "--assoc", "full"],
        vec!["--mode", "cache", "--assoc", "direct"],
        vec!["--mode", "cache", "--assoc", "8-way", "--eviction", "arc"],
        vec!["--mode", "cache", "--assoc", "full", "--eviction", "s3fifo"],
        vec!["--mode", "tica", "--dram-size", "1MiB"],
        vec!["--mode", "ucache", "--dram-size", "1MiB"],
        vec!["--mode", "srac", "--dram-size", "1MiB"],
        vec!["--mode", "ssd"],
        vec!["--mode", "ssc"],
        vec!["--mode", "ssc-v"],
    ];
    for size in ["1TiB", "16TiB"] {
        for mode in &runs {
            let mut args = vec!["sim", "--trace", t, "--cache-size", size, "--json"];
            // 16 TiB of 4 KiB lines is more lines than a cache may have.
            if size == "16TiB" && mode[1] == "cache" {
                args.extend_from_slice(&["--line-size", "64KiB"]);
            }
            // The flash model numbers its pages in 32 bits: just under 16 TiB.
            if size == "16TiB" && mode[1].starts_with("ss") {
                args[4] = "15TiB";
            }
            args.extend_from_slice(mode);
            let Some(kib) = peak_rss_kib(&args) else {
                eprintln!("skipped: /usr/bin/time is not installed");
                return;
            };
            assert!(
                kib < LIMIT_KIB,
                "{args:?}: peak RSS {kib} KiB, limit {LIMIT_KIB} KiB"
            );
        }
        let args = [
            "sim",
            "--trace",
            t,
            "--mode",
            "tier",
            "--fast-tier-size",
            size,
            "--json",
        ];
        let kib = peak_rss_kib(&args).unwrap();
        assert!(kib < LIMIT_KIB, "{args:?}: peak RSS {kib} KiB");
    }
}

#[test]
fn a_flash_device_past_32_bit_page_numbers_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    for size in ["16TiB", "1PiB"] {
        let o = Command::new(env!("CARGO_BIN_EXE_tiercache"))
            .args([
                "sim",
                "--trace",
                t.to_str().unwrap(),
                "--mode",
                "ssd",
                "--cache-size",
                size,
            ])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{size}: {e}");
        assert!(
            e.contains("at most 2^32 pages") && !e.contains("panicked"),
            "{size}: {e}"
        );
    }
}

#[test]
fn tier_shares_stay_within_the_footprint() {
    let d = tempfile::tempdir().unwrap();
    let t = msr_trace(d.path());
    // A fast tier far larger than the volume (64 blocks of 4 KiB, 256 KiB):
    // it can use the volume's blocks plus one scratch block, and every
    // share is at most 100 %.
    let out = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--mode",
        "tier",
        "--fast-tier-size",
        "1TiB",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fast_tier_blocks"], 65, "{v}");
    assert_eq!(v["fast_tier_bytes"], 65 * 4096, "{v}");
    let share = v["fast_tier_block_share"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&share), "{v}");
    let text = ok(&[
        "sim",
        "--trace",
        t.to_str().unwrap(),
        "--mode",
        "tier",
        "--fast-tier-size",
        "1TiB",
    ]);
    // The row: fast, policy, mean, p50, p99, blocks%, ...
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.contains(" oodt "))
        .expect(&text)
        .split_whitespace()
        .collect();
    let at = row.iter().position(|&w| w == "oodt").unwrap();
    let blocks_pct: f64 = row[at + 4].parse().unwrap();
    assert!((0.0..=100.0).contains(&blocks_pct), "{text}");
}

/// `n` bytes of a fixed pseudo-random sequence.
fn random_bytes(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn traces_that_hold_no_requests_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let empty = d.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    let noise = d.path().join("noise.bin");
    std::fs::write(&noise, random_bytes(100_000)).unwrap();
    let (empty, noise) = (empty.to_str().unwrap(), noise.to_str().unwrap());
    for (trace, format) in [(empty, "msr"), (empty, "cloudphysics"), (noise, "blkparse")] {
        let want = format!("tiercache: error: trace {trace} holds no requests (format {format})");
        for cmd in [
            &[
                "sim",
                "--trace",
                trace,
                "--format",
                format,
                "--cache-size",
                "4lines",
            ][..],
            &["trace", "stats", trace, "--format", format][..],
        ] {
            let e = fail(cmd);
            assert_eq!(e.trim(), want, "{cmd:?}");
        }
    }
    // Random bytes read as a binary format: one line naming the format.
    for (format, says) in [
        (
            "cloudphysics",
            "not a cloudphysics trace: its first 4096 block ids",
        ),
        ("vscsi", "not a vscsi trace"),
        ("native", "native"),
    ] {
        for extra in [&[][..], &["--skip-bad"][..]] {
            let mut cmd = vec![
                "sim",
                "--trace",
                noise,
                "--format",
                format,
                "--cache-size",
                "4lines",
            ];
            cmd.extend_from_slice(extra);
            let e = fail(&cmd);
            assert_eq!(e.trim().lines().count(), 1, "{e}");
            assert!(e.starts_with("tiercache: error: "), "{e}");
            assert!(e.contains(says), "{format}: {e}");
        }
    }
    // Text mostly malformed, read with --skip-bad: refused, naming the first bad line.
    let junk = d.path().join("junk.csv");
    let mut s = String::from("128166372000000000,hm,0,Read,0,4096,100\n");
    for _ in 0..10 {
        s.push_str("not,a,record\n");
    }
    std::fs::write(&junk, s).unwrap();
    let e = fail(&[
        "sim",
        "--trace",
        junk.to_str().unwrap(),
        "--format",
        "msr",
        "--cache-size",
        "4lines",
        "--skip-bad",
    ]);
    assert!(
        e.contains("not a msr trace: 10 of its 11 records are malformed")
            && e.contains("junk.csv:2"),
        "{e}"
    );
}

/// A vscsi v1 trace of `n` 4 KiB READ(10)s (32-byte little-endian records).
fn vscsi_v1(n: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        v.extend_from_slice(&(i as u32).to_le_bytes()); // serial
        v.extend_from_slice(&4096u32.to_le_bytes()); // length
        v.extend_from_slice(&1u32.to_le_bytes()); // nSG
        v.extend_from_slice(&0x28u16.to_le_bytes()); // READ(10)
        v.extend_from_slice(&0x0100u16.to_le_bytes()); // version 1
        v.extend_from_slice(&(i * 8).to_le_bytes()); // LBN
        v.extend_from_slice(&(1000 + i).to_le_bytes()); // time, µs
    }
    v
}

#[test]
fn truncated_real_traces_are_refused_or_read_whole() {
    let d = tempfile::tempdir().unwrap();
    // A vscsi trace cut inside its 10th record: an error naming the record;
    // cut at a record boundary, it reads 9.
    let data = vscsi_v1(12);
    let cut = d.path().join("cut.vscsi");
    let cut_s = cut.to_str().unwrap();
    std::fs::write(&cut, &data[..9 * 32 + 20]).unwrap();
    let e = fail(&["trace", "stats", cut_s, "--format", "vscsi"]);
    assert!(e.contains("record 10") && e.contains("truncated"), "{e}");
    std::fs::write(&cut, &data[..9 * 32]).unwrap();
    let out = ok(&["trace", "stats", cut_s, "--format", "vscsi", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests"], 9, "{v}");
    // A native trace cut inside its records: an error, not a shorter trace.
    let t = msr_trace(d.path());
    let native = d.path().join("t.tct");
    ok(&[
        "trace",
        "convert",
        t.to_str().unwrap(),
        "-o",
        native.to_str().unwrap(),
    ]);
    let bytes = std::fs::read(&native).unwrap();
    std::fs::write(&native, &bytes[..bytes.len() - 7]).unwrap();
    let e = fail(&[
        "trace",
        "stats",
        native.to_str().unwrap(),
        "--format",
        "native",
    ]);
    assert!(e.starts_with("tiercache: error: "), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}
