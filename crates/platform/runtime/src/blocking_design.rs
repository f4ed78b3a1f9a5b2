//! A [`Design`] for stores that do synchronous device I/O under a lock (the
//! log-structured and three-level caches): each call runs on tokio's
//! blocking pool. One adapter for all such stores, instead of one per design.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::design::{Design, WriteBack};
use crate::error::{blocking, Result};

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

/// A [`SyncStore`] served through the blocking pool.
pub struct OnBlockingPool<T>(pub Arc<T>);

impl<T> OnBlockingPool<T> {
    /// Wrap a store.
    pub fn new(store: Arc<T>) -> Self {
        OnBlockingPool(store)
    }
}

impl<T: SyncStore> OnBlockingPool<T> {
    async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&T) -> Result<R> + Send + 'static,
    ) -> Result<R> {
        let s = Arc::clone(&self.0);
        blocking(move || f(&s)).await
    }
}

#[async_trait::async_trait]
impl<T: SyncStore> Design for OnBlockingPool<T> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn description(&self) -> String {
        self.0.description()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn backing_path(&self) -> PathBuf {
        self.0.backing_path()
    }
    fn can_prefetch(&self) -> bool {
        self.0.can_prefetch()
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let n = buf.len();
        let data = self.run(move |s| s.read(offset, n)).await?;
        buf.copy_from_slice(&data);
        Ok(())
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        self.run(move |s| s.write(offset, &data, fua)).await
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
        self.0.metrics(stats, m)
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
