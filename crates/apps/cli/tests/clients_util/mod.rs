//! Helpers for the real-client tests of the live server: format a cache, run
//! `tiercache serve` as a child process, run peer tools (nbdinfo, nbdcopy,
//! qemu-img, qemu-io, fio, nbdfuse) and skip cleanly when one is missing.

#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

// The standalone helpers of `common`, for the tests that do not load it
// (a test that loads both has two copies: harmless).
#[allow(clippy::duplicate_mod)]
#[path = "../common/fio.rs"]
mod fio_opts;
#[allow(clippy::duplicate_mod)]
#[path = "../common/wait.rs"]
mod wait;
// Not every test uses each of these.
#[allow(unused_imports)]
pub use fio_opts::FIO_NO_STATE;
#[allow(unused_imports)]
pub use wait::{poll_for, wait_for, wait_until, READY_TIMEOUT};

/// The `tiercache` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tiercache")
}

/// Whether `tool` can be started (it answers `--version` or `--help`).
pub fn have(tool: &str) -> bool {
    ["--version", "--help"].iter().any(|a| {
        Command::new(tool)
            .arg(a)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    })
}

/// Skip the calling test with a clear message unless every tool is installed.
#[macro_export]
macro_rules! require_tools {
    ($($t:expr),+) => {
        for t in [$($t),+] {
            if !$crate::clients_util::have(t) {
                eprintln!("SKIPPED: `{t}` is not installed (scripts/setup.sh installs it)");
                return;
            }
        }
    };
}

/// Run a command, panic with its output unless it succeeds; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Longest any one client command may run: a hang fails the test instead of the whole run.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// Run a command and return its output, whatever its exit status. A command still
/// running after [`COMMAND_TIMEOUT`] is killed and the test fails as hung.
pub fn output(cmd: &mut Command) -> Output {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = poll_for(COMMAND_TIMEOUT, || child.try_wait().unwrap()).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?} hung: still running after {COMMAND_TIMEOUT:?}, killed");
    });
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Deterministic pseudo-random bytes (xorshift64*), the reference data written by clients.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        v.extend_from_slice(&s.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Write `data` to a new file.
pub fn write_file(p: &Path, data: &[u8]) {
    let mut f = fs::File::create(p).unwrap();
    f.write_all(data).unwrap();
}

/// Create a sparse (all-zero) file of `len` bytes.
pub fn sparse_file(p: &Path, len: u64) {
    fs::File::create(p).unwrap().set_len(len).unwrap();
}

/// Assert that two files hold the same bytes, naming the first differing offset.
pub fn assert_same_file(a: &Path, b: &Path) {
    let (x, y) = (fs::read(a).unwrap(), fs::read(b).unwrap());
    assert_eq!(
        x.len(),
        y.len(),
        "{} and {} differ in size",
        a.display(),
        b.display()
    );
    if let Some(i) = x.iter().zip(&y).position(|(p, q)| p != q) {
        panic!(
            "{} and {} differ first at byte {i} (4 KiB block {})",
            a.display(),
            b.display(),
            i / 4096
        );
    }
}

/// A formatted cache in a temporary directory with its backing file.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub cache: PathBuf,
    pub backing: PathBuf,
}

impl Setup {
    /// Format a cache file of `cache_size` (e.g. "8MiB") in front of a zero-filled
    /// backing file of `backing_len` bytes, with extra `format` options.
    pub fn new(backing_len: u64, cache_size: &str, opts: &[&str]) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("backing.img");
        sparse_file(&backing, backing_len);
        Self::with_backing(dir, backing, cache_size, opts)
    }

    /// Like [`Setup::new`] with an existing backing file inside `dir`.
    pub fn with_backing(
        dir: tempfile::TempDir,
        backing: PathBuf,
        cache_size: &str,
        opts: &[&str],
    ) -> Setup {
        let cache = dir.path().join("cache.img");
        run(Command::new(bin())
            .args(["format", "--cache"])
            .arg(&cache)
            .arg("--backing")
            .arg(&backing)
            .args(["--size", cache_size])
            .args(opts));
        Setup {
            dir,
            cache,
            backing,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Start `tiercache serve` on a Unix socket in the temp dir.
    pub fn serve(&self, extra: &[&str]) -> Server {
        Server::start(&self.cache, &self.path("nbd.sock"), extra)
    }

    /// `tiercache stats --json` of the running server.
    pub fn stats(&self) -> serde_json::Value {
        let s = run(Command::new(bin())
            .args(["stats", "--json", "--cache"])
            .arg(&self.cache));
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("stats JSON {e}: {s}"))
    }

    /// `tiercache <cmd> --cache CACHE` (flush, detach).
    pub fn ctl(&self, cmd: &str) -> String {
        run(Command::new(bin()).args([cmd, "--cache"]).arg(&self.cache))
    }
}

/// A `tiercache serve` child process, killed on drop if still running.
pub struct Server {
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl Server {
    /// Start the server and wait until it accepts connections.
    pub fn start(cache: &Path, socket: &Path, extra: &[&str]) -> Server {
        let log = socket.with_extension("log");
        let _ = fs::remove_file(socket);
        let child = Command::new(bin())
            .env("TIERCACHE_DEBUG_OPS", "1")
            .arg("serve")
            .arg("--cache")
            .arg(cache)
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&log).unwrap())
            .stderr(fs::File::create(socket.with_extension("err")).unwrap())
            .spawn()
            .expect("starting tiercache serve");
        let mut s = Server {
            child: Some(child),
            socket: socket.to_path_buf(),
            log,
        };
        s.wait_ready();
        s
    }

    /// Whatever the server printed on stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.socket.with_extension("err")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let ready = poll_for(READY_TIMEOUT, || {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("tiercache serve exited early ({st}): {}", self.stderr());
            }
            std::os::unix::net::UnixStream::connect(&self.socket)
                .is_ok()
                .then_some(())
        });
        assert!(ready.is_some(), "server never listened: {}", self.stderr());
    }

    /// The NBD URI of the export (empty default name).
    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }

    /// The NBD URI naming the export explicitly.
    pub fn uri_named(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.socket.display())
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Wait for the server to exit on its own (after `detach`); a server still
    /// running after [`COMMAND_TIMEOUT`] is killed and the test fails.
    pub fn wait(&mut self) -> ExitStatus {
        let mut c = self.child.take().unwrap();
        poll_for(COMMAND_TIMEOUT, || c.try_wait().unwrap()).unwrap_or_else(|| {
            let _ = c.kill();
            let _ = c.wait();
            panic!("tiercache serve did not exit: {}", self.stderr());
        })
    }

    /// SIGTERM by PID, then wait: a clean shutdown must exit successfully.
    pub fn stop(&mut self) {
        let pid = self.pid();
        run(Command::new("kill").args(["-TERM", &pid.to_string()]));
        let st = self.wait();
        assert!(
            st.success(),
            "server exited with {st} after SIGTERM: {}",
            self.stderr()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run fio with the nbd engine against `uri`; `args` are extra fio options.
/// Panics unless fio succeeds and reports no verify errors.
pub fn fio(uri: &str, name: &str, args: &[&str]) -> serde_json::Value {
    let out = output(
        Command::new("fio")
            .arg(format!("--name={name}"))
            .args(["--ioengine=nbd", "--output-format=json"])
            .arg(FIO_NO_STATE)
            .arg(format!("--uri={uri}"))
            .args(args),
    );
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fio {name} {args:?} failed ({}):\n{so}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let j = &so[so.find('{').unwrap_or(0)..];
    let v: serde_json::Value =
        serde_json::from_str(j).unwrap_or_else(|e| panic!("fio JSON {e}: {so}"));
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "fio {name} reported an error: {job}");
    v
}
