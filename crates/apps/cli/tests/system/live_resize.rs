//! `tiercache resize` of a served SSD cache, fully associative and 8-way:
//! fio's crc32c verification at queue depth 32 passes while the cache grows
//! and shrinks five times;
//! `stats`, the cache file and `sim --like` follow the size; a kill -9 at
//! every metadata write of a grow and of a shrink recovers the old size or
//! the new one with every acknowledged write; impossible resizes are
//! refused with one line and change nothing.
//!
//! Tests skip with a `SKIPPED:` message when a tool is missing
//! (`scripts/setup.sh` installs them).

use crate::common;
use common::resize::{file_len, have, resize, VerifyingFio};

use common::{
    bin, format_cache, init_backing, run_load, tail, verify_all, wait_until, Ledger, LoadShape,
    NbdClient, Rng, ServeProc,
};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// The environment variable that stops a resize after its Nth metadata
/// write (the same for every design).
const STOP_AT: &str = tiercache_runtime::resize::STOP_AT_ENV;

/// The cache size `sim --like` takes from the device, in lines.
fn like_lines(dir: &Path, cache: &Path) -> u64 {
    let trace = dir.join("t.csv");
    std::fs::write(
        &trace,
        "128166372003061629,hm,0,Write,4096,4096,100\n128166372003061630,hm,0,Read,4096,4096,100\n",
    )
    .unwrap();
    let out = common::tiercache(&[
        "sim",
        "--like",
        cache.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--json",
        "--no-timing",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["cache_lines"].as_u64().unwrap()
}

#[test]
fn fio_verifies_while_the_cache_grows_and_shrinks_five_times() {
    grow_and_shrink_under_fio(&[]);
}

/// A set-associative cache starts again empty at each new size (its sets
/// change): every dirty line is written back first, and nothing is lost.
#[test]
fn fio_verifies_while_a_set_associative_cache_grows_and_shrinks_five_times() {
    grow_and_shrink_under_fio(&["--assoc", "8-way"]);
}

/// fio's crc32c verification at queue depth 32 through five grows and five
/// shrinks of a write-back cache formatted with `extra`.
fn grow_and_shrink_under_fio(extra: &[&str]) {
    if !have("fio") {
        eprintln!("SKIPPED: fio is not installed (scripts/setup.sh installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (cache, backing) = (dir.join("cache.img"), dir.join("backing.img"));
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(256 * MIB)
        .unwrap();
    let mut args = vec![
        "--max-size",
        "96MiB",
        "--write-policy",
        "write-back",
        "--dirty-target",
        "0.9",
    ];
    args.extend_from_slice(extra);
    let out = format_cache(&cache, &backing, "24MiB", &args);
    assert!(out.contains("metadata made for up to"), "{out}");
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    let mut srv = ServeProc::start_with(&cache, &sock, &log, &["--metrics", "127.0.0.1:0"]);
    let metrics = srv.stats()["runtime"]["metrics"]
        .as_str()
        .expect("runtime.metrics in stats")
        .to_string();
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let mut fio = VerifyingFio::start(&uri, 128 * MIB, &dir.join("fio.json"));
    wait_until("dirty lines under fio", Duration::from_secs(300), || {
        assert!(fio.running(), "fio ended: {}", tail(&dir.join("fio.err")));
        srv.stats()["dirty_lines"].as_u64().unwrap() >= 256
    });
    let sizes = [
        "96MiB", "16MiB", "64MiB", "12MiB", "80MiB", "20MiB", "96MiB", "8MiB", "48MiB", "24MiB",
    ];
    let mut before = srv.stats()["slots"].as_u64().unwrap();
    for size in sizes {
        assert!(fio.running(), "fio ended before resizing to {size}");
        let (ok, out, err) = resize(&cache, size, &["--json"]);
        assert!(ok, "resize to {size} failed: {out}{err}\n{}", tail(&log));
        let v: Value = serde_json::from_str(&out).unwrap();
        let slots = v["slots"].as_u64().unwrap();
        assert_eq!(v["old_slots"].as_u64(), Some(before), "{v}");
        assert_ne!(slots, before, "{v}");
        if extra.contains(&"--assoc") {
            // Its sets change: it starts again empty, every line dropped.
            // (fio refills it at once, so only the answer shows it.)
            assert!(v["dropped_lines"].as_u64().unwrap() > 0, "{v}");
        }
        let bytes = tiercache_sim_bytes(size);
        assert_eq!(file_len(&cache), bytes, "the cache file follows the size");
        let st = srv.stats();
        assert_eq!(st["slots"].as_u64(), Some(slots), "stats after {size}");
        assert!(st["occupied_lines"].as_u64().unwrap() <= slots);
        assert_eq!(
            st["config"]["cache_bytes"].as_u64(),
            Some(slots * 4096),
            "{st}"
        );
        assert_eq!(like_lines(dir, &cache), slots, "sim --like after {size}");
        assert_eq!(scraped_slots(&metrics), slots, "the metrics after {size}");
        // Still writing and verifying after the resize: it ran under load.
        assert!(
            fio.running(),
            "fio failed during the resize to {size}: {}",
            tail(&dir.join("fio.err"))
        );
        before = slots;
    }
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
    let srv = ServeProc::start(&cache, &sock, &log);
    assert_eq!(srv.stats()["slots"].as_u64(), Some(before));
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

/// Bytes of a size written like "96MiB".
fn tiercache_sim_bytes(s: &str) -> u64 {
    s.trim_end_matches("MiB").parse::<u64>().unwrap() * MIB
}

/// One kill -9 round: the server stops its resize from `from` to `to`
/// after metadata write `n` and is killed there while a pipelined load
/// waits; the restarted server must hold every acknowledged write and the
/// old size or the new one. Returns whether the resize stopped (false: it
/// has fewer than `n` metadata writes and completed).
#[allow(clippy::too_many_arguments)]
fn kill_round(
    dir: &Path,
    cache: &Path,
    ledger: &mut Ledger,
    rng: &mut Rng,
    from: &str,
    to: &str,
    n: u32,
    sizes: (u64, u64),
) -> bool {
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    // The cache at `from`, with a clean start.
    {
        let mut srv = ServeProc::start(cache, &sock, &log);
        let (ok, out, err) = resize(cache, from, &[]);
        assert!(ok, "setting up {from}: {out}{err}");
        let _ = Command::new("kill")
            .args(["-TERM", &srv.child.id().to_string()])
            .status();
        assert!(srv.wait_exit().success(), "{}", tail(&log));
    }
    let n_s = n.to_string();
    let mut srv = ServeProc::start_env(cache, &sock, &log, &[], &[(STOP_AT, &n_s)]);
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
        .arg(cache)
        .args(["--size", to])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("resize starts");
    // Requests sent while the resize runs: they wait for its pause, and
    // the kill lands with them in flight.
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
    match end {
        Ok(_) => {}
        Err(e) => panic!("load during the resize: {e}\n{}", tail(&log)),
    }
    drop(c);
    // Restart: every acknowledged write is there, the size is old or new.
    let srv = ServeProc::start(cache, &sock, &log);
    let mut c = NbdClient::connect(&sock).expect("connect after the kill");
    verify_all(&mut c, ledger).unwrap_or_else(|e| {
        panic!(
            "{from} -> {to}, killed after write {n}: {e}\n{}",
            tail(&log)
        )
    });
    c.disconnect();
    let slots = srv.stats()["slots"].as_u64().unwrap();
    assert!(
        slots == sizes.0 || slots == sizes.1,
        "{from} -> {to}, killed after write {n}: {slots} slots, neither {} nor {}",
        sizes.0,
        sizes.1
    );
    drop(srv);
    hit
}

#[test]
fn kill_9_at_every_metadata_write_of_a_grow_and_a_shrink_loses_no_acknowledged_write() {
    kill_at_every_metadata_write(&[]);
}

#[test]
fn kill_9_at_every_metadata_write_of_a_set_associative_resize_loses_no_acknowledged_write() {
    kill_at_every_metadata_write(&["--assoc", "8-way"]);
}

/// kill -9 at each metadata write of a grow and of a shrink of a cache
/// formatted with `extra`, under a write load; every acknowledged write
/// reads back and the size is the old one or the new one.
fn kill_at_every_metadata_write(extra: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (cache, backing) = (dir.join("cache.img"), dir.join("backing.img"));
    let blocks = 4096; // 16 MiB exported
    init_backing(&backing, blocks);
    let mut args = vec![
        "--max-size",
        "16MiB",
        "--write-policy",
        "write-back",
        "--dirty-target",
        "0.9",
    ];
    args.extend_from_slice(extra);
    format_cache(&cache, &backing, "8MiB", &args);
    // The slot counts of the two sizes.
    let slots_at = |size: &str| -> u64 {
        let sock = dir.join("nbd.sock");
        let log = dir.join("serve.log");
        let srv = ServeProc::start(&cache, &sock, &log);
        let (ok, out, err) = resize(&cache, size, &["--json"]);
        assert!(ok, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        drop(srv);
        v["slots"].as_u64().unwrap()
    };
    let sizes = (slots_at("8MiB"), slots_at("16MiB"));
    let mut ledger = Ledger::new(blocks);
    let mut rng = Rng(0x005e_512e);
    for (from, to) in [("8MiB", "16MiB"), ("16MiB", "8MiB")] {
        let mut n = 1;
        while kill_round(dir, &cache, &mut ledger, &mut rng, from, to, n, sizes) {
            n += 1;
        }
        eprintln!(
            "{from} -> {to}: killed after each of its {} metadata writes",
            n - 1
        );
        assert!(n > 4, "{from} -> {to}: only {} metadata writes", n - 1);
    }
}

#[test]
fn impossible_resizes_are_refused_with_one_line_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (cache, backing) = (dir.join("cache.img"), dir.join("backing.img"));
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    format_cache(&cache, &backing, "16MiB", &[]);
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    let srv = ServeProc::start(&cache, &sock, &log);
    let slots = srv.stats()["slots"].as_u64().unwrap();
    let refused = |size: &str, why: &str| {
        let (ok, out, err) = resize(&cache, size, &[]);
        assert!(!ok, "resize to {size} succeeded: {out}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("tiercache: error: resize refused: ") && err.contains(why),
            "resize to {size}: {err}"
        );
        assert_eq!(srv.stats()["slots"].as_u64(), Some(slots));
        assert_eq!(file_len(&cache), 16 * MIB);
    };
    // Past what the metadata regions were made for (no --max-size).
    refused("64MiB", "format the cache with --max-size");
    refused("5000000", "not a multiple of 4 KiB");
    refused("1MiB", "holds no line");
    drop(srv);
    // A configuration that cannot resize: a tiered volume of capacity sum
    // (its fast tier is part of the exported size).
    let fast = dir.join("fast.img");
    let tiers = format!("{},{}", fast.display(), backing.display());
    common::tiercache(&[
        "format",
        "--design",
        "oodt",
        "--tiers",
        &tiers,
        "--size",
        "8MiB",
        "--tier-block",
        "64KiB",
    ]);
    let srv = ServeProc::start(&fast, &dir.join("tier.sock"), &log);
    let (ok, _, err) = resize(&fast, "4MiB", &[]);
    assert!(
        !ok && err.starts_with("tiercache: error: resize refused: ")
            && err.contains("capacity sum"),
        "{err}"
    );
    drop(srv);
    // --max-size is the caches' (the SSD cache's, the log-structured cache's).
    let out = Command::new(bin())
        .args(["format", "--design", "oodt", "--tiers"])
        .arg(format!(
            "{},{}",
            dir.join("fast2.img").display(),
            backing.display()
        ))
        .args(["--size", "8MiB", "--max-size", "32MiB"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--max-size applies to the SSD cache"),
        "{err}"
    );
}

/// A shrink needs every dirty line written back first: with the backing
/// device failing every write (nbdkit's error filter, switched by a file),
/// it is refused with one line, the size unchanged and the dirty data
/// still served from the cache.
#[test]
fn a_shrink_is_refused_while_dirty_lines_cannot_be_written_back() {
    if !have("nbdkit") {
        eprintln!("SKIPPED: nbdkit is not installed (scripts/setup.sh installs it)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (remote_sock, inject) = (dir.join("remote.sock"), dir.join("inject"));
    let pidfile = dir.join("nbdkit.pid");
    let st = Command::new("nbdkit")
        .args(["--filter=error", "-U"])
        .arg(&remote_sock)
        .arg("-P")
        .arg(&pidfile)
        .args(["memory", "size=64M", "error=EIO", "error-rate=1"])
        .arg(format!("error-file={}", inject.display()))
        .status()
        .expect("nbdkit");
    assert!(st.success(), "nbdkit did not start");
    struct Remote(std::path::PathBuf);
    impl Drop for Remote {
        fn drop(&mut self) {
            if let Ok(pid) = std::fs::read_to_string(&self.0) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
    }
    let _remote = Remote(pidfile);
    wait_until("nbdkit listening", Duration::from_secs(30), || {
        remote_sock.exists()
    });
    let uri = format!("nbd+unix:///?socket={}", remote_sock.display());
    let cache = dir.join("cache.img");
    format_cache(
        &cache,
        Path::new(&uri),
        "16MiB",
        &["--write-policy", "write-back", "--dirty-target", "1.0"],
    );
    let (sock, log) = (dir.join("nbd.sock"), dir.join("serve.log"));
    let srv = ServeProc::start_with(&cache, &sock, &log, &["--backing-timeout", "1s"]);
    let mut c = NbdClient::connect(&sock).unwrap();
    for b in 0..512u64 {
        c.write(b * 4096, &common::make_block(b, 1), false)
            .unwrap()
            .unwrap();
    }
    let slots = srv.stats()["slots"].as_u64().unwrap();
    assert!(srv.stats()["dirty_lines"].as_u64().unwrap() > 0);
    std::fs::write(&inject, b"").unwrap();
    let (ok, out, err) = resize(&cache, "8MiB", &[]);
    assert!(!ok, "a shrink over unwritable dirty lines succeeded: {out}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("tiercache: error: resize refused: ") && err.contains("written back"),
        "{err}"
    );
    assert_eq!(srv.stats()["slots"].as_u64(), Some(slots));
    assert_eq!(file_len(&cache), 16 * MIB);
    // The acknowledged writes are still there.
    for b in 0..512u64 {
        let d = c.read(b * 4096, 4096).unwrap().unwrap();
        assert_eq!(common::parse_block(b, &d), Ok(1), "block {b}");
    }
}

/// On a block device (a loop device) the size is the part of the device
/// the cache uses: a shrink leaves the device as it is, a grow goes up to
/// its end and no further.
#[test]
fn a_block_device_keeps_its_size_and_grows_only_to_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let img = dir.join("loop.img");
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
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    struct Loop(String);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let _loop = Loop(dev.clone());
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    let cache = Path::new(&dev);
    common::tiercache(&[
        "format",
        "--cache",
        &dev,
        "--backing",
        backing.to_str().unwrap(),
        "--force",
    ]);
    let (sock, log) = (dir.join("nbd.sock"), dir.join("serve.log"));
    // The control socket is the device's: /dev/loopN.ctl.
    let srv = ServeProc::start(cache, &sock, &log);
    let full = srv.stats()["slots"].as_u64().unwrap();
    let run = |size: &str| -> (bool, String) {
        let (ok, _, err) = resize(cache, size, &[]);
        (ok, err)
    };
    let (ok, err) = run("16MiB");
    assert!(ok, "{err}\n{}", tail(&log));
    assert!(srv.stats()["slots"].as_u64().unwrap() < full);
    let size = std::fs::File::open(cache)
        .map(|mut f| std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap())
        .unwrap();
    assert_eq!(size, 32 * MIB, "the block device keeps its size");
    let (ok, err) = run("32MiB");
    assert!(ok, "{err}");
    assert_eq!(srv.stats()["slots"].as_u64(), Some(full));
    let (ok, err) = run("48MiB");
    assert!(!ok && err.lines().count() == 1, "{err}");
    assert!(err.contains("resize refused"), "{err}");
    drop(srv);
}
