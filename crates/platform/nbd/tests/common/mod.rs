//! Test helpers: an in-process server on a Unix socket, tool lookup, data generation.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use tiercache_nbd::{Backend, Limits, Server, ServerHandle};

/// A server running on its own tokio runtime, listening on a Unix socket in a
/// temporary directory; stopped (and waited for) on drop.
pub struct TestServer {
    rt: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
}

impl TestServer {
    pub fn start(exports: Vec<(&str, Arc<dyn Backend>)>) -> TestServer {
        Self::start_with_limits(exports, Limits::default())
    }

    pub fn start_with_limits(exports: Vec<(&str, Arc<dyn Backend>)>, limits: Limits) -> TestServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("nbd.sock");
        let server = Server::with_limits(exports, limits).expect("valid server config");
        let handle = rt
            .block_on(server.serve_unix(&sock))
            .expect("bind unix socket");
        TestServer {
            rt,
            handle: Some(handle),
            dir,
            sock,
        }
    }

    /// URI of the default export.
    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    /// URI of a named export.
    pub fn uri_for(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.sock.display())
    }

    pub fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Path of an installed tool, or None (the caller skips with a message).
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Skip the current test (return) with a clear message when a tool is missing.
#[macro_export]
macro_rules! require_tool {
    ($name:expr) => {
        match common::tool($name) {
            Some(p) => p,
            None => {
                eprintln!(
                    "SKIP: `{}` is not installed (apt-get install libnbd-bin qemu-utils fio)",
                    $name
                );
                return;
            }
        }
    };
}

/// Run a command, panicking with its output if it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Deterministic pseudo-random bytes (xorshift64*), the reference data for copies.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(len);
    v
}

pub fn write_file(path: &Path, data: &[u8]) {
    std::fs::write(path, data).expect("write file");
}

/// First differing offset, for readable assertion messages.
pub fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}
