//! The one NBD export adapter: any [`Design`] as a `tiercache_nbd::Backend`.

use std::sync::Arc;

use tiercache_nbd::{async_trait, Backend, BlockSize, Result};

use crate::design::Design;
use crate::metrics::{Op, RequestMetrics};

/// A design exported over NBD: READ, WRITE (FUA), FLUSH, TRIM (FUA),
/// WRITE_ZEROES (the design's [`Design::write_zeroes`]), CACHE, multi-conn
/// (one shared state: a FLUSH on any connection covers them all).
/// With `metrics`, each request is timed from its arrival here to its
/// answer (`tiercache_request_duration_seconds`); without, nothing is measured.
pub struct Export {
    pub design: Arc<dyn Design>,
    pub read_only: bool,
    pub metrics: Option<Arc<RequestMetrics>>,
}

impl Export {
    /// Run `f`, timing it when metrics are on.
    async fn timed<T>(
        &self,
        op: Op,
        f: impl std::future::Future<Output = crate::error::Result<T>>,
    ) -> Result<T> {
        let Some(m) = &self.metrics else {
            return Ok(f.await?);
        };
        let t = std::time::Instant::now();
        let r = f.await;
        m.observe(op, t.elapsed(), r.is_err());
        Ok(r?)
    }
}

#[async_trait]
impl Backend for Export {
    fn size(&self) -> u64 {
        self.design.size()
    }
    fn block_size(&self) -> BlockSize {
        BlockSize {
            minimum: 1,
            preferred: 4096,
            maximum: 32 << 20,
        }
    }
    fn description(&self) -> Option<String> {
        Some(self.design.description())
    }
    fn is_read_only(&self) -> bool {
        self.read_only
    }
    fn can_trim(&self) -> bool {
        true
    }
    fn can_cache(&self) -> bool {
        self.design.can_prefetch()
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    fn is_rotational(&self) -> bool {
        false
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.timed(Op::Read, self.design.read(offset, buf)).await
    }
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        self.timed(Op::Write, self.design.write(offset, data.to_vec(), fua))
            .await
    }
    async fn write_owned(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        self.timed(Op::Write, self.design.write(offset, data, fua))
            .await
    }
    fn batches_writes(&self) -> bool {
        !self.read_only && self.design.batches_writes()
    }
    fn write_batch_now(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        let t = self.metrics.as_ref().map(|_| std::time::Instant::now());
        let results = self.design.write_batch_now(writes)?;
        if let (Some(m), Some(t)) = (&self.metrics, t) {
            // Each write of the batch waited for the whole batch.
            let took = t.elapsed();
            for r in &results {
                m.observe(Op::Write, took, r.is_err());
            }
        }
        Some(results.into_iter().map(|r| Ok(r?)).collect())
    }
    async fn flush(&self) -> Result<()> {
        self.timed(Op::Flush, self.design.flush()).await
    }
    async fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.timed(Op::Trim, async {
            self.design.trim(offset, len).await?;
            if fua {
                self.design.flush().await?;
            }
            Ok(())
        })
        .await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, _no_hole: bool, fua: bool) -> Result<()> {
        // `no_hole` needs nothing: no design deallocates on a zero write.
        self.timed(Op::Write, self.design.write_zeroes(offset, len, fua))
            .await
    }
    async fn cache(&self, offset: u64, len: u64) -> Result<()> {
        self.timed(Op::Cache, self.design.prefetch(offset, len))
            .await
    }
}
