//! Interoperability with real NBD clients (libnbd tools, qemu, fio). Each test
//! skips with a message when its tool is not installed.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::{first_diff, pattern, run_ok, write_file, TestServer};
use tiercache_nbd::{Backend, BlockSize, FileBackend, MemBackend};

const MIB: usize = 1 << 20;

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "invalid JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn nbdinfo_reports_size_block_sizes_and_flags() {
    let nbdinfo = require_tool!("nbdinfo");
    let bs = BlockSize {
        minimum: 512,
        preferred: 4096,
        maximum: 32 * MIB as u32,
    };
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::new(8 * MIB).with_block_size(bs));
    let srv = TestServer::start(vec![("disk", mem)]);
    for uri in [srv.uri(), srv.uri_for("disk")] {
        let out = run_ok(Command::new(&nbdinfo).arg("--json").arg(&uri));
        let v = json(&out);
        let e = &v["exports"][0];
        assert_eq!(v["protocol"], "newstyle-fixed");
        assert_eq!(v["structured"], true);
        assert_eq!(e["export-size"], 8 * MIB as u64);
        assert_eq!(e["block_size_minimum"], 512);
        assert_eq!(e["block_size_preferred"], 4096);
        assert_eq!(e["block_size_maximum"], 32 * MIB as u64);
        assert_eq!(e["description"], "tiercache in-memory disk");
        for flag in [
            "can_flush",
            "can_fua",
            "can_trim",
            "can_zero",
            "can_fast_zero",
            "can_cache",
            "can_multi_conn",
            "can_df",
        ] {
            assert_eq!(e[flag], true, "{flag} in {e}");
        }
        assert_eq!(e["is_read_only"], false);
        assert_eq!(e["is_rotational"], false);
    }
}

#[test]
fn nbdinfo_sees_read_only_file_export_without_fast_zero() {
    let nbdinfo = require_tool!("nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ro.img");
    write_file(&img, &pattern(MIB, 3));
    let ro: Arc<dyn Backend> = Arc::new(FileBackend::open_read_only(&img).unwrap());
    let rw: Arc<dyn Backend> = Arc::new(FileBackend::open(&img).unwrap());
    let srv = TestServer::start(vec![("ro", ro), ("rw", rw)]);
    let v = json(&run_ok(
        Command::new(&nbdinfo).arg("--json").arg(srv.uri_for("ro")),
    ));
    let e = &v["exports"][0];
    assert_eq!(e["export-size"], MIB as u64);
    assert_eq!(e["is_read_only"], true);
    assert_eq!(e["can_trim"], false);
    assert_eq!(e["can_zero"], false);
    let v = json(&run_ok(
        Command::new(&nbdinfo).arg("--json").arg(srv.uri_for("rw")),
    ));
    let e = &v["exports"][0];
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["can_zero"], true);
    // The file backend cannot zero without writing in general: FAST_ZERO is
    // still advertised, and requests with it get ENOTSUP (see robustness tests).
    assert_eq!(e["can_fast_zero"], true);
}

#[test]
fn nbdinfo_list_shows_every_export() {
    let nbdinfo = require_tool!("nbdinfo");
    let a: Arc<dyn Backend> = Arc::new(MemBackend::new(MIB));
    let b: Arc<dyn Backend> = Arc::new(MemBackend::new(2 * MIB));
    let srv = TestServer::start(vec![("alpha", a), ("beta", b)]);
    let v = json(&run_ok(
        Command::new(&nbdinfo)
            .args(["--list", "--json"])
            .arg(srv.uri()),
    ));
    let exports = v["exports"].as_array().expect("exports array");
    let mut got: Vec<(String, u64)> = exports
        .iter()
        .map(|e| {
            (
                e["export-name"].as_str().unwrap().to_string(),
                e["export-size"].as_u64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("alpha".to_string(), MIB as u64),
            ("beta".into(), 2 * MIB as u64)
        ]
    );
}

#[test]
fn nbdcopy_round_trip_with_four_connections() {
    let nbdcopy = require_tool!("nbdcopy");
    let size = 24 * MIB;
    let mem = Arc::new(MemBackend::new(size));
    let srv = TestServer::start(vec![("", mem.clone() as Arc<dyn Backend>)]);
    let src = srv.dir.path().join("src.img");
    let dst = srv.dir.path().join("dst.img");
    let mut data = pattern(size, 42);
    // A zero region exercises nbdcopy's sparse path (WRITE_ZEROES).
    data[5 * MIB..9 * MIB].fill(0);
    write_file(&src, &data);

    run_ok(
        Command::new(&nbdcopy)
            .arg("--connections=4")
            .arg("--flush")
            .arg(&src)
            .arg(srv.uri()),
    );
    assert_eq!(first_diff(&mem.snapshot(), &data), None, "upload differs");

    run_ok(
        Command::new(&nbdcopy)
            .arg("--connections=4")
            .arg(srv.uri())
            .arg(&dst),
    );
    let back = std::fs::read(&dst).unwrap();
    assert_eq!(first_diff(&back, &data), None, "download differs");
}

#[test]
fn nbdcopy_to_file_backend_matches_source() {
    let nbdcopy = require_tool!("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    let size = 16 * MIB;
    let file: Arc<dyn Backend> = Arc::new(FileBackend::create(&img, size as u64).unwrap());
    let srv = TestServer::start(vec![("", file)]);
    let src = dir.path().join("src.img");
    let data = pattern(size, 7);
    write_file(&src, &data);
    run_ok(
        Command::new(&nbdcopy)
            .arg("--connections=4")
            .arg("--flush")
            .arg(&src)
            .arg(srv.uri()),
    );
    assert_eq!(first_diff(&std::fs::read(&img).unwrap(), &data), None);
}

/// Run qemu-io commands against the export; qemu-io reports pattern
/// mismatches on stdout and exits 0, so the output is checked too.
fn qemu_io(qemu_io: &std::path::Path, uri: &str, cmds: &[&str]) -> String {
    let mut c = Command::new(qemu_io);
    c.args(["-f", "raw"]).arg(uri);
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    let out = run_ok(&mut c);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !stdout.contains("Pattern verification failed") && !stdout.contains("failed"),
        "qemu-io reported a failure:\n{stdout}"
    );
    stdout
}

#[test]
fn qemu_io_pattern_write_then_read_verify_including_unaligned() {
    let qio = require_tool!("qemu-io");
    let size = 8 * MIB;
    let mem = Arc::new(MemBackend::new(size));
    let srv = TestServer::start(vec![("", mem.clone() as Arc<dyn Backend>)]);
    let uri = srv.uri();
    let mut model = vec![0u8; size];

    let out = qemu_io(
        &qio,
        &uri,
        &["write -P 0xab 0 1M", "read -P 0xab 0 1M", "flush"],
    );
    assert!(out.contains("wrote 1048576/1048576"), "{out}");
    model[..MIB].fill(0xab);

    // Unaligned offsets and lengths (1 is the advertised minimum block size).
    qemu_io(
        &qio,
        &uri,
        &[
            "write -P 0xcd 1000 5555",
            "read -P 0xcd 1000 5555",
            "read -P 0xab 0 1000",
            "read -P 0xab 6555 10000",
            "write -P 0x11 3145727 3",
            "read -P 0x11 3145727 3",
        ],
    );
    model[1000..6555].fill(0xcd);
    model[3145727..3145730].fill(0x11);

    // write -z sends WRITE_ZEROES with FUA|NO_HOLE; discard sends TRIM.
    qemu_io(
        &qio,
        &uri,
        &[
            "write -z 65536 65536",
            "read -P 0 65536 65536",
            "discard 2M 64k",
        ],
    );
    model[65536..131072].fill(0);
    model[2 * MIB..2 * MIB + 65536].fill(0); // MemBackend zeroes trimmed ranges
    assert_eq!(first_diff(&mem.snapshot(), &model), None);
}

#[test]
fn qemu_io_write_to_read_only_export_fails() {
    let qio = require_tool!("qemu-io");
    let mem = Arc::new(MemBackend::new(MIB).read_only());
    let srv = TestServer::start(vec![("", mem.clone() as Arc<dyn Backend>)]);
    let out = Command::new(&qio)
        .args(["-f", "raw"])
        .arg(srv.uri())
        .args(["-c", "write -P 0xab 0 4k"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        // qemu sees NBD_FLAG_READ_ONLY and refuses a read-write open ("Permission
        // denied"); the wire-level EPERM is covered by the robustness tests.
        ["Permission denied", "Operation not permitted", "read-only"]
            .iter()
            .any(|m| text.contains(m)),
        "expected a read-only refusal, got:\n{text}"
    );
    assert!(
        mem.snapshot().iter().all(|&b| b == 0),
        "read-only data changed"
    );
}

#[test]
fn qemu_img_info_convert_and_compare() {
    let qimg = require_tool!("qemu-img");
    let size = 12 * MIB;
    let mem = Arc::new(MemBackend::new(size));
    let srv = TestServer::start(vec![("", mem.clone() as Arc<dyn Backend>)]);
    let uri = srv.uri();

    let out = run_ok(
        Command::new(&qimg)
            .args(["info", "--output=json", "-f", "raw"])
            .arg(&uri),
    );
    assert_eq!(json(&out)["virtual-size"], size as u64);

    let src = srv.dir.path().join("src.img");
    let mut data = pattern(size, 99);
    data[3 * MIB..4 * MIB].fill(0);
    write_file(&src, &data);
    run_ok(
        Command::new(&qimg)
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(&uri),
    );
    assert_eq!(first_diff(&mem.snapshot(), &data), None);

    let cmp = |a: &std::path::Path| {
        Command::new(&qimg)
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(a)
            .arg(&uri)
            .output()
            .unwrap()
    };
    let same = cmp(&src);
    assert_eq!(same.status.code(), Some(0), "{same:?}");

    // Change one byte on the server: compare must notice (exit status 1).
    let mut other = data.clone();
    other[7 * MIB + 123] ^= 0xff;
    let changed = srv.dir.path().join("changed.img");
    write_file(&changed, &other);
    let diff = cmp(&changed);
    assert_eq!(diff.status.code(), Some(1), "{diff:?}");

    // And back out again through convert.
    let dst = srv.dir.path().join("dst.img");
    run_ok(
        Command::new(&qimg)
            .args(["convert", "-f", "raw", "-O", "raw"])
            .arg(&uri)
            .arg(&dst),
    );
    assert_eq!(first_diff(&std::fs::read(&dst).unwrap(), &data), None);
}

#[test]
fn fio_randrw_crc32c_verify_at_iodepth_32() {
    let fio = require_tool!("fio");
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::new(64 * MIB));
    let srv = TestServer::start(vec![("", mem)]);
    let out_json = srv.dir.path().join("fio.json");
    run_ok(
        Command::new(&fio)
            .args([
                "--name=verify",
                "--ioengine=nbd",
                // No verify state file in the working directory.
                "--verify_state_save=0",
                "--rw=randrw",
                "--bs=4k",
                "--iodepth=32",
                "--size=32M",
                "--verify=crc32c",
                "--verify_fatal=1",
                "--do_verify=1",
                "--output-format=json",
            ])
            .arg(format!("--uri={}", srv.uri()))
            .arg(format!("--output={}", out_json.display())),
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_json).unwrap()).expect("fio json");
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    assert!(job["write"]["io_bytes"].as_u64().unwrap() > 0);
    assert!(job["read"]["io_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn tcp_listener_on_loopback_serves_nbdinfo_and_qemu_io() {
    let nbdinfo = require_tool!("nbdinfo");
    let qio = require_tool!("qemu-io");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mem = Arc::new(MemBackend::new(4 * MIB));
    let server =
        tiercache_nbd::Server::new([("tcpdisk", mem.clone() as Arc<dyn Backend>)]).unwrap();
    let handle = rt.block_on(server.serve_tcp("127.0.0.1:0")).unwrap();
    let tiercache_nbd::ListenAddr::Tcp(addr) = handle.addr().clone() else {
        panic!("expected a TCP address");
    };
    assert!(addr.ip().is_loopback());
    let uri = format!("nbd://{addr}/tcpdisk");
    let v = json(&run_ok(Command::new(&nbdinfo).arg("--json").arg(&uri)));
    assert_eq!(v["exports"][0]["export-size"], 4 * MIB as u64);
    qemu_io(
        &qio,
        &uri,
        &["write -P 0x5c 4096 8192", "read -P 0x5c 4096 8192"],
    );
    let snap = mem.snapshot();
    assert!(snap[4096..12288].iter().all(|&b| b == 0x5c));
    assert!(snap[..4096].iter().all(|&b| b == 0));
    rt.block_on(handle.shutdown());
}

/// Expected zero map at 4 KiB granularity: merged (offset, length, is_zero).
fn zero_runs(data: &[u8]) -> Vec<(u64, u64, bool)> {
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    for (i, grain) in data.chunks(4096).enumerate() {
        let z = grain.iter().all(|&b| b == 0);
        match runs.last_mut() {
            Some(r) if r.2 == z => r.1 += grain.len() as u64,
            _ => runs.push((i as u64 * 4096, grain.len() as u64, z)),
        }
    }
    runs
}

fn merge(mut v: Vec<(u64, u64, bool)>) -> Vec<(u64, u64, bool)> {
    v.sort();
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    for r in v {
        match out.last_mut() {
            Some(l) if l.2 == r.2 && l.0 + l.1 == r.0 => l.1 += r.1,
            _ => out.push(r),
        }
    }
    out
}

fn sparse_disk(size: usize) -> Vec<u8> {
    let mut data = pattern(size, 5);
    data[..64 * 1024].fill(0);
    data[MIB..3 * MIB].fill(0);
    data[3 * MIB + 4096..3 * MIB + 8192].fill(0);
    data
}

#[test]
fn nbdinfo_map_and_qemu_img_map_match_the_zero_layout() {
    let nbdinfo = require_tool!("nbdinfo");
    let qimg = require_tool!("qemu-img");
    let data = sparse_disk(4 * MIB);
    let expected = zero_runs(&data);
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::from_vec(data));
    let srv = TestServer::start(vec![("", mem)]);

    let v = json(&run_ok(
        Command::new(&nbdinfo)
            .args(["--map", "--json"])
            .arg(srv.uri()),
    ));
    let got: Vec<(u64, u64, bool)> = v
        .as_array()
        .expect("map array")
        .iter()
        .map(|e| {
            let t = e["type"].as_u64().unwrap();
            assert_eq!(t & 1, 0, "memory is never a hole: {e}");
            (
                e["offset"].as_u64().unwrap(),
                e["length"].as_u64().unwrap(),
                t & 2 != 0,
            )
        })
        .collect();
    assert_eq!(merge(got), expected);

    let v = json(&run_ok(
        Command::new(&qimg)
            .args(["map", "--output=json", "-f", "raw"])
            .arg(srv.uri()),
    ));
    let got: Vec<(u64, u64, bool)> = v
        .as_array()
        .expect("map array")
        .iter()
        .map(|e| {
            (
                e["start"].as_u64().unwrap(),
                e["length"].as_u64().unwrap(),
                e["zero"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(merge(got), expected);
}

#[test]
fn qemu_io_unaligned_io_on_an_export_with_512_byte_minimum() {
    let qio = require_tool!("qemu-io");
    let bs = BlockSize {
        minimum: 512,
        preferred: 4096,
        maximum: 32 * MIB as u32,
    };
    let mem = Arc::new(MemBackend::new(2 * MIB).with_block_size(bs));
    let srv = TestServer::start(vec![("", mem.clone() as Arc<dyn Backend>)]);
    // qemu negotiates NBD_INFO_BLOCK_SIZE, so the server rejects unaligned
    // requests; qemu must read-modify-write and the result must still be exact.
    qemu_io(
        &qio,
        &srv.uri(),
        &[
            "write -P 0x77 0 8k",
            "write -P 0x33 1001 3000",
            "read -P 0x33 1001 3000",
            "read -P 0x77 0 1001",
            "read -P 0x77 4001 4191",
        ],
    );
    let mut model = vec![0u8; 2 * MIB];
    model[..8192].fill(0x77);
    model[1001..4001].fill(0x33);
    assert_eq!(first_diff(&mem.snapshot(), &model), None);
}
