//! `tiercache resize` of a served tiered volume (`--design oodt`, capacity
//! `slow`): the fast tier grows, or shrinks by moving its blocks home, while
//! the exported size stays. fio's crc32c verification at queue depth 32
//! passes while the fast tier grows and shrinks five times; `stats`, the
//! fast-tier file, the metrics and `sim --like` follow the size; a kill -9
//! at every metadata write of a grow and of a shrink recovers the old size
//! or the new one with every acknowledged write; impossible resizes
//! (a volume of capacity sum among them) are refused with one line and
//! change nothing.
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

/// The environment variable that stops a resize after its Nth metadata write.
const STOP_AT: &str = tiercache_runtime::resize::STOP_AT_ENV;

/// `tiercache format --design oodt` of `fast.img` over `slow.img` in `dir`,
/// 64 KiB blocks, planning every 50 requests.
fn format_volume(dir: &Path, size: &str, capacity: &str) {
    let out = Command::new(bin())
        .current_dir(dir)
        .args(["format", "--design", "oodt", "--tiers", "fast.img,slow.img"])
        .args([
            "--size",
            size,
            "--tier-block",
            "64KiB",
            "--capacity",
            capacity,
        ])
        .args(["--plan-every", "50"])
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

fn fast_slots(st: &Value) -> u64 {
    st["tiers"][0]["slots"].as_u64().expect("tiers[0].slots")
}

/// The fast-tier blocks `sim --like` takes from the volume.
fn like_blocks(dir: &Path, fast: &Path) -> u64 {
    let trace = dir.join("t.csv");
    std::fs::write(
        &trace,
        "128166372003061629,hm,0,Write,4096,4096,100\n128166372003061630,hm,0,Read,4096,4096,100\n",
    )
    .unwrap();
    let out = common::tiercache(&[
        "sim",
        "--like",
        fast.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--json",
        "--no-timing",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let row = if v.is_array() { &v[0] } else { &v };
    row["fast_tier_blocks"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fast_tier_blocks in sim --like: {row}"))
}

/// The `tiercache_tier_slots{tier="fast"}` gauge of a `/metrics` scrape at `url`.
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
        .find_map(|l| l.strip_prefix("tiercache_tier_slots{tier=\"fast\"} "))
        .unwrap_or_else(|| panic!("no fast tier_slots in the scrape:\n{body}"))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

#[test]
fn fio_verifies_while_the_fast_tier_grows_and_shrinks_five_times() {
    if !have("fio") {
        eprintln!("SKIPPED: fio is not installed (scripts/setup.sh installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fast = dir.join("fast.img");
    std::fs::File::create(dir.join("slow.img"))
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    format_volume(dir, "8MiB", "slow");
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    let mut srv = ServeProc::start_with(&fast, &sock, &log, &["--metrics", "127.0.0.1:0"]);
    let metrics = srv.stats()["runtime"]["metrics"]
        .as_str()
        .expect("runtime.metrics in stats")
        .to_string();
    let volume = srv.stats()["volume_bytes"].as_u64().unwrap();
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let mut fio = VerifyingFio::start(&uri, 32 * MIB, &dir.join("fio.json"));
    wait_until("promotions under fio", Duration::from_secs(300), || {
        assert!(fio.running(), "fio ended: {}", tail(&dir.join("fio.err")));
        srv.stats()["tiers"][0]["used_slots"].as_u64().unwrap() >= 32
    });
    let sizes = [
        "24MiB", "4MiB", "16MiB", "2MiB", "20MiB", "6MiB", "32MiB", "3MiB", "12MiB", "8MiB",
    ];
    let mut before = fast_slots(&srv.stats());
    let mut moved = 0;
    for size in sizes {
        assert!(fio.running(), "fio ended before resizing to {size}");
        // Blocks in the slots a shrink drops: promoted since the last resize.
        wait_until("promotions", Duration::from_secs(300), || {
            srv.stats()["tiers"][0]["used_slots"].as_u64().unwrap() * 2 >= before
        });
        let (ok, out, err) = resize(&fast, size, &["--json"]);
        assert!(ok, "resize to {size} failed: {out}{err}\n{}", tail(&log));
        let v: Value = serde_json::from_str(&out).unwrap();
        let slots = v["slots"].as_u64().unwrap();
        assert_eq!(v["old_slots"].as_u64(), Some(before), "{v}");
        assert_ne!(slots, before, "{v}");
        assert_eq!(v["volume_bytes"].as_u64(), Some(volume), "{v}");
        moved += v["moved_blocks"].as_u64().unwrap();
        assert_eq!(file_len(&fast), bytes(size), "the fast-tier file follows");
        let st = srv.stats();
        assert_eq!(fast_slots(&st), slots, "stats after {size}");
        assert!(st["tiers"][0]["used_slots"].as_u64().unwrap() <= slots);
        assert_eq!(st["volume_bytes"].as_u64(), Some(volume), "exported size");
        assert_eq!(st["fast_tier_bytes"].as_u64(), Some(bytes(size)));
        assert_eq!(like_blocks(dir, &fast), slots, "sim --like after {size}");
        assert_eq!(scraped_slots(&metrics), slots, "the metrics after {size}");
        assert!(
            fio.running(),
            "fio failed during the resize to {size}: {}",
            tail(&dir.join("fio.err"))
        );
        before = slots;
    }
    assert!(moved > 0, "no shrink moved a block home");
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
    let srv = ServeProc::start(&fast, &sock, &log);
    assert_eq!(fast_slots(&srv.stats()), before);
}

/// One kill -9 round: the server stops its resize from `from` to `to`
/// after metadata write `n` and is killed there while a pipelined load
/// runs; the restarted server must hold every acknowledged write and the
/// fast tier at the old size or the new one. Returns whether the resize
/// stopped (false: it has fewer than `n` metadata writes and completed).
fn kill_round(
    dir: &Path,
    ledger: &mut Ledger,
    rng: &mut Rng,
    (from, to): (&str, &str),
    n: u32,
    slots: (u64, u64),
) -> bool {
    let fast = dir.join("fast.img");
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    // The fast tier at `from`, with a clean start.
    {
        let mut srv = ServeProc::start(&fast, &sock, &log);
        let (ok, out, err) = resize(&fast, from, &[]);
        assert!(ok, "setting up {from}: {out}{err}");
        let _ = Command::new("kill")
            .args(["-TERM", &srv.child.id().to_string()])
            .status();
        assert!(srv.wait_exit().success(), "{}", tail(&log));
    }
    let n_s = n.to_string();
    let mut srv = ServeProc::start_env(&fast, &sock, &log, &[], &[(STOP_AT, &n_s)]);
    let mut c = NbdClient::connect(&sock).expect("connect");
    let shape = LoadShape {
        depth: 8,
        hot_blocks: ledger.blocks.len() as u64,
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
        .arg(&fast)
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
    // `check` finds the metadata consistent as the kill left it.
    let out = Command::new(bin())
        .args(["check", "--cache"])
        .arg(&fast)
        .output()
        .expect("run tiercache check");
    assert!(
        out.status.success(),
        "{from} -> {to}, killed after write {n}: check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Restart: every acknowledged write is there, the fast tier old or new.
    let srv = ServeProc::start(&fast, &sock, &log);
    let mut c = NbdClient::connect(&sock).expect("connect after the kill");
    verify_all(&mut c, ledger).unwrap_or_else(|e| {
        panic!(
            "{from} -> {to}, killed after write {n}: {e}\n{}",
            tail(&log)
        )
    });
    c.disconnect();
    let s = fast_slots(&srv.stats());
    assert!(
        s == slots.0 || s == slots.1,
        "{from} -> {to}, killed after write {n}: the fast tier has {s} slots, neither {} nor {}",
        slots.0,
        slots.1
    );
    drop(srv);
    hit
}

#[test]
fn kill_9_at_every_metadata_write_of_a_grow_and_a_shrink_loses_no_acknowledged_write() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let blocks = 4096; // 16 MiB exported
    init_backing(&dir.join("slow.img"), blocks);
    format_volume(dir, "4MiB", "slow");
    let fast = dir.join("fast.img");
    // The slot counts of the two sizes.
    let slots_at = |size: &str| -> u64 {
        let sock = dir.join("nbd.sock");
        let log = dir.join("serve.log");
        let srv = ServeProc::start(&fast, &sock, &log);
        let (ok, out, err) = resize(&fast, size, &["--json"]);
        assert!(ok, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        drop(srv);
        v["slots"].as_u64().unwrap()
    };
    let slots = (slots_at("4MiB"), slots_at("2MiB"));
    let mut ledger = Ledger::new(blocks);
    let mut rng = Rng(0x0bd7_5123);
    for (from, to) in [("2MiB", "4MiB"), ("4MiB", "2MiB")] {
        let mut n = 1;
        while kill_round(dir, &mut ledger, &mut rng, (from, to), n, slots) {
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
fn impossible_resizes_are_refused_with_one_line_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::File::create(dir.join("slow.img"))
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    format_volume(dir, "4MiB", "slow");
    let fast = dir.join("fast.img");
    let log = dir.join("serve.log");
    let srv = ServeProc::start(&fast, &dir.join("nbd.sock"), &log);
    let slots = fast_slots(&srv.stats());
    let refused = |size: &str, why: &str| {
        let (ok, out, err) = resize(&fast, size, &[]);
        assert!(!ok, "resize to {size} succeeded: {out}");
        assert!(
            err.starts_with("tiercache: error: resize refused: ")
                && err.contains(why)
                && err.trim_end().lines().count() == 1,
            "{size}: {err}"
        );
        assert_eq!(fast_slots(&srv.stats()), slots, "{size} changed the size");
        assert_eq!(file_len(&fast), 4 * MIB, "{size} changed the file");
    };
    refused("5000000", "not a multiple of 4 KiB");
    refused("128KiB", "holds no block");
    // The same size: nothing to do, no metadata write.
    let (ok, out, err) = resize(&fast, "4MiB", &["--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["metadata_writes"].as_u64(), Some(0), "{v}");
    assert!(v["message"].as_str().unwrap().starts_with("nothing to do"));
    drop(srv);
    // Capacity sum: the fast tier is part of the exported size.
    let sum = tempfile::tempdir().unwrap();
    std::fs::File::create(sum.path().join("slow.img"))
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    format_volume(sum.path(), "4MiB", "sum");
    let fast = sum.path().join("fast.img");
    let srv = ServeProc::start(&fast, &sum.path().join("nbd.sock"), &log);
    let before = srv.stats();
    let (ok, _, err) = resize(&fast, "8MiB", &[]);
    assert!(
        !ok && err.starts_with("tiercache: error: resize refused: ")
            && err.contains("capacity sum")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
    assert_eq!(fast_slots(&srv.stats()), fast_slots(&before));
    assert_eq!(file_len(&fast), 4 * MIB);
}

/// On a block device (a loop device) the fast tier keeps its size: a shrink
/// leaves the device as it is (and survives a restart), a grow goes up to
/// its end and no further (refused with one line, nothing changed).
#[test]
fn a_block_device_keeps_its_size_and_grows_only_to_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    struct Loop(String);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let img = dir.join("fast-loop.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(16 * MIB)
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
    let lo = Loop(String::from_utf8_lossy(&out.stdout).trim().to_string());
    let fast = Path::new(&lo.0);
    let slow = dir.join("slow.img");
    std::fs::File::create(&slow)
        .unwrap()
        .set_len(32 * MIB)
        .unwrap();
    common::tiercache(&[
        "format",
        "--design",
        "oodt",
        "--tiers",
        &format!("{},{}", lo.0, slow.display()),
        "--tier-block",
        "64KiB",
        "--capacity",
        "slow",
        "--force",
    ]);
    let dev_size = |p: &Path| {
        std::fs::File::open(p)
            .map(|mut f| std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap())
            .unwrap()
    };
    let (sock, log) = (dir.join("nbd.sock"), dir.join("serve.log"));
    let mut srv = ServeProc::start(fast, &sock, &log);
    let full = fast_slots(&srv.stats());
    let (ok, _, err) = resize(fast, "8MiB", &[]);
    assert!(ok, "{err}\n{}", tail(&log));
    let half = fast_slots(&srv.stats());
    assert!(half < full, "{half} {full}");
    assert_eq!(dev_size(fast), 16 * MIB, "the device keeps its size");
    // The smaller size is the volume's after a restart.
    let _ = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status();
    assert!(srv.wait_exit().success(), "{}", tail(&log));
    let srv = ServeProc::start(fast, &sock, &log);
    assert_eq!(fast_slots(&srv.stats()), half);
    let (ok, _, err) = resize(fast, "16MiB", &[]);
    assert!(ok, "{err}");
    assert_eq!(fast_slots(&srv.stats()), full);
    let (ok, _, err) = resize(fast, "32MiB", &[]);
    assert!(
        !ok && err.trim_end().lines().count() == 1 && err.contains("resize refused: "),
        "{err}"
    );
    assert!(err.contains("fewer than 33554432"), "{err}");
    assert_eq!(fast_slots(&srv.stats()), full);
}
