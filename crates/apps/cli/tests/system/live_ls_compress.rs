//! The compressed log-structured cache (`format --layout log-structured
//! --compress lz4|zstd`, the Azor thesis's FlaZ direction) driven by real
//! NBD clients: fio with `--ioengine=nbd --verify=crc32c` (compressible and
//! random data, cleaning, a restart, the backing file alone after detach),
//! nbdcopy and qemu-img round trips, kill -9 crash rounds (acknowledged
//! flushed writes survive, reads never stale), and the capacity gain: with
//! compressible data the same cache device holds more distinct blocks
//! (more hits on a second pass) than with `--compress off`. Tests skip with
//! a `SKIPPED:` message when a tool is missing.

use crate::clients_util;
use crate::common;

use clients_util::{assert_same_file, bin, fio, output, run, sparse_file, write_file, Setup};
use common::crash::{crash_rounds, tiercache_in, CrashDesign};
use std::process::Command;

const MIB: u64 = 1 << 20;

fn ls(codec: &str, extra: &[&str]) -> Vec<&'static str> {
    let mut v = vec![
        "--layout",
        "log-structured",
        "--segment-size",
        "256KiB",
        "--compress",
    ];
    v.push(Box::leak(codec.to_string().into_boxed_str()));
    for e in extra {
        v.push(Box::leak(e.to_string().into_boxed_str()));
    }
    v
}

/// Compressible bytes (about 4:1 with lz4): lines from a small set of
/// 64-byte lines with a unique stamp every 512 bytes, so no two blocks are
/// alike.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let lines: Vec<Vec<u8>> = (0..8)
        .map(|i| {
            format!("{i}: select id, name from cache_blocks where segment = {i};\n").into_bytes()
        })
        .collect();
    let mut v = Vec::with_capacity(len + 128);
    let mut x = seed | 1;
    while v.len() < len {
        if v.len() % 512 < 64 {
            v.extend_from_slice(format!("{:016x}", (v.len() as u64) ^ seed).as_bytes());
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&lines[(x % 8) as usize]);
    }
    v.truncate(len);
    v
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
        "--randseed=11".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let v = fio(uri, name, &a);
    assert!(
        v["jobs"][0]["write"]["io_bytes"].as_u64().unwrap() > 0,
        "fio wrote nothing"
    );
}

fn fio_case(codec: &str, policy: &str) {
    require_tools!("fio");
    let size = 32 * MIB;
    let s = Setup::new(size, "6MiB", &ls(codec, &["--write-policy", policy]));
    let mut srv = s.serve(&[]);
    let uri = srv.uri();
    // Compressible buffers (fio fills part of each buffer with zeros).
    let comp = ["--buffer_compress_percentage=60", "--refill_buffers"];
    fio_verify(&uri, "randrw", "randrw", "4k", size, &comp);
    fio_verify(
        &uri,
        "mixed",
        "randrw",
        "4k",
        size / 2,
        &[
            "--bssplit=4k/50:16k/25:128k/25",
            "--numjobs=2",
            "--offset_increment=16M",
        ],
    );
    fio_verify(&uri, "seqrw", "rw", "64k", size, &comp);
    let st = s.stats();
    let z = &st["compression"];
    assert_eq!(z["codec"], codec, "{st}");
    assert!(
        z["stored_compressed_blocks"].as_u64().unwrap() > 1000,
        "{st}"
    );
    assert!(z["stored_raw_blocks"].as_u64().unwrap() > 1000, "{st}");
    assert_eq!(z["checksum_errors"], 0, "{st}");
    assert!(
        st["cleaning"]["segments_cleaned"].as_u64().unwrap() > 10,
        "{st}"
    );
    srv.stop();
    let mut srv = s.serve(&[]);
    assert_eq!(s.stats()["recovery"]["clean_shutdown"], true);
    let verify = [
        "--verify_only".to_string(),
        "--rw=rw".into(),
        "--bs=64k".into(),
        "--iodepth=16".into(),
        "--verify=crc32c".into(),
        "--verify_fatal=1".into(),
        "--randseed=11".into(),
        format!("--size={size}"),
        comp[0].into(),
        comp[1].into(),
    ];
    let va: Vec<&str> = verify.iter().map(|s| s.as_str()).collect();
    fio(&srv.uri(), "seqrw", &va);
    s.ctl("detach");
    assert!(
        srv.wait().success(),
        "server after detach: {}",
        srv.stderr()
    );
    run(Command::new("fio")
        .args(["--name=seqrw", "--ioengine=psync", "--rw=rw", "--bs=64k"])
        .arg(clients_util::FIO_NO_STATE)
        .arg(format!("--filename={}", s.backing.display()))
        .arg(format!("--size={size}"))
        .args([
            "--verify=crc32c",
            "--verify_only",
            "--verify_fatal=1",
            "--randseed=11",
            comp[0],
            comp[1],
        ]));
}

#[test]
fn fio_verify_lz4_write_back() {
    fio_case("lz4", "write-back");
}

#[test]
fn fio_verify_zstd_write_through() {
    fio_case("zstd:3", "write-through");
}

#[test]
fn nbdcopy_and_qemu_img_round_trip() {
    require_tools!("nbdcopy", "qemu-img");
    let size = 24 * MIB;
    let s = Setup::new(size, "6MiB", &ls("zstd", &[]));
    let reference = s.path("reference.img");
    let mut data = text(size as usize, 7);
    // A quarter of random (incompressible) data.
    let rnd = clients_util::pattern(size as usize / 4, 3);
    data[..rnd.len()].copy_from_slice(&rnd);
    write_file(&reference, &data);
    let mut srv = s.serve(&[]);
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(&reference)
        .arg(srv.uri()));
    let back = s.path("back.img");
    run(Command::new("nbdcopy")
        .arg("--connections=4")
        .arg(srv.uri())
        .arg(&back));
    assert_same_file(&reference, &back);
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&reference)
        .arg(srv.uri()));
    // The text was stored compressed when it was written (the counters
    // are the serving process's: which blocks the second server has to
    // fill, random or text, depends on what the first one evicted).
    let st = s.stats();
    let z = &st["compression"];
    assert!(z["stored_compressed_blocks"].as_u64().unwrap() > 0, "{st}");
    srv.stop();
    let srv = s.serve(&[]);
    let out = s.path("out.img");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(srv.uri())
        .arg(&out));
    assert_same_file(&reference, &out);
    // After the restart the cache still holds compressed blocks.
    let st = s.stats();
    let z = &st["compression"];
    assert!(z["ratio"].as_f64().unwrap() > 1.5, "{st}");
    drop(srv);
}

/// Hits of a second sequential pass over `size` bytes of compressible
/// data through a cache of `cache` bytes formatted with `codec`.
fn second_pass_hits(codec: &str, size: u64, cache: &str) -> (u64, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    write_file(&backing, &text(size as usize, 5));
    let s = Setup::with_backing(
        dir,
        backing,
        cache,
        &ls(codec, &["--write-policy", "write-through"]),
    );
    let srv = s.serve(&[]);
    let sink = s.path("sink.img");
    for _ in 0..2 {
        run(Command::new("nbdcopy").arg(srv.uri()).arg(&sink));
    }
    assert_same_file(&s.backing, &sink);
    let st = s.stats();
    drop(srv);
    (st["read_hits"].as_u64().unwrap(), st)
}

#[test]
fn compression_caches_more_distinct_blocks_in_the_same_device() {
    require_tools!("nbdcopy");
    let size = 16 * MIB;
    let (plain, sp) = second_pass_hits("off", size, "8MiB");
    let (lz4, sc) = second_pass_hits("lz4", size, "8MiB");
    let blocks = size / 4096;
    eprintln!(
        "second-pass hits of {blocks} blocks in an 8 MiB cache: off {plain}, lz4 {lz4}; mapped off {}, lz4 {}; ratio {}",
        sp["mapped_blocks"], sc["mapped_blocks"], sc["compression"]["ratio"]
    );
    assert!(
        sc["mapped_blocks"].as_u64().unwrap() > 2 * sp["mapped_blocks"].as_u64().unwrap(),
        "off {sp}\nlz4 {sc}"
    );
    assert!(lz4 > blocks * 9 / 10, "lz4: {lz4} hits of {blocks}: {sc}");
    assert!(lz4 > 2 * plain, "off {plain} hits, lz4 {lz4}");
}

fn crash_case(label: &str, codec: &'static str, policy: &'static str, rounds: u64, seed: u64) {
    common::COMPRESSIBLE_BLOCKS.store(true, std::sync::atomic::Ordering::Relaxed);
    let design = CrashDesign {
        format: Box::new(move |d| {
            let args = "format --layout log-structured --cache cache.img --backing backing.img \
                        --size 6MiB --segment-size 256KiB --write-policy";
            tiercache_in(d, &format!("{args} {policy} --compress {codec}"))
        }),
        final_writes: 7500,
        on_start: Box::new(|run, st| {
            if st["mode"] != "log-structured" || st["status"] != "ok" {
                return Err(format!("unexpected stats: {st}"));
            }
            let r = &st["recovery"];
            if run.round > 0 && r["clean_shutdown"] != false {
                return Err(format!("a kill -9 looks clean: {st}"));
            }
            run.add(
                "dirty blocks recovered",
                r["dirty_blocks"].as_u64().unwrap_or(0) as f64,
            );
            Ok(format!("recovery {r}"))
        }),
        after_kill: Box::new(|run| {
            tiercache_in(&run.dir, "check cache.img");
            Ok(())
        }),
        before_stop: Box::new(move |run, st| {
            let z = &st["compression"];
            let n = |k: &str| z[k].as_u64().unwrap_or(0);
            if n("stored_compressed_blocks") == 0 || n("stored_raw_blocks") == 0 {
                return Err(format!("both record kinds should be stored: {st}"));
            }
            if n("checksum_errors") != 0 {
                return Err(format!("checksum errors: {st}"));
            }
            if st["cleaning"]["segments_cleaned"].as_u64().unwrap_or(0) == 0 {
                return Err(format!("segment cleaning never ran: {st}"));
            }
            if policy == "write-back" && run.get("dirty blocks recovered") == 0.0 {
                return Err("restarts after kill -9 were never warm".into());
            }
            Ok(format!("final compression {z}"))
        }),
        ..CrashDesign::default()
    };
    crash_rounds(design, label, rounds, seed);
}

#[test]
fn kill9_compressed_write_back() {
    crash_case("lsz-write-back", "zstd", "write-back", 12, 0x22_0001);
}

#[test]
fn kill9_compressed_write_through() {
    crash_case("lsz-write-through", "lz4", "write-through", 6, 0x22_0002);
}

/// The compressed layout packs 512-byte units: on a cache device with
/// 4096-byte logical sectors (a loop device with `--sector-size 4096`),
/// `format --compress` refuses with a clear error (`--compress off` is
/// accepted there), and on 512-byte sectors it formats.
#[test]
fn compressed_layout_refuses_4k_sector_cache_device() {
    require_tools!("losetup");
    if !std::path::Path::new("/dev/loop-control").exists() {
        eprintln!("SKIPPED: /dev/loop-control is missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("b.img");
    sparse_file(&backing, 16 * MIB);
    let mut results = Vec::new();
    for sector in ["4096", "512"] {
        let img = dir.path().join(format!("c{sector}.img"));
        sparse_file(&img, 16 * MIB);
        let lo = output(
            Command::new("losetup")
                .args(["-f", "--show", "--sector-size", sector])
                .arg(&img),
        );
        if !lo.status.success() {
            eprintln!(
                "SKIPPED: losetup --sector-size {sector} failed: {}",
                String::from_utf8_lossy(&lo.stderr)
            );
            return;
        }
        let dev = String::from_utf8_lossy(&lo.stdout).trim().to_string();
        struct Detach(String);
        impl Drop for Detach {
            fn drop(&mut self) {
                let _ = Command::new("losetup").args(["-d", &self.0]).status();
            }
        }
        let _d = Detach(dev.clone());
        let format = |codec: &str| {
            output(
                Command::new(bin())
                    .args(["format", "--layout", "log-structured", "--force"])
                    .args(["--compress", codec, "--cache", &dev, "--backing"])
                    .arg(&backing),
            )
        };
        let lz4 = format("lz4");
        let off = format("off");
        assert!(
            off.status.success(),
            "--compress off on {sector}-byte sectors: {off:?}"
        );
        results.push((sector, lz4));
    }
    let (_, big) = &results[0];
    let msg = String::from_utf8_lossy(&big.stderr);
    assert!(
        !big.status.success(),
        "lz4 on 4096-byte sectors was accepted"
    );
    assert!(
        msg.contains("4096-byte logical sectors") && msg.contains("--compress off"),
        "unclear refusal: {msg}"
    );
    let (_, small) = &results[1];
    assert!(small.status.success(), "lz4 on 512-byte sectors: {small:?}");
}
