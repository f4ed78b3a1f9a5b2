//! What a new user reported: a closed pipe, full and read-only file
//! systems, devices `serve` refuses, sizes and warnings that differed
//! between designs, URIs with spaces. One test each (each failed before
//! its fix).

use crate::common;

use common::*;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run tiercache")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Run `tiercache args` with stdout a pipe whose reader is already gone;
/// assert it ends as a Unix tool does (killed by SIGPIPE, or exit 0 or 141)
/// and says nothing.
fn with_closed_stdout(args: &[&str]) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(bin())
        .args(args)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run tiercache");
    let st = out.status;
    assert!(
        st.signal() == Some(libc_sigpipe()) || matches!(st.code(), Some(0 | 141)),
        "tiercache {args:?} ended with {st}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "tiercache {args:?} said something on a closed pipe"
    );
}

fn libc_sigpipe() -> i32 {
    13
}

/// An MSR Cambridge trace of `n` requests.
fn msr(dir: &Path, n: u64) -> PathBuf {
    let p = dir.join("small.csv");
    let mut t = String::new();
    for i in 0..n {
        let op = if i % 3 == 0 { "Write" } else { "Read" };
        t.push_str(&format!(
            "{},hm,0,{op},{},4096,100\n",
            128166372000000000u64 + i * 10_000,
            (i * 7 % 50) * 4096
        ));
    }
    std::fs::write(&p, t).unwrap();
    p
}

#[test]
fn a_closed_pipe_ends_every_command_quietly() {
    let d = tempfile::tempdir().unwrap();
    with_closed_stdout(&["completions", "bash"]);
    let trace = msr(d.path(), 400);
    with_closed_stdout(&["trace", "stats", s(&trace)]);
    let (backing, cache) = (d.path().join("backing.img"), d.path().join("cache.img"));
    init_backing(&backing, 256);
    format_cache(&cache, &backing, "8MiB", &[]);
    let srv = ServeProc::start(&cache, &d.path().join("s.sock"), &d.path().join("log"));
    with_closed_stdout(&["stats", "--cache", s(&cache)]);
    with_closed_stdout(&["stats", "--json", "--cache", s(&cache)]);
    // The server never minds: clients that vanish are its daily bread.
    assert_eq!(srv.stats()["design"], "azor");
}

/// A temporary tmpfs of `size` mounted at `mnt` (root only; `None` with a
/// message otherwise), unmounted on drop (then its directory goes).
struct Tmpfs {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let d = tempfile::tempdir().unwrap();
        let mnt = d.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mnt)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED: cannot mount a tmpfs (needs root)");
            return None;
        }
        Some(Tmpfs { mnt, _dir: d })
    }

    fn read_only(&self) {
        let st = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.mnt)
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

#[test]
fn format_warns_when_a_new_file_exceeds_the_free_space() {
    let Some(fs) = Tmpfs::mount("8m") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let backing = d.path().join("backing.img");
    init_backing(&backing, 16384); // 64 MiB
    let cache = fs.mnt.join("cache.img");
    let out = run(&[
        "format",
        "--cache",
        s(&cache),
        "--backing",
        s(&backing),
        "--size",
        "32MiB",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("free")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].starts_with("tiercache: warning: ") && warnings[0].contains("32 MiB"),
        "{err}"
    );
    // A file that fits: no such warning.
    let small = d.path().join("small.img");
    let out = run(&[
        "format",
        "--cache",
        s(&small),
        "--backing",
        s(&backing),
        "--size",
        "8MiB",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("free"), "{err}");
}

/// `format` refuses what `serve` would refuse, in one line, and leaves no
/// cache file behind.
fn refused(backing: &Path, dir: &Path, expect: &str) {
    let cache = dir.join("new-cache.img");
    let out = run(&[
        "format",
        "--cache",
        s(&cache),
        "--backing",
        s(backing),
        "--size",
        "8MiB",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "format accepted {}",
        backing.display()
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("tiercache: error: ") && err.contains(expect),
        "{err}"
    );
    assert!(!cache.exists(), "format left {} behind", cache.display());
}

#[test]
fn format_refuses_the_devices_serve_refuses() {
    let d = tempfile::tempdir().unwrap();
    refused(
        Path::new("/dev/null"),
        d.path(),
        "neither a regular file nor a block device",
    );
    let empty = d.path().join("empty.img");
    std::fs::write(&empty, b"").unwrap();
    refused(&empty, d.path(), "empty");
    // The tiered volume's slow tier too.
    let fast = d.path().join("fast.img");
    let out = run(&[
        "format",
        "--mode",
        "tier",
        "--tiers",
        &format!("{},/dev/null", s(&fast)),
        "--size",
        "8MiB",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("slow tier /dev/null"), "{err}");
    assert!(!fast.exists());
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let ro = fs.mnt.join("backing.img");
    init_backing(&ro, 256);
    fs.read_only();
    refused(&ro, d.path(), "Read-only file system");
}

#[test]
fn every_design_warns_of_a_cache_larger_than_its_backing() {
    let d = tempfile::tempdir().unwrap();
    let p = |f: &str| d.path().join(f).to_str().unwrap().to_string();
    init_backing(&d.path().join("backing.img"), 256); // 1 MiB
    let runs: [Vec<String>; 4] = [
        vec![
            "--cache",
            &p("c1.img"),
            "--backing",
            &p("backing.img"),
            "--size",
            "16MiB",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
        [
            "--cache",
            &p("c2.img"),
            "--backing",
            &p("backing.img"),
            "--size",
            "16MiB",
            "--layout",
            "log-structured",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
        [
            "--mode",
            "tica",
            "--ro-ssd",
            &p("ro.img"),
            "--wo-ssd",
            &p("wo.img"),
            "--backing",
            &p("backing.img"),
            "--size",
            "16MiB",
            "--dram-size",
            "1MiB",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
        [
            "--mode",
            "tier",
            "--tiers",
            &format!("{},{}", p("fast.img"), p("backing.img")),
            "--capacity",
            "slow",
            "--size",
            "16MiB",
            "--tier-block",
            "64KiB",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
    ];
    for args in runs {
        let mut all = vec!["format"];
        all.extend(args.iter().map(String::as_str));
        let out = run(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{all:?}: {err}");
        let w: Vec<&str> = err.lines().filter(|l| l.contains("never used")).collect();
        assert_eq!(w.len(), 1, "{all:?}: {err}");
        assert!(w[0].starts_with("tiercache: warning: the "), "{}", w[0]);
    }
}

#[test]
fn negative_and_huge_sizes_say_what_is_wrong() {
    let d = tempfile::tempdir().unwrap();
    let backing = d.path().join("backing.img");
    init_backing(&backing, 256);
    let cache = d.path().join("cache.img");
    for (size, expect) in [
        ("-1", "must be positive"),
        ("-1GiB", "must be positive"),
        ("16EiB", "too large"),
    ] {
        let out = run(&[
            "format",
            "--cache",
            s(&cache),
            "--backing",
            s(&backing),
            "--size",
            size,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--size {size} accepted");
        assert!(
            err.contains(expect) && !err.contains("unexpected argument"),
            "--size {size}: {err}"
        );
        assert!(!cache.exists());
    }
    // Petabytes are sizes like terabytes: parsed, then the missing server
    // is the error.
    for size in ["1PiB", "2PB", "1TiB"] {
        let out = run(&["set", "--cache", s(&cache), "--seq-cutoff", size]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(!err.contains("invalid size"), "{size}: {err}");
    }
    let out = run(&["set", "--cache", s(&cache), "--seq-cutoff", "1XiB"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid size"));
}

#[test]
fn the_printed_uri_reaches_a_socket_with_a_space_in_its_path() {
    if !Command::new("sh")
        .args(["-c", "command -v nbdinfo"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("SKIPPED: nbdinfo is not installed");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("my disks");
    std::fs::create_dir(&dir).unwrap();
    let (backing, cache) = (dir.join("backing.img"), dir.join("cache.img"));
    init_backing(&backing, 256);
    format_cache(&cache, &backing, "8MiB", &[]);
    let log = d.path().join("serve.log");
    let _srv = ServeProc::start(&cache, &dir.join("nbd sock"), &log);
    let printed = std::fs::read_to_string(&log).unwrap();
    let uri = printed
        .split_whitespace()
        .find(|w| w.starts_with("nbd+unix://"))
        .unwrap_or_else(|| panic!("no URI printed: {printed}"));
    assert!(uri.contains("my%20disks/nbd%20sock"), "{uri}");
    let out = Command::new("nbdinfo")
        .arg("--size")
        .arg(uri)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "nbdinfo {uri}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1048576");
}
