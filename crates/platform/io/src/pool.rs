//! A portable engine: a fixed pool of threads doing blocking I/O.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::engine::{aborted, Admission, Completion, Engine, IoOp, RunFuture};
use crate::BlockDev;

struct Job {
    dev: Arc<dyn BlockDev>,
    op: IoOp,
    done: Completion,
}

/// `threads` worker threads taking ops from a bounded FIFO queue and running
/// them with the blocking [`BlockDev`] methods. Works with every device and
/// on every system; concurrency is limited to the number of threads, except
/// for devices that submit asynchronously themselves ([`BlockDev::submit`]),
/// which get each op directly.
pub struct PoolEngine {
    tx: Option<Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
    admission: Admission,
}

impl PoolEngine {
    /// Start `threads` workers (1..=1024) with a queue of `queue_depth` ops
    /// (at least 1) waiting for a worker.
    pub fn new(threads: usize, queue_depth: usize) -> io::Result<PoolEngine> {
        if !(1..=1024).contains(&threads) || queue_depth == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "thread pool engine: {threads} threads and queue depth {queue_depth} \
                     requested; threads must be 1..=1024 and the queue depth at least 1"
                ),
            ));
        }
        let (tx, rx) = bounded::<Job>(queue_depth);
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let rx = rx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("tiercache-io-{i}"))
                .spawn(move || worker(rx))?;
            workers.push(handle);
        }
        Ok(PoolEngine {
            tx: Some(tx),
            workers,
            admission: Admission::new(threads.saturating_add(queue_depth)),
        })
    }
}

fn worker(rx: Receiver<Job>) {
    for Job { dev, op, done } in rx {
        let result = catch_unwind(AssertUnwindSafe(|| op.execute(&*dev)));
        match result {
            Ok(r) => done(r),
            Err(_) => {
                tracing::error!(device = %dev.name(), "a device operation panicked");
                done(Err(aborted()));
            }
        }
    }
}

impl Engine for PoolEngine {
    fn submit(&self, dev: &Arc<dyn BlockDev>, op: IoOp, done: Completion) {
        // A device that submits asynchronously itself needs no thread.
        let (op, done) = match dev.submit(op, done) {
            Ok(()) => return,
            Err(back) => back,
        };
        let job = Job {
            dev: Arc::clone(dev),
            op,
            done,
        };
        match &self.tx {
            Some(tx) => {
                if let Err(e) = tx.send(job) {
                    (e.into_inner().done)(Err(aborted()));
                }
            }
            None => (job.done)(Err(aborted())),
        }
    }

    fn run<'a>(&'a self, dev: &Arc<dyn BlockDev>, op: IoOp) -> RunFuture<'a> {
        self.admission.run(self, dev, op)
    }

    fn name(&self) -> &str {
        "pool"
    }
}

impl Drop for PoolEngine {
    /// Finish every queued op, then stop the workers.
    fn drop(&mut self) {
        self.tx = None;
        let me = std::thread::current().id();
        for w in self.workers.drain(..) {
            // A completion callback may drop the last handle on a worker.
            if w.thread().id() != me {
                let _ = w.join();
            }
        }
    }
}
