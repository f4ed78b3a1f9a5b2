//! Engines: run many device operations concurrently, complete them out of order.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{oneshot, Semaphore};

use crate::BlockDev;

/// One device operation, owning its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// Read `len` bytes at `offset`; completes with exactly `len` bytes.
    Read { offset: u64, len: usize },
    /// Write `data` at `offset`; with `fua`, complete only once it is durable.
    Write {
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    },
    /// Discard `len` bytes at `offset` (see [`BlockDev::trim`]).
    Trim { offset: u64, len: u64 },
    /// Make writes completed before this op was submitted durable.
    Flush,
}

impl IoOp {
    /// Run the op synchronously on `dev`; reads return their data, other ops
    /// an empty vector.
    pub fn execute(self, dev: &dyn BlockDev) -> io::Result<Vec<u8>> {
        match self {
            IoOp::Read { offset, len } => {
                let mut buf = vec![0; len];
                dev.read_at(&mut buf, offset)?;
                Ok(buf)
            }
            IoOp::Write { offset, data, fua } => {
                if fua {
                    dev.write_at_fua(&data, offset)?;
                } else {
                    dev.write_at(&data, offset)?;
                }
                Ok(Vec::new())
            }
            IoOp::Trim { offset, len } => dev.trim(offset, len).map(|()| Vec::new()),
            IoOp::Flush => dev.flush().map(|()| Vec::new()),
        }
    }
}

/// Called exactly once with the result of a submitted op: the data for a
/// read, an empty vector otherwise. Runs on an engine thread (or a device's
/// own, see [`BlockDev::submit`]): keep it short (send on a channel, wake a
/// task), and do not call [`Engine::submit`] on the same engine from it:
/// with a full queue that blocks the engine's own thread and can deadlock.
pub type Completion = Box<dyn FnOnce(io::Result<Vec<u8>>) + Send + 'static>;

/// The future returned by [`Engine::run`].
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<u8>>> + Send + 'a>>;

/// Runs device operations concurrently and completes them out of order.
///
/// Ops in flight at the same time are not ordered with respect to each
/// other, including flushes: a flush covers the writes that completed before
/// it was submitted. Dropping an engine waits for every submitted op to
/// complete.
pub trait Engine: Send + Sync {
    /// Queue `op` on `dev`; `done` is called once it finishes. Blocks the
    /// calling thread while the engine's queue is full (backpressure); async
    /// code should use [`Engine::run`], which waits without blocking.
    fn submit(&self, dev: &Arc<dyn BlockDev>, op: IoOp, done: Completion);

    /// Run `op` on `dev` and await its result. Waits asynchronously for room
    /// in the queue, so it never blocks an async runtime's thread. Usable
    /// from any executor. Dropping the future after the op was submitted does
    /// not cancel it: the op still runs to completion, its result is dropped.
    fn run<'a>(&'a self, dev: &Arc<dyn BlockDev>, op: IoOp) -> RunFuture<'a>;

    /// Run `op` and block the calling thread until it completes. Not for use
    /// on an async runtime's threads.
    fn run_blocking(&self, dev: &Arc<dyn BlockDev>, op: IoOp) -> io::Result<Vec<u8>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit(
            dev,
            op,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv().unwrap_or_else(|_| Err(aborted()))
    }

    /// Engine name for logs ("pool", "io_uring").
    fn name(&self) -> &str;
}

/// Limits the ops in flight through [`Engine::run`] to what the engine's
/// queue holds, so that `submit` never blocks there.
pub(crate) struct Admission(Arc<Semaphore>);

impl Admission {
    pub(crate) fn new(slots: usize) -> Admission {
        Admission(Arc::new(Semaphore::new(
            slots.clamp(1, Semaphore::MAX_PERMITS),
        )))
    }

    /// The body of [`Engine::run`] for an engine whose queue holds `slots` ops.
    pub(crate) fn run<'a, E: Engine + ?Sized>(
        &self,
        engine: &'a E,
        dev: &Arc<dyn BlockDev>,
        op: IoOp,
    ) -> RunFuture<'a> {
        let sem = Arc::clone(&self.0);
        let dev = Arc::clone(dev);
        Box::pin(async move {
            let permit = sem.acquire_owned().await.map_err(|_| aborted())?;
            let (tx, rx) = oneshot::channel();
            engine.submit(
                &dev,
                op,
                Box::new(move |r| {
                    drop(permit);
                    let _ = tx.send(r);
                }),
            );
            rx.await.unwrap_or_else(|_| Err(aborted()))
        })
    }
}

/// The error of an op whose completion was lost (engine shut down or a
/// device implementation panicked).
pub(crate) fn aborted() -> io::Error {
    io::Error::other("the I/O engine stopped before the operation completed")
}
