//! `tiercache replay` against real NBD servers started here and stopped by
//! PID: nbdkit's memory plugin, `tiercache serve` on a fresh cache, and
//! nbdkit's null plugin (which drops writes, so `--verify` must fail); plus
//! refusal of bad input with one clear message.

use crate::common;

use common::{format_cache, shared_sample, tiercache, wait_until, ServeProc, READY_TIMEOUT};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

fn have_nbdkit() -> bool {
    let ok = Command::new("nbdkit")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: nbdkit is not installed");
    }
    ok
}

/// An nbdkit process in the foreground on a Unix socket; killed by PID on drop.
struct Nbdkit(Child);

impl Nbdkit {
    fn start(sock: &Path, plugin_args: &[&str]) -> Nbdkit {
        let child = Command::new("nbdkit")
            .args(["-f", "--unix"])
            .arg(sock)
            .args(plugin_args)
            .stdout(Stdio::null())
            // The readiness probe below connects and hangs up: nbdkit logs that.
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nbdkit");
        let mut n = Nbdkit(child);
        wait_until("nbdkit to listen", READY_TIMEOUT, || {
            if let Ok(Some(st)) = n.0.try_wait() {
                panic!("nbdkit {plugin_args:?} exited with {st} before listening");
            }
            UnixStream::connect(sock).is_ok()
        });
        n
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn uri(sock: &Path) -> String {
    format!("nbd+unix:///?socket={}", sock.display())
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tiercache"))
        .args(args)
        .output()
        .expect("run tiercache")
}

fn replay_json(trace: &Path, uri: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--uri",
        uri,
        "--verify",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(
        o.status.success(),
        "tiercache {args:?} failed ({}):\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("replay --json output")
}

fn trace_requests(trace: &Path) -> u64 {
    let st: serde_json::Value = serde_json::from_str(&tiercache(&[
        "trace",
        "stats",
        trace.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    st["requests"].as_u64().expect("requests")
}

fn check_report(r: &serde_json::Value, expected_records: u64) {
    let skipped = r["skipped"]["total"].as_u64().unwrap();
    assert_eq!(r["records"].as_u64().unwrap(), expected_records, "{r:#}");
    assert_eq!(
        r["requests"].as_u64().unwrap(),
        expected_records - skipped,
        "{r:#}"
    );
    assert_eq!(r["verify"]["mismatches"].as_u64().unwrap(), 0, "{r:#}");
    assert_eq!(r["errors"].as_u64().unwrap(), 0, "{r:#}");
    assert!(r["latency_us"]["max"].as_u64().unwrap() > 0, "{r:#}");
}

#[test]
fn replay_msr_and_systor_against_nbdkit_memory() {
    if !have_nbdkit() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("mem.sock");
    let _srv = Nbdkit::start(&sock, &["memory", "1G"]);
    let mut verified = 0;
    for name in [
        "msr-cambridge1-sample.csv",
        "systor17-traces-sample.csv.gz",
        "cloud_storage-sample.bz2",
    ] {
        let Some(trace) = shared_sample(name) else {
            continue;
        };
        let n = trace_requests(&trace);
        let r = replay_json(&trace, &uri(&sock), &[]);
        check_report(&r, n);
        verified += r["verify"]["verified_reads"].as_u64().unwrap();
        // Open loop at 1000x the trace's time, queue depth 4.
        let r = replay_json(
            &trace,
            &uri(&sock),
            &["--speed", "1000", "--queue-depth", "4", "--limit", "2000"],
        );
        check_report(&r, n.min(2000));
        assert_eq!(r["mode"], "open");
    }
    // The Tencent sample reads back blocks it wrote: those reads were checked.
    if shared_sample("cloud_storage-sample.bz2").is_some() {
        assert!(verified > 1000, "only {verified} reads verified");
    }
}

#[test]
fn replay_against_tiercache_serve_then_detach() {
    let Some(trace) = shared_sample("msr-cambridge1-sample.csv") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let backing = tmp.path().join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let cache = tmp.path().join("cache.img");
    format_cache(&cache, &backing, "64MiB", &[]);
    let sock = tmp.path().join("nbd.sock");
    let mut srv = ServeProc::start(&cache, &sock, &tmp.path().join("serve.log"));
    let n = trace_requests(&trace);
    let r = replay_json(&trace, &uri(&sock), &["--queue-depth", "8"]);
    check_report(&r, n);
    assert!(r["verify"]["verified_reads"].as_u64().unwrap() > 0, "{r:#}");
    tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
    let st = srv.wait_exit();
    assert!(st.success(), "serve after detach: {st}");
}

/// A trace that writes 64 blocks and reads them back, in MSR format.
fn write_then_read_trace(dir: &Path) -> PathBuf {
    let p = dir.join("wr.csv");
    let mut s = String::new();
    let t0 = 128_166_385_295_514_663u64;
    for (i, op) in ["Write", "Read"].iter().enumerate() {
        for b in 0..64u64 {
            s.push_str(&format!(
                "{},h,0,{op},{},4096,100\n",
                t0 + (i as u64 * 64 + b) * 10,
                b * 8192
            ));
        }
    }
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn verify_fails_when_the_server_loses_writes() {
    if !have_nbdkit() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let trace = write_then_read_trace(tmp.path());
    // A correct server: the same trace verifies.
    let good = tmp.path().join("good.sock");
    let srv = Nbdkit::start(&good, &["memory", "64M"]);
    let r = replay_json(&trace, &uri(&good), &["--format", "msr"]);
    assert_eq!(r["verify"]["verified_reads"], 64, "{r:#}");
    assert_eq!(r["verify"]["verified_sectors"], 64 * 8, "{r:#}");
    drop(srv);
    // nbdkit null accepts writes and reads back zeros.
    let bad = tmp.path().join("null.sock");
    let _srv = Nbdkit::start(&bad, &["null", "64M"]);
    let o = run(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--uri",
        &uri(&bad),
        "--verify",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "must fail: {stderr}");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["verify"]["mismatches"], 64 * 8, "{r:#}");
    assert_eq!(r["verify"]["mismatched_reads"], 64, "{r:#}");
    assert!(stderr.contains("mismatch"), "{stderr}");
    assert!(
        stderr.contains("did not hold what this run wrote"),
        "{stderr}"
    );
}

#[test]
fn nbd_errors_fail_the_run() {
    if !have_nbdkit() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let trace = write_then_read_trace(tmp.path());
    let sock = tmp.path().join("err.sock");
    let _srv = Nbdkit::start(
        &sock,
        &[
            "--filter=error",
            "memory",
            "64M",
            "error-pwrite=EIO",
            "error-pwrite-rate=100%",
        ],
    );
    let o = run(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--uri",
        &uri(&sock),
        "--verify",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "must fail: {stderr}");
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["errors"], 64, "{r:#}");
    // Failed writes leave their sectors undefined: the reads are not checked.
    assert_eq!(r["verify"]["mismatches"], 0, "{r:#}");
    assert_eq!(r["verify"]["verified_reads"], 0, "{r:#}");
    assert!(
        stderr.contains("the NBD server failed 64 requests"),
        "{stderr}"
    );
    assert!(
        stderr.contains("first failed request: WRITE of 4096 bytes"),
        "{stderr}"
    );
}

/// Exit status 1 and exactly one `tiercache: error:` line containing `want`.
fn fails_with(args: &[&str], want: &str) {
    let o = run(args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
    let errs: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("tiercache: error:"))
        .collect();
    assert_eq!(errs.len(), 1, "{args:?}: {stderr}");
    assert!(
        errs[0].contains(want),
        "{args:?}: want '{want}' in: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_input_is_refused_with_one_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = write_then_read_trace(tmp.path());
    let t = trace.to_str().unwrap();
    fails_with(
        &["replay", "--trace", t, "--uri", "http://localhost/x"],
        "unsupported scheme 'http'",
    );
    fails_with(
        &["replay", "--trace", t, "--uri", "nbd+unix:///x"],
        "needs ?socket=PATH",
    );
    let missing = tmp.path().join("nobody.sock");
    fails_with(
        &["replay", "--trace", t, "--uri", &uri(&missing)],
        "cannot connect to NBD server at unix:",
    );
    fails_with(
        &["replay", "--trace", t, "--uri", "nbd://127.0.0.1:1/"],
        "cannot connect to NBD server at 127.0.0.1:1",
    );
    let absent = tmp.path().join("absent.csv");
    fails_with(
        &[
            "replay",
            "--trace",
            absent.to_str().unwrap(),
            "--uri",
            &uri(&missing),
        ],
        "does not exist",
    );
    let garbage = tmp.path().join("garbage.csv");
    std::fs::write(&garbage, "this is not a trace\nat all\n").unwrap();
    fails_with(
        &[
            "replay",
            "--trace",
            garbage.to_str().unwrap(),
            "--format",
            "msr",
            "--uri",
            &uri(&missing),
        ],
        "garbage.csv:1: expected 7 comma-separated fields",
    );
}
