//! `tiercache reproduce oodt` in a tiny mode: the tables exist, their cells
//! are what `tiercache sim --json` gives for the same configuration, the
//! live part measures real fio runs, and a bad `--traces` is an error.

use crate::common;

use common::{bin, shared_sample, tiercache};
use std::path::Path;
use std::process::Command;

/// The CSV `name` of `dir` as rows of fields (header first).
fn csv(dir: &Path, name: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    text.lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

fn col(rows: &[Vec<String>], name: &str) -> usize {
    rows[0]
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("column {name} in {:?}", rows[0]))
}

#[test]
fn reproduce_oodt_bad_traces_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let o = Command::new(bin())
        .args(["reproduce", "oodt", "--no-live", "--traces"])
        .arg(d.path().join("nowhere"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("traces folder") && e.contains("--traces"), "{e}");
    assert!(!out.exists(), "nothing written for a bad --traces");
    // A folder without any expected trace.
    let o = Command::new(bin())
        .args(["reproduce", "oodt", "--no-live", "--traces"])
        .arg(d.path())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("none of the expected traces"), "{e}");
}

#[test]
fn reproduce_oodt_tiny_matches_sim_json() {
    let Some(msr) = shared_sample("msr-cambridge1-sample.csv") else {
        return;
    };
    let oltp = msr.parent().unwrap().join("../arc/OLTP.lis.zst");
    if !oltp.is_file() {
        eprintln!("skipping: {} is absent", oltp.display());
        return;
    }
    // A traces folder with two of the expected traces: the others are skipped.
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("traces");
    std::fs::create_dir_all(t.join("samples")).unwrap();
    std::fs::create_dir_all(t.join("arc")).unwrap();
    std::os::unix::fs::symlink(&msr, t.join("samples/msr-cambridge1-sample.csv")).unwrap();
    std::os::unix::fs::symlink(&oltp, t.join("arc/OLTP.lis.zst")).unwrap();
    let out = d.path().join("out");
    let o = Command::new(bin())
        .args([
            "reproduce",
            "oodt",
            "--quick",
            "--no-live",
            "--fast-sizes",
            "2%,8%",
        ])
        .arg("--traces")
        .arg(&t)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("skipping the postmark study"), "{e}");
    let md = std::fs::read_to_string(out.join("oodt.md")).unwrap();
    assert!(
        md.contains("| Paper claim | Our figure | Agrees? | Why not |"),
        "{md}"
    );
    assert!(md.contains("Skipped: postmark"), "{md}");
    assert!(md.contains("#### oltp"), "{md}");
    assert!(out.join("sim_response.svg").is_file());

    let rows = csv(&out, "sim_response.csv");
    // 2 traces x 2 sizes x 4 policies.
    assert_eq!(rows.len(), 1 + 2 * 2 * 4, "{rows:?}");
    let (ct, cf, cp) = (
        col(&rows, "trace"),
        col(&rows, "fast_tier"),
        col(&rows, "policy"),
    );
    let (cm, ch, cn) = (
        col(&rows, "mean_response_us"),
        col(&rows, "hdd_only_mean_us"),
        col(&rows, "normalized_to_hdd"),
    );
    let cmig = col(&rows, "migrations");
    for r in &rows[1..] {
        let m: f64 = r[cm].parse().unwrap();
        let h: f64 = r[ch].parse().unwrap();
        let n: f64 = r[cn].parse().unwrap();
        assert!(m > 0.0 && h > 0.0, "{r:?}");
        assert!(
            (n - m / h).abs() < 1e-3,
            "normalized = mean / HDD only: {r:?}"
        );
    }
    // One cell against a direct `sim --json` run of the same configuration.
    let cell = rows[1..]
        .iter()
        .find(|r| r[ct] == "oltp" && r[cf] == "8%" && r[cp] == "oodt")
        .expect("oltp 8% oodt row");
    let j: serde_json::Value = serde_json::from_str(&tiercache(&[
        "sim",
        "--mode",
        "tier",
        "--replay",
        "closed",
        "--trace",
        oltp.to_str().unwrap(),
        "--format",
        "arc-lis",
        "--tier-policy",
        "oodt",
        "--fast-tier-size",
        "8%",
        "--json",
    ]))
    .unwrap();
    let mean = j["mean_response_us"].as_f64().unwrap();
    let ours: f64 = cell[cm].parse().unwrap();
    assert!(
        (ours - mean).abs() < 1e-3,
        "reproduce {ours} against sim --json {mean}"
    );
    assert_eq!(cell[cmig], j["migrations"].as_u64().unwrap().to_string());
    let hdd = j["baseline"]["mean_response_us"].as_f64().unwrap();
    assert!((cell[ch].parse::<f64>().unwrap() - hdd).abs() < 1e-3);
    // Tiering helps OLTP (small random reads with reuse) in the model.
    assert!(ours < hdd, "OODT {ours} µs against HDD only {hdd} µs");

    // Block-size study: the 4 KiB row is the main table's cell.
    let bs = csv(&out, "sim_block_size.csv");
    let b4 = bs[1..]
        .iter()
        .find(|r| r[0] == "oltp" && r[2] == "4096")
        .expect("oltp 4 KiB row");
    assert_eq!(b4[col(&bs, "normalized_to_4k")], "1.00000");
    assert_eq!(bs.len(), 1 + 4, "{bs:?}");
}

#[test]
fn reproduce_oodt_live_tiny() {
    for tool in ["fio", "nbdkit"] {
        if Command::new(tool).arg("--version").output().is_err() {
            eprintln!("skipping: {tool} not found");
            return;
        }
    }
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let o = Command::new(bin())
        .args([
            "reproduce",
            "oodt",
            "--no-sim",
            "--live-runtime",
            "2s",
            "--live-warmup",
            "1",
            "--live-size",
            "32MiB",
            "--live-fast",
            "10",
        ])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{e}");
    let rows = csv(&out, "live.csv");
    assert_eq!(rows.len(), 4, "HDD only, nbdkit, tiered: {rows:?}");
    let ci = col(&rows, "iops");
    for r in &rows[1..] {
        let iops: f64 = r[ci].parse().unwrap();
        assert!(iops > 0.0, "{r:?}");
    }
    assert!(rows[1][0].contains("HDD only"));
    assert!(rows[3][0].contains("tiered"));
    let md = std::fs::read_to_string(out.join("oodt.md")).unwrap();
    assert!(md.contains("## Live part"), "{md}");
    assert!(md.contains("migrations"), "{md}");
}
