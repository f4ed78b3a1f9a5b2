//! A remote NBD export as the backing device, against three real
//! servers: nbdkit (file plugin), qemu-nbd and nbd-server. Each test formats a
//! cache over `nbd+unix://` or `nbd://`, then:
//!
//! 1. fio crc32c verify through the cache, over more data than it holds;
//! 2. a write-back load with FLUSHes, during which the remote is killed
//!    (SIGKILL): cached blocks stay readable, writes and FLUSHes keep being
//!    acknowledged, stats show the outage; the remote restarts on the same
//!    file and cleaning catches up (`tiercache flush` succeeds);
//! 3. a second outage, more acknowledged writes, then tiercache itself is
//!    killed (SIGKILL) while the remote is down; the remote comes back,
//!    tiercache restarts and every flushed block reads back;
//! 4. `detach`, then every block is read straight from the remote (the
//!    project's NBD client) and checked.
//!
//! Skips with a message when a server binary is absent.

use crate::common;
use crate::pki;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tiercache_nbd_client as nbdc;

/// Blocks of the versioned-block ledger (4 MiB); fio uses the space after it.
const BLOCKS: u64 = 1024;
const REMOTE_SIZE: u64 = 64 << 20;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Nbdkit,
    QemuNbd,
    NbdServer,
}

/// A remote NBD server on `img`, restartable on the same file and address.
struct Remote {
    kind: Kind,
    dir: PathBuf,
    img: PathBuf,
    port: u16,
    pid: Option<u32>,
    /// nbdkit only: filter options before the plugin and parameters after it.
    filters: Vec<String>,
    params: Vec<String>,
    /// nbdkit with `--tls=require`: the client certificate directory its URI names.
    tls: Option<PathBuf>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

impl Remote {
    /// nbdkit with `filters` (`--filter=NAME`) and their `params` (`KEY=VALUE`).
    fn with_filters(kind: Kind, dir: &Path, filters: &[&str], params: &[&str]) -> Option<Remote> {
        Self::build(kind, dir, filters, params, None)
    }

    /// nbdkit requiring TLS with the server certificates of `pki`; its URI
    /// is `nbds+unix://` with the anonymous client's directory.
    fn with_tls(dir: &Path, pki: &pki::Pki) -> Option<Remote> {
        let certs = format!("--tls-certificates={}", pki.server.display());
        let filters = ["--tls=require", certs.as_str()];
        Self::build(Kind::Nbdkit, dir, &filters, &[], Some(pki.anon.clone()))
    }

    fn build(
        kind: Kind,
        dir: &Path,
        filters: &[&str],
        params: &[&str],
        tls: Option<PathBuf>,
    ) -> Option<Remote> {
        let bin = match kind {
            Kind::Nbdkit => "nbdkit",
            Kind::QemuNbd => "qemu-nbd",
            Kind::NbdServer => "nbd-server",
        };
        if !have(bin) {
            eprintln!("SKIPPED: `{bin}` is not installed (scripts/setup.sh installs it)");
            return None;
        }
        let img = dir.join("remote.img");
        init_backing(&img, BLOCKS);
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.set_len(REMOTE_SIZE).unwrap();
        let mut r = Remote {
            kind,
            dir: dir.to_path_buf(),
            img,
            port: free_port(),
            pid: None,
            filters: filters.iter().map(|s| s.to_string()).collect(),
            params: params.iter().map(|s| s.to_string()).collect(),
            tls,
        };
        r.start();
        Some(r)
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("remote.sock")
    }

    fn uri(&self) -> String {
        if let Some(certs) = &self.tls {
            return self.uri_with(certs);
        }
        match self.kind {
            Kind::Nbdkit => format!("nbd+unix:///?socket={}", self.sock().display()),
            Kind::QemuNbd => format!("nbd+unix:///disk?socket={}", self.sock().display()),
            Kind::NbdServer => format!("nbd://127.0.0.1:{}/disk", self.port),
        }
    }

    /// The `nbds+unix://` URI with the client certificates in `certs`.
    fn uri_with(&self, certs: &Path) -> String {
        format!(
            "nbds+unix:///?socket={}&tls-certificates={}",
            self.sock().display(),
            certs.display()
        )
    }

    fn start(&mut self) {
        let pidf = self.dir.join("remote.pid");
        let _ = std::fs::remove_file(&pidf);
        let _ = std::fs::remove_file(self.sock());
        let st = match self.kind {
            Kind::Nbdkit => Command::new("nbdkit")
                .arg("-U")
                .arg(self.sock())
                .arg("-P")
                .arg(&pidf)
                .args(&self.filters)
                .arg("file")
                .arg(&self.img)
                .args(&self.params)
                .status(),
            Kind::QemuNbd => Command::new("qemu-nbd")
                .arg("-k")
                .arg(self.sock())
                .args(["-f", "raw", "--persistent", "--shared=16", "--fork", "-x", "disk"])
                .arg("--pid-file")
                .arg(&pidf)
                .arg(&self.img)
                .status(),
            Kind::NbdServer => {
                let conf = self.dir.join("nbd-server.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "[generic]\n    listenaddr = 127.0.0.1\n    port = {}\n    allowlist = true\n\
                         [disk]\n    exportname = {}\n    flush = true\n    fua = true\n    trim = true\n    multifile = false\n",
                        self.port,
                        self.img.display()
                    ),
                )
                .unwrap();
                Command::new("nbd-server")
                    .arg("-C")
                    .arg(&conf)
                    .arg("-p")
                    .arg(&pidf)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
            }
        }
        .expect("start the NBD server");
        assert!(st.success(), "{:?} failed to start", self.kind);
        // Started once it wrote its pid file and answers.
        let uri: nbdc::Uri = self.uri().parse().unwrap();
        let pid = wait_for(format!("{:?} to start", self.kind), READY_TIMEOUT, || {
            let pid = std::fs::read_to_string(&pidf)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())?;
            nbdc::Client::connect(&uri).ok()?.disconnect();
            Some(pid)
        });
        self.pid = Some(pid);
    }

    /// SIGKILL the server and the children it forked for connections
    /// (nbd-server serves each connection in a child).
    fn kill9(&mut self) {
        let Some(pid) = self.pid.take() else { return };
        let mut victims = vec![pid];
        if let Ok(out) = Command::new("ps")
            .args(["-o", "pid=", "--ppid", &pid.to_string()])
            .output()
        {
            victims.extend(
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .filter_map(|s| s.parse::<u32>().ok()),
            );
        }
        for v in victims {
            let _ = Command::new("kill").args(["-9", &v.to_string()]).status();
        }
        // Gone when the socket no longer answers.
        let uri: nbdc::Uri = self.uri().parse().unwrap();
        wait_until(format!("{:?} to be gone", self.kind), READY_TIMEOUT, || {
            nbdc::Client::connect(&uri).is_err()
        });
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// What the ledger knows: the newest version written and acknowledged, and
/// the newest covered by an acknowledged FLUSH.
struct Book {
    acked: Vec<u64>,
    flushed: Vec<u64>,
}

impl Book {
    fn new() -> Book {
        Book {
            acked: vec![0; BLOCKS as usize],
            flushed: vec![0; BLOCKS as usize],
        }
    }

    /// Write `n` blocks (pseudo-random), a FLUSH every 16; every reply must
    /// succeed (else the panic shows the server's `log`).
    fn write(&mut self, c: &mut NbdClient, rng: &mut Rng, n: usize, log: &Path) {
        for i in 0..n {
            let b = rng.below(BLOCKS);
            let v = self.acked[b as usize] + 1;
            c.write(b * 4096, &make_block(b, v), false)
                .expect("connection")
                .unwrap_or_else(|e| {
                    panic!(
                        "write of block {b} failed with NBD error {e}\n{}",
                        tail(log)
                    )
                });
            self.acked[b as usize] = v;
            if i % 16 == 15 || i + 1 == n {
                c.flush()
                    .expect("connection")
                    .unwrap_or_else(|e| panic!("flush failed with NBD error {e}\n{}", tail(log)));
                self.flushed.copy_from_slice(&self.acked);
            }
        }
    }

    /// Every block holds at least its flushed version (at most the acknowledged one).
    fn verify(&self, read: &mut dyn FnMut(u64) -> Vec<u8>, what: &str) {
        for b in 0..BLOCKS {
            let data = read(b);
            let v = parse_block(b, &data).unwrap_or_else(|e| panic!("{what}: block {b}: {e}"));
            let (lo, hi) = (self.flushed[b as usize], self.acked[b as usize]);
            assert!(
                (lo..=hi).contains(&v),
                "{what}: block {b} holds version {v}, expected {lo}..={hi}"
            );
        }
    }
}

fn backing_state(p: &ServeProc) -> String {
    p.stats()["backing"]["state"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

/// fio's writes the server takes before the remote dies under fio: the
/// outage falls inside fio's run (10240 writes, then as many verifying
/// reads) whatever the machine's speed.
const OUTAGE_AT_WRITES: u64 = 1024;

/// What the server logs when it meets the remote's outage.
const CONNECTION_LOST: &str = "connection lost";

/// The client writes a design has answered: the log-structured cache's
/// write hits and misses, the tiered volume's writes to either tier.
fn writes_served(st: &serde_json::Value) -> u64 {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    match st["tiers"].as_array() {
        Some(tiers) => tiers.iter().map(|t| n(&t["write_hits"])).sum(),
        None => n(&st["write_hits"]) + n(&st["write_misses"]),
    }
}

fn wait_state(p: &ServeProc, want: &str) {
    let reached = poll_for(READY_TIMEOUT, || (backing_state(p) == want).then_some(()));
    assert!(
        reached.is_some(),
        "backing state never became {want}: {}\n{}",
        p.stats()["backing"],
        tail(&p.log)
    );
}

fn fio_verify(sock: &Path, dir: &Path) {
    fio_verify_uri(
        &format!("nbd+unix:///?socket={}", sock.display()),
        dir,
        false,
    );
}

/// fio's crc32c verify of 40 MiB at `uri` (writing, then verifying; with
/// `verify_only` verifying what the same job wrote before). A `uri` that is
/// an absolute path is a plain file, read with fio's psync engine.
fn fio_verify_uri(uri: &str, dir: &Path, verify_only: bool) {
    if !have("fio") {
        eprintln!("SKIPPED (fio part): `fio` is not installed");
        return;
    }
    let out = dir.join("fio.json");
    let st = Command::new("fio")
        .args(verify_only.then_some("--verify_only"))
        .args([
            "--name=remote-verify",
            FIO_NO_STATE,
            if uri.starts_with('/') {
                "--ioengine=psync"
            } else {
                "--ioengine=nbd"
            },
            &if uri.starts_with('/') {
                format!("--filename={uri}")
            } else {
                format!("--uri={uri}")
            },
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            &format!("--offset={}", BLOCKS * 4096),
            "--size=40M",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--do_verify=1",
            "--output-format=json",
        ])
        .arg(format!("--output={}", out.display()))
        .stdout(Stdio::null())
        .status()
        .expect("run fio");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_default())
            .unwrap_or_default();
    assert!(st.success(), "fio verify failed: {j}");
    assert_eq!(j["jobs"][0]["error"], 0, "fio error: {j}");
    let rw = if verify_only { "read" } else { "write" };
    assert!(
        j["jobs"][0][rw]["io_bytes"].as_u64().unwrap_or(0) > 0,
        "fio did not {rw}"
    );
}

/// The designs a test formats over a remote.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Over {
    /// The SSD cache with this write policy.
    SsdCache(&'static str),
    Tica,
    LogStructured,
    /// The tiered volume, the remote as its slow tier.
    Tiered,
}

/// `tiercache format` of `over` in `dir` over the remote at `uri`; returns
/// the device `serve --cache` takes.
fn format_over(dir: &Path, uri: &str, over: Over) -> PathBuf {
    let d = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let (dev, args): (&str, Vec<String>) = match over {
        Over::SsdCache(policy) => (
            "cache.img",
            vec![
                "--cache",
                &d("cache.img"),
                "--backing",
                uri,
                "--size",
                "24MiB",
            ]
            .into_iter()
            .chain(["--write-policy", policy])
            .map(String::from)
            .collect(),
        ),
        Over::LogStructured => (
            "cache.img",
            [
                "--cache",
                &d("cache.img"),
                "--backing",
                uri,
                "--size",
                "24MiB",
            ]
            .into_iter()
            .chain(["--layout", "log-structured"])
            .map(String::from)
            .collect(),
        ),
        Over::Tica => (
            "wo.img",
            [
                "--mode",
                "tica",
                "--ro-ssd",
                &d("ro.img"),
                "--wo-ssd",
                &d("wo.img"),
                "--backing",
                uri,
                "--size",
                "16MiB",
                "--dram-size",
                "1MiB",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
        Over::Tiered => (
            "fast.img",
            [
                "--mode",
                "tier",
                "--tiers",
                &format!("{},{uri}", d("fast.img")),
                "--capacity",
                "slow",
                "--size",
                "16MiB",
                "--block-size",
                "64KiB",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
        ),
    };
    let mut all = vec!["format"];
    all.extend(args.iter().map(String::as_str));
    let out = tiercache(&all);
    assert!(out.contains(uri), "{out}");
    dir.join(dev)
}

/// A test's remote and the design formatted over it (the remote is
/// killed before the directory goes). Bind `dir` when destructuring: a
/// field left to `..` is dropped at once, and with it the directory.
struct Rig {
    remote: Remote,
    uri: String,
    cache: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    dir: tempfile::TempDir,
}

/// Start `kind` (nbdkit with `filters` and `params`; `{dir}` in a
/// parameter is the test's directory) and format `over` on it; `None` (the
/// test skips) when the server is not installed.
fn rig(kind: Kind, filters: &[&str], params: &[&str], over: Over) -> Option<Rig> {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let params: Vec<String> = params.iter().map(|p| p.replace("{dir}", &d)).collect();
    let params: Vec<&str> = params.iter().map(String::as_str).collect();
    let remote = Remote::with_filters(kind, dir.path(), filters, &params)?;
    let uri = remote.uri();
    let cache = format_over(dir.path(), &uri, over);
    Some(Rig {
        remote,
        uri,
        cache,
        sock: dir.path().join("t.sock"),
        log: dir.path().join("serve.log"),
        dir,
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Design {
    SsdCache,
    Tica,
}

/// The whole scenario for `design` over `kind`.
fn cache_over(design: Design, kind: Kind) {
    let Some(Rig {
        dir,
        mut remote,
        uri,
        cache,
        sock,
        log,
    }) = rig(
        kind,
        &[],
        &[],
        match design {
            Design::SsdCache => Over::SsdCache("write-back"),
            Design::Tica => Over::Tica,
        },
    )
    else {
        return;
    };
    let serve_opts = ["--backing-timeout", "1s"];
    let mut p = ServeProc::start_with(&cache, &sock, &log, &serve_opts);
    assert_eq!(backing_state(&p), "connected");
    assert_eq!(p.stats()["backing"]["uri"], uri.as_str());

    // 1. fio crc32c verify through the cache over the remote.
    fio_verify(&sock, dir.path());
    tiercache(&["flush", "--cache", cache.to_str().unwrap()]);

    // 2. The remote dies in the middle of a write-back load and comes back.
    let mut book = Book::new();
    let mut rng = Rng(0x5eed ^ kind as u64);
    let mut c = NbdClient::connect(&sock).unwrap();
    book.write(&mut c, &mut rng, 300, &log);
    remote.kill9();
    book.write(&mut c, &mut rng, 300, &log);
    // Cached data stays readable (every ledger block was read or written
    // recently enough to be cached? not necessarily: read only the ones written).
    for b in 0..BLOCKS {
        if book.acked[b as usize] > 0 {
            let d = c.read(b * 4096, 4096).unwrap().unwrap_or_else(|e| {
                panic!("cached block {b} unreadable during the outage: NBD error {e}")
            });
            assert_eq!(parse_block(b, &d), Ok(book.acked[b as usize]));
        }
    }
    // The SSD cache's cleaner meets the outage (the three-level cache may
    // not touch the remote during it: its state changes on first use).
    if design == Design::SsdCache {
        let st = p.stats();
        assert_ne!(st["backing"]["state"], "connected", "{}", st["backing"]);
        assert!(st["backing"]["since_unix"].as_f64().is_some());
        assert!(st["dirty_lines"].as_u64().unwrap() > 0);
    }
    remote.start();
    book.write(&mut c, &mut rng, 100, &log);
    wait_state(&p, "connected");
    tiercache(&["flush", "--cache", cache.to_str().unwrap()]);
    if design == Design::SsdCache {
        assert_eq!(p.stats()["dirty_lines"], 0);
    }
    assert!(p.stats()["backing"]["reconnects"].as_u64().unwrap() >= 1);
    book.verify(
        &mut |b| c.read(b * 4096, 4096).unwrap().unwrap(),
        "after the remote came back",
    );

    // 3. tiercache killed while the remote is down.
    remote.kill9();
    book.write(&mut c, &mut rng, 300, &log);
    drop(c);
    p.kill9();
    remote.start();
    let p2 = ServeProc::start_with(&cache, &sock, &log, &serve_opts);
    let mut c = NbdClient::connect(&sock).unwrap();
    book.verify(
        &mut |b| c.read(b * 4096, 4096).unwrap().unwrap(),
        "after tiercache restarted",
    );
    // What it read is now the newest each block can hold.
    for b in 0..BLOCKS as usize {
        let d = c.read(b as u64 * 4096, 4096).unwrap().unwrap();
        let v = parse_block(b as u64, &d).unwrap();
        book.acked[b] = v;
        book.flushed[b] = v;
    }
    drop(c);

    // 4. detach, then straight against the remote.
    tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
    let mut p2 = p2;
    p2.wait_exit();
    let u: nbdc::Uri = uri.parse().unwrap();
    let mut rc = nbdc::Client::connect(&u).unwrap();
    book.verify(
        &mut |b| rc.read(b * 4096, 4096).unwrap().unwrap(),
        "on the remote after detach",
    );
    rc.disconnect();
}

/// A size mismatch between the export and what was formatted is a clear error.
#[test]
fn export_size_change_is_refused() {
    let Some(Rig {
        dir,
        mut remote,
        uri,
        cache,
        ..
    }) = rig(Kind::Nbdkit, &[], &[], Over::SsdCache("write-back"))
    else {
        return;
    };
    remote.kill9();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&remote.img)
        .unwrap();
    f.set_len(REMOTE_SIZE * 2).unwrap();
    remote.start();
    let out = Command::new(bin())
        .args(["serve", "--cache"])
        .arg(&cache)
        .arg("--listen")
        .arg(format!("unix:{}", dir.path().join("t.sock").display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("size differs"), "{err}");
    // An unreachable remote at format time is a clear error too.
    remote.kill9();
    let out = Command::new(bin())
        .args(["format", "--cache"])
        .arg(dir.path().join("c2.img"))
        .args(["--size", "24MiB", "--backing", &uri])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cannot connect"), "{err}");
}

/// A miss while the remote is down waits up to `--backing-timeout`, then
/// fails with EIO (stats say "error" and count it), while cached data stays
/// readable.
#[test]
fn misses_fail_with_eio_when_the_remote_is_down() {
    let Some(Rig {
        mut remote,
        cache,
        sock,
        log,
        dir: _dir,
        ..
    }) = rig(Kind::Nbdkit, &[], &[], Over::SsdCache("write-back"))
    else {
        return;
    };
    let mut p = ServeProc::start_with(&cache, &sock, &log, &["--backing-timeout", "1s"]);
    let mut c = NbdClient::connect(&sock).unwrap();
    // Block 0 cached (read once), block 900 not.
    let d = c.read(0, 4096).unwrap().unwrap();
    assert_eq!(parse_block(0, &d), Ok(0));
    remote.kill9();
    assert_eq!(
        c.read(900 * 4096, 4096).unwrap().map(|_| ()),
        Err(5),
        "a miss during the outage"
    );
    let st = p.stats();
    assert_eq!(st["backing"]["state"], "error", "{}", st["backing"]);
    assert!(st["backing"]["timeouts"].as_u64().unwrap() >= 1);
    assert_eq!(parse_block(0, &c.read(0, 4096).unwrap().unwrap()), Ok(0));
    drop(c);
    p.kill9();
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ErrMode {
    WriteBack,
    WriteThrough,
    Tica,
    LogStructured,
}

/// Which versions a block's two halves hold, each one of `may`; panics on
/// data that is no version of the block at all (zeros, another block).
fn halves(b: u64, data: &[u8], may: &[u64], what: &str) -> (u64, u64) {
    let half = |h: usize| {
        let r = h * 2048..(h + 1) * 2048;
        *may.iter()
            .find(|&&v| make_block(b, v)[r.clone()] == data[r.clone()])
            .unwrap_or_else(|| {
                panic!(
                    "{what}: block {b} half {h} holds none of versions {may:?} ({:?})",
                    parse_block(b, data)
                )
            })
    };
    (half(0), half(1))
}

/// Read block `b`: its halves' versions, or the NBD error.
fn read_halves(c: &mut NbdClient, b: u64, may: &[u64], what: &str) -> Result<(u64, u64), u32> {
    let d = c.read(b * 4096, 4096).expect("connection")?;
    Ok(halves(b, &d, may, what))
}

/// The remote starts failing every request with EIO (nbdkit's error filter,
/// switched by a file) after `serve` is up: cached blocks keep reading
/// correctly, misses fail with EIO (never zeros or other data), writes
/// either succeed or fail; once the errors stop every block reads back one
/// of the versions it may hold, the same one through the cache, after
/// `flush`, and straight from the remote after `detach`.
fn remote_errors(mode: ErrMode) {
    let Some(Rig {
        dir,
        remote: _remote,
        uri,
        cache,
        sock,
        log,
    }) = rig(
        Kind::Nbdkit,
        &["--filter=error"],
        &["error=EIO", "error-rate=1", "error-file={dir}/inject"],
        match mode {
            ErrMode::WriteBack => Over::SsdCache("write-back"),
            ErrMode::WriteThrough => Over::SsdCache("write-through"),
            ErrMode::Tica => Over::Tica,
            ErrMode::LogStructured => Over::LogStructured,
        },
    )
    else {
        return;
    };
    let inject = dir.path().join("inject");
    let mut p = ServeProc::start_with(&cache, &sock, &log, &["--backing-timeout", "1s"]);
    let mut c = NbdClient::connect(&sock).unwrap();
    // Versions each block may hold (the first is the newest acknowledged).
    let mut may: Vec<Vec<u64>> = vec![vec![0]; BLOCKS as usize];
    // Blocks 0..256 written (version 1), 256..512 read: both cached.
    for b in 0..256 {
        c.write(b * 4096, &make_block(b, 1), false)
            .unwrap()
            .unwrap();
        may[b as usize] = vec![1];
    }
    c.flush().unwrap().unwrap();
    for b in 256..512 {
        assert_eq!(
            read_halves(&mut c, b, &[0], "before the errors"),
            Ok((0, 0))
        );
    }

    std::fs::write(&inject, b"").unwrap();
    // Cached blocks read correctly.
    for b in 0..512 {
        let want = may[b as usize][0];
        match (mode, read_halves(&mut c, b, &[want], "a cached block")) {
            (_, Ok(_)) => {}
            // TICA and the log-structured cache need not keep every block they read.
            (ErrMode::Tica | ErrMode::LogStructured, Err(e)) if b >= 256 => {
                assert_eq!(e, NBD_EIO)
            }
            (_, Err(e)) => panic!(
                "cached block {b} unreadable while the remote fails: NBD error {e}\n{}",
                tail(&log)
            ),
        }
    }
    // Misses, from several clients at once: EIO, never data.
    let eio = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let sock = &sock;
                s.spawn(move || {
                    let mut c = NbdClient::connect(sock).unwrap();
                    let mut eio = 0;
                    for b in (512 + t..BLOCKS).step_by(4).take(24) {
                        match c.read(b * 4096, 4096).unwrap() {
                            Ok(d) => panic!(
                                "a miss on block {b} returned data while the remote fails: {:?} (first bytes {:02x?})",
                                parse_block(b, &d),
                                &d[..16]
                            ),
                            Err(e) => {
                                assert_eq!(e, NBD_EIO);
                                eio += 1;
                            }
                        }
                        // A read that spans a cached and a missing block fails whole.
                        let r = c.read((b - 512) * 4096, 8192).unwrap();
                        if let Ok(d) = r {
                            halves(b - 512, &d[..4096], &[0, 1], "a spanning read");
                            halves(b - 511, &d[4096..], &[0, 1], "a spanning read");
                        }
                    }
                    eio
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u32>()
    });
    assert!(eio > 0);
    assert_backing_errors_in_stats(&p);
    // Writes: to cached blocks, to missing blocks, partial blocks.
    let mut rng = Rng(0xe110 + mode as u64);
    let (mut ok, mut failed) = (0, 0);
    for i in 0..200 {
        let b = rng.below(BLOCKS);
        let v = may[b as usize].iter().max().unwrap() + 1;
        let data = make_block(b, v);
        if i % 10 == 9 {
            // A partial write (the first half), then the whole block.
            let r = c.write(b * 4096, &data[..2048], false).unwrap();
            assert!(r.is_ok() || r == Err(NBD_EIO), "{r:?}");
            may[b as usize].push(v);
        }
        match c.write(b * 4096, &data, false).unwrap() {
            Ok(()) => {
                may[b as usize] = vec![v];
                ok += 1;
            }
            Err(e) => {
                assert_eq!(e, NBD_EIO, "write of block {b}");
                if !may[b as usize].contains(&v) {
                    may[b as usize].push(v);
                }
                failed += 1;
            }
        }
    }
    eprintln!("{mode:?}: {eio} misses failed with EIO; {ok} writes succeeded, {failed} failed");
    if mode == ErrMode::WriteThrough {
        assert!(
            failed > 0,
            "write-through writes cannot succeed while the remote fails"
        );
    }
    let fl = c.flush().unwrap();
    eprintln!("{mode:?}: FLUSH during the errors: {fl:?}");
    // Whatever the cache answers now is what it must keep answering.
    let mut seen: Vec<Option<(u64, u64)>> = vec![None; BLOCKS as usize];
    for b in 0..BLOCKS {
        if let Ok(v) = read_halves(&mut c, b, &may[b as usize], "during the errors") {
            seen[b as usize] = Some(v);
        }
    }

    std::fs::remove_file(&inject).unwrap();
    for b in 0..BLOCKS {
        let v = read_halves(&mut c, b, &may[b as usize], "after the errors stopped")
            .unwrap_or_else(|e| {
                panic!(
                    "block {b} after the errors stopped: NBD error {e}\n{}",
                    tail(&log)
                )
            });
        if let Some(s) = seen[b as usize] {
            assert_eq!(
                v, s,
                "block {b} changed from versions {s:?} to {v:?} when the errors stopped"
            );
        }
        seen[b as usize] = Some(v);
    }
    drop(c);
    tiercache(&["flush", "--cache", cache.to_str().unwrap()]);
    tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
    p.wait_exit();
    let u: nbdc::Uri = uri.parse().unwrap();
    let mut rc = nbdc::Client::connect(&u).unwrap();
    for b in 0..BLOCKS {
        let d = rc.read(b * 4096, 4096).unwrap().unwrap();
        let v = halves(b, &d, &may[b as usize], "on the remote after detach");
        assert_eq!(
            Some(v),
            seen[b as usize],
            "block {b} on the remote after detach differs from what the cache answered"
        );
    }
    rc.disconnect();
}

/// `stats` of a server whose backing device (or slow tier) failed reads:
/// the status says degraded, and the device's read errors are counted, in
/// the JSON and in the text, the same for every design.
fn assert_backing_errors_in_stats(p: &ServeProc) {
    let st = p.stats();
    let status = st["status"].as_str().unwrap_or("");
    assert!(status.starts_with("degraded"), "status: {status}\n{st}");
    let role = if st["mode"] == "tier" {
        "slow"
    } else {
        "backing"
    };
    let reads = st["device_errors"][role]["read"].as_u64().unwrap_or(0);
    assert!(reads > 0, "no {role} read errors counted: {st}");
    let human = tiercache(&["stats", "--cache", p.cache.to_str().unwrap()]);
    assert!(
        human.contains("status            degraded"),
        "the status line: {human}"
    );
    let line = human
        .lines()
        .find(|l| l.starts_with("device errors"))
        .unwrap_or_else(|| panic!("no device errors line: {human}"));
    let label = if role == "slow" {
        "slow tier"
    } else {
        "backing device"
    };
    assert!(
        line.contains(label) && !line.contains(&format!("{label} 0 read")),
        "{line}"
    );
}

/// The tiered volume whose slow tier (a remote) fails reads: misses are EIO,
/// and `stats` reports the slow tier's read errors with a degraded status.
#[test]
fn tiered_slow_tier_errors_in_stats() {
    let Some(Rig {
        dir,
        remote: _remote,
        cache,
        sock,
        log,
        ..
    }) = rig(
        Kind::Nbdkit,
        &["--filter=error"],
        &["error=EIO", "error-rate=1", "error-file={dir}/inject"],
        Over::Tiered,
    )
    else {
        return;
    };
    let p = ServeProc::start_with(&cache, &sock, &log, &["--backing-timeout", "1s"]);
    assert_eq!(p.stats()["status"], "ok");
    std::fs::write(dir.path().join("inject"), b"").unwrap();
    let mut c = NbdClient::connect(&sock).unwrap();
    let eio = (0..16u64)
        .filter(|b| c.read(b * 65536, 4096).unwrap() == Err(NBD_EIO))
        .count();
    assert!(eio > 0, "no read of the slow tier failed\n{}", tail(&log));
    assert_backing_errors_in_stats(&p);
    let _ = std::fs::remove_file(dir.path().join("inject"));
}

/// A detach that fails (the remote refuses every write while dirty data
/// waits) says why once: "detach failed" appears once in its message.
#[test]
fn failed_detach_says_its_cause_once() {
    let Some(Rig {
        dir,
        remote: _remote,
        cache,
        sock,
        log,
        ..
    }) = rig(
        Kind::Nbdkit,
        &["--filter=error"],
        &["error=EIO", "error-rate=1", "error-file={dir}/inject"],
        Over::SsdCache("write-back"),
    )
    else {
        return;
    };
    let mut p = ServeProc::start_with(&cache, &sock, &log, &["--backing-timeout", "1s"]);
    let mut c = NbdClient::connect(&sock).unwrap();
    for b in 0..32 {
        c.write(b * 4096, &make_block(b, 1), false)
            .unwrap()
            .unwrap();
    }
    c.flush().unwrap().unwrap();
    drop(c);
    std::fs::write(dir.path().join("inject"), b"").unwrap();
    let out = Command::new(bin())
        .args(["detach", "--cache", cache.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "detach succeeded: {err}");
    assert_eq!(err.matches("detach failed").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("tiercache: error: detach failed: "),
        "{err}"
    );
    // The server's own last word says it once too.
    p.wait_exit();
    let served = std::fs::read_to_string(&log).unwrap();
    let last = served
        .lines()
        .rfind(|l| l.contains("detach failed"))
        .unwrap();
    assert_eq!(last.matches("detach failed").count(), 1, "{last}");
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum LocalDesign {
    LogStructured,
    Tiered,
}

/// The log-structured cache or the tiered volume over a remote that is
/// killed (SIGKILL) and restarted in the middle of a fio crc32c verify run:
/// requests wait for it (a long `--backing-timeout`) and fio verifies every
/// block; then tiercache itself is killed and restarted and fio verifies
/// again; the log-structured cache is flushed and detached and fio verifies
/// straight on the remote.
fn outage_under_fio(design: LocalDesign, kind: Kind) {
    if !have("fio") {
        eprintln!("SKIPPED: `fio` is not installed");
        return;
    }
    let Some(Rig {
        dir,
        mut remote,
        uri,
        cache,
        sock,
        log,
    }) = rig(
        kind,
        &[],
        &[],
        match design {
            LocalDesign::LogStructured => Over::LogStructured,
            LocalDesign::Tiered => Over::Tiered,
        },
    )
    else {
        return;
    };
    let opts = ["--backing-timeout", "120s"];
    let mut p = ServeProc::start_with(&cache, &sock, &log, &opts);
    let turi = format!("nbd+unix:///?socket={}", sock.display());
    std::thread::scope(|s| {
        let fio = s.spawn(|| fio_verify_uri(&turi, dir.path(), false));
        // The outage is the point here: the remote dies once the server has
        // taken some of fio's writes, and comes back once the server met
        // the outage (fio's writes soon need the remote: they outgrow the
        // cache); fio verifies every block whenever the outage falls.
        let started = writes_served(&p.stats());
        wait_until("fio's first writes", READY_TIMEOUT, || {
            fio.is_finished() || writes_served(&p.stats()) >= started + OUTAGE_AT_WRITES
        });
        eprintln!(
            "{design:?} over {kind:?}: remote killed {} fio finished",
            if fio.is_finished() { "after" } else { "before" }
        );
        // The server's log, not `stats`: a control command may wait
        // behind requests that wait for the remote.
        let lost = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches(CONNECTION_LOST)
                .count()
        };
        let before = lost();
        remote.kill9();
        wait_until("the server to meet the outage", READY_TIMEOUT, || {
            fio.is_finished() || lost() > before
        });
        remote.start();
        fio.join().unwrap();
    });
    p.kill9();
    let maddr = format!("127.0.0.1:{}", free_port());
    let mut p = ServeProc::start_with(
        &cache,
        &sock,
        &log,
        &[&opts[..], &["--metrics", &maddr]].concat(),
    );
    fio_verify_uri(&turi, dir.path(), true);
    // The remote's state is in stats and /metrics as for the other designs.
    let st = p.stats();
    assert_eq!(st["backing"]["remote"], true, "{st}");
    assert_eq!(st["backing"]["uri"], uri.as_str(), "{st}");
    assert_eq!(st["backing"]["state"], "connected", "{st}");
    let human = tiercache(&["stats", "--cache", cache.to_str().unwrap()]);
    assert!(human.contains("remote backing    connected"), "{human}");
    let m = http_get(&maddr, "/metrics");
    assert!(m.contains("tiercache_backing_connected 1"), "{m}");
    if design == LocalDesign::LogStructured {
        tiercache(&["flush", "--cache", cache.to_str().unwrap()]);
        tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
        p.wait_exit();
        fio_verify_uri(&uri, dir.path(), true);
    } else {
        p.kill9();
    }
    let _ = tail(&log);
}

/// The body of `GET path` from the HTTP server at `addr`.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

/// A slow remote (nbdkit's delay filter, 2 ms a read or write): fio crc32c
/// verify through the SSD cache, and the backing latency the stats report
/// includes the delay (each backing op waits at least that long).
#[test]
fn ssd_cache_over_a_slow_remote() {
    let Some(Rig {
        dir,
        remote: _remote,
        cache,
        sock,
        log,
        ..
    }) = rig(
        Kind::Nbdkit,
        &["--filter=delay"],
        &["rdelay=2ms", "wdelay=2ms"],
        Over::SsdCache("write-back"),
    )
    else {
        return;
    };
    let p = ServeProc::start_with(&cache, &sock, &log, &[]);
    fio_verify(&sock, dir.path());
    tiercache(&["flush", "--cache", cache.to_str().unwrap()]);
    let st = p.stats();
    let lat = &st["live"]["backing_latency"];
    assert!(lat["ops"].as_u64().unwrap_or(0) > 0, "{st}");
    assert!(
        lat["max_us"].as_f64().unwrap_or(0.0) >= 2000.0,
        "a backing op took less than the remote's 2 ms delay: {lat}"
    );
    eprintln!("backing latency over a 2 ms remote: {lat}");
    assert_eq!(st["backing"]["state"], "connected");
}

/// The most requests the remote had in flight at once, from nbdkit's log
/// filter: each request logs a line when it starts (`connection=N Read
/// id=M ... ...`) and one when it returns (`...Read id=M return=0`).
fn max_in_flight(nbdkit_log: &str) -> usize {
    const OPS: [&str; 5] = ["Read", "Write", "Flush", "Trim", "Zero"];
    let (mut now, mut max) = (0usize, 0usize);
    for line in nbdkit_log.lines() {
        let Some(rest) = line.split(" connection=").nth(1) else {
            continue;
        };
        let Some(op) = rest.split_whitespace().nth(1) else {
            continue;
        };
        if op.strip_prefix("...").is_some_and(|o| OPS.contains(&o)) {
            now = now.saturating_sub(1);
        } else if OPS.contains(&op) && line.ends_with(" ...") {
            now += 1;
            max = max.max(now);
        }
    }
    max
}

/// Misses go to the remote pipelined, not one per I/O thread: fio reads at
/// queue depth 16 over data the SSD cache does not hold (nbdkit with a
/// 50 ms delay and its log filter), and the remote sees at least 8 reads in
/// flight at once (the I/O engine has 4 threads; before, it saw at most 4).
#[test]
fn ssd_cache_misses_are_pipelined() {
    if !have("fio") {
        eprintln!("SKIPPED: `fio` is not installed");
        return;
    }
    let Some(Rig {
        dir,
        remote: _remote,
        sock,
        cache,
        log,
        ..
    }) = rig(
        Kind::Nbdkit,
        &["--filter=log", "--filter=delay"],
        &["rdelay=50ms", "wdelay=50ms", "logfile={dir}/nbdkit.log"],
        Over::SsdCache("write-back"),
    )
    else {
        return;
    };
    let p = ServeProc::start_with(&cache, &sock, &log, &["--io-engine", "auto"]);
    let st = Command::new("fio")
        .args([
            "--name=misses",
            FIO_NO_STATE,
            "--ioengine=nbd",
            &format!("--uri=nbd+unix:///?socket={}", sock.display()),
            "--rw=randread",
            "--bs=4k",
            "--iodepth=16",
            &format!("--offset={}", BLOCKS * 4096),
            "--size=32M",
            "--number_ios=320",
            "--randrepeat=0",
        ])
        .stdout(Stdio::null())
        .status()
        .expect("run fio");
    assert!(st.success(), "fio failed; serve log:\n{}", tail(&p.log));
    let nlog = std::fs::read_to_string(dir.path().join("nbdkit.log")).unwrap();
    let most = max_in_flight(&nlog);
    eprintln!("most requests in flight at the remote: {most}");
    assert!(
        most >= 8,
        "at most {most} requests were in flight at the remote while fio read at queue depth 16"
    );
    assert_eq!(p.stats()["backing"]["state"], "connected");
}

/// `nbds://`: the SSD cache over nbdkit with `--tls=require`. fio verify
/// passes through the cache, and after `detach` the remote alone (read by
/// libnbd over TLS) holds what fio wrote. A plain `nbd+unix://` URI, a CA that
/// did not sign the server's certificate, and a missing directory are each
/// refused at format with a message naming the cause.
#[test]
fn ssd_cache_over_a_tls_remote() {
    if !have("openssl") {
        eprintln!("SKIPPED: `openssl` is not installed (it makes the test certificates)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = pki::pki(dir.path());
    let other = pki::pki(&dir.path().join("other"));
    let Some(remote) = Remote::with_tls(dir.path(), &p) else {
        return;
    };
    let plain = format!("nbd+unix:///?socket={}", remote.sock().display());
    let with = |certs: &Path| remote.uri_with(certs);
    let cache = dir.path().join("cache.img").display().to_string();
    let refused = |uri: &str, want: &str| {
        let out = Command::new(bin())
            .args([
                "format",
                "--cache",
                &cache,
                "--backing",
                uri,
                "--size",
                "24MiB",
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "format over {uri} succeeded");
        assert!(
            err.contains(want),
            "format over {uri}: want '{want}' in: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    };
    refused(&plain, "requires TLS");
    refused(&with(&other.anon), "certificate");
    refused(&with(&dir.path().join("nowhere")), "not a directory");
    let uri = with(&p.anon);
    let cache = format_over(dir.path(), &uri, Over::SsdCache("write-back"));
    let sock = dir.path().join("t.sock");
    let log = dir.path().join("serve.log");
    let mut proc = ServeProc::start_with(&cache, &sock, &log, &[]);
    fio_verify(&sock, dir.path());
    let st = proc.stats();
    assert_eq!(st["backing"]["state"], "connected", "{st}");
    tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
    proc.wait_exit();
    // The remote alone, copied out through libnbd's own TLS (nbdcopy), holds
    // fio's crc32c data.
    if !have("nbdcopy") {
        eprintln!("SKIPPED (remote check): `nbdcopy` is not installed");
        return;
    }
    let copy = dir.path().join("copy.img");
    let st = Command::new("nbdcopy")
        .arg(&uri)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success(), "nbdcopy {uri} failed");
    fio_verify_uri(copy.to_str().unwrap(), dir.path(), true);
}

/// One `#[test]` per scenario and server.
/// A client's WRITE_ZEROES through the SSD cache (write-through or
/// write-around, `policy`) over nbdkit with its log filter: the remote gets
/// NBD WRITE_ZEROES (a `Zero` line in nbdkit's log), not a zero buffer;
/// reads through the cache return zeros (a cached copy of the old data is
/// never served), also after tiercache is killed and restarted; after
/// `detach` the remote image holds zeros in the range and the pattern
/// elsewhere. The range starts and ends inside lines.
fn write_zeroes_reach_the_remote(policy: &'static str) {
    let Some(Rig {
        dir,
        remote,
        cache,
        sock,
        log,
        ..
    }) = rig(
        Kind::Nbdkit,
        &["--filter=log"],
        &["logfile={dir}/nbdkit.log"],
        Over::SsdCache(policy),
    )
    else {
        return;
    };
    const SPAN: usize = 4 << 20;
    let (zoff, zlen) = ((1u64 << 20) + 512, (1u32 << 20) + 8192);
    let pattern: Vec<u8> = (0..SPAN).map(|i| (i % 251) as u8 + 1).collect();
    let mut want = pattern.clone();
    want[zoff as usize..zoff as usize + zlen as usize].fill(0);
    let check = |got: &[u8], what: &str| {
        if let Some(i) = (0..SPAN).find(|&i| got[i] != want[i]) {
            panic!(
                "{what}: byte {i} is {:#x}, expected {:#x} (zeroed range {zoff}..{})",
                got[i],
                want[i],
                zoff + zlen as u64
            );
        }
    };
    let mut p = ServeProc::start_with(&cache, &sock, &log, &[]);
    let mut c = NbdClient::connect(&sock).unwrap();
    for off in (0..SPAN).step_by(1 << 20) {
        c.write(off as u64, &pattern[off..off + (1 << 20)], false)
            .unwrap()
            .unwrap();
    }
    // Reads bring the old data into the cache (write-around cached none).
    assert_eq!(c.read(0, SPAN).unwrap().unwrap(), pattern);
    assert_eq!(c.read(0, SPAN).unwrap().unwrap(), pattern);
    c.write_zeroes(zoff, zlen, false).unwrap().unwrap();
    check(&c.read(0, SPAN).unwrap().unwrap(), "read through the cache");
    c.flush().unwrap().unwrap();
    let nlog = std::fs::read_to_string(dir.path().join("nbdkit.log")).unwrap();
    let zeros: Vec<&str> = nlog.lines().filter(|l| l.contains("Zero")).collect();
    assert!(
        !zeros.is_empty(),
        "no WRITE_ZEROES reached the remote; nbdkit's log:\n{nlog}"
    );
    eprintln!(
        "{} Zero log lines on the remote, the first: {}",
        zeros.len(),
        zeros[0]
    );
    drop(c);

    // Killed and restarted: the cache's state survives without the old data.
    p.kill9();
    let p2 = ServeProc::start_with(&cache, &sock, &log, &[]);
    let mut c = NbdClient::connect(&sock).unwrap();
    check(&c.read(0, SPAN).unwrap().unwrap(), "read after a restart");
    drop(c);

    // Detached: the remote image alone.
    tiercache(&["detach", "--cache", cache.to_str().unwrap()]);
    let mut p2 = p2;
    p2.wait_exit();
    let img = std::fs::read(&remote.img).unwrap();
    check(&img[..SPAN], "the remote image after detach");
}

#[test]
fn write_zeroes_reach_the_remote_write_through() {
    write_zeroes_reach_the_remote("write-through");
}

#[test]
fn write_zeroes_reach_the_remote_write_around() {
    write_zeroes_reach_the_remote("write-hdd-inv");
}

macro_rules! remote_tests {
    ($($name:ident: $body:expr;)*) => {
        $(
            #[test]
            fn $name() {
                $body;
            }
        )*
    };
}

remote_tests! {
    ssd_cache_over_nbdkit: cache_over(Design::SsdCache, Kind::Nbdkit);
    ssd_cache_over_qemu_nbd: cache_over(Design::SsdCache, Kind::QemuNbd);
    ssd_cache_over_nbd_server: cache_over(Design::SsdCache, Kind::NbdServer);
    tica_over_nbdkit: cache_over(Design::Tica, Kind::Nbdkit);
    tica_over_qemu_nbd: cache_over(Design::Tica, Kind::QemuNbd);
    tica_over_nbd_server: cache_over(Design::Tica, Kind::NbdServer);
    remote_errors_ssd_cache_write_back: remote_errors(ErrMode::WriteBack);
    remote_errors_ssd_cache_write_through: remote_errors(ErrMode::WriteThrough);
    remote_errors_tica: remote_errors(ErrMode::Tica);
    remote_errors_log_structured: remote_errors(ErrMode::LogStructured);
    log_structured_over_nbdkit: outage_under_fio(LocalDesign::LogStructured, Kind::Nbdkit);
    log_structured_over_qemu_nbd: outage_under_fio(LocalDesign::LogStructured, Kind::QemuNbd);
    tiered_slow_tier_over_nbdkit: outage_under_fio(LocalDesign::Tiered, Kind::Nbdkit);
    tiered_slow_tier_over_nbd_server: outage_under_fio(LocalDesign::Tiered, Kind::NbdServer);
}
