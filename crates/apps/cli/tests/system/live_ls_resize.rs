//! `tiercache resize` of a served log-structured cache (`--design
//! flashtier`): segments are added or retired. fio's crc32c verification at
//! queue depth 32 passes while the cache grows and shrinks five times;
//! `stats`, the metrics, the cache file and `sim --like` follow the size; a
//! kill -9 at every metadata write of a grow and of a shrink recovers the old
//! size or the new one with every acknowledged write; impossible resizes are
//! refused with one line and change nothing.
//!
//! Tests skip with a `SKIPPED:` message when a tool is missing
//! (`scripts/setup.sh` installs them).

use crate::common;
use common::resize::{file_len, have, VerifyingFio};

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

/// `tiercache format --design flashtier` of a cache file of `size`.
fn format_ls(cache: &Path, backing: &Path, size: &str, extra: &[&str]) -> String {
    let mut args = vec!["--design", "flashtier"];
    args.extend_from_slice(extra);
    format_cache(cache, backing, size, &args)
}

/// `tiercache resize --cache CACHE --size SIZE [extra]`: (success, stdout, stderr).
fn resize(cache: &Path, size: &str, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new("timeout")
        .arg("600")
        .arg(bin())
        .args(["resize", "--cache"])
        .arg(cache)
        .args(["--size", size])
        .args(extra)
        .output()
        .expect("run tiercache resize");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Bytes of a size written like "96MiB".
fn mib(s: &str) -> u64 {
    s.trim_end_matches("MiB").parse::<u64>().unwrap() * MIB
}

/// The cache size `sim --like` takes from the device, in slots (4 KiB blocks).
fn like_slots(dir: &Path, cache: &Path) -> u64 {
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
    v["slots"]
        .as_u64()
        .unwrap_or_else(|| panic!("no slots in sim --json: {v}"))
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
fn fio_verifies_while_the_log_structured_cache_grows_and_shrinks_five_times() {
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
    let out = format_ls(
        &cache,
        &backing,
        "24MiB",
        &[
            "--max-size",
            "96MiB",
            "--write-policy",
            "write-back",
            "--dirty-target",
            "0.9",
        ],
    );
    assert!(out.contains("tiercache resize can grow it to"), "{out}");
    let sock = dir.join("nbd.sock");
    let log = dir.join("serve.log");
    let mut srv = ServeProc::start_with(&cache, &sock, &log, &["--metrics", "127.0.0.1:0"]);
    let metrics = srv.stats()["runtime"]["metrics"]
        .as_str()
        .expect("runtime.metrics in stats")
        .to_string();
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let mut fio = VerifyingFio::start(&uri, 128 * MIB, &dir.join("fio.json"));
    wait_until("dirty blocks under fio", Duration::from_secs(300), || {
        assert!(fio.running(), "fio ended: {}", tail(&dir.join("fio.err")));
        srv.stats()["dirty_blocks"].as_u64().unwrap() >= 1024
    });
    let sizes = [
        "96MiB", "16MiB", "64MiB", "12MiB", "80MiB", "20MiB", "96MiB", "8MiB", "48MiB", "24MiB",
    ];
    let mut before = srv.stats()["slots"].as_u64().unwrap();
    let mut moved_or_written_back = 0;
    for size in sizes {
        assert!(fio.running(), "fio ended before resizing to {size}");
        let (ok, out, err) = resize(&cache, size, &["--json"]);
        assert!(ok, "resize to {size} failed: {out}{err}\n{}", tail(&log));
        let v: Value = serde_json::from_str(&out).unwrap();
        let slots = v["slots"].as_u64().unwrap();
        assert_eq!(v["old_slots"].as_u64(), Some(before), "{v}");
        assert_ne!(slots, before, "{v}");
        moved_or_written_back +=
            v["moved_blocks"].as_u64().unwrap() + v["written_back_blocks"].as_u64().unwrap();
        assert_eq!(
            file_len(&cache),
            mib(size),
            "the cache file follows the size"
        );
        let st = srv.stats();
        assert_eq!(st["slots"].as_u64(), Some(slots), "stats after {size}");
        assert_eq!(
            st["segments"]["total"].as_u64(),
            v["segments"].as_u64(),
            "{st}"
        );
        assert!(st["mapped_blocks"].as_u64().unwrap() <= slots);
        assert_eq!(like_slots(dir, &cache), slots, "sim --like after {size}");
        assert_eq!(scraped_slots(&metrics), slots, "the metrics after {size}");
        // Still writing and verifying after the resize: it ran under load.
        assert!(
            fio.running(),
            "fio failed during the resize to {size}: {}",
            tail(&dir.join("fio.err"))
        );
        before = slots;
    }
    // The shrinks found dirty blocks in the retired segments.
    assert!(moved_or_written_back > 0, "no dirty block was in the way");
    let report = fio.stop();
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "fio reported an error: {job}");
    assert!(
        job["read"]["io_bytes"].as_u64().unwrap() > 0,
        "fio verified nothing"
    );
    // The size survives a restart, and so does the data (fio verifies it
    // again, reading only).
    let _ = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status();
    assert!(srv.wait_exit().success(), "{}", tail(&log));
    let srv = ServeProc::start(&cache, &sock, &log);
    assert_eq!(srv.stats()["slots"].as_u64(), Some(before));
    drop(srv);
}

/// One kill -9 round: the server stops its resize from `from` to `to`
/// after metadata write `n` and is killed there while a pipelined load
/// runs; the restarted server must hold every acknowledged write and the
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
    let target = ledger.writes_acked + 1500;
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
    let answer = dir.join("resize.json");
    let mut resizer = Command::new(bin())
        .args(["resize", "--json", "--cache"])
        .arg(cache)
        .args(["--size", to])
        .stdout(std::fs::File::create(&answer).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("resize starts");
    // Requests sent while the resize runs: the kill lands with them in
    // flight.
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
    if !hit && mib(to) < mib(from) {
        // The shrink that ran to its end: the retired segments held data
        // (the rounds before were killed with it there).
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&answer).unwrap())
            .unwrap_or_else(|e| panic!("resize answer: {e}\n{}", tail(&log)));
        let emptied = ["evicted_blocks", "moved_blocks", "written_back_blocks"]
            .iter()
            .map(|k| v[k].as_u64().unwrap())
            .sum::<u64>();
        assert!(emptied > 0, "the retired segments were empty: {v}");
    }
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
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (cache, backing) = (dir.join("cache.img"), dir.join("backing.img"));
    let blocks = 4096; // 16 MiB exported
    init_backing(&backing, blocks);
    format_ls(
        &cache,
        &backing,
        "12MiB",
        &[
            "--max-size",
            "24MiB",
            "--write-policy",
            "write-back",
            "--dirty-target",
            "0.9",
        ],
    );
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
    let sizes = (slots_at("12MiB"), slots_at("24MiB"));
    let mut ledger = Ledger::new(blocks);
    let mut rng = Rng(0x155e_512e);
    for (from, to) in [("12MiB", "24MiB"), ("24MiB", "12MiB")] {
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
    format_ls(&cache, &backing, "16MiB", &[]);
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
    // Past what the checkpoint areas were made for (no --max-size).
    refused("64MiB", "format the cache with --max-size");
    refused("5000000", "not a multiple of 4 KiB");
    refused("2MiB", "fewer than 4 segments");
    // The same size is no change.
    let (ok, out, err) = resize(&cache, "16MiB", &[]);
    assert!(ok && out.contains("already"), "{out}{err}");
    drop(srv);
    // --max-size smaller than the device: refused at format.
    let out = Command::new(bin())
        .args(["format", "--design", "flashtier", "--cache"])
        .arg(dir.join("ls2.img"))
        .arg("--backing")
        .arg(&backing)
        .args(["--size", "16MiB", "--max-size", "8MiB"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--max-size") && err.lines().count() == 1,
        "{err}"
    );
}

/// A shrink whose retired segments hold more dirty blocks than the
/// surviving ones can take needs the backing device: with it failing every
/// write (nbdkit's error filter, switched by a file), the shrink is refused
/// with one line, the size unchanged and every acknowledged write still
/// served from the cache; once the backing device works again the same
/// shrink succeeds and the data is all there.
#[test]
fn a_shrink_is_refused_while_dirty_blocks_cannot_be_written_back() {
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
    format_ls(
        &cache,
        Path::new(&uri),
        "16MiB",
        &["--write-policy", "write-back", "--dirty-target", "1.0"],
    );
    let (sock, log) = (dir.join("nbd.sock"), dir.join("serve.log"));
    let srv = ServeProc::start_with(&cache, &sock, &log, &["--backing-timeout", "1s"]);
    let mut c = NbdClient::connect(&sock).unwrap();
    // More dirty blocks than 8 MiB of segments hold.
    let n = 2500u64;
    for b in 0..n {
        c.write(b * 4096, &common::make_block(b, 1), false)
            .unwrap()
            .unwrap();
    }
    c.flush().unwrap().unwrap();
    let slots = srv.stats()["slots"].as_u64().unwrap();
    assert!(srv.stats()["dirty_blocks"].as_u64().unwrap() >= n);
    std::fs::write(&inject, b"").unwrap();
    let (ok, out, err) = resize(&cache, "8MiB", &[]);
    assert!(
        !ok,
        "a shrink over unwritable dirty blocks succeeded: {out}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("tiercache: error: resize refused: ")
            && err.contains("cannot be written back")
            && err.contains("the size is unchanged"),
        "{err}"
    );
    assert_eq!(srv.stats()["slots"].as_u64(), Some(slots));
    assert_eq!(file_len(&cache), 16 * MIB);
    // The acknowledged writes are still there.
    let check = |c: &mut NbdClient| {
        for b in 0..n {
            let d = c.read(b * 4096, 4096).unwrap().unwrap();
            assert_eq!(common::parse_block(b, &d), Ok(1), "block {b}");
        }
    };
    check(&mut c);
    // The backing device back: the same shrink goes through.
    std::fs::remove_file(&inject).unwrap();
    let (ok, out, err) = resize(&cache, "8MiB", &["--json"]);
    assert!(ok, "{out}{err}\n{}", tail(&log));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(v["written_back_blocks"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(file_len(&cache), 8 * MIB);
    check(&mut c);
}

/// On a block device (a loop device) the size is the part of the device
/// the cache uses: a shrink leaves the device as it is, a grow goes up to
/// its end and no further, even with checkpoint areas made for more.
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
        "--design",
        "flashtier",
        "--cache",
        &dev,
        "--backing",
        backing.to_str().unwrap(),
        "--max-size",
        "64MiB",
        "--force",
    ]);
    let (sock, log) = (dir.join("nbd.sock"), dir.join("serve.log"));
    // The control socket is the device's: /dev/loopN.ctl.
    let srv = ServeProc::start(cache, &sock, &log);
    let full = srv.stats()["slots"].as_u64().unwrap();
    let mut c = NbdClient::connect(&sock).unwrap();
    for b in 0..3000u64 {
        c.write(b * 4096, &common::make_block(b, 1), false)
            .unwrap()
            .unwrap();
    }
    let (ok, _, err) = resize(cache, "16MiB", &[]);
    assert!(ok, "{err}\n{}", tail(&log));
    assert!(srv.stats()["slots"].as_u64().unwrap() < full);
    let size = std::fs::File::open(cache)
        .map(|mut f| std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap())
        .unwrap();
    assert_eq!(size, 32 * MIB, "the block device keeps its size");
    let (ok, _, err) = resize(cache, "32MiB", &[]);
    assert!(ok, "{err}");
    assert_eq!(srv.stats()["slots"].as_u64(), Some(full));
    let (ok, _, err) = resize(cache, "48MiB", &[]);
    assert!(!ok && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("resize refused") && err.contains("fewer than"),
        "{err}"
    );
    assert_eq!(srv.stats()["slots"].as_u64(), Some(full));
    for b in 0..3000u64 {
        let d = c.read(b * 4096, 4096).unwrap().unwrap();
        assert_eq!(common::parse_block(b, &d), Ok(1), "block {b}");
    }
    drop(srv);
}
