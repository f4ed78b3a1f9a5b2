//! The one in-process fixture of the fault tests: a temporary directory,
//! devices wrapped in `FaultyDev`s that inject errors by rule, and a design
//! exported over NBD on a Unix socket by `tiercache_runtime::export::Export`
//! and `tiercache_nbd::Server`, as `tiercache serve` would.

use super::*;
use std::sync::Arc;
use tiercache_io::{BlockDev, FaultyDev, FileDev, FileDevOptions};
use tiercache_nbd::{Server, ServerHandle};
use tiercache_runtime::design::Design;
use tiercache_runtime::export::Export;

/// A design served in process; the server stops on drop.
pub struct InProcess {
    pub rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    handle: Option<ServerHandle>,
    /// The fault injectors handed out: a crash kills them (see `crash`).
    faulty: std::sync::Mutex<Vec<Arc<FaultyDev>>>,
}

/// Open a file as a block device.
pub fn dev(path: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(path, FileDevOptions::default()).expect("open device"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

impl InProcess {
    /// A temporary directory and a runtime; nothing served yet.
    pub fn new() -> InProcess {
        // TIERCACHE_LOG=tiercache::ops=trace shows every op, to diagnose a failure.
        if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_env("TIERCACHE_LOG") {
            let log = tracing_subscriber::fmt().with_env_filter(filter);
            let _ = log.with_writer(std::io::stderr).try_init();
        }
        let dir = tempfile::tempdir().expect("tempdir");
        InProcess {
            rt: runtime(),
            sock: dir.path().join("nbd.sock"),
            dir,
            handle: None,
            faulty: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// A file of the temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The file `name` as a device whose faults are drawn with `seed`.
    pub fn faulty(&self, name: &str, seed: u64) -> Arc<FaultyDev> {
        let d = Arc::new(FaultyDev::new(dev(&self.path(name)), seed));
        self.faulty.lock().unwrap().push(Arc::clone(&d));
        d
    }

    /// Serve the design `make` builds (inside the runtime, so it may start
    /// background tasks) on the socket, read-write.
    pub fn serve<D: Design>(&mut self, make: impl FnOnce() -> Arc<D>) -> Arc<D> {
        let _ = std::fs::remove_file(&self.sock);
        let design = {
            let _in_rt = self.rt.enter();
            make()
        };
        let export: Arc<dyn tiercache_nbd::Backend> = Arc::new(Export {
            design: design.clone(),
            read_only: false,
            metrics: None,
        });
        let sock = self.sock.clone();
        self.handle = Some(self.rt.block_on(async move {
            Server::new([("tiercache", export)])
                .expect("server")
                .serve_unix(&sock)
                .await
                .expect("listen")
        }));
        design
    }

    /// Stop serving (the design is not shut down: a crash, unless the caller
    /// shuts it down).
    pub fn stop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
    }

    /// A crash of the serving process (kill -9 as far as the design can
    /// tell): stop serving and drop the runtime, so that the design's
    /// background tasks end wherever they are, nothing is shut down or
    /// committed, and the files keep what reached them; then a fresh
    /// runtime for the restart.
    pub fn crash(&mut self) {
        // The dead process issues nothing more, and what it had under way
        // ends before the restart (an op sleeping in a slow-device delay
        // would otherwise write into the restarted cache's files).
        for d in self.faulty.lock().unwrap().drain(..) {
            d.kill();
        }
        self.stop();
        drop(std::mem::replace(&mut self.rt, runtime()));
    }

    pub fn client(&self) -> NbdClient {
        NbdClient::connect(&self.sock).expect("connect")
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Write the next version of each block in `blocks` (one request each),
/// tracking them in the ledger; panics on an error.
pub fn write_blocks(c: &mut NbdClient, ledger: &mut Ledger, blocks: impl IntoIterator<Item = u64>) {
    for b in blocks {
        let s = &mut ledger.blocks[b as usize];
        let v = s.next;
        s.next += 1;
        s.issued.push(v);
        c.write(b * BLOCK as u64, &make_block(b, v), false)
            .expect("socket")
            .unwrap_or_else(|e| panic!("write of block {b} failed with NBD error {e}"));
        s.acked = v;
    }
}

/// The version block `b` holds, or the NBD error of its read.
pub fn read_version(c: &mut NbdClient, b: u64) -> Result<u64, u32> {
    let d = c.read(b * BLOCK as u64, BLOCK).expect("socket")?;
    Ok(parse_block(b, &d).unwrap_or_else(|e| panic!("block {b}: {e}")))
}
