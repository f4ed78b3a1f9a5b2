//! The NBD export of a [`LogCache`].

use std::sync::Arc;

use tiercache_nbd::{async_trait, Backend, BlockSize, Errno, Error, Result};

use crate::cache::{CacheError, LogCache};

/// A log-structured cache as an NBD export. Requests run on tokio's
/// blocking pool (the cache does synchronous device I/O under its lock).
pub struct Export {
    pub cache: Arc<LogCache>,
    pub read_only: bool,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, CacheError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(Errno::Io, e.to_string()))?
        .map_err(|e| Error::new(Errno::Io, e.0))
}

#[async_trait]
impl Backend for Export {
    fn size(&self) -> u64 {
        self.cache.size()
    }
    fn block_size(&self) -> BlockSize {
        BlockSize {
            minimum: 1,
            preferred: 4096,
            maximum: 32 << 20,
        }
    }
    fn description(&self) -> Option<String> {
        Some(format!(
            "tiercache: log-structured {} cache",
            self.cache.write_policy()
        ))
    }
    fn is_read_only(&self) -> bool {
        self.read_only
    }
    fn can_trim(&self) -> bool {
        true
    }
    fn can_cache(&self) -> bool {
        true
    }
    fn can_multi_conn(&self) -> bool {
        // One shared state: a flush commits what every connection completed.
        true
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let c = Arc::clone(&self.cache);
        let n = buf.len();
        let data = blocking(move || c.read(offset, n)).await?;
        buf.copy_from_slice(&data);
        Ok(())
    }
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        let c = Arc::clone(&self.cache);
        let d = data.to_vec();
        blocking(move || c.write(offset, &d, fua)).await
    }
    async fn flush(&self) -> Result<()> {
        let c = Arc::clone(&self.cache);
        blocking(move || c.flush()).await
    }
    async fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        let c = Arc::clone(&self.cache);
        blocking(move || {
            c.trim(offset, len)?;
            if fua {
                c.flush()?;
            }
            Ok(())
        })
        .await
    }
    async fn cache(&self, offset: u64, len: u64) -> Result<()> {
        let c = Arc::clone(&self.cache);
        blocking(move || c.prefetch(offset, len)).await
    }
}
