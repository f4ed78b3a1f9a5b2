//! `tiercache reproduce azor`: a bad `--traces` folder is a clear
//! error; on a folder holding only the MSR Cambridge sample the simulated
//! studies run (the other traces skipped with a message), and their tables
//! agree with `tiercache sim --json` of the same configuration; a tiny live
//! run (when fio is installed) writes the live table beside nbdkit's cache
//! filter; a tiny PostMark run on ext4 through the live cache (when postmark
//! and nbdfuse are installed) completes, leaves the filesystem clean and
//! writes its rows. Skips with a message when the shared sample is absent.

use crate::common;

use common::{bin, sample_trace, sim_json};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

fn azor(args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(["-q", "reproduce", "azor"])
        .args(args)
        .output()
        .expect("run tiercache")
}

#[test]
fn bad_traces_folder_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-folder");
    let out = dir.path().join("out");
    let o = azor(&[
        "--quick",
        "--traces",
        missing.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not found") && err.contains("no-such-folder"),
        "{err}"
    );
    // A folder without any of the traces is an error too, naming them.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = azor(&[
        "--quick",
        "--no-live",
        "--traces",
        empty.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("none of the expected traces"), "{err}");
    assert!(err.contains("msr-cambridge1-sample.csv"), "{err}");
}

/// A live data set too small for the caches and filesystems is refused
/// before anything runs or is written (no empty report).
#[test]
fn too_small_live_data_is_an_error_before_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for bad in ["1MiB", "twelve"] {
        let o = azor(&[
            "--no-sim",
            "--live-data",
            bad,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!o.status.success(), "--live-data {bad} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--live-data"), "{err}");
        assert!(!out.join("azor.md").exists(), "a report was written");
    }
}

/// The CSV as rows of column name -> value.
fn csv(p: &Path) -> Vec<HashMap<String, String>> {
    let s = std::fs::read_to_string(p).unwrap();
    let mut lines = s.lines();
    let head: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    lines
        .map(|l| {
            head.iter()
                .cloned()
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

fn f(r: &HashMap<String, String>, k: &str) -> f64 {
    r[k].parse().unwrap_or_else(|_| panic!("{k} = {}", r[k]))
}

#[test]
fn simulated_studies_match_sim() {
    let Some(trace) = sample_trace() else { return };
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir_all(traces.join("samples")).unwrap();
    std::fs::copy(&trace, traces.join("samples/msr-cambridge1-sample.csv")).unwrap();
    let out = dir.path().join("out");
    let o = azor(&[
        "--quick",
        "--no-live",
        "--jobs",
        "2",
        "--traces",
        traces.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // The absent traces are skipped with a message.
    assert!(err.contains("skipped postmark"), "{err}");
    let md = std::fs::read_to_string(out.join("azor.md")).unwrap();
    assert!(md.contains("## Thesis claims beside ours"), "{md}");
    assert!(md.contains("skipped postmark"), "{md}");
    for s in ["assoc", "size", "line", "write", "2lbs"] {
        assert!(out.join(format!("azor-{s}.svg")).is_file(), "{s}");
        let rows = csv(&out.join(format!("azor-{s}.csv")));
        assert!(!rows.is_empty(), "{s}");
        for r in &rows {
            assert_eq!(r["trace"], "msr-hm");
            let h = f(r, "hit_ratio");
            assert!((0.0..=1.0).contains(&h), "{s}: {h}");
            assert!(f(r, "speedup") > 0.0, "{s}");
        }
    }
    // Fully associative LRU keeps the inclusion property: a larger cache
    // never hits less.
    let size = csv(&out.join("azor-size.csv"));
    let fa: Vec<f64> = size
        .iter()
        .filter(|r| r["assoc"] == "full")
        .map(|r| f(r, "hit_ratio"))
        .collect();
    assert!(fa.len() >= 2);
    assert!(fa.windows(2).all(|w| w[1] >= w[0]), "{fa:?}");
    // The write-policy study: read-only caches no write, so it hits no more
    // than write-back does.
    let wr = csv(&out.join("azor-write.csv"));
    let hit = |wp: &str, a: &str| {
        f(
            wr.iter()
                .find(|r| r["write_policy"] == wp && r["assoc"] == a)
                .unwrap(),
            "hit_ratio",
        )
    };
    assert!(hit("read-only", "full") <= hit("write-back", "full"));
    // One cell against `tiercache sim --json` of the same configuration.
    let assoc = csv(&out.join("azor-assoc.csv"));
    let full = assoc.iter().find(|r| r["assoc"] == "full").unwrap();
    let bytes = format!("{}B", full["cache_bytes"]);
    let v = sim_json(
        &trace,
        &[
            "--cache-size",
            &bytes,
            "--assoc",
            "full",
            "--write-policy",
            "write-hdd-upd",
            "--replay",
            "closed",
            "--queue-depth",
            "1",
        ],
    );
    assert_eq!(v["hdd_ops"].as_u64().unwrap() as f64, f(full, "hdd_ops"));
    assert!((v["hit_ratio"].as_f64().unwrap() - f(full, "hit_ratio")).abs() < 1e-6);
    let sp = v["speedup"].as_f64().unwrap();
    assert!(
        (sp - f(full, "speedup")).abs() / sp < 1e-3,
        "{sp} vs {}",
        full["speedup"]
    );
    // The metadata table: fully associative needs more per GiB than
    // direct-mapped, and larger lines need less.
    let meta = csv(&out.join("azor-metadata.csv"));
    let (dm4, fa4) = (
        f(&meta[0], "direct_mb_per_gib"),
        f(&meta[0], "full_mb_per_gib"),
    );
    let last = meta.last().unwrap();
    assert!(fa4 > dm4);
    assert!(f(last, "full_mb_per_gib") < fa4);
    assert!(f(last, "direct_mb_per_gib") < dm4);
}

#[test]
fn tiny_live_run_beside_nbdkit() {
    let Some(trace) = sample_trace() else { return };
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("skipping: fio is not installed (scripts/setup.sh)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    std::fs::create_dir_all(traces.join("samples")).unwrap();
    std::fs::copy(&trace, traces.join("samples/msr-cambridge1-sample.csv")).unwrap();
    let out = dir.path().join("out");
    let o = azor(&[
        "--quick",
        "--live-time",
        "2s",
        "--live-data",
        "32MiB",
        "--no-apps",
        "--jobs",
        "2",
        "--traces",
        traces.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let md = std::fs::read_to_string(out.join("azor.md")).unwrap();
    assert!(md.contains("## Live part: fio zipf"), "{md}\n{err}");
    let row = |name: &str| -> Vec<String> {
        md.lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no {name} row:\n{md}"))
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    for v in ["uncached", "dm-upd", "fa-upd", "fa-wb", "dm-upd-2lbs"] {
        let r = row(v);
        let iops: f64 = r[3].parse().unwrap();
        assert!(iops > 0.0, "{v}: {r:?}");
    }
    // The cached variants report the server's hit ratio.
    let h: f64 = row("fa-upd")[7].parse().unwrap();
    assert!((0.0..=100.0).contains(&h));
    if Command::new("nbdkit").arg("--version").output().is_ok() {
        let r = row("nbdkit-cache");
        assert!(r[3].parse::<f64>().unwrap() > 0.0, "{r:?}");
    }
}

fn in_path(t: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .any(|d| d.join(t).is_file())
    })
}

/// PostMark on ext4 through nbdfuse + loop: the HDD alone, write-hdd-upd
/// and write-back, each on a fresh filesystem that checks clean afterwards.
#[test]
fn tiny_postmark_on_ext4_through_the_live_cache() {
    let tools = [
        "postmark",
        "nbdfuse",
        "losetup",
        "fusermount3",
        "mkfs.ext4",
        "e2fsck",
    ];
    if let Some(t) = tools.iter().find(|t| !in_path(t)) {
        eprintln!("SKIPPED: {t} is not installed (scripts/setup.sh installs it)");
        return;
    }
    if !Path::new("/dev/fuse").exists() || !Path::new("/dev/loop-control").exists() {
        eprintln!("SKIPPED: /dev/fuse or /dev/loop-control is missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `--no-sim` runs the live part alone: no traces folder is needed.
    let traces = dir.path().join("no-traces-here");
    let out = dir.path().join("out");
    let o = azor(&[
        "--quick",
        "--no-sim",
        "--live-seconds",
        "0",
        "--live-data",
        "48MiB",
        "--postmark-files",
        "10",
        "--postmark-transactions",
        "20",
        "--jobs",
        "2",
        "--traces",
        traces.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let md = std::fs::read_to_string(out.join("azor.md")).unwrap();
    assert!(
        md.contains("## Live part: applications on ext4 and XFS"),
        "{md}\n{err}"
    );
    assert!(md.contains("simulated studies skipped (--no-sim)"), "{md}");
    assert!(
        !out.join("azor-assoc.csv").exists(),
        "--no-sim wrote a study"
    );
    // The thesis's PostMark claim has a row with our figure beside it.
    let claim = md
        .lines()
        .find(|l| l.starts_with("| PostMark: SSD caching up to 1.72x |"))
        .unwrap_or_else(|| panic!("no PostMark claim row:\n{md}"));
    assert!(claim.contains("ext4: "), "{claim}");
    let rows = csv(&out.join("azor-apps.csv"));
    for v in ["uncached", "fa-upd", "fa-wb"] {
        let r = rows
            .iter()
            .find(|r| r["variant"] == v && r["fs"] == "ext4" && r["app"] == "postmark")
            .unwrap_or_else(|| panic!("no {v} row: {rows:?}\n{err}"));
        assert!(f(r, "rate") > 0.0, "{v}: {r:?}");
        assert_eq!(
            r["fsck_clean"], "true",
            "{v}: the filesystem must check clean"
        );
        if v != "uncached" {
            let h = f(r, "hit_ratio");
            assert!((0.0..=1.0).contains(&h), "{v}: {h}");
        }
        let line = md
            .lines()
            .find(|l| l.starts_with(&format!("| ext4 | postmark | {v} |")))
            .unwrap_or_else(|| panic!("no {v} table row:\n{md}"));
        assert!(line.contains("| clean |"), "{line}");
    }
}
