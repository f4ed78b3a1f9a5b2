//! The NBD export of a live cache.

use crate::live::LiveCache;
use std::sync::Arc;
use tiercache_core::IoKind;
use tiercache_nbd::{async_trait, Backend, BlockSize, Errno, Error, Result};

/// A [`LiveCache`] as an NBD export.
pub struct Export {
    pub cache: Arc<LiveCache>,
    pub read_only: bool,
}

fn eio(e: crate::live::LiveError) -> Error {
    Error::new(Errno::Io, e.0)
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
        Some("tiercache: SSD cache in front of a slower device".into())
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
        // Flush is export-wide: it commits everything every connection completed.
        true
    }
    fn is_rotational(&self) -> bool {
        false
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let data = self
            .cache
            .request(IoKind::Read, offset, buf.len() as u64, None, false)
            .await
            .map_err(eio)?;
        buf.copy_from_slice(&data);
        Ok(())
    }
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        self.cache
            .request(IoKind::Write, offset, data.len() as u64, Some(data), fua)
            .await
            .map_err(eio)?;
        Ok(())
    }
    async fn write_owned(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        self.cache.write_owned(offset, data, fua).await.map_err(eio)
    }
    async fn flush(&self) -> Result<()> {
        self.cache
            .request(IoKind::Flush, 0, 0, None, false)
            .await
            .map_err(eio)?;
        Ok(())
    }
    async fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.cache
            .request(IoKind::Trim, offset, len, None, fua)
            .await
            .map_err(eio)?;
        Ok(())
    }
    async fn cache(&self, offset: u64, len: u64) -> Result<()> {
        // Prefetch: a read whose data is dropped fills the cache like any read miss.
        let mut off = offset;
        let end = offset + len;
        while off < end {
            let n = (end - off).min(4 << 20);
            self.cache
                .request(IoKind::Read, off, n, None, false)
                .await
                .map_err(eio)?;
            off += n;
        }
        Ok(())
    }
}

/// A device exported as it is, without a cache (the demo's and benchmarks' baseline).
pub struct PassThrough {
    pub dev: Arc<dyn tiercache_io::BlockDev>,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::new(Errno::Io, e.to_string()))?
        .map_err(|e| Error::new(Errno::Io, e.to_string()))
}

#[async_trait]
impl Backend for PassThrough {
    fn size(&self) -> u64 {
        self.dev.len()
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let dev = Arc::clone(&self.dev);
        let n = buf.len();
        let v = blocking(move || {
            let mut v = vec![0u8; n];
            dev.read_at(&mut v, offset).map(|_| v)
        })
        .await?;
        buf.copy_from_slice(&v);
        Ok(())
    }
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        let dev = Arc::clone(&self.dev);
        let d = data.to_vec();
        blocking(move || {
            if fua {
                dev.write_at_fua(&d, offset)
            } else {
                dev.write_at(&d, offset)
            }
        })
        .await
    }
    async fn flush(&self) -> Result<()> {
        let dev = Arc::clone(&self.dev);
        blocking(move || dev.flush()).await
    }
}
