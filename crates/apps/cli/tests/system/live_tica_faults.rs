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

use crate::common;

use common::crash::tiercache_in;
use common::inproc::{dev, InProcess};
use common::{wait_until, READY_TIMEOUT};
use std::process::{Command, Stdio};
use std::sync::Arc;

use tiercache_io::{FaultRule, OpKinds};
use tiercache_tica_live::{open_with_devices, Role, Tica};

const DATA: &str = "48M";

fn have_fio() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The fio job both runs share: the same offsets and verify headers.
fn job() -> Vec<String> {
    [
        "--name=tica",
        common::FIO_NO_STATE,
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
    let mut served = InProcess::new();
    let (wo, backing) = (served.path("wo.img"), served.path("backing.img"));
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(64 << 20))
        .expect("backing file");
    let args = "format --mode tica --ro-ssd ro.img --wo-ssd wo.img --backing backing.img";
    tiercache_in(
        served.dir.path(),
        &format!("{args} --size 12MiB --dram-size 1MiB"),
    );
    let ro_f = served.faulty("ro.img", 3);
    let wo_f = served.faulty("wo.img", 5);
    let (r, w) = (ro_f.clone(), wo_f.clone());
    let design = served.serve(|| {
        let cache = open_with_devices(r, w, dev(&backing), &backing).expect("open the cache");
        cache.start_background();
        Arc::new(Tica::new(cache))
    });
    let cache = Arc::clone(design.store());
    let sock = &served.sock;
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
    wait_until("fio to write 1500 pages", READY_TIMEOUT, || {
        cache.stats_json()["write_pages"].as_u64().unwrap_or(0) >= 1500
    });
    // fio's pipelined writes arrive together: while the SSDs have room
    // they run as write batches, up to the failure.
    let before = cache.stats_json();
    assert!(
        before["wo_ssd"]["batched_page_writes"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no write ran in a batch before the failure: {before}"
    );
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
    served.stop();
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
    let e = tiercache_tica_live::open(&tiercache_tica_live::OpenOptions {
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
