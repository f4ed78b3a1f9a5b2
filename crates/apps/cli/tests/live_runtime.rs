//! The one live runtime, for every design (the SSD cache, the log-structured
//! cache, the three-level cache, the tiered volume), driven as a user would:
//! `detach` under a 32-deep write stream, SIGTERM with stalled clients, a
//! second server or `format --force` or `check` on a served device, the
//! control socket's mode, idle and non-reading clients, EMFILE.

mod common;

use common::*;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 16 MiB of checked blocks.
const BLOCKS: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Design {
    Cache,
    LogStructured,
    Tica,
    Tier,
}

const ALL: [Design; 4] = [
    Design::Cache,
    Design::LogStructured,
    Design::Tica,
    Design::Tier,
];

/// A formatted device of one design, in a temporary directory.
struct Setup {
    _dir: tempfile::TempDir,
    /// What `serve --cache` names.
    primary: PathBuf,
    /// The device that holds everything after a detach.
    backing: PathBuf,
    sock: PathBuf,
    log: PathBuf,
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

impl Setup {
    fn new(design: Design) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let backing = root.join("backing.img");
        init_backing(&backing, BLOCKS);
        let primary = match design {
            Design::Cache => {
                let c = root.join("cache.img");
                format_cache(&c, &backing, "8MiB", &[]);
                c
            }
            Design::LogStructured => {
                let c = root.join("cache.img");
                tiercache(&[
                    "format",
                    "--layout",
                    "log-structured",
                    "--cache",
                    s(&c),
                    "--backing",
                    s(&backing),
                    "--size",
                    "8MiB",
                    "--segment-size",
                    "256KiB",
                ]);
                c
            }
            Design::Tica => {
                let (ro, wo) = (root.join("ro.img"), root.join("wo.img"));
                tiercache(&[
                    "format",
                    "--mode",
                    "tica",
                    "--ro-ssd",
                    s(&ro),
                    "--wo-ssd",
                    s(&wo),
                    "--backing",
                    s(&backing),
                    "--size",
                    "8MiB",
                    "--dram-size",
                    "1MiB",
                ]);
                wo
            }
            Design::Tier => {
                let fast = root.join("fast.img");
                let tiers = format!("{},{}", s(&fast), s(&backing));
                tiercache(&[
                    "format",
                    "--mode",
                    "tier",
                    "--tiers",
                    &tiers,
                    "--size",
                    "8MiB",
                    "--block-size",
                    "64KiB",
                ]);
                fast
            }
        };
        Setup {
            primary,
            backing,
            sock: root.join("nbd.sock"),
            log: root.join("serve.log"),
            _dir: dir,
        }
    }

    fn serve(&self, extra: &[&str]) -> ServeProc {
        ServeProc::start_with(&self.primary, &self.sock, &self.log, extra)
    }

    fn ctl(&self) -> PathBuf {
        let mut p = self.primary.as_os_str().to_owned();
        p.push(".ctl");
        p.into()
    }
}

/// Run `tiercache` with `args`, returning (success, stdout + stderr).
fn try_tiercache(args: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .args(["--kill-after=10", "300"])
        .arg(bin())
        .args(args)
        .output()
        .expect("run tiercache");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A write-only load at queue depth 32 until the connection breaks (the server stopped).
fn write_stream(c: &mut NbdClient, ledger: &mut Ledger, seed: u64) -> LoadEnd {
    let shape = LoadShape {
        depth: 32,
        hot_blocks: 512,
        read_share: 0.0,
        flush_share: 0.0,
        fua_share: 0.0,
        max_blocks: 1,
    };
    let mut rng = Rng(seed);
    run_load(
        c,
        ledger,
        &mut rng,
        shape,
        Instant::now() + Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("write stream: {e}"))
}

fn detach_under_load(design: Design) {
    let st = Setup::new(design);
    let mut srv = st.serve(&[]);
    let mut c = NbdClient::connect(&st.sock).expect("connect");
    let mut ledger = Ledger::new(BLOCKS);
    let ctl = st.ctl();
    let primary = st.primary.clone();
    let detacher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        let _ = ctl;
        try_tiercache(&["detach", "--cache", s(&primary)])
    });
    let end = write_stream(&mut c, &mut ledger, 7);
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
        let st = Setup::new(d);
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
            Instant::now() + Duration::from_secs(3),
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
    let st = Setup::new(Design::Tier);
    let srv = st.serve(&[]);
    let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(!ok && out.contains("cannot be detached"), "{out}");
    let mut c = NbdClient::connect(&st.sock).expect("still serving");
    assert!(c.read(0, 4096).expect("read").is_ok());
    assert_eq!(srv.stats()["design"], "tier");
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
        let st = Setup::new(d);
        let mut srv = st.serve(&["--shutdown-grace", "2s", "--io-timeout", "60s"]);
        let _w = stalled_writer(&st.sock);
        let _r = non_reader(&st.sock, 64, 1 << 20);
        std::thread::sleep(Duration::from_millis(500));
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
        let st = Setup::new(d);
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
    let st = Setup::new(Design::Cache);
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
    let t0 = Instant::now();
    while srv.try_stats().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = std::fs::metadata(st.ctl()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "control socket mode {mode:o}");
    srv.kill9();
}

#[test]
fn a_control_path_that_is_not_a_socket_is_never_replaced() {
    let st = Setup::new(Design::Cache);
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
    let st = Setup::new(Design::Cache);
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
    let st = Setup::new(Design::Cache);
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
    // A well-behaved client is served within the timeouts.
    let t0 = Instant::now();
    let mut served = None;
    while t0.elapsed() < Duration::from_secs(30) {
        if let Ok(mut c) = NbdClient::connect(&st.sock) {
            c.raw()
                .set_read_timeout(Some(Duration::from_secs(15)))
                .unwrap();
            if let Ok(Ok(d)) = c.read(4096, 4096) {
                served = Some(d);
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let took = t0.elapsed();
    let data = served.unwrap_or_else(|| panic!("no client served within 30 s\n{}", tail(&st.log)));
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
    let st = Setup::new(Design::Cache);
    let mut srv = st.serve(&["--max-connections", "1000", "--handshake-timeout", "60s"]);
    let pid = srv.child.id();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64;
    let limit = fds + 16;
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
    std::thread::sleep(Duration::from_millis(500));
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
    let t0 = Instant::now();
    let mut st_json = None;
    while t0.elapsed() < Duration::from_secs(20) && st_json.is_none() {
        st_json = srv.try_stats();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        st_json.is_some(),
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
        let st = Setup::new(d);
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
        let st = Setup::new(d);
        let (ok, out) = try_tiercache(&["check", "--json", s(&st.primary)]);
        assert!(ok, "{d:?}: {out}");
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{d:?}: {e}: {out}"));
        let want = match d {
            Design::Cache | Design::Tica => "cache",
            Design::LogStructured => "log-structured",
            Design::Tier => "tier",
        };
        assert_eq!(v["ok"], true, "{d:?}: {v}");
        assert_eq!(v["design"], want, "{d:?}: {v}");
        assert!(v["findings"].is_array(), "{d:?}: {v}");
        assert_eq!(v["device"], s(&st.primary), "{d:?}: {v}");
    }
    // A damaged checkpoint is a finding with a severity, and the exit is non-zero.
    let st = Setup::new(Design::Cache);
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
    let st = Setup::new(Design::Cache);
    let mut srv = st.serve(&["-v"]);
    let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(ok, "{out}");
    assert!(srv.wait_exit().success());
    let log = std::fs::read_to_string(&st.log).unwrap();
    // -v shows the info lines, in the same `tiercache:` style as the rest.
    assert!(
        log.lines()
            .any(|l| l.starts_with("tiercache: serving cache export")),
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
    assert!(!log.contains("tiercache: serving cache export"), "{log}");
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
    let st = Setup::new(Design::Cache);
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
    let t0 = Instant::now();
    while !st.sock.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "no socket");
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}\n{}", tail(&st.log));
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        st.sock.exists(),
        "an inherited socket belongs to systemd: never removed"
    );
}

#[test]
fn stats_watch_prints_a_line_per_interval_until_the_server_stops() {
    let st = Setup::new(Design::Cache);
    let mut srv = st.serve(&[]);
    let mut w = Command::new(bin())
        .args(["stats", "--watch", "0.2", "--cache", s(&st.primary)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut c = NbdClient::connect(&st.sock).unwrap();
    for b in 0..200u64 {
        assert!(c
            .write(b * BLOCK as u64, &make_block(b, 1), false)
            .unwrap()
            .is_ok());
    }
    std::thread::sleep(Duration::from_millis(1200));
    c.disconnect();
    let (ok, out) = try_tiercache(&["detach", "--cache", s(&st.primary)]);
    assert!(ok, "{out}");
    assert!(srv.wait_exit().success());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = w.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "stats --watch did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    w.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(status.success(), "{status}: {out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("cache hit")).collect();
    assert!(lines.len() >= 3, "one line per interval: {out}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("/s") && !l.contains("accesses          -")),
        "{out}"
    );
    assert!(!out.contains('\x1b'), "no terminal escapes on a pipe");
}

#[test]
fn an_exposed_tcp_address_needs_the_risk_named() {
    let st = Setup::new(Design::Cache);
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
