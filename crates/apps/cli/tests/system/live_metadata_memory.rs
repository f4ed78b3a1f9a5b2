//! Metadata memory at scale: `format` refuses a cache whose metadata would
//! not fit the machine's allowance, in one line and leaving nothing behind,
//! and a large sparse cache formats, serves and restarts after a kill -9
//! with its peak memory under the stated bound plus the fixed overhead.

use crate::common;

use common::{init_backing, NbdClient, ServeProc};
use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run tiercache")
}

/// The refusal: non-zero, one line on stderr naming the need and a fix.
fn assert_refused(out: &Output, fix: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "format succeeded: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("tiercache: error: "), "{err}");
    assert!(err.contains("of metadata memory, more than the"), "{err}");
    assert!(err.contains(fix), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    err
}

#[test]
fn format_of_a_cache_whose_metadata_does_not_fit_is_refused_leaving_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let backing = d.join("backing.img");
    init_backing(&backing, 256);
    let cache = d.join("cache.img");
    let args = |size: &'static str| {
        vec![
            "format".to_string(),
            "--cache".into(),
            cache.display().to_string(),
            "--backing".into(),
            backing.display().to_string(),
            "--size".into(),
            size.into(),
        ]
    };
    let a = args("1024TiB");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    // On this machine's own allowance: 1 PiB of 4 KiB lines needs terabytes.
    let out = run(&a, &[]);
    let err = assert_refused(&out, "fits");
    assert!(err.contains("a 1 PiB cache with 4 KiB lines ("), "{err}");
    assert!(!cache.exists(), "no file left behind");
    // With a stated allowance the smallest line size that fits is named.
    let a = args("16TiB");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let limit = (12u64 << 30).to_string();
    let out = run(&a, &[("TIERCACHE_METADATA_MEMORY_LIMIT", &limit)]);
    let err = assert_refused(&out, "--line-size 256KiB would fit");
    assert!(err.contains("more than the 12 GiB allowed"), "{err}");
    assert!(!cache.exists(), "no file left behind");

    // The three-level cache: its SSDs too.
    let (ro, wo) = (d.join("ro.img"), d.join("wo.img"));
    let out = run(
        &[
            "format",
            "--mode",
            "tica",
            "--ro-ssd",
            ro.to_str().unwrap(),
            "--wo-ssd",
            wo.to_str().unwrap(),
            "--backing",
            backing.to_str().unwrap(),
            "--dram-size",
            "64MiB",
            "--size",
            "64TiB",
        ],
        &[],
    );
    let err = assert_refused(&out, "would fit");
    assert!(err.contains("three-level cache with 64 TiB SSDs"), "{err}");
    assert!(!ro.exists() && !wo.exists(), "no file left behind");
}

/// Peak resident memory (VmHWM) of a process, in bytes.
fn vm_hwm(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: u64 = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kib * 1024
}

fn slots_of(cache: &Path) -> u64 {
    let f = std::fs::File::open(cache).unwrap();
    tiercache_store::Superblock::read(&f)
        .unwrap()
        .newest
        .layout
        .slots as u64
}

#[test]
fn a_sparse_1tib_cache_serves_and_restarts_within_its_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let backing = d.join("backing.img");
    init_backing(&backing, 64 << 8); // 64 MiB of 4 KiB blocks
    let cache = d.join("cache.img");
    let out = run(
        &[
            "format",
            "--cache",
            cache.to_str().unwrap(),
            "--backing",
            backing.to_str().unwrap(),
            "--size",
            "1TiB",
            "--line-size",
            "1MiB",
            "--sub-block",
            "1MiB",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let used = std::fs::metadata(&cache).unwrap();
    assert_eq!(used.len(), 1 << 40);
    assert!(
        std::os::unix::fs::MetadataExt::blocks(&used) * 512 < 1 << 30,
        "format wrote no more than its metadata"
    );
    let cfg = tiercache_azor_policy::CacheConfig {
        line_bytes: 1 << 20,
        sub_block_bytes: 1 << 20,
        ..Default::default()
    };
    let slots = slots_of(&cache);
    let bound = tiercache_azor_live::memory::metadata_bytes(&cfg, slots)
        + tiercache_azor_live::memory::FIXED_OVERHEAD;
    let (sock, log) = (d.join("nbd.sock"), d.join("serve.log"));
    let mut s = ServeProc::start(&cache, &sock, &log);
    let start_peak = vm_hwm(s.child.id());
    // Some data through the cache: 32 MiB of writes, flushed.
    let mut c = NbdClient::connect(&sock).unwrap();
    let block = vec![0x5au8; 1 << 20];
    for i in 0..32u64 {
        c.write(i << 20, &block, false).unwrap().unwrap();
    }
    c.flush().unwrap().unwrap();
    drop(c);
    let served_peak = vm_hwm(s.child.id());
    s.kill9();
    let mut s = ServeProc::start(&cache, &sock, &log);
    let mut c = NbdClient::connect(&sock).unwrap();
    assert_eq!(
        c.read(5 << 20, 1 << 20).unwrap().unwrap(),
        block,
        "data survived"
    );
    drop(c);
    let restart_peak = vm_hwm(s.child.id());
    s.kill9();
    for (what, peak) in [
        ("start", start_peak),
        ("serving", served_peak),
        ("restart", restart_peak),
    ] {
        assert!(
            peak <= bound,
            "{what}: peak RSS {peak} above the bound {bound} ({slots} slots)"
        );
    }
}
