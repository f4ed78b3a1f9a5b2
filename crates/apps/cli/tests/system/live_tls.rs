//! TLS for the live server (`serve --tls off|on|require --tls-certificates
//! DIR [--tls-verify-peer]`), driven with real clients: nbdinfo and nbdcopy
//! (libnbd with GnuTLS) and qemu-io (QEMU's tls-creds-x509). Certificates
//! are made in the test with `openssl`, in nbdkit's layout.
//!
//! Tests skip with a `SKIPPED:` message when a tool is missing.

use crate::clients_util;
use crate::pki;

use clients_util::{
    assert_same_file, bin, output, pattern, run, wait_until, write_file, Server, Setup,
    READY_TIMEOUT,
};
use pki::pki;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Skip unless openssl, nbdinfo and nbdcopy are there.
macro_rules! require_tls_tools {
    () => {
        require_tools!("openssl", "nbdinfo", "nbdcopy");
    };
}

fn tls_args(dir: &Path, mode: &str) -> Vec<String> {
    vec![
        format!("--tls={mode}"),
        "--tls-certificates".into(),
        s(dir).into(),
    ]
}

fn serve_tls(setup: &Setup, dir: &Path, mode: &str, more: &[&str]) -> Server {
    let mut a = tls_args(dir, mode);
    a.extend(more.iter().map(|x| x.to_string()));
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    setup.serve(&a)
}

/// `nbds+unix://` URI of the default export with the client's certificate directory.
fn tls_uri(srv: &Server, certs: &Path) -> String {
    format!(
        "nbds+unix:///?socket={}&tls-certificates={}",
        srv.socket.display(),
        certs.display()
    )
}

/// nbdinfo's output, or its stderr when it fails.
fn nbdinfo(uri: &str) -> Result<String, String> {
    let out = output(Command::new("nbdinfo").arg(uri));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Write `len` bytes of a pattern through `uri` with nbdcopy, copy the
/// export back to a file and compare.
fn nbdcopy_round_trip(dir: &Path, uri: &str, len: usize, seed: u64) {
    let src = dir.join(format!("src-{seed}.bin"));
    let back = dir.join(format!("back-{seed}.bin"));
    write_file(&src, &pattern(len, seed));
    run(Command::new("nbdcopy").arg(&src).arg(uri));
    run(Command::new("nbdcopy").arg(uri).arg(&back));
    let exported = fs::read(&back).unwrap();
    fs::write(&back, &exported[..len]).unwrap();
    assert_same_file(&src, &back);
}

#[test]
fn require_serves_tls_clients_and_refuses_plain_ones() {
    require_tls_tools!();
    let setup = Setup::new(32 * MIB, "8MiB", &[]);
    let p = pki(setup.dir.path());
    let srv = serve_tls(&setup, &p.server, "require", &[]);
    let info = nbdinfo(&tls_uri(&srv, &p.anon)).expect("nbdinfo over TLS");
    assert!(
        srv.stderr().contains("nbds+unix://"),
        "the printed URI says TLS: {}",
        srv.stderr()
    );
    assert!(info.contains("with TLS"), "{info}");
    assert!(info.contains("export-size: 33554432"), "{info}");

    let plain = format!("nbd+unix:///?socket={}", srv.socket.display());
    let e = nbdinfo(&plain).expect_err("a plain-text client must be refused");
    assert!(!e.is_empty());

    // Data written over TLS reads back over TLS (nbdcopy: 4 connections).
    nbdcopy_round_trip(setup.dir.path(), &tls_uri(&srv, &p.anon), 6 << 20, 7);

    let st = setup.stats();
    assert_eq!(st["runtime"]["tls"]["mode"], "require", "{st}");
}

/// qemu-io over TLS with QEMU's x509 credentials (dir holds ca-cert.pem).
fn qemu_io(sock: &Path, certs: &Path, cmds: &[&str]) -> std::process::Output {
    let mut c = Command::new("qemu-io");
    c.args([
        "--object",
        &format!(
            "tls-creds-x509,id=tls0,dir={},endpoint=client",
            certs.display()
        ),
        "--image-opts",
        &format!(
            "driver=nbd,path={},tls-creds=tls0,tls-hostname=localhost",
            sock.display()
        ),
    ]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    output(&mut c)
}

#[test]
fn qemu_io_writes_and_reads_back_over_tls() {
    require_tls_tools!();
    require_tools!("qemu-io");
    let setup = Setup::new(32 * MIB, "8MiB", &[]);
    let p = pki(setup.dir.path());
    let srv = serve_tls(&setup, &p.server, "require", &[]);
    let out = qemu_io(
        &srv.socket,
        &p.anon,
        &[
            "write -P 0xa5 1M 192k",
            "write -P 0x3c 5000 3000",
            "read -P 0xa5 1M 192k",
            "read -P 0x3c 5000 3000",
            "read -P 0 0 5000",
        ],
    );
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if text.contains("tls-creds-x509") && text.contains("not") && !out.status.success() {
        eprintln!("SKIPPED: this qemu-io cannot use tls-creds-x509: {text}");
        return;
    }
    assert!(out.status.success(), "qemu-io over TLS failed: {text}");
    assert!(!text.contains("Pattern verification failed"), "{text}");
    assert_eq!(text.matches("read ").count(), 3, "{text}");
}

#[test]
fn on_serves_plain_and_tls_clients() {
    require_tls_tools!();
    let setup = Setup::new(16 * MIB, "8MiB", &[]);
    let p = pki(setup.dir.path());
    let srv = serve_tls(&setup, &p.server, "on", &[]);
    let plain = format!("nbd+unix:///?socket={}", srv.socket.display());
    let info = nbdinfo(&plain).expect("plain nbdinfo with --tls=on");
    assert!(info.contains("without TLS"), "{info}");
    let info = nbdinfo(&tls_uri(&srv, &p.anon)).expect("TLS nbdinfo with --tls=on");
    assert!(info.contains("with TLS"), "{info}");
    // What a TLS client wrote, a plain one reads.
    nbdcopy_round_trip(setup.dir.path(), &tls_uri(&srv, &p.anon), 1 << 20, 3);
    nbdcopy_round_trip(setup.dir.path(), &plain, 1 << 20, 3);
}

#[test]
fn verify_peer_admits_only_clients_with_a_certificate_from_the_ca() {
    require_tls_tools!();
    let setup = Setup::new(16 * MIB, "8MiB", &[]);
    let p = pki(setup.dir.path());
    let srv = serve_tls(&setup, &p.server, "require", &["--tls-verify-peer"]);
    nbdinfo(&tls_uri(&srv, &p.anon)).expect_err("a client without a certificate is refused");
    // A client certificate from another CA is refused too.
    let other = pki(&setup.dir.path().join("other"));
    let mixed = setup.dir.path().join("mixed");
    fs::create_dir_all(&mixed).unwrap();
    fs::copy(p.anon.join("ca-cert.pem"), mixed.join("ca-cert.pem")).unwrap();
    for f in ["client-cert.pem", "client-key.pem"] {
        fs::copy(other.client.join(f), mixed.join(f)).unwrap();
    }
    nbdinfo(&tls_uri(&srv, &mixed)).expect_err("a certificate from another CA is refused");
    let info = nbdinfo(&tls_uri(&srv, &p.client)).expect("a client with a CA certificate");
    assert!(info.contains("with TLS"), "{info}");
    nbdcopy_round_trip(setup.dir.path(), &tls_uri(&srv, &p.client), 2 << 20, 5);
}

/// `serve` with `args` fails before serving; returns its stderr.
fn serve_fails(setup: &Setup, args: &[&str]) -> String {
    let sock = setup.path("refused.sock");
    let out = output(
        Command::new(bin())
            .args(["serve", "--cache", s(&setup.cache), "--listen"])
            .arg(format!("unix:{}", sock.display()))
            .args(args),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "serve {args:?} started: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!sock.exists(), "no socket is left behind: {err}");
    err
}

#[test]
fn bad_certificates_are_refused_at_startup_naming_the_file() {
    require_tools!("openssl");
    let setup = Setup::new(16 * MIB, "8MiB", &[]);
    let p = pki(setup.dir.path());
    let dir = s(&p.server);

    let e = serve_fails(&setup, &["--tls=require"]);
    assert!(e.contains("--tls-certificates"), "{e}");
    let e = serve_fails(&setup, &["--tls-certificates", dir]);
    assert!(e.contains("--tls=on or --tls=require"), "{e}");
    let missing = setup.path("no-such-dir");
    let e = serve_fails(&setup, &["--tls=on", "--tls-certificates", s(&missing)]);
    assert!(e.contains("no-such-dir"), "{e}");

    let broken = setup.path("broken");
    fs::create_dir_all(&broken).unwrap();
    let b = s(&broken);
    let put = |f: &str, from: &Path| fs::copy(from, broken.join(f)).unwrap();
    put("server-cert.pem", &p.server.join("server-cert.pem"));
    let e = serve_fails(&setup, &["--tls=require", "--tls-certificates", b]);
    assert!(e.contains("server-key.pem"), "missing key: {e}");

    fs::write(
        broken.join("server-key.pem"),
        "-----BEGIN PRIVATE KEY-----\n%%%\n",
    )
    .unwrap();
    let e = serve_fails(&setup, &["--tls=require", "--tls-certificates", b]);
    assert!(
        e.contains("server-key.pem") && e.contains("PEM"),
        "bad PEM: {e}"
    );

    // The client's key does not belong to the server's certificate.
    put("server-key.pem", &p.client.join("client-key.pem"));
    let e = serve_fails(&setup, &["--tls=require", "--tls-certificates", b]);
    assert!(
        e.contains("server-cert.pem") && e.contains("server-key.pem"),
        "key mismatch: {e}"
    );

    // --tls-verify-peer needs the CA.
    put("server-key.pem", &p.server.join("server-key.pem"));
    let e = serve_fails(
        &setup,
        &[
            "--tls=require",
            "--tls-certificates",
            b,
            "--tls-verify-peer",
        ],
    );
    assert!(e.contains("ca-cert.pem"), "{e}");

    // None of that left the cache marked open: it serves now.
    let srv = serve_tls(&setup, &broken, "require", &[]);
    drop(srv);
}

/// A free TCP port on the loopback interface.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_reachable_tcp_address_is_allowed_with_tls_require() {
    require_tls_tools!();
    let setup = Setup::new(16 * MIB, "8MiB", &[]);
    let p = pki(setup.dir.path());
    let port = free_port();
    let listen = format!("tcp:0.0.0.0:{port}");
    // Without TLS: refused, and the message says how to do it safely.
    let out = output(Command::new(bin()).args([
        "serve",
        "--cache",
        s(&setup.cache),
        "--listen",
        &listen,
    ]));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains("--tls=require") && e.contains("--insecure-listen"),
        "{e}"
    );
    // --tls=on still lets plain clients in: refused as well.
    let mut a = vec!["serve", "--cache", s(&setup.cache), "--listen", &listen];
    let on = tls_args(&p.server, "on");
    a.extend(on.iter().map(String::as_str));
    let out = output(Command::new(bin()).args(&a));
    assert!(!out.status.success(), "--tls=on on 0.0.0.0 was accepted");

    let mut srv = TcpServer::start(&setup.cache, &listen, &tls_args(&p.server, "require"), port);
    let uri = format!(
        "nbds://localhost:{port}/?tls-certificates={}",
        p.anon.display()
    );
    let info = nbdinfo(&uri).expect("nbdinfo over TLS on TCP");
    assert!(info.contains("with TLS"), "{info}");
    nbdinfo(&format!("nbd://127.0.0.1:{port}/")).expect_err("plain TCP client refused");
    srv.stop();
}

/// `tiercache serve` on TCP, stopped by PID (SIGTERM, or kill -9 on drop).
struct TcpServer {
    child: Option<std::process::Child>,
}

impl TcpServer {
    fn start(cache: &Path, listen: &str, more: &[String], port: u16) -> TcpServer {
        let child = Command::new(bin())
            .args(["serve", "--cache", s(cache), "--listen", listen])
            .args(more)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting tiercache serve");
        let mut srv = TcpServer { child: Some(child) };
        // Listening and the control socket answering: the cache is open.
        let ctl = format!("{}.ctl", cache.display());
        wait_until(
            format!("serve on {listen} to listen"),
            READY_TIMEOUT,
            || {
                let c = srv.child.as_mut().unwrap();
                assert!(
                    c.try_wait().unwrap().is_none(),
                    "serve on {listen} exited early"
                );
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                    && std::os::unix::net::UnixStream::connect(&ctl).is_ok()
            },
        );
        srv
    }

    /// SIGTERM by PID and a clean exit.
    fn stop(&mut self) {
        let mut c = self.child.take().unwrap();
        run(Command::new("kill").args(["-TERM", &c.id().to_string()]));
        assert!(
            c.wait().unwrap().success(),
            "serve did not exit cleanly on SIGTERM"
        );
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Format `design` ("tier" or "tica") in `dir`; returns what `serve --cache` names.
fn format_design(dir: &Path, design: &str) -> PathBuf {
    let backing = dir.join("backing.img");
    fs::File::create(&backing)
        .unwrap()
        .set_len(16 * MIB)
        .unwrap();
    let b = s(&backing);
    match design {
        "tier" => {
            let fast = dir.join("fast.img");
            let tiers = format!("{},{b}", s(&fast));
            #[rustfmt::skip]
            run(Command::new(bin()).args(["format", "--mode", "tier", "--tiers", &tiers,
                "--size", "8MiB", "--tier-block", "64KiB"]));
            fast
        }
        _ => {
            let (ro, wo) = (dir.join("ro.img"), dir.join("wo.img"));
            #[rustfmt::skip]
            run(Command::new(bin()).args(["format", "--mode", "tica", "--ro-ssd", s(&ro),
                "--wo-ssd", s(&wo), "--backing", b, "--size", "8MiB", "--dram-size", "1MiB"]));
            wo
        }
    }
}

#[test]
fn tiered_volume_and_three_level_cache_serve_over_tls() {
    require_tls_tools!();
    for design in ["tier", "tica"] {
        let dir = tempfile::tempdir().unwrap();
        let p = pki(dir.path());
        let primary = format_design(dir.path(), design);
        let sock = dir.path().join("nbd.sock");
        let srv = Server::start(
            &primary,
            &sock,
            &["--tls=require", "--tls-certificates", s(&p.server)],
        );
        let info = nbdinfo(&tls_uri(&srv, &p.anon)).expect("nbdinfo over TLS");
        assert!(info.contains("with TLS"), "{design}: {info}");
        let plain = format!("nbd+unix:///?socket={}", sock.display());
        nbdinfo(&plain).expect_err("plain client refused");
        nbdcopy_round_trip(dir.path(), &tls_uri(&srv, &p.anon), 3 << 20, 11);
    }
}
