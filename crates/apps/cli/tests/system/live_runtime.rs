//! The one live runtime, for every design (the SSD cache, the log-structured
//! cache, the three-level cache, the tiered volume), driven as a user would:
//! `detach` under a 32-deep write stream, SIGTERM with stalled clients, a
//! second server or `format --force` or `check` on a served device, the
//! control socket's mode, idle and non-reading clients, EMFILE.

use crate::common;

use common::designs::*;
use common::*;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 16 MiB of checked blocks.
const BLOCKS: u64 = 4096;

const ALL: [Design; 4] = ALL_DESIGNS;

/// A device of `design` in front of 16 MiB of checked blocks.
fn setup(design: Design) -> DesignSetup {
    DesignSetup::new(design, |backing| init_backing(backing, BLOCKS))
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A write-only load at queue depth 32 until `until`, or until the
/// connection breaks (the server stopped).
fn write_stream(
    c: &mut NbdClient,
    ledger: &mut Ledger,
    seed: u64,
    until: impl Into<Until>,
) -> LoadEnd {
    let shape = LoadShape {
        depth: 32,
        hot_blocks: 512,
        read_share: 0.0,
        flush_share: 0.0,
        fua_share: 0.0,
        max_blocks: 1,
    };
    let mut rng = Rng(seed);
    run_load(c, ledger, &mut rng, shape, until).unwrap_or_else(|e| panic!("write stream: {e}"))
}

fn detach_under_load(design: Design) {
    let st = setup(design);
    let mut srv = st.serve(&[]);
    let mut c = NbdClient::connect(&st.sock).expect("connect");
    let mut ledger = Ledger::new(BLOCKS);
    // Some writes acknowledged first, then the detach starts while the
    // stream goes on (a bound far beyond any detach).
    let first = write_stream(&mut c, &mut ledger, 7, Until::WritesAcked(200));
    assert!(matches!(first, LoadEnd::Done), "{design:?}: {first:?}");
    let primary = st.primary.clone();
    let detacher = std::thread::spawn(move || try_tiercache(&["detach", "--cache", s(&primary)]));
    let end = write_stream(
        &mut c,
        &mut ledger,
        8,
        Instant::now() + Duration::from_secs(120),
    );
    let (ok, out) = detacher.join().expect("detach thread");
    let status = srv.wait_exit();
    assert!(
        matches!(end, LoadEnd::Broken(_)),
        "{design:?}: the write stream outlived the detach: {end:?}"
    );
    assert!(
        ledger.writes_acked > 100,
        "{design:?}: too few writes acknowledged before the detach ({}) for a meaningful test",
        ledger.writes_acked
    );
    if design == Design::Tier {
        // A tiered volume cannot be detached: refused, and nothing stops.
        assert!(!ok, "{design:?}: detach was accepted: {out}");
        assert!(out.contains("cannot be detached"), "{out}");
        return;
    }
    assert!(ok, "{design:?}: detach failed: {out}\n{}", tail(&st.log));
    assert!(status.success(), "{design:?}: server exited with {status}");
    assert!(out.contains("written back"), "{out}");
    check_file_acked(&st.backing, &ledger).unwrap_or_else(|e| {
        panic!(
            "{design:?}: after detach with {} writes acknowledged: {e}\n{}",
            ledger.writes_acked,
            tail(&st.log)
        )
    });
    eprintln!(
        "{design:?}: detach during a 32-deep write stream: {} writes acknowledged, all on the backing device",
        ledger.writes_acked
    );
}

#[test]
fn detach_under_a_32_deep_write_stream_keeps_every_acknowledged_write() {
    for d in [Design::Cache, Design::LogStructured, Design::Tica] {
        detach_under_load(d);
    }
}

/// `serve --emulate-hdd` puts the HDD model in front of every design's slow
/// device: the log says so, and writes through it are read back and, after
/// a detach, on the backing device.
#[test]
fn every_design_serves_over_an_emulated_hdd() {
    for d in ALL {
        let st = setup(d);
        let mut srv = st.serve(&["--emulate-hdd"]);
        let mut c = NbdClient::connect(&st.sock).expect("connect");
        // The first half: a tiered volume of both tiers holds the slow
        // tier's blocks up to its last (scratch) block, then zeros.
        let mut ledger = Ledger::new(BLOCKS / 2);
        let shape = LoadShape {
            depth: 8,
            hot_blocks: 256,
            read_share: 0.3,
            flush_share: 0.05,
            fua_share: 0.1,
            max_blocks: 4,
        };
        let end = run_load(
            &mut c,
            &mut ledger,
            &mut Rng(11),
            shape,
            Until::WritesAcked(256),
        )
        .unwrap_or_else(|e| panic!("{d:?}: load: {e}\n{}", tail(&st.log)));
        assert!(
            matches!(end, LoadEnd::Done),
            "{d:?}: the load ended early: {end:?}\n{}",
            tail(&st.log)
        );
        assert!(ledger.writes_acked > 0, "{d:?}: nothing acknowledged");
        verify_all(&mut c, &mut ledger).unwrap_or_else(|e| panic!("{d:?}: {e}"));
        c.disconnect();
        let log = std::fs::read_to_string(&st.log).unwrap_or_default();
        assert!(log.contains("emulated HDD"), "{d:?}: {log}");
        if d == Design::Tier {
            // A tiered volume cannot be detached; its slow tier is checked
            // by the tier tests.
            drop(srv);
            continue;
        }
        let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
        assert!(ok, "{d:?}: detach failed: {out}\n{}", tail(&st.log));
        assert!(srv.wait_exit().success(), "{d:?}");
        check_file_latest(&st.backing, &ledger)
            .unwrap_or_else(|e| panic!("{d:?}: after detach: {e}"));
    }
}

#[test]
fn detach_of_a_tiered_volume_is_refused_and_it_keeps_serving() {
    let st = setup(Design::Tier);
    let srv = st.serve(&[]);
    let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(!ok && out.contains("cannot be detached"), "{out}");
    let mut c = NbdClient::connect(&st.sock).expect("still serving");
    assert!(c.read(0, 4096).expect("read").is_ok());
    assert_eq!(srv.stats()["design"], "oodt");
}

/// A client that sends a WRITE header announcing 1 MiB and only 100 bytes of it.
fn stalled_writer(sock: &Path) -> NbdClient {
    let mut c = NbdClient::connect(sock).expect("connect");
    let mut h = Vec::new();
    h.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    h.extend_from_slice(&0u16.to_be_bytes());
    h.extend_from_slice(&CMD_WRITE.to_be_bytes());
    h.extend_from_slice(&99u64.to_be_bytes());
    h.extend_from_slice(&0u64.to_be_bytes());
    h.extend_from_slice(&(1u32 << 20).to_be_bytes());
    h.extend_from_slice(&[0xAB; 100]);
    c.raw().write_all(&h).expect("partial write");
    c
}

/// A client that queues `n` reads of `len` bytes and never reads the replies.
fn non_reader(sock: &Path, n: usize, len: usize) -> NbdClient {
    let mut c = NbdClient::connect(sock).expect("connect");
    c.raw()
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    for _ in 0..n {
        if c.send_read(0, len).is_err() {
            break;
        }
    }
    c
}

fn sigterm(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

#[test]
fn sigterm_with_stalled_clients_exits_within_the_grace() {
    for d in ALL {
        let st = setup(d);
        let mut srv = st.serve(&["--shutdown-grace", "2s", "--io-timeout", "60s"]);
        let _w = stalled_writer(&st.sock);
        let mut r = non_reader(&st.sock, 64, 1 << 20);
        // The server is answering the non-reader (the first reply arrived):
        // its replies are stuck behind the full socket.
        r.raw().set_read_timeout(Some(READY_TIMEOUT)).unwrap();
        r.raw()
            .read_exact(&mut [0u8; 1])
            .expect("the first reply to the non-reader");
        let t0 = Instant::now();
        sigterm(srv.child.id());
        let status = srv.wait_exit();
        let took = t0.elapsed();
        assert!(
            status.success(),
            "{d:?}: exit status {status}\n{}",
            tail(&st.log)
        );
        // Grace 2 s, plus the time to close the design: generous, a liveness bound.
        assert!(
            took < Duration::from_secs(20),
            "{d:?}: SIGTERM took {took:?} with stalled clients\n{}",
            tail(&st.log)
        );
        eprintln!("{d:?}: SIGTERM with a stalled writer and a non-reader: exited in {took:?}");
    }
}

#[test]
fn a_served_device_is_never_opened_twice() {
    for d in ALL {
        let st = setup(d);
        let srv = st.serve(&[]);
        let pid = srv.child.id().to_string();
        // A second server on the same device (another socket, another control path).
        let other = st.sock.with_extension("2");
        let ctl2 = st.sock.with_extension("ctl2");
        let (ok, out) = try_tiercache(&[
            "serve",
            "--cache",
            s(&st.primary),
            "--listen",
            &format!("unix:{}", s(&other)),
            "--control",
            s(&ctl2),
        ]);
        assert!(!ok, "{d:?}: a second serve started: {out}");
        assert!(
            out.contains(&format!("in use by pid {pid}")),
            "{d:?}: {out}"
        );
        assert!(
            !ctl2.exists() && !other.exists(),
            "{d:?}: the refused server left sockets"
        );
        // format --force and check.
        let (ok, out) = match d {
            Design::Cache | Design::LogStructured => try_tiercache(&[
                "format",
                "--cache",
                s(&st.primary),
                "--backing",
                s(&st.backing),
                "--force",
            ]),
            Design::Tica => try_tiercache(&[
                "format",
                "--mode",
                "tica",
                "--ro-ssd",
                s(&st.primary.with_file_name("ro.img")),
                "--wo-ssd",
                s(&st.primary),
                "--backing",
                s(&st.backing),
                "--dram-size",
                "1MiB",
                "--force",
            ]),
            Design::Tier => try_tiercache(&[
                "format",
                "--mode",
                "tier",
                "--tiers",
                &format!("{},{}", s(&st.primary), s(&st.backing)),
                "--force",
            ]),
        };
        assert!(
            !ok && out.contains("in use by pid"),
            "{d:?}: format --force: {out}"
        );
        let (ok, out) = try_tiercache(&["check", s(&st.primary)]);
        assert!(!ok && out.contains("in use by pid"), "{d:?}: check: {out}");
        // The backing device is claimed too.
        let (ok, out) = try_tiercache(&[
            "format",
            "--cache",
            s(&st.backing.with_file_name("x.img")),
            "--backing",
            s(&st.backing),
            "--size",
            "8MiB",
        ]);
        assert!(
            !ok && out.contains("in use by pid"),
            "{d:?}: format on the backing: {out}"
        );
        // The first server keeps serving.
        let mut c = NbdClient::connect(&st.sock).expect("first server still serving");
        assert!(c.write(0, &make_block(0, 1), true).expect("write").is_ok());
        assert_eq!(srv.stats()["status"], "ok", "{d:?}");
        eprintln!("{d:?}: second serve, format --force and check refused: in use by pid {pid}");
    }
}

#[test]
fn cache_and_backing_must_differ() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path().join("disk.img");
    init_backing(&b, 64);
    let (ok, out) = try_tiercache(&["format", "--cache", s(&b), "--backing", s(&b), "--force"]);
    assert!(!ok && out.contains("same device"), "{out}");
}

#[test]
fn the_control_socket_is_owner_only_under_umask_000() {
    let st = setup(Design::Cache);
    let child = Command::new("sh")
        .args([
            "-c",
            "umask 000; exec \"$0\" serve --cache \"$1\" --listen \"unix:$2\"",
        ])
        .arg(bin())
        .arg(&st.primary)
        .arg(&st.sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let mut srv = ServeProc {
        child,
        sock: st.sock.clone(),
        cache: st.primary.clone(),
        log: st.log.clone(),
    };
    wait_until("the server to answer stats", READY_TIMEOUT, || {
        srv.try_stats().is_some()
    });
    let mode = std::fs::metadata(st.ctl()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "control socket mode {mode:o}");
    srv.kill9();
}

#[test]
fn a_control_path_that_is_not_a_socket_is_never_replaced() {
    let st = setup(Design::Cache);
    let precious = st.primary.with_file_name("notes.txt");
    std::fs::write(&precious, "keep me").unwrap();
    let (ok, out) = try_tiercache(&[
        "serve",
        "--cache",
        s(&st.primary),
        "--listen",
        &format!("unix:{}", s(&st.sock)),
        "--control",
        s(&precious),
    ]);
    assert!(!ok && out.contains("not a socket"), "{out}");
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
    // Refused before the cache was opened: it is still marked clean.
    let (ok, out) = try_tiercache(&["check", "--json", s(&st.primary)]);
    assert!(ok, "{out}");
}

#[test]
fn a_bad_listen_address_leaves_the_cache_untouched() {
    let st = setup(Design::Cache);
    let before = std::fs::read(&st.primary).unwrap();
    let (ok, out) = try_tiercache(&[
        "serve",
        "--cache",
        s(&st.primary),
        "--listen",
        "tcp:nowhere",
    ]);
    assert!(!ok && out.contains("tcp:HOST:PORT"), "{out}");
    assert!(
        std::fs::read(&st.primary).unwrap() == before,
        "a refused serve wrote to the cache device"
    );
}

fn vm_hwm_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn idle_and_non_reading_clients_leave_the_server_serving_others() {
    let st = setup(Design::Cache);
    let mut srv = st.serve(&[
        "--handshake-timeout",
        "2s",
        "--io-timeout",
        "4s",
        "--max-in-flight",
        "64MiB",
    ]);
    // 300 connections that never start the handshake.
    let idle: Vec<UnixStream> = (0..300)
        .filter_map(|_| UnixStream::connect(&st.sock).ok())
        .collect();
    // 16 clients that queue 32 MiB of reads each and never read the replies.
    let stuck: Vec<NbdClient> = (0..16)
        .filter_map(|_| {
            NbdClient::connect(&st.sock).ok().map(|mut c| {
                c.raw()
                    .set_write_timeout(Some(Duration::from_secs(2)))
                    .unwrap();
                for _ in 0..32 {
                    if c.send_read(0, 1 << 20).is_err() {
                        break;
                    }
                }
                c
            })
        })
        .collect();
    // A well-behaved client is served (once the timeouts freed the server).
    let t0 = Instant::now();
    let served = poll_for(READY_TIMEOUT, || {
        let mut c = NbdClient::connect(&st.sock).ok()?;
        c.raw()
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        c.read(4096, 4096).ok()?.ok()
    });
    let took = t0.elapsed();
    let data = served.unwrap_or_else(|| panic!("no client served\n{}", tail(&st.log)));
    assert_eq!(parse_block(1, &data), Ok(0));
    let hwm_mib = vm_hwm_kib(srv.child.id()) / 1024;
    // The stated bound: the in-flight cap (64 MiB) plus the process's own
    // footprint (runtime, cache metadata): 256 MiB in all. Unbounded
    // buffering would hold 16 x 32 MiB = 512 MiB.
    assert!(
        hwm_mib < 256,
        "peak RSS {hwm_mib} MiB with 16 non-reading clients (cap 64 MiB in flight)"
    );
    assert!(srv.try_stats().is_some(), "control channel answers");
    eprintln!(
        "300 idle + 16 non-reading clients ({} and {} connected): a client was served after {took:?}; peak RSS {hwm_mib} MiB",
        idle.len(),
        stuck.len()
    );
    drop((idle, stuck));
    srv.kill9();
}

#[test]
fn emfile_does_not_kill_the_control_channel() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        eprintln!("SKIP: prlimit (util-linux) is not installed");
        return;
    }
    let st = setup(Design::Cache);
    let mut srv = st.serve(&["--max-connections", "1000", "--handshake-timeout", "60s"]);
    let pid = srv.child.id();
    let fds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count() as u64
    };
    let limit = fds() + 16;
    let ok = Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok, "prlimit failed");
    // Use up the server's descriptors with connections that never handshake.
    let hogs: Vec<UnixStream> = (0..64)
        .filter_map(|_| UnixStream::connect(&st.sock).ok())
        .collect();
    // The server accepted until it ran out of descriptors.
    wait_until(
        "the server to run out of descriptors",
        READY_TIMEOUT,
        || {
            fds() >= limit
                || std::fs::read_to_string(&st.log)
                    .unwrap_or_default()
                    .contains("accept failed")
        },
    );
    // The control socket cannot accept now (EMFILE) ...
    let mut probe = UnixStream::connect(st.ctl()).expect("connect (queued in the backlog)");
    probe
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    probe.write_all(b"{\"cmd\":\"stats\"}\n").unwrap();
    let mut buf = [0u8; 16];
    let answered_while_full = matches!(probe.read(&mut buf), Ok(n) if n > 0);
    // ... and answers again once descriptors are free.
    drop(hogs);
    drop(probe);
    let recovered = poll_for(READY_TIMEOUT, || srv.try_stats());
    assert!(
        recovered.is_some(),
        "the control channel did not recover after EMFILE\n{}",
        tail(&st.log)
    );
    let log = std::fs::read_to_string(&st.log).unwrap_or_default();
    assert!(
        answered_while_full || log.contains("accept failed"),
        "the test did not reach EMFILE (limit {limit})\n{}",
        tail(&st.log)
    );
    srv.kill9();
}

#[test]
fn a_panic_aborts_and_recovery_keeps_every_flushed_write() {
    use std::os::unix::process::ExitStatusExt;
    // Enables the `panic` control command in the servers this test starts.
    std::env::set_var("TIERCACHE_TEST_PANIC", "1");
    for d in ALL {
        let st = setup(d);
        let mut srv = st.serve(&[]);
        let mut c = NbdClient::connect(&st.sock).expect("connect");
        for b in 0..64u64 {
            let r = c
                .write(b * BLOCK as u64, &make_block(b, 1), false)
                .expect("write");
            assert!(r.is_ok(), "{d:?}: write {b}: {r:?}");
        }
        assert!(c.flush().expect("flush").is_ok());
        let mut ctl = UnixStream::connect(st.ctl()).expect("control");
        ctl.write_all(b"{\"cmd\":\"panic\"}\n").unwrap();
        let status = srv.wait_exit();
        assert_eq!(
            status.signal(),
            Some(6),
            "{d:?}: a panic must abort (SIGABRT), got {status}\n{}",
            tail(&st.log)
        );
        assert!(
            std::fs::read_to_string(&st.log)
                .unwrap()
                .contains("aborting"),
            "{d:?}: the abort is explained in the log"
        );
        let _srv = st.serve(&[]);
        let mut c = NbdClient::connect(&st.sock).expect("connect after the abort");
        for b in 0..64u64 {
            let data = c
                .read(b * BLOCK as u64, BLOCK)
                .expect("read")
                .expect("no error");
            assert_eq!(
                parse_block(b, &data),
                Ok(1),
                "{d:?}: block {b} after the abort"
            );
        }
    }
}

#[test]
fn check_json_is_structured_for_every_design() {
    for d in ALL {
        let st = setup(d);
        let (ok, out) = try_tiercache(&["check", "--json", "--cache", s(&st.primary)]);
        assert!(ok, "{d:?}: {out}");
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{d:?}: {e}: {out}"));
        let want = match d {
            Design::Cache => "azor",
            Design::Tica => "tica",
            Design::LogStructured => "flashtier",
            Design::Tier => "oodt",
        };
        assert_eq!(v["ok"], true, "{d:?}: {v}");
        assert_eq!(v["design"], want, "{d:?}: {v}");
        assert!(v["findings"].is_array(), "{d:?}: {v}");
        assert_eq!(v["device"], s(&st.primary), "{d:?}: {v}");
    }
    // A damaged checkpoint is a finding with a severity, and the exit is non-zero.
    let st = setup(Design::Cache);
    let mut img = std::fs::read(&st.primary).unwrap();
    let (ok, out) = try_tiercache(&["check", "--json", s(&st.primary)]);
    assert!(ok, "{out}");
    for b in &mut img[0..8192] {
        *b ^= 0x5a;
    }
    std::fs::write(&st.primary, &img).unwrap();
    let (ok, out) = try_tiercache(&["check", "--json", s(&st.primary)]);
    assert!(
        !ok,
        "a cache with both superblock copies destroyed passed check: {out}"
    );
}

#[test]
fn format_says_when_the_cache_outgrows_its_backing_and_leaves_nothing_behind_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("small.img");
    init_backing(&backing, 256); // 1 MiB
    let cache = dir.path().join("cache.img");
    let (ok, out) = try_tiercache(&[
        "format",
        "--cache",
        s(&cache),
        "--backing",
        s(&backing),
        "--size",
        "64MiB",
    ]);
    assert!(ok, "{out}");
    assert!(
        out.contains("warning") && out.contains("never used"),
        "no warning: {out}"
    );
    // A failing format removes the cache file it created (too small for its metadata).
    let bad = dir.path().join("new.img");
    let (ok, out) = try_tiercache(&[
        "format",
        "--cache",
        s(&bad),
        "--backing",
        s(&backing),
        "--size",
        "64KiB",
    ]);
    assert!(!ok, "{out}");
    assert!(
        !bad.exists(),
        "format left {} behind after failing: {out}",
        bad.display()
    );
}

#[test]
fn one_log_style_and_verbosity_flags() {
    let st = setup(Design::Cache);
    let mut srv = st.serve(&["-v"]);
    let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(ok, "{out}");
    assert!(srv.wait_exit().success());
    let log = std::fs::read_to_string(&st.log).unwrap();
    // -v shows the info lines, in the same `tiercache:` style as the rest.
    assert!(
        log.lines()
            .any(|l| l.starts_with("tiercache: serving azor export")),
        "{log}"
    );
    for l in log.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            l.starts_with("tiercache: "),
            "a line in another style: {l:?}\n{log}"
        );
        assert!(!l.contains('\x1b'), "ANSI escape in {l:?}");
    }
    // -q: nothing but errors.
    std::fs::remove_file(&st.log).unwrap();
    let mut srv = st.serve(&["-q"]);
    let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(ok, "{out}");
    assert!(srv.wait_exit().success());
    let log = std::fs::read_to_string(&st.log).unwrap();
    assert!(!log.contains("tiercache: serving azor export"), "{log}");
}

#[test]
fn systemd_socket_activation_and_readiness() {
    if Command::new("systemd-socket-activate")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP: systemd-socket-activate is not installed");
        return;
    }
    let st = setup(Design::Cache);
    // Readiness goes to NOTIFY_SOCKET.
    let notify_path = st.primary.with_file_name("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let log = std::fs::File::create(&st.log).unwrap();
    let mut child = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&st.sock)
        .arg("-E")
        .arg(format!("NOTIFY_SOCKET={}", s(&notify_path)))
        .arg(bin())
        .args(["serve", "--cache", s(&st.primary)])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("systemd-socket-activate");
    wait_until("the activation socket", READY_TIMEOUT, || st.sock.exists());
    // The first connection starts the server on the inherited socket.
    let mut c = NbdClient::connect(&st.sock).expect("connect through the activated socket");
    assert!(c.write(0, &make_block(0, 5), true).unwrap().is_ok());
    assert_eq!(parse_block(0, &c.read(0, BLOCK).unwrap().unwrap()), Ok(5));
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY=1 on NOTIFY_SOCKET");
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(
        msg.contains("READY=1") && msg.contains("STATUS=serving"),
        "{msg}"
    );
    c.disconnect();
    let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(ok, "{out}\n{}", tail(&st.log));
    let n = notify.recv(&mut buf).expect("STOPPING=1");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    let status = wait_for("the server to exit", READY_TIMEOUT, || {
        child.try_wait().unwrap()
    });
    assert!(status.success(), "{status}\n{}", tail(&st.log));
    assert!(
        st.sock.exists(),
        "an inherited socket belongs to systemd: never removed"
    );
}

#[test]
fn stats_watch_prints_a_line_per_interval_until_the_server_stops() {
    let st = setup(Design::Cache);
    let mut srv = st.serve(&[]);
    let mut w = Command::new(bin())
        .args(["stats", "--watch", "0.2", "--cache", s(&st.primary)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // What it prints, line by line, as it comes.
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = w.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Writes go on until at least three interval lines were printed, one
    // of them with the writes' rates.
    let mut c = NbdClient::connect(&st.sock).unwrap();
    let mut out = Vec::new();
    let busy = |l: &String| l.contains("/s") && !l.contains("accesses          -");
    let mut b = 0u64;
    wait_until(
        "three stats --watch lines, one with rates",
        READY_TIMEOUT,
        || {
            for _ in 0..20 {
                assert!(c
                    .write(
                        b % 200 * BLOCK as u64,
                        &make_block(b % 200, b / 200 + 1),
                        false
                    )
                    .unwrap()
                    .is_ok());
                b += 1;
            }
            out.extend(rx.try_iter());
            let lines: Vec<&String> = out.iter().filter(|l| l.starts_with("azor hit")).collect();
            lines.len() >= 3 && lines.iter().any(|l| busy(l))
        },
    );
    c.disconnect();
    let (ok, detached) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(ok, "{detached}");
    assert!(srv.wait_exit().success());
    let status = wait_for("stats --watch to end", READY_TIMEOUT, || {
        w.try_wait().unwrap()
    });
    reader.join().unwrap();
    out.extend(rx.try_iter());
    let out = out.join("\n");
    assert!(status.success(), "{status}: {out}");
    assert!(!out.contains('\x1b'), "no terminal escapes on a pipe");
}

#[test]
fn an_exposed_tcp_address_needs_the_risk_named() {
    let st = setup(Design::Cache);
    let before = std::fs::read(&st.primary).unwrap();
    let (ok, out) = try_tiercache(&[
        "serve",
        "--cache",
        s(&st.primary),
        "--listen",
        "tcp:0.0.0.0:0",
    ]);
    assert!(!ok && out.contains("--insecure-listen"), "{out}");
    assert!(
        std::fs::read(&st.primary).unwrap() == before,
        "refused before opening"
    );
}
