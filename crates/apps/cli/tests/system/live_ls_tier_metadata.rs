//! Metadata memory of the log-structured cache and the tiered volume: a
//! device whose metadata would not fit in the machine's allowance of memory
//! is refused by `format` (one line, non-zero exit, no file left behind)
//! and by `serve`; a sparse 1 TiB device formats, serves, survives a
//! kill -9 and serves again, its server's peak RSS (VmHWM) under the
//! design's stated bound plus a fixed overhead.

use crate::common;

use common::{bin, make_block, parse_block, tiercache, NbdClient, ServeProc};
use std::path::Path;
use std::process::{Command, Output};
use tiercache_runtime::memory::LIMIT_ENV;

const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;
/// What a server holds besides its design's metadata: the binary, threads'
/// stacks, I/O buffers, the runtime (whole servers measured 11 to 170 MiB
/// at 64 GiB and 1 TiB, docs/results.md; generous).
const FIXED_OVERHEAD: u64 = 256 << 20;

fn run_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("run tiercache")
}

fn sparse(path: &Path, len: u64) {
    std::fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// The one refusal line: what is needed, that it exceeds the allowance,
/// what would fit; nothing else on stderr.
fn assert_refusal(o: &Output, fits: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "accepted: {e}");
    assert_eq!(e.trim_end().lines().count(), 1, "more than one line: {e}");
    assert!(e.starts_with("tiercache: error: "), "{e}");
    assert!(e.contains("of metadata memory, more than the"), "{e}");
    assert!(e.contains(LIMIT_ENV), "the allowance's source: {e}");
    assert!(e.contains(fits), "no {fits:?} in: {e}");
    assert!(
        !e.contains("panicked") && !e.contains("memory allocation"),
        "{e}"
    );
}

/// Peak resident memory of process `pid` in bytes (VmHWM).
fn vm_hwm(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line[6..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

/// Write blocks `blocks` (versioned contents), flush, and return them.
fn write_and_flush(sock: &Path, blocks: &[u64]) {
    let mut c = NbdClient::connect(sock).unwrap();
    for &b in blocks {
        c.write(b * 4096, &make_block(b, 1), false)
            .unwrap()
            .unwrap();
    }
    c.flush().unwrap().unwrap();
    c.disconnect();
}

fn read_back(sock: &Path, blocks: &[u64]) {
    let mut c = NbdClient::connect(sock).unwrap();
    for &b in blocks {
        let data = c.read(b * 4096, 4096).unwrap().unwrap();
        assert_eq!(parse_block(b, &data), Ok(1), "block {b} after kill -9");
    }
    c.disconnect();
}

#[test]
fn ls_format_and_serve_refuse_a_cache_whose_metadata_does_not_fit() {
    let d = tempfile::tempdir().unwrap();
    sparse(&d.path().join("backing.img"), 64 << 20);
    let limit = (64u64 << 20).to_string();
    let env = [(LIMIT_ENV, limit.as_str())];
    // 64 GiB of cache: 16.6 million slots, about 380 MiB of metadata.
    let o = run_env(
        d.path(),
        &[
            "format",
            "--layout",
            "log-structured",
            "--cache",
            "cache.img",
            "--backing",
            "backing.img",
            "--size",
            "64GiB",
        ],
        &env,
    );
    assert_refusal(&o, "format at most --size");
    assert!(
        !d.path().join("cache.img").exists(),
        "format left the cache file behind"
    );
    // An existing file keeps its size.
    sparse(&d.path().join("small.img"), 1 << 20);
    let o = run_env(
        d.path(),
        &[
            "format",
            "--layout",
            "log-structured",
            "--cache",
            "small.img",
            "--backing",
            "backing.img",
            "--size",
            "64GiB",
        ],
        &env,
    );
    assert_refusal(&o, "--size");
    assert_eq!(
        std::fs::metadata(d.path().join("small.img")).unwrap().len(),
        1 << 20
    );
    // A cache that fits here, served where it does not: one line, no abort.
    let _ = tiercache(&[
        "format",
        "--layout",
        "log-structured",
        "--cache",
        &d.path().join("cache.img").display().to_string(),
        "--backing",
        &d.path().join("backing.img").display().to_string(),
        "--size",
        "64GiB",
    ]);
    let o = run_env(
        d.path(),
        &["serve", "--cache", "cache.img", "--listen", "unix:nbd.sock"],
        &env,
    );
    assert_refusal(&o, "--size");
}

#[test]
fn tier_format_and_serve_refuse_a_volume_whose_metadata_does_not_fit() {
    let d = tempfile::tempdir().unwrap();
    sparse(&d.path().join("slow.img"), 64 * GIB);
    let limit = (64u64 << 20).to_string();
    let env = [(LIMIT_ENV, limit.as_str())];
    // 65 GiB in 4 KiB blocks: 17 million blocks, about 900 MiB of metadata;
    // in 64 KiB blocks about 56 MiB.
    let fmt = |block: &str, env: &[(&str, &str)]| {
        run_env(
            d.path(),
            &[
                "format",
                "--mode",
                "tier",
                "--tiers",
                "fast.img,slow.img",
                "--size",
                "1GiB",
                "--tier-block",
                block,
            ],
            env,
        )
    };
    let o = fmt("4KiB", &env);
    assert_refusal(&o, "--tier-block 64KiB or larger");
    assert!(
        !d.path().join("fast.img").exists(),
        "format left the fast tier behind"
    );
    // Formatted without the limit, served with it.
    let o = fmt("4KiB", &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run_env(
        d.path(),
        &["serve", "--cache", "fast.img", "--listen", "unix:nbd.sock"],
        &env,
    );
    assert_refusal(&o, "--tier-block 64KiB or larger");
    // The block size it names fits.
    std::fs::remove_file(d.path().join("fast.img")).unwrap();
    let o = fmt("64KiB", &env);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Format, serve, write, kill -9, serve again: the data is there and the
/// server's peak RSS stayed under `bound` plus the fixed overhead.
fn restart_within_bound(dir: &Path, cache: &Path, bound: u64, what: &str) {
    let blocks = [0u64, 1, 77, 4096, 100_000];
    let mut s = ServeProc::start(cache, &dir.join("a.sock"), &dir.join("serve.log"));
    write_and_flush(&s.sock, &blocks);
    let hwm = vm_hwm(s.child.id());
    s.kill9();
    let s2 = ServeProc::start(cache, &dir.join("b.sock"), &dir.join("serve.log"));
    read_back(&s2.sock, &blocks);
    let hwm2 = vm_hwm(s2.child.id());
    eprintln!(
        "{what}: peak RSS {} MiB, after kill -9 {} MiB; bound {} MiB + {} MiB",
        hwm >> 20,
        hwm2 >> 20,
        bound >> 20,
        FIXED_OVERHEAD >> 20
    );
    for h in [hwm, hwm2] {
        assert!(
            h < bound + FIXED_OVERHEAD,
            "{what}: peak RSS {h} over {bound} + {FIXED_OVERHEAD}"
        );
    }
}

#[test]
fn ls_sparse_1tib_cache_restarts_after_kill9_within_its_bound() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache.img");
    let backing = d.path().join("backing.img");
    sparse(&backing, 4 * GIB);
    let _ = tiercache(&[
        "format",
        "--layout",
        "log-structured",
        "--cache",
        &cache.display().to_string(),
        "--backing",
        &backing.display().to_string(),
        "--size",
        "1TiB",
    ]);
    let dev = tiercache_io::FileDev::open(&cache, Default::default()).unwrap();
    let sb = tiercache_flashtier_live::Superblock::read(&dev).unwrap();
    let m = tiercache_flashtier_live::memory::metadata_memory(&sb).unwrap();
    assert!(m.slots > TIB / 4096 * 98 / 100, "{m:?}");
    restart_within_bound(d.path(), &cache, m.total(), "log-structured 1 TiB");
}

#[test]
fn tier_sparse_1tib_volume_restarts_after_kill9_within_its_bound() {
    let d = tempfile::tempdir().unwrap();
    let fast = d.path().join("fast.img");
    let slow = d.path().join("slow.img");
    sparse(&slow, TIB - 64 * GIB);
    let tiers = format!("{},{}", fast.display(), slow.display());
    let _ = tiercache(&[
        "format",
        "--mode",
        "tier",
        "--tiers",
        &tiers,
        "--size",
        "64GiB",
        "--tier-block",
        "64KiB",
    ]);
    let sb = tiercache_oodt_live::Superblock::read(&fast).unwrap();
    assert!(sb.volume_bytes > TIB * 99 / 100, "{}", sb.volume_bytes);
    let m = tiercache_oodt_live::memory::metadata_memory(
        &sb,
        tiercache_oodt_policy::policy::PolicyKind::Oodt,
    );
    restart_within_bound(d.path(), &fast, m.total(), "tiered volume 1 TiB");
}
