//! `tiercache format` records the policy options in the cache's superblock,
//! and opening the cache brings them back: the live cache runs the policy
//! the operator chose (here Azor's 2LBS levels, switchable on their own).

use std::path::Path;
use std::process::{Command, Output};

fn tiercache(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .output()
        .expect("run tiercache")
}

fn format(dir: &Path, name: &str, extra: &[&str]) -> Output {
    let backing = dir.join("backing.img");
    if !backing.exists() {
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
    }
    let cache = dir.join(name);
    let mut args = vec![
        "format",
        "--cache",
        cache.to_str().unwrap(),
        "--backing",
        backing.to_str().unwrap(),
        "--size",
        "8MiB",
    ];
    args.extend_from_slice(extra);
    tiercache(&args)
}

fn levels_of(dir: &Path, name: &str) -> (bool, bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Opening starts tasks on the runtime: do it inside one.
    rt.block_on(async {
        let opened = tiercache_azor_live::open_cache(&tiercache_azor_live::OpenOptions {
            cache: dir.join(name),
            backing: None,
            emulate_hdd: false,
            direct: false,
        })
        .expect("open the formatted cache");
        let a = &opened.config.admission;
        (a.twolbs_metadata, a.twolbs_frequency)
    })
}

#[test]
fn format_records_2lbs_levels_and_refuses_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // Default: both levels.
    let out = format(d, "both.img", &["--admission", "2lbs"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(levels_of(d, "both.img"), (true, true));

    // Each level on its own.
    let out = format(
        d,
        "freq.img",
        &["--admission", "2lbs", "--2lbs-levels", "frequency"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(levels_of(d, "freq.img"), (false, true));
    let out = format(
        d,
        "meta.img",
        &["--admission", "2lbs", "--2lbs-levels", "metadata"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(levels_of(d, "meta.img"), (true, false));

    // An unknown level is refused, naming what is allowed, and writes nothing.
    let out = format(
        d,
        "bad.img",
        &["--admission", "2lbs", "--2lbs-levels", "inodes"],
    );
    assert!(!out.status.success(), "an unknown 2LBS level was accepted");
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("inodes") && msg.contains("metadata, frequency, both"),
        "the refusal should name the bad value and the allowed ones: {msg}"
    );
    assert!(
        !d.join("bad.img").exists(),
        "a refused format created a file"
    );
}

#[test]
fn log_structured_layout_refuses_in_place_policy_options() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = format(
        d,
        "ls.img",
        &[
            "--layout",
            "log-structured",
            "--eviction",
            "arc",
            "--assoc",
            "8-way",
        ],
    );
    assert!(
        !out.status.success(),
        "in-place options were accepted and ignored"
    );
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("--eviction") && msg.contains("--assoc") && msg.contains("--segment-size"),
        "the refusal should name the options and what the layout takes: {msg}"
    );
    assert!(
        !d.join("ls.img").exists(),
        "a refused format created a file"
    );
    // Its own options are accepted.
    let out = format(
        d,
        "ls.img",
        &[
            "--layout",
            "log-structured",
            "--write-policy",
            "write-through",
            "--segment-size",
            "256KiB",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new cache is marked as shut down cleanly: its first `serve` is a warm,
/// clean start (a write-back cache would otherwise start as after a crash).
#[test]
fn format_leaves_a_cleanly_shut_down_cache() {
    let dir = tempfile::tempdir().unwrap();
    let out = format(dir.path(), "cache.img", &["--write-policy", "write-back"]);
    assert!(out.status.success(), "{out:?}");
    let cache = dir.path().join("cache.img");
    let out = tiercache(&["check", "--cache", cache.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("state: clean shutdown"),
        "check after format:\n{text}"
    );
}

/// `serve --threads` takes 1 to 1024 and says so otherwise (no panic, no start).
#[test]
fn serve_refuses_zero_threads() {
    let dir = tempfile::tempdir().unwrap();
    assert!(format(dir.path(), "cache.img", &[]).status.success());
    let cache = dir.path().join("cache.img");
    let out = tiercache(&[
        "serve",
        "--cache",
        cache.to_str().unwrap(),
        "--listen",
        &format!("unix:{}", dir.path().join("s.sock").display()),
        "--threads",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--threads"), "{err}");
}
