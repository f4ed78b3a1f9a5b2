//! A device exported as it is, without a cache (the demo's and benchmarks' baseline).

use std::sync::Arc;
use tiercache_nbd::{async_trait, Backend, Errno, Error, Result};

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
