//! First contact: the defects a new user met, one test each (each failed
//! before its fix).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run tiercache")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn msr(dir: &Path) -> PathBuf {
    let p = dir.join("small.csv");
    let mut s = String::new();
    for i in 0..400u64 {
        let op = if i % 3 == 0 { "Write" } else { "Read" };
        s.push_str(&format!(
            "{},hm,0,{op},{},4096,100\n",
            128166372000000000u64 + i * 10_000,
            (i * 7 % 50) * 4096
        ));
    }
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn classify_default_offset_is_accepted() {
    let d = tempfile::tempdir().unwrap();
    let img = d.path().join("zeros.img");
    std::fs::write(&img, vec![0u8; 1 << 16]).unwrap();
    for extra in [&[][..], &["--offset", "0B"][..], &["--offset", "0"][..]] {
        let mut args = vec!["classify", img.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = run_in(d.path(), &args);
        let e = stderr(&o);
        assert!(!e.contains("invalid size"), "{args:?}: {e}");
        assert!(e.contains("no ext4 or XFS superblock"), "{args:?}: {e}");
    }
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg({
            let p = d.path().join("fs.img");
            std::fs::File::create(&p)
                .unwrap()
                .set_len(16 << 20)
                .unwrap();
            p
        })
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        let o = run_in(d.path(), &["classify", "fs.img", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["filesystem"], "ext4");
        // Indented like every other --json.
        assert!(String::from_utf8_lossy(&o.stdout).contains("\n  \""));
    } else {
        eprintln!("mkfs.ext4 absent: classify of a real image not tested");
    }
}

fn said_once(e: &str, cause: &str) {
    assert_eq!(e.matches(cause).count(), 1, "cause said {e}");
}

#[test]
fn errors_say_their_cause_once() {
    let d = tempfile::tempdir().unwrap();
    let t = msr(d.path());
    let o = run_in(
        d.path(),
        &[
            "trace",
            "convert",
            t.to_str().unwrap(),
            "-o",
            "/nonexistent/dir/x.tct",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    said_once(&stderr(&o), "No such file or directory");

    let bad = d.path().join("bad.lis");
    std::fs::write(&bad, "1 2 3 4\nxx 1 2\n").unwrap();
    let b = bad.to_str().unwrap();
    for args in [
        &[
            "sim",
            "--trace",
            b,
            "--format",
            "arc-lis",
            "--cache-size",
            "10lines",
            "--no-timing",
        ][..],
        &["trace", "stats", "--format", "arc-lis", b][..],
    ] {
        let o = run_in(d.path(), args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{e}");
        said_once(&e, "expected 4 space-separated fields");
        assert!(e.contains(&format!("{b}:2: ")), "FILE:LINE: first: {e}");
    }
}

#[test]
fn detection_refuses_prose_and_stats_names_the_format() {
    let d = tempfile::tempdir().unwrap();
    let readme =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../README.md")).unwrap();
    let r = d.path().join("r.txt");
    std::fs::write(&r, &readme[..16400.min(readme.len())]).unwrap();
    let o = run_in(d.path(), &["trace", "stats", "r.txt"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("cannot detect") && e.contains("--format") && e.contains("msr"));

    let t = msr(d.path());
    let o = run_in(d.path(), &["trace", "stats", t.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("format                       msr"));
    let o = run_in(d.path(), &["trace", "stats", t.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "msr");
    assert_eq!(v["trace"], t.to_str().unwrap());
}

#[test]
fn reproduce_refuses_a_missing_traces_folder() {
    let d = tempfile::tempdir().unwrap();
    for paper in ["tica", "flashtier"] {
        let o = run_in(d.path(), &["reproduce", paper]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{paper}: {e}");
        assert!(e.contains("traces folder") && e.contains("--traces"), "{e}");
        assert!(o.stdout.is_empty(), "no empty tables");
        let o = run_in(d.path(), &["reproduce", paper, "--traces", "."]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{paper}: {e}");
        assert!(e.contains("none of the expected traces"), "{e}");
    }
}

#[test]
fn sweep_writes_files_only_with_out() {
    let d = tempfile::tempdir().unwrap();
    let t = msr(d.path());
    let o = run_in(
        d.path(),
        &[
            "sim",
            "--trace",
            t.to_str().unwrap(),
            "--cache-size",
            "8lines,16lines",
            "--json",
            "--no-timing",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let files: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files, ["small.csv"], "nothing written without --out");
    let help = run_in(d.path(), &["sim", "--help"]);
    let h = String::from_utf8_lossy(&help.stdout);
    assert!(!h.contains("[default: tiercache-sweep]"), "{h}");
}

#[test]
fn queue_depth_with_open_replay_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let t = msr(d.path());
    let o = run_in(
        d.path(),
        &[
            "sim",
            "--trace",
            t.to_str().unwrap(),
            "--cache-size",
            "8lines",
            "--replay",
            "open",
            "--queue-depth",
            "8",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("--queue-depth 8 applies to closed-loop replay"),
        "{e}"
    );
}

#[test]
fn tica_mode_prints_microseconds_and_percentages() {
    let d = tempfile::tempdir().unwrap();
    let t = msr(d.path());
    let o = run_in(
        d.path(),
        &[
            "sim",
            "--trace",
            t.to_str().unwrap(),
            "--mode",
            "tica",
            "--cache-size",
            "20%",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains(" µs") && !out.contains(" us,"), "{out}");
    assert!(out.contains(" %"), "{out}");
}

#[test]
fn log_lines_carry_no_ansi_escapes_on_a_pipe() {
    let d = tempfile::tempdir().unwrap();
    // One of the expected traces present: the others are warned about.
    std::fs::create_dir_all(d.path().join("samples")).unwrap();
    std::fs::copy(
        msr(d.path()),
        d.path().join("samples/msr-cambridge1-sample.csv"),
    )
    .unwrap();
    let o = run_in(d.path(), &["reproduce", "tica", "--traces", ".", "--json"]);
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("skipping"), "{e}");
    assert!(!e.contains('\u{1b}'), "{e:?}");
}
