//! The live server driven by real NBD clients: nbdinfo, nbdcopy (multi-conn),
//! qemu-img, qemu-io, fio (crc32c verify), and nbdfuse + loop device + ext4.
//! Every policy option of the core is exercised live with a cache much smaller
//! than the data. The references are independent: data generated here and
//! compared byte for byte, fio's own checksums, fsck, sha256sum.
//!
//! Tests skip with a `SKIPPED:` message when a tool (or FUSE / loop devices) is
//! missing; `scripts/setup.sh` installs the tools.

use crate::clients_util;

use clients_util::{
    assert_same_file, bin, fio, output, pattern, poll_for, run, sparse_file, wait_for, wait_until,
    write_file, Server, Setup, READY_TIMEOUT,
};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MIB: u64 = 1 << 20;

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("bad JSON ({e}): {s}"))
}

#[test]
fn nbdinfo_reports_size_and_flags() {
    require_tools!("nbdinfo");
    let s = Setup::new(48 * MIB, "8MiB", &[]);
    let srv = s.serve(&[]);
    for uri in [srv.uri(), srv.uri_named("tiercache")] {
        let v = json(&run(Command::new("nbdinfo").args(["--json", &uri])));
        let e = &v["exports"][0];
        assert_eq!(e["export-size"], 48 * MIB, "{e}");
        assert_eq!(v["protocol"], "newstyle-fixed");
        assert_eq!(v["structured"], true);
        for flag in [
            "can_flush",
            "can_fua",
            "can_multi_conn",
            "can_trim",
            "can_zero",
            "can_cache",
        ] {
            assert_eq!(e[flag], true, "{flag} not advertised: {e}");
        }
        assert_eq!(e["is_read_only"], false);
        assert_eq!(e["block_size_minimum"], 1);
        assert_eq!(e["block_size_preferred"], 4096);
    }
    // --read-only is advertised as such.
    drop(srv);
    let srv = s.serve(&["--read-only"]);
    let v = json(&run(Command::new("nbdinfo").args(["--json", &srv.uri()])));
    assert_eq!(v["exports"][0]["is_read_only"], true);
    // An unknown export name is refused.
    let out = output(Command::new("nbdinfo").arg(srv.uri_named("no-such-export")));
    assert!(!out.status.success(), "unknown export name was accepted");
}

#[test]
fn nbdcopy_both_directions_with_four_connections() {
    require_tools!("nbdcopy");
    let s = Setup::new(64 * MIB, "8MiB", &[]);
    let reference = s.path("reference.img");
    write_file(&reference, &pattern(64 * MIB as usize, 1));
    let mut srv = s.serve(&[]);
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(&reference)
        .arg(srv.uri()));
    let back = s.path("copied-back.img");
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(srv.uri())
        .arg(&back));
    assert_same_file(&reference, &back);
    // Again after a clean restart (warm cache, data from cache and backing).
    srv.stop();
    let srv = s.serve(&[]);
    fs::remove_file(&back).unwrap();
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(srv.uri())
        .arg(&back));
    assert_same_file(&reference, &back);
}

#[test]
fn qemu_img_info_compare_convert() {
    require_tools!("qemu-img");
    let s = Setup::new(32 * MIB, "8MiB", &["--line-size", "64KiB"]);
    let reference = s.path("reference.raw");
    write_file(&reference, &pattern(32 * MIB as usize, 2));
    let srv = s.serve(&[]);
    let uri = srv.uri();
    let info = json(&run(Command::new("qemu-img").args([
        "info",
        "--output=json",
        &uri,
    ])));
    assert_eq!(info["virtual-size"], 32 * MIB, "{info}");
    // Fresh export is all zeros, so it differs from the reference.
    let cmp = output(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&reference)
            .arg(&uri),
    );
    assert_eq!(
        cmp.status.code(),
        Some(1),
        "compare of different images must exit 1"
    );
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&reference)
        .arg(&uri));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&reference)
        .arg(&uri));
    let out = s.path("out.raw");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&uri)
        .arg(&out));
    assert_same_file(&reference, &out);
    // And into a qcow2 image, compared back against the export.
    let q = s.path("out.qcow2");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(&uri)
        .arg(&q));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "qcow2", "-F", "raw"])
        .arg(&q)
        .arg(&uri));
}

/// 512-byte reads through a cache of 4 KiB lines: a read miss reads and
/// fills its whole line, so the other sectors of the line then hit, and
/// every read returns the backing file's bytes.
#[test]
fn small_reads_fill_the_whole_line_and_then_hit() {
    require_tools!("qemu-io");
    let size = 4 * MIB;
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    // 4 KiB chunk k holds the byte k % 251 + 1 (so each chunk is checkable with -P).
    let mut data = vec![0u8; size as usize];
    for (k, chunk) in data.chunks_mut(4096).enumerate() {
        chunk.fill((k % 251 + 1) as u8);
    }
    write_file(&backing, &data);
    let s = Setup::with_backing(dir, backing, "8MiB", &["--line-size", "4KiB"]);
    let srv = s.serve(&[]);
    let n = |v: &serde_json::Value, k: &str| {
        v[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {v}"))
    };
    let io = |cmds: &[String]| {
        let mut c = Command::new("qemu-io");
        c.args(["-f", "raw"]);
        for cmd in cmds {
            c.arg("-c").arg(cmd);
        }
        let out = output(c.arg(srv.uri()));
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !text.contains("fail") && !text.contains("rror"),
            "qemu-io {cmds:?}: {text}"
        );
    };
    let before = s.stats();
    // Lines 5, 6 and 7: one 512-byte read inside each (sector 1, 3, 7).
    let lines = [(5u64, 1u64), (6, 3), (7, 7)];
    io(&lines
        .iter()
        .map(|&(l, sec)| format!("read -P {:#x} {} 512", l % 251 + 1, l * 4096 + sec * 512))
        .collect::<Vec<_>>());
    let st = s.stats();
    assert_eq!(n(&st, "fills") - n(&before, "fills"), 3, "{st}");
    assert_eq!(n(&st, "read_misses") - n(&before, "read_misses"), 3, "{st}");
    assert_eq!(n(&st, "occupied_lines"), 3, "{st}");
    // Every other sector of those lines now hits, with the line's bytes.
    let mut again = vec![];
    for &(l, sec) in &lines {
        for k in (0..8).filter(|&k| k != sec) {
            again.push(format!(
                "read -P {:#x} {} 512",
                l % 251 + 1,
                l * 4096 + k * 512
            ));
        }
    }
    io(&again);
    let after = s.stats();
    assert_eq!(n(&after, "read_hits") - n(&st, "read_hits"), 21, "{after}");
    assert_eq!(n(&after, "read_misses"), n(&st, "read_misses"), "{after}");
    assert_eq!(n(&after, "fills"), n(&st, "fills"), "{after}");
}

/// qemu-io commands at unaligned offsets and odd lengths, mirrored into a
/// reference buffer; reads verify the pattern and the detached backing file
/// must equal the reference.
#[test]
fn qemu_io_unaligned_pattern_writes_and_reads() {
    require_tools!("qemu-io");
    let size = 16 * MIB;
    // 64 KiB lines and a cache of a few lines: sub-line writes, evictions and cleaning.
    let s = Setup::new(size, "6MiB", &["--line-size", "64KiB", "--assoc", "8-way"]);
    let mut model = vec![0u8; size as usize];
    let writes: &[(u64, u64, u8)] = &[
        (0, 65536, 0xab),
        (4097, 1000, 0xcd),
        (511, 3, 0x11),
        (65535, 2, 0x22),
        (1 << 20, 300_001, 0x33),
        (3 * MIB + 123, 2 * MIB + 7, 0x44),
        (size - 5, 5, 0x55),
        (7 * MIB + 4096, 4096, 0x66),
        (7 * MIB + 4095, 2, 0x77),
        (9 * MIB + 1, 65536 * 3, 0x88),
    ];
    let srv = s.serve(&[]);
    let mut args: Vec<String> = vec![];
    for &(off, len, p) in writes {
        args.push("-c".into());
        args.push(format!("write -P {p:#x} {off} {len}"));
        model[off as usize..(off + len) as usize].fill(p);
    }
    // Zeroes and a trim in the middle of written data.
    args.extend(["-c".into(), format!("write -z {} 777", 3 * MIB + 1000)]);
    model[(3 * MIB + 1000) as usize..(3 * MIB + 1777) as usize].fill(0);
    args.extend(["-c".into(), "flush".into()]);
    let run_io = |args: &[String]| {
        let out = output(
            Command::new("qemu-io")
                .args(["-f", "raw"])
                .args(args)
                .arg(srv.uri()),
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !text.contains("failed") && !text.contains("error"),
            "qemu-io {args:?}: {text}"
        );
        text
    };
    run_io(&args);
    // Read back every run of equal bytes of the model (this includes the
    // zero gaps and unaligned edges), in one qemu-io session.
    let mut reads = vec![];
    let mut i = 0usize;
    while i < model.len() {
        let mut j = i + 1;
        while j < model.len() && model[j] == model[i] && j - i < (1 << 20) {
            j += 1;
        }
        reads.push("-c".to_string());
        reads.push(format!("read -P {:#x} {i} {}", model[i], j - i));
        i = j;
    }
    let text = run_io(&reads);
    assert_eq!(
        text.matches("read ").count(),
        reads.len() / 2,
        "every read must report success: {text}"
    );
    // After detach the backing file alone holds exactly the model.
    let mut srv = srv;
    s.ctl("detach");
    let st = srv.wait();
    assert!(st.success(), "server after detach: {st}");
    assert_eq!(fs::read(&s.backing).unwrap(), model, "backing after detach");
}

fn fio_verify(uri: &str, name: &str, rw: &str, bs: &str, size: u64, extra: &[&str]) {
    let mut args = vec![
        format!("--rw={rw}"),
        format!("--bs={bs}"),
        format!("--size={size}"),
        "--iodepth=16".into(),
        "--verify=crc32c".into(),
        "--do_verify=1".into(),
        "--verify_fatal=1".into(),
        "--randseed=7".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let v = fio(uri, name, &a);
    let job = &v["jobs"][0];
    assert!(
        job["write"]["io_bytes"].as_u64().unwrap() > 0,
        "fio wrote nothing: {job}"
    );
}

#[test]
fn fio_verify_random_and_sequential_mixes() {
    require_tools!("fio");
    let size = 32 * MIB;
    let s = Setup::new(size, "8MiB", &[]);
    let srv = s.serve(&[]);
    fio_verify(&srv.uri(), "randrw", "randrw", "4k", size, &[]);
    fio_verify(&srv.uri(), "rw", "rw", "64k", size, &[]);
    // Mixed block sizes, two jobs (two connections) on disjoint halves.
    fio_verify(
        &srv.uri(),
        "randrw-mixed",
        "randrw",
        "4k",
        size / 2,
        &[
            "--bssplit=4k/50:16k/25:128k/25",
            "--numjobs=2",
            "--offset_increment=16M",
        ],
    );
    let st = s.stats();
    assert!(st["evictions"].as_u64().unwrap() > 0, "no evictions: {st}");
}

/// Each associativity, line size, write policy, eviction and admission value
/// of the core, live, with a cache of ~10 % of the data; fio verifies random
/// and sequential mixes, then after a restart (`--verify_only`), then the
/// backing file alone after `detach`.
fn policy_case(opts: &[&str]) {
    require_tools!("fio");
    let size = 32 * MIB;
    let s = Setup::new(size, "8MiB", opts);
    let srv = s.serve(&[]);
    let uri = srv.uri();
    fio_verify(&uri, "randrw", "randrw", "4k", size, &[]);
    fio_verify(&uri, "rw", "rw", "64k", size / 2, &["--offset=16M"]);
    let st = s.stats();
    let pol = &st["policy"];
    for (k, flag) in [
        ("line_size", "--line-size"),
        ("assoc", "--assoc"),
        ("eviction", "--eviction"),
        ("write_policy", "--write-policy"),
        ("admission", "--admission"),
    ] {
        if let Some(i) = opts.iter().position(|o| *o == flag) {
            let want = opts[i + 1];
            let got = match &pol[k] {
                serde_json::Value::Number(n) => format!("{}KiB", n.as_u64().unwrap() / 1024),
                v => v.as_str().unwrap().to_string(),
            };
            assert_eq!(got, want, "{k} recorded differently: {st}");
        }
    }
    assert!(
        st["fills"].as_u64().unwrap() > 0,
        "nothing was cached: {st}"
    );
    assert!(
        st["evictions"].as_u64().unwrap() > 0,
        "cache of 10% never evicted: {st}"
    );
    assert_eq!(st["status"], "ok");
    // Clean restart: everything fio wrote still verifies.
    let mut srv = srv;
    srv.stop();
    run(Command::new(bin()).arg("check").arg(&s.cache));
    let mut srv = s.serve(&[]);
    // The sequential job wrote the upper half last: it verifies after the restart.
    fio(
        &srv.uri(),
        "rw",
        &[
            "--verify_only",
            "--rw=rw",
            "--bs=64k",
            "--iodepth=16",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--randseed=7",
            "--offset=16M",
            &format!("--size={}", size / 2),
        ],
    );
    // Detach: the backing file alone verifies, served without any cache.
    s.ctl("detach");
    assert!(srv.wait().success());
    let plain = Server::start(&s.cache, &s.path("plain.sock"), &["--no-cache"]);
    fio(
        &plain.uri(),
        "rw",
        &[
            "--verify_only",
            "--rw=rw",
            "--bs=64k",
            "--iodepth=16",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--randseed=7",
            "--offset=16M",
            &format!("--size={}", size / 2),
        ],
    );
}

macro_rules! policy_tests {
    ($($(#[$m:meta])* $name:ident: [$($o:expr),*];)*) => {
        $(#[test] $(#[$m])* fn $name() { policy_case(&[$($o),*]); })*
    };
}

policy_tests! {
    policy_direct_4k_lru_writeback_always:
        ["--assoc", "direct", "--line-size", "4KiB", "--eviction", "lru", "--write-policy", "write-back", "--admission", "always"];
    policy_8way_64k_fifo_writethrough_seqcutoff:
        ["--assoc", "8-way", "--line-size", "64KiB", "--eviction", "fifo", "--write-policy", "write-through", "--admission", "seq-cutoff", "--seq-cutoff", "1MiB"];
    policy_full_4k_arc_hddupd_nhit:
        ["--assoc", "full", "--line-size", "4KiB", "--eviction", "arc", "--write-policy", "write-hdd-upd", "--admission", "nhit", "--nhit-threshold", "2"];
    policy_full_64k_s3fifo_hddinv_2lbs:
        ["--assoc", "full", "--line-size", "64KiB", "--eviction", "s3fifo", "--write-policy", "write-hdd-inv", "--admission", "2lbs"];
    policy_8way_4k_s3fifo_readonly_always:
        ["--assoc", "8-way", "--line-size", "4KiB", "--eviction", "s3fifo", "--write-policy", "read-only", "--admission", "always"];
    policy_direct_64k_arc_writeback_nhit:
        ["--assoc", "direct", "--line-size", "64KiB", "--eviction", "arc", "--write-policy", "write-back", "--admission", "nhit", "--nhit-threshold", "2"];
    policy_full_4k_fifo_writeback_noalloc_2lbs:
        ["--assoc", "full", "--line-size", "4KiB", "--eviction", "fifo", "--write-policy", "write-back", "--no-write-allocate", "--admission", "2lbs"];
}

#[test]
fn detach_leaves_backing_equal_to_client_writes() {
    require_tools!("nbdcopy", "qemu-io");
    let size = 32 * MIB;
    // Backing starts with old data: the client overwrites part of it.
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    let mut model = pattern(size as usize, 3);
    write_file(&backing, &model);
    let s = Setup::with_backing(dir, backing, "8MiB", &["--write-policy", "write-back"]);
    let srv = s.serve(&[]);
    // New data over the first 20 MiB through 4 connections, then small unaligned overwrites.
    let new = pattern(20 * MIB as usize, 4);
    let part = s.path("part.img");
    write_file(&part, &new);
    model[..new.len()].copy_from_slice(&new);
    // nbdcopy writes the whole destination size; use qemu-img-free way: copy a
    // full image made of the new data followed by the old tail.
    let full = s.path("full.img");
    write_file(&full, &model);
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(&full)
        .arg(srv.uri()));
    let mut cmds = vec![];
    for k in 0..40u64 {
        let off = k * 797_003 % (size - 10_000);
        let len = 1 + k * 211 % 9000;
        cmds.push("-c".to_string());
        cmds.push(format!("write -P {:#x} {off} {len}", 0x10 + k));
        model[off as usize..(off + len) as usize].fill((0x10 + k) as u8);
    }
    run(Command::new("qemu-io")
        .args(["-f", "raw"])
        .args(&cmds)
        .arg(srv.uri()));
    let st = s.stats();
    assert!(
        st["dirty_lines"].as_u64().unwrap() > 0,
        "write-back left nothing dirty: {st}"
    );
    // Backing is not yet complete (dirty data lives only in the cache)...
    assert_ne!(
        fs::read(&s.backing).unwrap(),
        model,
        "dirty data already on the backing device"
    );
    s.ctl("detach");
    let mut srv = srv;
    assert!(
        srv.wait().success(),
        "server after detach: {}",
        srv.stderr()
    );
    // ...and after detach it is, without tiercache.
    let got = fs::read(&s.backing).unwrap();
    if let Some(i) = got.iter().zip(&model).position(|(a, b)| a != b) {
        panic!("backing differs from the client's writes at byte {i}");
    }
}

#[test]
fn stats_json_after_workload_and_check_on_stopped_cache() {
    require_tools!("nbdcopy", "qemu-io");
    let size = 16 * MIB;
    let s = Setup::new(size, "12MiB", &[]);
    let data = s.path("data.img");
    write_file(&data, &pattern(size as usize, 5));
    let mut srv = s.serve(&[]);
    run(Command::new("nbdcopy").arg(&data).arg(srv.uri()));
    let before = s.stats();
    // Read a 4 MiB window twice: the second pass must hit.
    for _ in 0..2 {
        run(Command::new("qemu-io")
            .args(["-f", "raw", "-c", "read 0 4M"])
            .arg(srv.uri()));
    }
    let st = s.stats();
    let n = |v: &serde_json::Value, k: &str| {
        v[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {v}"))
    };
    assert!(
        n(&st, "read_hits") > n(&before, "read_hits"),
        "second pass did not hit: {st}"
    );
    assert!(n(&st, "hits") > 0 && n(&st, "misses") > 0);
    assert_eq!(
        n(&st, "hits") + n(&st, "misses"),
        n(&st, "read_hits") + n(&st, "read_misses") + n(&st, "write_hits") + n(&st, "write_misses")
    );
    let ratio = st["hit_ratio"].as_f64().unwrap();
    let expect = n(&st, "hits") as f64 / (n(&st, "hits") + n(&st, "misses")) as f64;
    assert!(
        (ratio - expect).abs() < 1e-9,
        "hit_ratio {ratio} vs {expect}"
    );
    assert!(n(&st, "occupied_lines") <= n(&st, "slots"));
    assert!(n(&st, "dirty_lines") <= n(&st, "occupied_lines"));
    let occ = st["occupancy"].as_f64().unwrap();
    assert!((occ - n(&st, "occupied_lines") as f64 / n(&st, "slots") as f64).abs() < 1e-9);
    assert!(occ > 0.0 && occ <= 1.0);
    let live = &st["live"];
    assert!(n(live, "writes") > 0 && n(live, "reads") > 0, "{live}");
    assert!(n(live, "bytes_written") >= size, "{live}");
    assert!(live["recovery_ms"].as_f64().unwrap() >= 0.0);
    assert!(
        live["cache_latency"]["p50_us"].as_f64().unwrap()
            <= live["cache_latency"]["p99_us"].as_f64().unwrap()
    );
    // Human form names the same things.
    let human = run(Command::new(bin()).args(["stats", "--cache"]).arg(&s.cache));
    assert!(
        human.contains("hit ratio") && human.contains("occupancy"),
        "{human}"
    );
    // flush leaves no dirty line.
    s.ctl("flush");
    assert_eq!(n(&s.stats(), "dirty_lines"), 0);
    srv.stop();
    let out = run(Command::new(bin()).arg("check").arg(&s.cache));
    assert!(!out.is_empty());
    let j = json(&run(Command::new(bin())
        .args(["check", "--json"])
        .arg(&s.cache)));
    assert_eq!(j["ok"], true, "{j}");
    // One damaged superblock copy: check warns and still succeeds (the other copy is used).
    let mut img = fs::read(&s.cache).unwrap();
    for b in &mut img[0..64] {
        *b ^= 0xff;
    }
    let one = s.path("one.img");
    write_file(&one, &img);
    let out = output(Command::new(bin()).arg("check").arg(&one));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "one damaged copy must be survivable: {text}"
    );
    assert!(
        text.contains("DAMAGED"),
        "check must report the damaged copy: {text}"
    );
    // Both copies damaged: check fails.
    for b in &mut img[4096..4096 + 64] {
        *b ^= 0xff;
    }
    let bad = s.path("bad.img");
    write_file(&bad, &img);
    assert!(!output(Command::new(bin()).arg("check").arg(&bad))
        .status
        .success());
}

#[test]
fn format_refuses_existing_cache_and_filesystem_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("b.img");
    sparse_file(&backing, 16 * MIB);
    let cache = dir.path().join("c.img");
    let fmt = |force: bool| {
        let mut c = Command::new(bin());
        c.args(["format", "--cache"])
            .arg(&cache)
            .arg("--backing")
            .arg(&backing)
            .args(["--size", "8MiB"]);
        if force {
            c.arg("--force");
        }
        output(&mut c)
    };
    assert!(fmt(false).status.success());
    let again = fmt(false);
    assert!(!again.status.success(), "formatted over an existing cache");
    let msg = String::from_utf8_lossy(&again.stderr);
    assert!(
        msg.contains("--force"),
        "refusal should name --force: {msg}"
    );
    assert!(fmt(true).status.success(), "--force must overwrite");
    if !clients_util::have("mkfs.ext4") {
        eprintln!("SKIPPED (ext4 part): mkfs.ext4 is not installed");
        return;
    }
    let fs_img = dir.path().join("ext4.img");
    sparse_file(&fs_img, 16 * MIB);
    run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&fs_img));
    let out = output(
        Command::new(bin())
            .args(["format", "--cache"])
            .arg(&fs_img)
            .arg("--backing")
            .arg(&backing),
    );
    assert!(!out.status.success(), "formatted over an ext4 filesystem");
    let msg = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        msg.contains("ext4") || msg.contains("filesystem"),
        "refusal should say why: {msg}"
    );
    // The filesystem is untouched.
    run(Command::new("e2fsck").args(["-n", "-f"]).arg(&fs_img));
    let out = output(
        Command::new(bin())
            .args(["format", "--force", "--cache"])
            .arg(&fs_img)
            .arg("--backing")
            .arg(&backing),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn serve_refuses_mismatching_backing_device() {
    let s = Setup::new(16 * MIB, "8MiB", &[]);
    let other = s.path("other.img");
    sparse_file(&other, 32 * MIB);
    let same_size = s.path("same-size.img");
    sparse_file(&same_size, 16 * MIB);
    for b in [&other, &same_size] {
        let out = output(
            Command::new(bin())
                .args(["serve", "--cache"])
                .arg(&s.cache)
                .arg("--backing")
                .arg(b)
                .arg("--listen")
                .arg(format!("unix:{}", s.path("x.sock").display())),
        );
        assert!(!out.status.success(), "served {} as backing", b.display());
        let msg = String::from_utf8_lossy(&out.stderr);
        assert!(
            msg.to_lowercase().contains("backing"),
            "refusal should name the backing device: {msg}"
        );
    }
    // The recorded device is accepted.
    let mut srv = s.serve(&[]);
    srv.stop();
}

/// nbdfuse exposes the export as a file; a loop device on it carries ext4.
#[test]
fn nbdfuse_loop_ext4_file_workload_and_fsck() {
    nbdfuse_loop_ext4(&["--line-size", "64KiB"]);
}

/// The same on the log-structured layout (every test of the live server
/// holds for it).
#[test]
fn nbdfuse_loop_ext4_file_workload_and_fsck_log_structured() {
    nbdfuse_loop_ext4(LS);
}

/// The same on the compressed log-structured layout, lz4.
#[test]
fn nbdfuse_loop_ext4_file_workload_and_fsck_log_structured_lz4() {
    nbdfuse_loop_ext4(&[LS, &["--compress", "lz4"]].concat());
}

/// The same on the compressed log-structured layout, zstd.
#[test]
fn nbdfuse_loop_ext4_file_workload_and_fsck_log_structured_zstd() {
    nbdfuse_loop_ext4(&[LS, &["--compress", "zstd"]].concat());
}

const LS: &[&str] = &["--layout", "log-structured", "--segment-size", "256KiB"];

/// The export of a server as a block device: nbdfuse exposes it as a file,
/// a loop device sits on that file. Unmounts `mnt`, detaches the loop
/// device and unmounts FUSE on drop.
struct Ext4Dev {
    mnt: std::path::PathBuf,
    fusedir: std::path::PathBuf,
    loopdev: Option<String>,
    fuse: std::process::Child,
}

impl Ext4Dev {
    /// Attach the export of `srv` (FUSE directory `tag` in the test's
    /// directory), mount point `mnt`; `None` (after a `SKIPPED:` message)
    /// when FUSE or loop devices are not usable here.
    fn attach(s: &Setup, srv: &Server, tag: &str, mnt: &Path) -> Option<Ext4Dev> {
        let fusedir = s.path(tag);
        fs::create_dir_all(&fusedir).unwrap();
        fs::create_dir_all(mnt).unwrap();
        let pidfile = s.path(&format!("{tag}.pid"));
        let fuse = Command::new("nbdfuse")
            .arg("-P")
            .arg(&pidfile)
            .arg(&fusedir)
            .arg(srv.uri())
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut d = Ext4Dev {
            mnt: mnt.to_path_buf(),
            fusedir,
            loopdev: None,
            fuse,
        };
        let image = d.fusedir.join("nbd");
        // Ready once it wrote its pid file and shows the image, or skipped if it exited.
        let exited = wait_for("nbdfuse to become ready", READY_TIMEOUT, || {
            if let Some(st) = d.fuse.try_wait().unwrap() {
                return Some(Some(st));
            }
            (pidfile.exists() && image.exists()).then_some(None)
        });
        if let Some(st) = exited {
            eprintln!("SKIPPED: nbdfuse exited ({st}); FUSE not usable here");
            return None;
        }
        let lo = output(Command::new("losetup").args(["-f", "--show"]).arg(&image));
        if !lo.status.success() {
            eprintln!(
                "SKIPPED: losetup failed: {}",
                String::from_utf8_lossy(&lo.stderr)
            );
            return None;
        }
        d.loopdev = Some(String::from_utf8_lossy(&lo.stdout).trim().to_string());
        Some(d)
    }

    fn dev(&self) -> &str {
        self.loopdev.as_deref().expect("loop device")
    }

    fn mount(&self) {
        run(Command::new("mount").arg(self.dev()).arg(&self.mnt));
    }

    fn umount(&self) {
        run(Command::new("umount").arg(&self.mnt));
    }
}

impl Drop for Ext4Dev {
    fn drop(&mut self) {
        let mounted = |m: &Path| {
            fs::read_to_string("/proc/self/mounts")
                .unwrap_or_default()
                .lines()
                .any(|l| l.split(' ').nth(1) == m.to_str())
        };
        if mounted(&self.mnt) {
            let st = Command::new("umount").arg(&self.mnt).status();
            if !st.is_ok_and(|s| s.success()) {
                // A dead server leaves dirty pages that cannot be written.
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
            }
        }
        if let Some(l) = &self.loopdev {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.fusedir)
            .status();
        if self.fuse.try_wait().ok().flatten().is_none() {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.fusedir)
                .status();
        }
        let _ = self.fuse.wait();
    }
}

fn ext4_tools() -> bool {
    if !Path::new("/dev/fuse").exists() || !Path::new("/dev/loop-control").exists() {
        eprintln!("SKIPPED: /dev/fuse or /dev/loop-control is missing");
        return false;
    }
    true
}

/// A tree of files of assorted sizes (compressible and not) under `src`.
fn file_tree(src: &Path) {
    for d in 0..6u64 {
        let dir = src.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..12u64 {
            let len = (1 + d * 12 + f) * 7919 % (3 << 20) + 1;
            let mut data = pattern(len as usize, d * 100 + f);
            if f % 2 == 0 {
                // Half the files compress well (text-like repetition).
                let line = format!("d{d} f{f}: the quick brown fox jumps over the lazy dog\n");
                for (i, b) in data.iter_mut().enumerate() {
                    *b = line.as_bytes()[i % line.len()];
                }
            }
            write_file(&dir.join(format!("f{f}")), &data);
        }
    }
}

/// sha256sum of every file under `root`, sorted by path.
fn sums(root: &Path) -> String {
    run(Command::new("sh")
        .arg("-c")
        .arg("find . -type f | sort | xargs sha256sum")
        .current_dir(root))
}

fn fsck_clean(dev: &Path, what: &str) {
    let fsck = output(Command::new("e2fsck").arg("-n").arg("-f").arg(dev));
    assert!(
        fsck.status.success(),
        "fsck -n of {what} reported problems: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
}

fn nbdfuse_loop_ext4(format_opts: &[&str]) {
    require_tools!("nbdfuse", "losetup", "mkfs.ext4", "fusermount3", "e2fsck");
    if !ext4_tools() {
        return;
    }
    let size = 128 * MIB;
    let s = Setup::new(size, "16MiB", format_opts);
    let mut srv = s.serve(&[]);
    let mnt = s.path("mnt");
    let Some(d) = Ext4Dev::attach(&s, &srv, "fuse", &mnt) else {
        return;
    };
    run(Command::new("mkfs.ext4").args(["-q", "-F", d.dev()]));
    d.mount();
    let src = s.path("src");
    file_tree(&src);
    run(Command::new("cp").arg("-a").arg(&src).arg(mnt.join("tree")));
    run(&mut Command::new("sync"));
    let expected = sums(&src);
    // Drop the page cache so the checksums read through the device.
    d.umount();
    d.mount();
    assert_eq!(
        sums(&mnt.join("tree")),
        expected,
        "file contents changed on the filesystem"
    );
    d.umount();
    fsck_clean(Path::new(d.dev()), "the export");
    let st = s.stats();
    assert!(st["hits"].as_u64().unwrap() > 0, "{st}");
    drop(d);
    // A restart (clean shutdown, reopen): the same files.
    srv.stop();
    let mut srv = s.serve(&[]);
    let d = Ext4Dev::attach(&s, &srv, "fuse2", &mnt).expect("FUSE worked before the restart");
    d.mount();
    assert_eq!(
        sums(&mnt.join("tree")),
        expected,
        "file contents changed across a server restart"
    );
    d.umount();
    fsck_clean(Path::new(d.dev()), "the export after a restart");
    drop(d);
    // After detach, the backing file alone holds the same filesystem.
    s.ctl("detach");
    assert!(srv.wait().success());
    fsck_clean(&s.backing, "the detached backing file");
}

/// kill -9 of the server in the middle of file writes on ext4 (nbdfuse +
/// loop device), log-structured layout: `check` accepts the cache, and
/// after a restart the filesystem needs at most a journal replay (and the
/// orphan list, and free counts), fsck finds nothing else, and the files
/// synced before the kill read back intact.
#[test]
fn ext4_kill9_during_file_writes_log_structured() {
    ext4_kill9_during_file_writes(LS);
}

/// The same on the compressed layout, lz4.
#[test]
fn ext4_kill9_during_file_writes_log_structured_lz4() {
    ext4_kill9_during_file_writes(&[LS, &["--compress", "lz4"]].concat());
}

/// The same on the compressed layout, zstd.
#[test]
fn ext4_kill9_during_file_writes_log_structured_zstd() {
    ext4_kill9_during_file_writes(&[LS, &["--compress", "zstd"]].concat());
}

fn ext4_kill9_during_file_writes(format_opts: &[&str]) {
    require_tools!(
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "fusermount3",
        "e2fsck",
        "nbdcopy"
    );
    if !ext4_tools() {
        return;
    }
    let s = Setup::new(128 * MIB, "16MiB", format_opts);
    let mut srv = s.serve(&[]);
    let mnt = s.path("mnt");
    let Some(d) = Ext4Dev::attach(&s, &srv, "fuse", &mnt) else {
        return;
    };
    run(Command::new("mkfs.ext4").args(["-q", "-F", d.dev()]));
    d.mount();
    let src = s.path("src");
    file_tree(&src);
    run(Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(mnt.join("synced")));
    run(&mut Command::new("sync"));
    let expected = sums(&src);
    // Copies of the tree, each followed by a sync, until the server dies.
    let script = format!(
        "i=0; while cp -a '{src}' '{mnt}/w'$i && sync; do i=$((i+1)); done",
        src = src.display(),
        mnt = mnt.display()
    );
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill once a copy completed and the next one's writes reach the cache.
    wait_until(
        "the first copy to complete",
        Duration::from_secs(300),
        || {
            assert!(
                writer.try_wait().unwrap().is_none(),
                "the writer stopped before the kill"
            );
            mnt.join("w1").exists()
        },
    );
    let appended_at = |s: &Setup| s.stats()["appended_blocks"].as_u64().unwrap_or(0);
    let before = appended_at(&s);
    let appended = wait_for("the next copy's writes", READY_TIMEOUT, || {
        Some(appended_at(&s)).filter(|&n| n > before)
    });
    let mut child = srv.child.take().unwrap();
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The writer fails on the dead device; stop it if it is still blocked.
    poll_for(Duration::from_secs(60), || writer.try_wait().unwrap());
    let _ = writer.kill();
    let _ = writer.wait();
    drop(d);
    // Offline check of the cache after the crash, then recovery by serve.
    let out = run(Command::new(bin()).arg("check").arg(&s.cache));
    eprintln!("check after kill -9 ({appended} blocks appended before it): {out}");
    let srv = s.serve(&[]);
    let image = s.path("after.img");
    run(Command::new("nbdcopy").arg(srv.uri()).arg(&image));
    let mut srv = srv;
    srv.stop();
    // Journal replay (and orphans, free counts) allowed, nothing else.
    let fix = output(Command::new("e2fsck").arg("-fy").arg(&image));
    let text = String::from_utf8_lossy(&fix.stdout).to_string();
    let code = fix.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "e2fsck -fy exited {code}: {text}");
    // A repair prompt ("...? yes") must follow a summary count problem.
    let allowed = ["count wrong", "orphan"];
    let mut prev = "";
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        if l.contains("? yes") {
            assert!(
                allowed.iter().any(|a| l.contains(a) || prev.contains(a)),
                "fsck found corruption beyond the journal: {prev} / {l}\n{text}"
            );
        }
        prev = l;
    }
    fsck_clean(&image, "the recovered export after replay");
    // The files synced before the kill are intact.
    let ro = s.path("ro");
    fs::create_dir_all(&ro).unwrap();
    run(Command::new("mount")
        .args(["-o", "loop,ro"])
        .arg(&image)
        .arg(&ro));
    let got = output(
        Command::new("sh")
            .arg("-c")
            .arg("find . -type f | sort | xargs sha256sum")
            .current_dir(ro.join("synced")),
    );
    run(Command::new("umount").arg(&ro));
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        expected,
        "files synced before the kill changed"
    );
}

/// `serve` without `--backing` finds the device recorded by `format`, also
/// when `format` was given relative paths and `serve` runs elsewhere.
#[test]
fn serve_defaults_to_recorded_backing_from_any_directory() {
    require_tools!("nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    sparse_file(&dir.path().join("b.img"), 16 * MIB);
    run(Command::new(bin())
        .args([
            "format",
            "--cache",
            "c.img",
            "--backing",
            "b.img",
            "--size",
            "8MiB",
        ])
        .current_dir(dir.path()));
    let elsewhere = tempfile::tempdir().unwrap();
    let sock = elsewhere.path().join("s.sock");
    let mut c = Command::new(bin());
    c.arg("serve")
        .arg("--cache")
        .arg(dir.path().join("c.img"))
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .current_dir(elsewhere.path());
    let child = c.stdin(std::process::Stdio::null()).spawn().unwrap();
    let mut srv = Server {
        child: Some(child),
        socket: sock.clone(),
        log: elsewhere.path().join("log"),
    };
    wait_until(
        "serve from another directory to listen",
        READY_TIMEOUT,
        || {
            if let Some(st) = srv.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("serve from another directory exited: {st}");
            }
            std::os::unix::net::UnixStream::connect(&sock).is_ok()
        },
    );
    let v = json(&run(Command::new("nbdinfo").args(["--json", &srv.uri()])));
    assert_eq!(v["exports"][0]["export-size"], 16 * MIB);
    srv.stop();
}
