//! fio under load on the live three-level (TICA) cache while one cache
//! device fails: the RO-SSD, then (in its own test) the WO-SSD, each by
//! injected EIO errors (half of all its operations fail) and by removal
//! (every operation fails, as when the device is pulled). The server runs in
//! process on `FaultyDev`-wrapped files; fio (`--ioengine=nbd`) writes random
//! 4 KiB blocks with crc32c verify headers, verifying while it writes
//! (`--verify_backlog`) and everything at the end. No data may be lost: fio's
//! verify passes, the cache reports the failure (degraded, which device,
//! nothing lost), and after shutdown the backing file alone passes fio's
//! verify too. Skipped with a message when fio is not installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tiercache_io::{BlockDev, FaultRule, FaultyDev, FileDev, FileDevOptions, OpKinds};
use tiercache_runtime::export::Export;
use tiercache_three_level::{open_with_devices, Role};

const DATA: &str = "48M";

fn have_fio() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn tiercache(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .output()
        .expect("run tiercache");
    assert!(
        out.status.success(),
        "tiercache {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).expect("open device"))
}

/// The fio job both runs share: the same offsets and verify headers.
fn job() -> Vec<String> {
    [
        "--name=tica",
        "--rw=randwrite",
        "--bs=4k",
        &format!("--size={DATA}"),
        "--verify=crc32c",
        "--verify_fatal=1",
        "--randseed=7",
        "--output-format=json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn fio_result(out: std::process::Output, what: &str) -> serde_json::Value {
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fio {what} failed ({}):\n{so}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&so[so.find('{').unwrap_or(0)..])
        .unwrap_or_else(|e| panic!("fio {what} JSON: {e}: {so}"));
    assert_eq!(v["jobs"][0]["error"], 0, "fio {what}: {}", v["jobs"][0]);
    v
}

fn fail_under_fio(role: Role, removal: bool) {
    if !have_fio() {
        eprintln!("SKIPPED: fio is not installed (apt-get install fio); the three-level fault test needs it");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let p = |n: &str| -> PathBuf { dir.path().join(n) };
    let (ro, wo, backing, sock) = (p("ro.img"), p("wo.img"), p("backing.img"), p("nbd.sock"));
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(64 << 20))
        .expect("backing file");
    tiercache(&[
        "format",
        "--mode",
        "tica",
        "--ro-ssd",
        ro.to_str().unwrap(),
        "--wo-ssd",
        wo.to_str().unwrap(),
        "--backing",
        backing.to_str().unwrap(),
        "--size",
        "12MiB",
        "--dram-size",
        "1MiB",
    ]);
    let ro_f = Arc::new(FaultyDev::new(dev(&ro), 3));
    let wo_f = Arc::new(FaultyDev::new(dev(&wo), 5));
    let cache = open_with_devices(ro_f.clone(), wo_f.clone(), dev(&backing), &backing)
        .expect("open the cache");
    cache.start_background();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let export: Arc<dyn tiercache_nbd::Backend> = Arc::new(Export {
        design: Arc::new(tiercache_three_level::Tica::new(Arc::clone(&cache))),
        read_only: false,
    });
    let server = tiercache_nbd::Server::new([("tiercache".to_string(), export)]).unwrap();
    let handle = rt.block_on(server.serve_unix(&sock)).expect("listen");
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let child = Command::new("fio")
        .args(job())
        .args([
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--iodepth=16",
            "--do_verify=1",
            "--verify_backlog=512",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fio");
    // Fail the device while fio writes and verifies.
    let t0 = Instant::now();
    while cache.stats_json()["write_pages"].as_u64().unwrap_or(0) < 1500 {
        assert!(t0.elapsed() < Duration::from_secs(60), "fio does not write");
        std::thread::sleep(Duration::from_millis(10));
    }
    let d = if role == Role::RoSsd { &ro_f } else { &wo_f };
    if removal {
        d.fail_all();
    } else {
        d.add_rule(FaultRule::always(OpKinds::ALL).with_probability(0.5))
            .unwrap();
    }
    let injected_at = cache.stats_json()["write_pages"].as_u64().unwrap_or(0);
    let out = child.wait_with_output().expect("fio");
    let v = fio_result(out, "under load");
    let st = cache.stats_json();
    assert_eq!(st["degraded"], true, "{st}");
    assert_eq!(
        st["failed_device"],
        serde_json::to_value(role).unwrap(),
        "{st}"
    );
    assert!(
        st["status"].as_str().unwrap().contains(role.label()),
        "{st}"
    );
    let deg = cache.degraded().expect("degraded");
    assert_eq!(deg.lost, 0, "dirty pages lost: {deg:?}");
    assert!(d.injected().total() > 0, "the fault was injected");
    assert!(
        st["degraded_io"]["writes"].as_u64().unwrap() > 0,
        "fio kept writing after the failure (injected after {injected_at} pages): {st}"
    );
    let written = v["jobs"][0]["write"]["io_bytes"].as_u64().unwrap();
    assert_eq!(written, 48 << 20, "fio wrote everything");
    eprintln!(
        "{} {}: fio wrote {written} bytes and verified them; {} dirty pages written back at the failure; status: {}",
        role.label(),
        if removal { "removed" } else { "errors" },
        deg.written_back,
        st["status"]
    );
    rt.block_on(handle.shutdown());
    cache.shutdown(false).expect("shutdown");
    // The backing file alone holds every block fio wrote.
    let out = Command::new("fio")
        .args(job())
        .args([
            "--ioengine=psync",
            &format!("--filename={}", backing.display()),
            "--verify_only",
        ])
        .output()
        .expect("fio");
    let v = fio_result(out, "verify of the backing file");
    assert_eq!(v["jobs"][0]["read"]["io_bytes"].as_u64().unwrap(), 48 << 20);
    // The failed pair is not served again without a new format.
    let e = tiercache_three_level::open(&tiercache_three_level::OpenOptions {
        ssd: wo.clone(),
        ..Default::default()
    })
    .err()
    .expect("a degraded pair must not open");
    assert!(format!("{e:#}").contains("Format the pair again"), "{e:#}");
}

#[test]
fn fio_verify_while_ro_ssd_fails_with_errors() {
    fail_under_fio(Role::RoSsd, false);
}

#[test]
fn fio_verify_while_ro_ssd_is_removed() {
    fail_under_fio(Role::RoSsd, true);
}

#[test]
fn fio_verify_while_wo_ssd_fails_with_errors() {
    fail_under_fio(Role::WoSsd, false);
}

#[test]
fn fio_verify_while_wo_ssd_is_removed() {
    fail_under_fio(Role::WoSsd, true);
}
