//! The log-structured cache as a [`Design`] of the live runtime.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tiercache_runtime::{async_trait, blocking, Design, Error, Result, WriteBack};

use crate::cache::{CacheError, LogCache};

/// A [`LogCache`] served by the live runtime. Requests run on tokio's
/// blocking pool (the store does synchronous device I/O under its lock).
pub struct LogStructured(pub Arc<LogCache>);

fn conv(e: CacheError) -> Error {
    Error::io(e.0)
}

fn dirty(c: &LogCache) -> u64 {
    c.stats_json()["dirty_blocks"].as_u64().unwrap_or(0)
}

#[async_trait]
impl Design for LogStructured {
    fn name(&self) -> &'static str {
        "log-structured"
    }
    fn description(&self) -> String {
        format!("tiercache: log-structured {} cache", self.0.write_policy())
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn backing_path(&self) -> PathBuf {
        self.0.backing_path().to_path_buf()
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (c, n) = (Arc::clone(&self.0), buf.len());
        let data = blocking(move || c.read(offset, n).map_err(conv)).await?;
        buf.copy_from_slice(&data);
        Ok(())
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        let c = Arc::clone(&self.0);
        blocking(move || c.write(offset, &data, fua).map_err(conv)).await
    }
    async fn flush(&self) -> Result<()> {
        let c = Arc::clone(&self.0);
        blocking(move || c.flush().map_err(conv)).await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        let c = Arc::clone(&self.0);
        blocking(move || c.trim(offset, len).map_err(conv)).await
    }
    async fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        let c = Arc::clone(&self.0);
        blocking(move || c.prefetch(offset, len).map_err(conv)).await
    }
    async fn stats(&self) -> Value {
        let c = Arc::clone(&self.0);
        blocking(move || Ok(c.stats_json()))
            .await
            .unwrap_or_default()
    }
    async fn write_back(&self) -> Result<WriteBack> {
        let c = Arc::clone(&self.0);
        blocking(move || {
            let n = c.write_back_all().map_err(conv)?;
            Ok(WriteBack {
                written_back: n,
                dirty_left: dirty(&c),
                unit: "blocks",
            })
        })
        .await
    }
    async fn detach(&self) -> Result<WriteBack> {
        let c = Arc::clone(&self.0);
        blocking(move || {
            let n = c.write_back_all().map_err(conv)?;
            let left = dirty(&c);
            if left == 0 {
                c.shutdown(false).map_err(conv)?;
            }
            Ok(WriteBack {
                written_back: n,
                dirty_left: left,
                unit: "blocks",
            })
        })
        .await
    }
    async fn shutdown(&self) -> Result<()> {
        let c = Arc::clone(&self.0);
        blocking(move || c.shutdown(false).map_err(conv)).await
    }
}
