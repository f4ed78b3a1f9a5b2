//! A [`Design`] for stores that do synchronous device I/O under a lock (the
//! log-structured and three-level caches): each call runs on a small pool of
//! dedicated request threads fed by a channel ([`SyncWorkers`]), unless the
//! store serves it cheaply on the calling task ([`SyncStore::read_inline`],
//! [`SyncStore::write_inline`]). One adapter for all such stores, instead of one
//! per design.
//!
//! Why not tokio's blocking pool: with 32 requests in flight per connection,
//! `spawn_blocking` wakes up to 32 threads that then queue on the store's one
//! lock; the hand-off and the convoy took 41-54 % of the CPU of all-hit
//! requests (docs/results.md). A few threads draining one queue run queued
//! requests back to back without sleeping in between. A store may still serve
//! a request on the calling task when it needs no slow I/O
//! ([`SyncStore::read_inline`], [`SyncStore::write_inline`]): no hand-off at all.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::design::{Design, WriteBack};
use crate::error::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// Dedicated threads that run synchronous calls for async callers: a channel
/// of jobs, each answered through a oneshot. The threads end when the pool
/// is dropped (after the queued jobs). With no threads, calls run inline on
/// the calling task (no hand-off; a slow call then holds a runtime worker).
pub struct SyncWorkers {
    tx: Option<crossbeam_channel::Sender<Job>>,
}

impl SyncWorkers {
    /// Start `threads` threads named `name-N` (0: run every call inline).
    pub fn new(name: &str, threads: usize) -> std::io::Result<Self> {
        if threads == 0 {
            return Ok(SyncWorkers { tx: None });
        }
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                })?;
        }
        Ok(SyncWorkers { tx: Some(tx) })
    }

    /// The default number of request threads: `TIERCACHE_SYNC_THREADS` if set
    /// (a benchmark knob; 0 runs calls inline), else 2 (the stores serialise on one lock, so more
    /// threads only queue on it).
    pub fn default_threads() -> usize {
        std::env::var("TIERCACHE_SYNC_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2)
    }

    /// Run `f` on one of the threads and wait for its result.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<R> + Send + 'static,
    ) -> Result<R> {
        self.call(f).await?
    }

    /// Run `f` on one of the threads and wait for what it returns; `Err`
    /// only if the threads stopped or `f` panicked.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R> {
        let Some(jobs) = &self.tx else {
            return Ok(f());
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        if jobs.send(job).is_err() {
            return Err(Error::io("the request threads have stopped"));
        }
        rx.await.map_err(|_| Error::io("a request thread failed"))
    }
}

/// A live store with synchronous operations.
pub trait SyncStore: Send + Sync + 'static {
    /// See [`Design::name`].
    fn name(&self) -> &'static str;
    /// See [`Design::description`].
    fn description(&self) -> String;
    /// Exported size in bytes.
    fn size(&self) -> u64;
    /// The device that holds every block once detached.
    fn backing_path(&self) -> PathBuf;
    /// The unit of dirty counts ("blocks", "pages").
    fn unit(&self) -> &'static str;
    /// Advertise NBD_CMD_CACHE.
    fn can_prefetch(&self) -> bool {
        false
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()>;
    /// Serve a read on the calling task (the runtime's worker, no hand-off to
    /// a request thread) when it needs no slow I/O; `None` (the default)
    /// sends it to the request threads.
    fn read_inline(&self, offset: u64, buf: &mut [u8]) -> Option<Result<()>> {
        let _ = (offset, buf);
        None
    }
    /// Serve a write on the calling task when it needs no slow I/O (no sync,
    /// no slow device); `None` (the default) only when nothing was done: the
    /// write then goes to the request threads.
    fn write_inline(&self, offset: u64, data: &[u8], fua: bool) -> Option<Result<()>> {
        let _ = (offset, data, fua);
        None
    }
    /// Whether [`SyncStore::write_batch_inline`] can take batches.
    fn batches_writes(&self) -> bool {
        false
    }
    /// Serve plain writes received together on the calling task when they
    /// need no slow I/O: one result per write, in order; `None` (the
    /// default) only when nothing was done (each then runs as a single write).
    fn write_batch_inline(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        let _ = writes;
        None
    }
    fn flush(&self) -> Result<()>;
    fn trim(&self, offset: u64, len: u64) -> Result<()>;
    fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }
    /// Counters for `stats`.
    fn stats(&self) -> Value;
    /// See [`Design::metrics`].
    fn metrics(&self, stats: &Value, m: &mut crate::metrics::MetricSet) {
        let _ = (stats, m);
    }
    /// Units dirty now.
    fn dirty(&self) -> u64;
    /// Write every dirty unit back and commit; returns how many.
    fn write_back_all(&self) -> Result<u64>;
    /// Close clean (after writing everything back, with `detach`).
    fn close(&self, detach: bool) -> Result<()>;
}

/// A [`SyncStore`] served through dedicated request threads ([`SyncWorkers`]).
pub struct OnBlockingPool<T> {
    store: Arc<T>,
    workers: SyncWorkers,
}

impl<T: SyncStore> OnBlockingPool<T> {
    /// Wrap a store, with [`SyncWorkers::default_threads`] request threads.
    /// Panics only if the OS refuses to start a thread; see [`Self::with_threads`].
    pub fn new(store: Arc<T>) -> Self {
        Self::with_threads(store, SyncWorkers::default_threads())
            .expect("cannot start the request threads")
    }

    /// Wrap a store, with `threads` request threads.
    pub fn with_threads(store: Arc<T>, threads: usize) -> std::io::Result<Self> {
        let workers = SyncWorkers::new(store.name(), threads)?;
        Ok(OnBlockingPool { store, workers })
    }

    /// The wrapped store.
    pub fn store(&self) -> &Arc<T> {
        &self.store
    }

    async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&T) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let s = Arc::clone(&self.store);
        self.workers.run(move || f(&s)).await
    }
}

#[async_trait::async_trait]
impl<T: SyncStore> Design for OnBlockingPool<T> {
    fn name(&self) -> &'static str {
        self.store.name()
    }
    fn description(&self) -> String {
        self.store.description()
    }
    fn size(&self) -> u64 {
        self.store.size()
    }
    fn backing_path(&self) -> PathBuf {
        self.store.backing_path()
    }
    fn can_prefetch(&self) -> bool {
        self.store.can_prefetch()
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(r) = self.store.read_inline(offset, buf) {
            return r;
        }
        let n = buf.len();
        let data = self.run(move |s| s.read(offset, n)).await?;
        buf.copy_from_slice(&data);
        Ok(())
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        if let Some(r) = self.store.write_inline(offset, &data, fua) {
            return r;
        }
        self.run(move |s| s.write(offset, &data, fua)).await
    }
    fn batches_writes(&self) -> bool {
        self.store.batches_writes()
    }
    fn write_batch_now(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        self.store.write_batch_inline(writes)
    }
    async fn flush(&self) -> Result<()> {
        self.run(|s| s.flush()).await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.run(move |s| s.trim(offset, len)).await
    }
    async fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        self.run(move |s| s.prefetch(offset, len)).await
    }
    async fn stats(&self) -> Value {
        self.run(|s| Ok(s.stats())).await.unwrap_or_default()
    }
    fn metrics(&self, stats: &Value, m: &mut crate::metrics::MetricSet) {
        self.store.metrics(stats, m)
    }
    async fn write_back(&self) -> Result<WriteBack> {
        self.run(|s| {
            Ok(WriteBack {
                written_back: s.write_back_all()?,
                dirty_left: s.dirty(),
                unit: s.unit(),
            })
        })
        .await
    }
    async fn detach(&self) -> Result<WriteBack> {
        self.run(|s| {
            let n = s.write_back_all()?;
            let left = s.dirty();
            if left == 0 {
                s.close(true)?;
            }
            Ok(WriteBack {
                written_back: n,
                dirty_left: left,
                unit: s.unit(),
            })
        })
        .await
    }
    async fn shutdown(&self) -> Result<()> {
        self.run(|s| s.close(false)).await
    }
}
