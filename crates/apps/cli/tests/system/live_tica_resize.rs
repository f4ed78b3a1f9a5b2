//! `tiercache resize` of a served three-level (TICA) cache: fio's crc32c
//! verification at queue depth 32 passes while both SSDs grow and shrink
//! five times; `stats`, the SSD files, the metrics and `sim --like` follow
//! the sizes; `--device` resizes one SSD; a kill -9 at every metadata write
//! of a grow and of a shrink recovers each SSD at its old size or its new
//! one with every acknowledged write; impossible resizes are refused with
//! one line and change nothing; on loop devices each SSD keeps its size
//! and grows only to its end.
//!
//! Tests skip with a `SKIPPED:` message when a tool is missing
//! (`scripts/setup.sh` installs them).

use crate::common;
use common::resize::{file_len, have, resize, VerifyingFio};

use common::{
    bin, init_backing, run_load, tail, verify_all, wait_until, Ledger, LoadShape, NbdClient, Rng,
    ServeProc,
};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// The environment variable that stops a resize after its Nth metadata
/// write (the same for every design).
const STOP_AT: &str = tiercache_runtime::resize::STOP_AT_ENV;

/// `tiercache format --design tica` of `ro.img` and `wo.img` in `dir`.
fn format_pair(dir: &Path, size: &str, max: &str) {
    let out = Command::new(bin())
        .current_dir(dir)
        .args(["format", "--design", "tica", "--ro-ssd", "ro.img"])
        .args(["--wo-ssd", "wo.img", "--backing", "backing.img"])
        .args(["--dram-size", "1MiB", "--size", size, "--max-size", max])
        .output()
        .expect("run tiercache format");
    assert!(
        out.status.success(),
        "format: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn bytes(s: &str) -> u64 {
    s.trim_end_matches("MiB").parse::<u64>().unwrap() * MIB
}

/// The SSD pages `sim --like` takes from the device (its `ssd_bytes`).
fn like_pages(dir: &Path, ssd: &Path) -> u64 {
    let trace = dir.join("t.csv");
    std::fs::write(
        &trace,
        "128166372003061629,hm,0,Write,4096,4096,100\n128166372003061630,hm,0,Read,4096,4096,100\n",
    )
    .unwrap();
    let out = common::tiercache(&[
        "sim",
        "--like",
        ssd.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--json",
        "--no-timing",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let row = if v.is_array() { &v[0] } else { &v };
    row["ssd_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no ssd_bytes in sim --like: {row}"))
        / row["page_bytes"].as_u64().unwrap()
}

/// The `tiercache_slots` gauge of a `/metrics` scrape at `url`.
fn scraped_slots(url: &str) -> u64 {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(host).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix("tiercache_slots "))
        .unwrap_or_else(|| panic!("no tiercache_slots in the scrape:\n{body}"))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

#[test]
fn fio_verifies_while_the_ssds_grow_and_shrink_five_times() {
    if !have("fio") {
        eprintln!("SKIPPED: fio is not installed (scripts/setup.sh installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (ro, wo) = (dir.join("ro.img"), dir.join("wo.img"));
    std::fs::File::create(dir.join("backing.img"))
        .unwrap()
        .set_len(256 * MIB)
        .unwrap();
    format_pair(dir, "24MiB", "96MiB");
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    let mut srv = ServeProc::start_with(&wo, &sock, &log, &["--metrics", "127.0.0.1:0"]);
    let metrics = srv.stats()["runtime"]["metrics"]
        .as_str()
        .expect("runtime.metrics in stats")
        .to_string();
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let mut fio = VerifyingFio::start(&uri, 128 * MIB, &dir.join("fio.json"));
    wait_until("dirty pages under fio", Duration::from_secs(300), || {
        assert!(fio.running(), "fio ended: {}", tail(&dir.join("fio.err")));
        srv.stats()["dirty_pages"].as_u64().unwrap() >= 256
    });
    let sizes = [
        "96MiB", "16MiB", "64MiB", "12MiB", "80MiB", "20MiB", "96MiB", "8MiB", "48MiB", "24MiB",
    ];
    let mut before = srv.stats()["slots"].as_u64().unwrap();
    let mut moved = 0;
    for size in sizes {
        assert!(fio.running(), "fio ended before resizing to {size}");
        let (ok, out, err) = resize(&wo, size, &["--json"]);
        assert!(ok, "resize to {size} failed: {out}{err}\n{}", tail(&log));
        let v: Value = serde_json::from_str(&out).unwrap();
        let slots = v["slots"].as_u64().unwrap();
        assert_eq!(v["old_slots"].as_u64(), Some(before), "{v}");
        assert_ne!(slots, before, "{v}");
        moved += v["moved_pages"].as_u64().unwrap();
        assert_eq!(v["ro_slots"].as_u64(), Some(slots), "{v}");
        assert_eq!(
            (file_len(&ro), file_len(&wo)),
            (bytes(size), bytes(size)),
            "the SSD files follow the size"
        );
        let st = srv.stats();
        assert_eq!(st["slots"].as_u64(), Some(slots), "stats after {size}");
        assert_eq!(st["ro_ssd"]["slots"].as_u64(), Some(slots));
        assert!(st["wo_ssd"]["used_pages"].as_u64().unwrap() < slots);
        let pages = st["policy"]["ssd_pages"].as_u64().unwrap();
        assert_eq!(
            pages,
            tiercache_tica_live::policy_ssd_pages(slots as usize) as u64
        );
        assert_eq!(like_pages(dir, &ro), pages, "sim --like after {size}");
        assert_eq!(scraped_slots(&metrics), slots, "the metrics after {size}");
        // Still writing and verifying after the resize: it ran under load.
        assert!(
            fio.running(),
            "fio failed during the resize to {size}: {}",
            tail(&dir.join("fio.err"))
        );
        before = slots;
    }
    assert!(moved > 0, "no shrink moved a page past its new end");
    let report = fio.stop();
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "fio reported an error: {job}");
    assert!(
        job["read"]["io_bytes"].as_u64().unwrap() > 0,
        "fio verified nothing"
    );
    // The size survives a restart.
    let _ = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status();
    assert!(srv.wait_exit().success(), "{}", tail(&log));
    let srv = ServeProc::start(&ro, &sock, &log);
    assert_eq!(srv.stats()["slots"].as_u64(), Some(before));
}

/// Each SSD's slots in `stats`: (RO-SSD, WO-SSD).
fn ssd_slots(st: &Value) -> (u64, u64) {
    (
        st["ro_ssd"]["slots"].as_u64().unwrap(),
        st["wo_ssd"]["slots"].as_u64().unwrap(),
    )
}

/// One kill -9 round: the server stops its resize from `from` to `to`
/// after metadata write `n` and is killed there while a pipelined load
/// runs; the restarted server must hold every acknowledged write and each
/// SSD at the old size or the new one. Returns whether the resize stopped
/// (false: it has fewer than `n` metadata writes and completed).
#[allow(clippy::too_many_arguments)]
fn kill_round(
    dir: &Path,
    ledger: &mut Ledger,
    rng: &mut Rng,
    from: &str,
    to: &str,
    n: u32,
    slots: (u64, u64),
) -> bool {
    let wo = dir.join("wo.img");
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    // Both SSDs at `from`, with a clean start.
    {
        let mut srv = ServeProc::start(&wo, &sock, &log);
        let (ok, out, err) = resize(&wo, from, &[]);
        assert!(ok, "setting up {from}: {out}{err}");
        let _ = Command::new("kill")
            .args(["-TERM", &srv.child.id().to_string()])
            .status();
        assert!(srv.wait_exit().success(), "{}", tail(&log));
    }
    let n_s = n.to_string();
    let mut srv = ServeProc::start_env(&wo, &sock, &log, &[], &[(STOP_AT, &n_s)]);
    let mut c = NbdClient::connect(&sock).expect("connect");
    let shape = LoadShape {
        depth: 8,
        ..LoadShape::default()
    };
    let target = ledger.writes_acked + 600;
    match run_load(
        &mut c,
        ledger,
        rng,
        shape,
        common::Until::WritesAcked(target),
    ) {
        Ok(common::LoadEnd::Done) => {}
        other => panic!("load before the resize: {other:?}\n{}", tail(&log)),
    }
    let marker = format!("resize stopped after metadata write {n} ");
    let mut resizer = Command::new(bin())
        .args(["resize", "--cache"])
        .arg(&wo)
        .args(["--size", to])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("resize starts");
    // Requests sent while the resize runs: the kill lands with them in flight.
    let load = {
        let mut c2 = NbdClient::connect(&sock).expect("connect");
        let mut l = std::mem::replace(ledger, Ledger::new(0));
        let mut r = Rng(rng.next());
        std::thread::spawn(move || {
            let end = std::time::Instant::now() + Duration::from_secs(600);
            let e = run_load(&mut c2, &mut l, &mut r, shape, end);
            (l, e)
        })
    };
    wait_until(
        "the resize to stop or end",
        Duration::from_secs(120),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains(&marker) || resizer.try_wait().unwrap().is_some()
        },
    );
    let hit = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains(&marker);
    srv.kill9();
    let _ = resizer.kill();
    let _ = resizer.wait();
    let (l, end) = load.join().expect("load thread");
    *ledger = l;
    if let Err(e) = end {
        panic!("load during the resize: {e}\n{}", tail(&log));
    }
    drop(c);
    // Restart: every acknowledged write is there, each SSD old or new.
    let srv = ServeProc::start(&wo, &sock, &log);
    let mut c = NbdClient::connect(&sock).expect("connect after the kill");
    verify_all(&mut c, ledger).unwrap_or_else(|e| {
        panic!(
            "{from} -> {to}, killed after write {n}: {e}\n{}",
            tail(&log)
        )
    });
    c.disconnect();
    let (ro_slots, wo_slots) = ssd_slots(&srv.stats());
    for (what, s) in [("RO-SSD", ro_slots), ("WO-SSD", wo_slots)] {
        assert!(
            s == slots.0 || s == slots.1,
            "{from} -> {to}, killed after write {n}: the {what} has {s} slots, neither {} nor {}",
            slots.0,
            slots.1
        );
    }
    drop(srv);
    hit
}

#[test]
fn kill_9_at_every_metadata_write_of_a_grow_and_a_shrink_loses_no_acknowledged_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let blocks = 4096; // 16 MiB exported
    init_backing(&dir.join("backing.img"), blocks);
    format_pair(dir, "8MiB", "16MiB");
    let wo = dir.join("wo.img");
    // The slot counts of the two sizes.
    let slots_at = |size: &str| -> u64 {
        let sock = dir.join("nbd.sock");
        let log = dir.join("serve.log");
        let srv = ServeProc::start(&wo, &sock, &log);
        let (ok, out, err) = resize(&wo, size, &["--json"]);
        assert!(ok, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        drop(srv);
        v["slots"].as_u64().unwrap()
    };
    let slots = (slots_at("8MiB"), slots_at("16MiB"));
    let mut ledger = Ledger::new(blocks);
    let mut rng = Rng(0x71ca_5123);
    for (from, to) in [("8MiB", "16MiB"), ("16MiB", "8MiB")] {
        let mut n = 1;
        while kill_round(dir, &mut ledger, &mut rng, from, to, n, slots) {
            n += 1;
        }
        eprintln!(
            "{from} -> {to}: killed after each of its {} metadata writes",
            n - 1
        );
        assert!(n > 8, "{from} -> {to}: only {} metadata writes", n - 1);
    }
}

#[test]
fn one_ssd_resizes_with_device_and_impossible_resizes_are_refused_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (ro, wo) = (dir.join("ro.img"), dir.join("wo.img"));
    std::fs::File::create(dir.join("backing.img"))
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    format_pair(dir, "16MiB", "32MiB");
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    let srv = ServeProc::start(&wo, &sock, &log);
    let mut c = NbdClient::connect(&sock).unwrap();
    for b in 0..512u64 {
        c.write(b * 4096, &common::make_block(b, 1), false)
            .unwrap()
            .unwrap();
    }
    let (ro_slots, wo_slots) = ssd_slots(&srv.stats());
    let refused = |size: &str, extra: &[&str], why: &str| {
        let (ok, out, err) = resize(&wo, size, extra);
        assert!(!ok, "resize to {size} succeeded: {out}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("tiercache: error: resize refused: ") && err.contains(why),
            "resize to {size}: {err}"
        );
        assert_eq!(ssd_slots(&srv.stats()), (ro_slots, wo_slots));
        assert_eq!((file_len(&ro), file_len(&wo)), (16 * MIB, 16 * MIB));
    };
    refused("64MiB", &[], "format the cache with --max-size");
    refused("5000000", &[], "not a multiple of 4 KiB");
    refused("4KiB", &[], "holds no line");
    let other = dir.join("other.img");
    std::fs::File::create(&other)
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    refused(
        "8MiB",
        &["--device", other.to_str().unwrap()],
        "not an SSD of a three-level cache",
    );
    // --device: only that SSD; the policy follows the smaller one.
    let (ok, out, err) = resize(&wo, "8MiB", &["--device", ro.to_str().unwrap(), "--json"]);
    assert!(ok, "{out}{err}\n{}", tail(&log));
    let v: Value = serde_json::from_str(&out).unwrap();
    let (ro_now, wo_now) = ssd_slots(&srv.stats());
    assert!(ro_now < ro_slots && wo_now == wo_slots, "{v}");
    assert_eq!((file_len(&ro), file_len(&wo)), (8 * MIB, 16 * MIB));
    assert_eq!(
        srv.stats()["policy"]["ssd_pages"].as_u64(),
        Some(tiercache_tica_live::policy_ssd_pages(ro_now as usize) as u64)
    );
    assert_eq!(like_pages(dir, &wo), v["ssd_pages"].as_u64().unwrap());
    // The text answer is one line naming what changed.
    let (ok, out, err) = resize(&wo, "32MiB", &[]);
    assert!(ok, "{err}");
    assert!(
        out.lines().count() == 1 && out.contains("RO-SSD") && out.contains("WO-SSD"),
        "{out}"
    );
    for b in 0..512u64 {
        let d = c.read(b * 4096, 4096).unwrap().unwrap();
        assert_eq!(common::parse_block(b, &d), Ok(1), "block {b}");
    }
}

/// On block devices (loop devices) each SSD keeps its size: a shrink
/// leaves the devices as they are, a grow goes up to their end and no
/// further (refused with one line, nothing changed).
#[test]
fn block_devices_keep_their_size_and_grow_only_to_their_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    struct Loop(String);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let mut loops = Vec::new();
    for name in ["ro-loop.img", "wo-loop.img"] {
        let img = dir.join(name);
        std::fs::File::create(&img)
            .unwrap()
            .set_len(32 * MIB)
            .unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&img)
            .output()
            .expect("losetup");
        if !out.status.success() {
            eprintln!(
                "SKIPPED: no loop device ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return;
        }
        loops.push(Loop(
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
        ));
    }
    let (ro, wo) = (Path::new(&loops[0].0), Path::new(&loops[1].0));
    std::fs::File::create(dir.join("backing.img"))
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    common::tiercache(&[
        "format",
        "--design",
        "tica",
        "--ro-ssd",
        &loops[0].0,
        "--wo-ssd",
        &loops[1].0,
        "--backing",
        dir.join("backing.img").to_str().unwrap(),
        "--dram-size",
        "1MiB",
        "--max-size",
        "64MiB",
        "--force",
    ]);
    let dev_size = |p: &Path| {
        std::fs::File::open(p)
            .map(|mut f| std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap())
            .unwrap()
    };
    // The control socket is the device's: /dev/loopN.ctl.
    let (sock, log) = (dir.join("nbd.sock"), dir.join("serve.log"));
    let srv = ServeProc::start(wo, &sock, &log);
    let full = ssd_slots(&srv.stats());
    let (ok, _, err) = resize(wo, "16MiB", &[]);
    assert!(ok, "{err}\n{}", tail(&log));
    let half = ssd_slots(&srv.stats());
    assert!(half.0 < full.0 && half.1 < full.1, "{half:?} {full:?}");
    assert_eq!((dev_size(ro), dev_size(wo)), (32 * MIB, 32 * MIB));
    let (ok, _, err) = resize(wo, "32MiB", &[]);
    assert!(ok, "{err}");
    assert_eq!(ssd_slots(&srv.stats()), full);
    let (ok, _, err) = resize(wo, "48MiB", &[]);
    assert!(!ok && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("resize refused: cannot grow the RO-SSD"),
        "{err}"
    );
    assert_eq!(ssd_slots(&srv.stats()), full);
    drop(srv);
}
