//! A remote NBD backing device under the I/O engines: ops go out pipelined
//! (many in flight on the device's connections, up to its bound), not one
//! per engine thread, and an outage while they are in flight is retried as
//! for blocking requests. The remote is nbdkit with its delay filter (each
//! request waits 250 ms, so ops submitted together overlap) and its log
//! filter (a line when each request starts and one when it returns, from
//! which the test counts the requests in flight). Skips when nbdkit is
//! not installed.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use tiercache_io::{BlockDev, Engine, IoOp, NbdDev, NbdOptions, PoolEngine, UringEngine};

const SIZE: u64 = 64 << 20;
const OPS: usize = 32;

/// An nbdkit on a file (`plugin` "file") or in memory, restartable on the
/// same socket; killed (SIGKILL, by its pid) when dropped.
struct Nbdkit {
    dir: PathBuf,
    args: Vec<String>,
    pid: Option<i32>,
}

impl Nbdkit {
    /// `None` (the test skips) without nbdkit.
    fn start(dir: &Path, delay: &str, plugin: &[&str]) -> Option<Nbdkit> {
        if Command::new("nbdkit").arg("--version").output().is_err() {
            eprintln!("SKIPPED: nbdkit is not installed");
            return None;
        }
        let mut args: Vec<String> = ["--filter=log", "--filter=delay"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(plugin.iter().map(|s| s.to_string()));
        args.push(format!("rdelay={delay}"));
        args.push(format!("wdelay={delay}"));
        args.push(format!("logfile={}", dir.join("nbdkit.log").display()));
        let mut k = Nbdkit {
            dir: dir.to_path_buf(),
            args,
            pid: None,
        };
        k.restart();
        Some(k)
    }

    fn sock(&self) -> PathBuf {
        self.dir.join("remote.sock")
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock().display())
    }

    fn restart(&mut self) {
        let pidf = self.dir.join("remote.pid");
        let _ = std::fs::remove_file(&pidf);
        let _ = std::fs::remove_file(self.sock());
        let st = Command::new("nbdkit")
            .arg("-U")
            .arg(self.sock())
            .arg("-P")
            .arg(&pidf)
            .args(&self.args)
            .status()
            .expect("run nbdkit");
        assert!(st.success(), "nbdkit did not start");
        // nbdkit writes its pid file once it listens.
        for _ in 0..1000 {
            if let Some(pid) = std::fs::read_to_string(&pidf)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                self.pid = Some(pid);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("nbdkit wrote no pid file");
    }

    fn kill9(&mut self) {
        if let Some(pid) = self.pid.take() {
            // SAFETY: plain kill(2) of the pid nbdkit wrote.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            while Path::new(&format!("/proc/{pid}")).exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// The most requests in flight at once so far (see the module docs).
    fn max_in_flight(&self) -> usize {
        const KINDS: [&str; 5] = ["Read", "Write", "Flush", "Trim", "Zero"];
        let log = std::fs::read_to_string(self.dir.join("nbdkit.log")).unwrap_or_default();
        let (mut now, mut max) = (0usize, 0usize);
        for line in log.lines() {
            let Some(rest) = line.split(" connection=").nth(1) else {
                continue;
            };
            let Some(op) = rest.split_whitespace().nth(1) else {
                continue;
            };
            if op.strip_prefix("...").is_some_and(|o| KINDS.contains(&o)) {
                now = now.saturating_sub(1);
            } else if KINDS.contains(&op) && line.ends_with(" ...") {
                now += 1;
                max = max.max(now);
            }
        }
        max
    }

    /// Forget the requests logged so far.
    fn clear_log(&self) {
        std::fs::write(self.dir.join("nbdkit.log"), b"").unwrap();
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn open(k: &Nbdkit, o: NbdOptions) -> Arc<dyn BlockDev> {
    Arc::new(NbdDev::open(&k.uri(), o).expect("open the NBD export"))
}

/// Submit all of `ops` at once; their results in order.
fn run_all(engine: &dyn Engine, dev: &Arc<dyn BlockDev>, ops: Vec<IoOp>) -> Vec<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    let n = ops.len();
    for (i, op) in ops.into_iter().enumerate() {
        let tx = tx.clone();
        engine.submit(
            dev,
            op,
            Box::new(move |r| {
                let _ = tx.send((i, r));
            }),
        );
    }
    let mut out = vec![Vec::new(); n];
    for _ in 0..n {
        let (i, r) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("an op never completed");
        out[i] = r.unwrap_or_else(|e| panic!("op {i} failed: {e}"));
    }
    out
}

fn block(i: usize) -> Vec<u8> {
    random_bytes(&mut rng(i as u64 + 1), 4096)
}

fn writes() -> Vec<IoOp> {
    (0..OPS)
        .map(|i| IoOp::Write {
            offset: i as u64 * 65536,
            data: block(i),
            fua: i % 4 == 0,
        })
        .collect()
}

fn reads() -> Vec<IoOp> {
    (0..OPS)
        .map(|i| IoOp::Read {
            offset: i as u64 * 65536,
            len: 4096,
        })
        .collect()
}

/// Both engines, with 4 threads each (io_uring's only for its fallback).
fn engines() -> Vec<Box<dyn Engine>> {
    let mut v: Vec<Box<dyn Engine>> = vec![Box::new(PoolEngine::new(4, 256).unwrap())];
    match UringEngine::new(256, 4) {
        Ok(e) => v.push(Box::new(e)),
        Err(e) => eprintln!("io_uring part skipped: {e}"),
    }
    v
}

/// 32 writes, then 32 reads submitted at once reach the remote together
/// (far more than the engines' 4 threads), and read back what was written.
#[test]
fn ops_on_a_remote_are_pipelined_by_every_engine() {
    let dir = scratch_dir();
    let Some(k) = Nbdkit::start(dir.path(), "250ms", &["memory", &SIZE.to_string()]) else {
        return;
    };
    for engine in engines() {
        let dev = open(&k, NbdOptions::default());
        k.clear_log();
        run_all(&*engine, &dev, writes());
        let w = k.max_in_flight();
        k.clear_log();
        let got = run_all(&*engine, &dev, reads());
        let r = k.max_in_flight();
        for (i, d) in got.iter().enumerate() {
            assert_same(d, &block(i), &format!("{}: block {i}", engine.name()));
        }
        eprintln!("{}: most in flight: {w} writes, {r} reads", engine.name());
        assert!(
            w >= OPS / 2 && r >= OPS / 2,
            "{}: at most {w} writes and {r} reads were in flight of {OPS} submitted at once",
            engine.name()
        );
    }
}

/// `max_in_flight` bounds the requests at the remote; the ops beyond it
/// wait in the device's queue and all complete.
#[test]
fn the_in_flight_bound_holds() {
    let dir = scratch_dir();
    let Some(k) = Nbdkit::start(dir.path(), "100ms", &["memory", &SIZE.to_string()]) else {
        return;
    };
    let engine = PoolEngine::new(4, 256).unwrap();
    let o = NbdOptions {
        max_in_flight: 5,
        ..NbdOptions::default()
    };
    let dev = open(&k, o);
    k.clear_log();
    run_all(&engine, &dev, writes());
    let got = run_all(&engine, &dev, reads());
    assert_eq!(got.len(), OPS);
    assert_eq!(k.max_in_flight(), 5, "the bound is 5 requests in flight");
}

/// The remote is killed while ops are in flight and comes back: every op
/// completes (retried on a new connection), the data is there, and the
/// device counts the reconnection. With the remote gone for good, ops fail
/// after the timeout with a clear error.
#[test]
fn an_outage_while_ops_are_in_flight_is_retried() {
    let dir = scratch_dir();
    let img = dir.path().join("remote.img");
    std::fs::File::create(&img).unwrap().set_len(SIZE).unwrap();
    let img = img.display().to_string();
    let Some(mut k) = Nbdkit::start(dir.path(), "250ms", &["file", &img]) else {
        return;
    };
    let engine = PoolEngine::new(4, 256).unwrap();
    let o = NbdOptions {
        timeout: Duration::from_secs(20),
        ..NbdOptions::default()
    };
    let dev = open(&k, o.clone());
    let (tx, rx) = mpsc::channel();
    for (i, op) in writes().into_iter().enumerate() {
        let tx = tx.clone();
        engine.submit(
            &dev,
            op,
            Box::new(move |r| {
                let _ = tx.send((i, r));
            }),
        );
    }
    k.kill9();
    k.restart();
    for _ in 0..OPS {
        let (i, r) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("an op never completed");
        r.unwrap_or_else(|e| panic!("write {i} failed across the outage: {e}"));
    }
    let got = run_all(&engine, &dev, reads());
    for (i, d) in got.iter().enumerate() {
        assert_same(d, &block(i), &format!("block {i} after the outage"));
    }
    let st = dev.remote_status().unwrap();
    assert!(st.reconnects >= 1, "{st:?}");
    assert_eq!(st.state.label(), "connected", "{st:?}");

    // Gone for good: an op fails once the timeout has passed.
    let short = NbdOptions {
        timeout: Duration::from_millis(500),
        ..NbdOptions::default()
    };
    let dev = open(&k, short);
    k.kill9();
    let (tx, rx) = mpsc::channel();
    engine.submit(
        &dev,
        IoOp::Read {
            offset: 0,
            len: 4096,
        },
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    let e = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the op never completed")
        .expect_err("a read from a dead remote succeeded");
    assert!(e.to_string().contains("unreachable"), "{e}");
    assert!(dev.remote_status().unwrap().timeouts >= 1);
}

/// io_uring hands the remote's ops to the device (none to its fallback
/// threads); ops the device cannot send as one request (over 8 MiB) still
/// run, on those threads.
#[test]
fn io_uring_gives_the_remote_its_ops() {
    let Ok(engine) = UringEngine::new(64, 2) else {
        eprintln!("SKIPPED: io_uring is unavailable");
        return;
    };
    let dir = scratch_dir();
    let Some(k) = Nbdkit::start(dir.path(), "1ms", &["memory", &SIZE.to_string()]) else {
        return;
    };
    let dev = open(&k, NbdOptions::default());
    run_all(&engine, &dev, writes());
    run_all(&engine, &dev, reads());
    let s = engine.stats();
    assert_eq!((s.device_ops, s.fallback_ops), (2 * OPS as u64, 0), "{s:?}");
    let big = tiercache_io::NBD_MAX_REQUEST as usize + 4096;
    let data = random_bytes(&mut rng(99), big);
    engine
        .run_blocking(
            &dev,
            IoOp::Write {
                offset: 4096,
                data: data.clone(),
                fua: false,
            },
        )
        .unwrap();
    let back = engine
        .run_blocking(
            &dev,
            IoOp::Read {
                offset: 4096,
                len: big,
            },
        )
        .unwrap();
    assert_same(&back, &data, "a read over 8 MiB");
    assert_eq!(engine.stats().fallback_ops, 2);
}
