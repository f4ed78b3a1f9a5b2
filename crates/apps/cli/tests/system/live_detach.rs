//! "Detach means detached", for every design, driven as a user would with
//! qemu-io: after `tiercache detach` the cache no longer serves the backing
//! device's old data (the next `serve` starts cold), also when the server is
//! killed just after or during the detach; a clean (SIGTERM) shutdown whose
//! backing device is then modified in the middle starts cold, or is refused
//! while the cache holds dirty data; a tiered volume refuses to detach and
//! keeps serving.
//!
//! Tests skip with a `SKIPPED:` message when qemu-io is missing.

use crate::common;

use common::designs::*;
use common::*;
use std::path::Path;
use std::process::Command;

/// The designs that can detach.
const CACHES: [Design; 3] = [Design::Cache, Design::LogStructured, Design::Tica];

/// The backing device: 16 MiB.
const BACKING_BYTES: u64 = 16 << 20;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn have_qemu_io() -> bool {
    let ok = Command::new("qemu-io").arg("--version").output().is_ok();
    if !ok {
        eprintln!("SKIPPED: qemu-io is not installed");
    }
    ok
}

/// A formatted device of one design in front of a 16 MiB backing file of zeros.
struct Setup(DesignSetup);

impl std::ops::Deref for Setup {
    type Target = DesignSetup;
    fn deref(&self) -> &DesignSetup {
        &self.0
    }
}

impl Setup {
    fn new(design: Design) -> Setup {
        Setup(DesignSetup::new(design, |backing| {
            std::fs::File::create(backing)
                .and_then(|f| f.set_len(BACKING_BYTES))
                .expect("backing file");
        }))
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    /// qemu-io commands through the served cache; panics unless all pass.
    fn io(&self, cmds: &[&str]) {
        let (ok, text) = qemu_io(&self.uri(), cmds);
        assert!(
            ok,
            "{:?}: qemu-io {cmds:?} through the cache: {text}\n{}",
            self.design,
            tail(&self.log)
        );
    }

    /// qemu-io commands straight on the backing file (the cache is stopped).
    fn io_backing(&self, cmds: &[&str]) {
        let (ok, text) = qemu_io(s(&self.backing), cmds);
        assert!(ok, "qemu-io {cmds:?} on the backing file: {text}");
    }

    fn detach(&self) -> (bool, String) {
        try_tiercache(&["detach", "--cache", s(&self.primary)])
    }

    fn check_json(&self) -> serde_json::Value {
        let out = tiercache(&["check", "--json", "--cache", s(&self.primary)]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("check --json ({e}): {out}"))
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Runs qemu-io on `target` (raw); (every command passed, its output).
fn qemu_io(target: &str, cmds: &[&str]) -> (bool, String) {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw"]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    let out = c.arg(target).output().expect("run qemu-io");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let ok = out.status.success() && !text.contains("failed") && !text.contains("error");
    (ok, text)
}

fn sigterm(srv: &mut ServeProc) {
    let st = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    assert!(
        srv.wait_exit().success(),
        "the server failed its clean shutdown"
    );
}

/// The cold start as `stats --json` shows it, per design.
fn cold_start(st: &Setup, v: &serde_json::Value) -> Option<String> {
    let c = match st.design {
        Design::Cache => &v["cold_start"],
        _ => &v["recovery"]["cold_start"],
    };
    c.as_str().map(str::to_string)
}

/// The user's scenario: 4 MiB of 0xaa at 8 MiB through the cache, detach,
/// 4 MiB of 0xbb straight to the backing file, serve again: the cache must
/// return 0xbb, say it started cold, and `check` must say "detached".
fn detach_then_modify(st: &Setup) {
    let d = st.design;
    let mut srv = st.serve(&[]);
    st.io(&["write -P 0xaa 8M 4M", "read -P 0xaa 8M 4M"]);
    let (ok, out) = st.detach();
    assert!(ok, "{d:?}: detach failed: {out}\n{}", tail(&st.log));
    assert!(out.contains("holds every acknowledged write"), "{out}");
    assert!(out.contains("next serve starts cold"), "{out}");
    assert!(srv.wait_exit().success(), "{d:?}");
    let c = st.check_json();
    assert_eq!(c["state"], "detached", "{d:?}: {c}");
    st.io_backing(&["write -P 0xbb 8M 4M"]);
    let _srv = st.serve(&[]);
    st.io(&["read -P 0xbb 8M 4M", "read -P 0 0 8M"]);
    let log = st.log_text();
    assert!(
        log.contains("starting cold: the cache was detached"),
        "{d:?}: {log}"
    );
    let v = _srv.stats();
    assert_eq!(
        cold_start(st, &v).as_deref(),
        Some("the cache was detached"),
        "{d:?}: {v}"
    );
}

#[test]
fn after_detach_every_design_serves_what_the_backing_device_holds_now() {
    if !have_qemu_io() {
        return;
    }
    for d in CACHES {
        detach_then_modify(&Setup::new(d));
        eprintln!("{d:?}: detached, backing modified, served again: the new data");
    }
}

/// The tiered volume keeps each block in one tier: detach is refused, the
/// server keeps serving, and what was written reads back.
#[test]
fn a_tiered_volume_refuses_detach_and_keeps_serving() {
    if !have_qemu_io() {
        return;
    }
    let st = Setup::new(Design::Tier);
    let mut srv = st.serve(&[]);
    st.io(&["write -P 0xaa 8M 4M"]);
    let (ok, out) = st.detach();
    assert!(!ok, "detach of a tiered volume was accepted: {out}");
    assert!(out.contains("cannot be detached"), "{out}");
    assert!(
        srv.child.try_wait().expect("try_wait").is_none(),
        "the server stopped"
    );
    st.io(&[
        "read -P 0xaa 8M 4M",
        "write -P 0xcc 1M 64k",
        "read -P 0xcc 1M 64k",
    ]);
    sigterm(&mut srv);
    let _srv = st.serve(&[]);
    st.io(&["read -P 0xaa 8M 4M", "read -P 0xcc 1M 64k"]);
}

/// Clean (SIGTERM) shutdown with the written data clean in the cache (a
/// `flush` wrote it back), then 64 KiB in the middle of it modified on the
/// backing file: the next serve starts cold with a warning and reads the
/// new data. With dirty data in the cache the serve is refused, saying why.
fn modified_while_stopped(st: &Setup) {
    let d = st.design;
    let mut srv = st.serve(&[]);
    st.io(&["write -P 0xaa 8M 4M", "read -P 0xaa 8M 4M"]);
    tiercache(&["flush", "--cache", s(&st.primary)]);
    st.io(&["read -P 0xaa 8M 4M"]);
    sigterm(&mut srv);
    assert_eq!(st.check_json()["state"], "clean shutdown", "{d:?}");
    st.io_backing(&["write -P 0xbb 9M 64k"]);
    let mut srv = st.serve(&[]);
    st.io(&[
        "read -P 0xaa 8M 1M",
        "read -P 0xbb 9M 64k",
        "read -P 0xaa 9280k 3008k",
    ]);
    let v = srv.stats();
    let why = cold_start(st, &v).unwrap_or_else(|| panic!("{d:?}: not cold: {v}"));
    assert!(
        why.contains("modified while the cache was stopped"),
        "{d:?}: {why}"
    );
    assert!(st
        .log_text()
        .contains("starting cold: the backing device was modified"));
    // Now dirty data (written, not flushed), a clean shutdown, and a change.
    st.io(&["write -P 0xcc 10M 64k"]);
    sigterm(&mut srv);
    st.io_backing(&["write -P 0xdd 12M 64k"]);
    let (ok, out) = try_tiercache(&[
        "serve",
        "--cache",
        s(&st.primary),
        "--listen",
        &format!("unix:{}", st.sock.display()),
    ]);
    assert!(
        !ok,
        "{d:?}: a cache with dirty data served a modified backing device"
    );
    assert!(
        out.contains("modified while the cache was stopped") && out.contains("dirty"),
        "{d:?}: {out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("error")).count(),
        1,
        "{d:?}: one error line: {out}"
    );
    assert!(out.contains("--force"), "{d:?}: says what to do: {out}");
}

#[test]
fn a_backing_device_modified_while_the_cache_was_stopped_is_never_served_stale() {
    if !have_qemu_io() {
        return;
    }
    for d in CACHES {
        modified_while_stopped(&Setup::new(d));
        eprintln!("{d:?}: modified while stopped: cold start (clean), refused (dirty)");
    }
}

/// kill -9 just after the detach answered, and during a detach: once the
/// detach said it succeeded, the next serve returns what the backing device
/// holds after it was modified; a detach cut short leaves each block either
/// the cache's acknowledged data or the backing device's new data.
fn crash_around_detach(st: &Setup) {
    let d = st.design;
    // Just after.
    let mut srv = st.serve(&[]);
    st.io(&["write -P 0xaa 8M 4M"]);
    let (ok, out) = st.detach();
    assert!(ok, "{d:?}: {out}");
    srv.kill9();
    st.io_backing(&["write -P 0xbb 8M 4M"]);
    // -v: the log says when the server starts to stop.
    let mut srv = st.serve(&["-v"]);
    st.io(&["read -P 0xbb 8M 4M"]);
    // During: kill -9 once the server started the detach.
    st.io(&["write -P 0xcc 8M 4M"]);
    let primary = st.primary.clone();
    let detacher = std::thread::spawn(move || try_tiercache(&["detach", "--cache", s(&primary)]));
    wait_until(format!("{d:?}: the detach to start"), READY_TIMEOUT, || {
        detacher.is_finished() || st.log_text().contains("detach: no new connections")
    });
    srv.kill9();
    let (ok, out) = detacher.join().expect("detach thread");
    st.io_backing(&["write -P 0xee 8M 4M"]);
    let _srv = st.serve(&[]);
    let mut c = NbdClient::connect(&st.sock).expect("connect");
    let got = c
        .read(8 << 20, 4 << 20)
        .expect("read")
        .unwrap_or_else(|e| panic!("{d:?}: read failed: NBD error {e}"));
    for (i, b) in got.chunks(BLOCK).enumerate() {
        let at = (8 << 20) + i * BLOCK;
        if ok {
            assert!(
                b.iter().all(|&x| x == 0xee),
                "{d:?}: detached ({out}), yet the block at {at} is not the backing device's new data"
            );
        } else {
            // Not detached: as after any crash, the cache's acknowledged data or the backing device's.
            assert!(
                b.iter().all(|&x| x == 0xee) || b.iter().all(|&x| x == 0xcc),
                "{d:?}: the block at {at} is neither the new data nor the cache's"
            );
        }
    }
    c.disconnect();
    eprintln!(
        "{d:?}: kill -9 during detach: detach {}",
        if ok { "completed" } else { "cut short" }
    );
}

#[test]
fn a_crash_around_detach_never_serves_stale_data() {
    if !have_qemu_io() {
        return;
    }
    for d in CACHES {
        crash_around_detach(&Setup::new(d));
    }
}
