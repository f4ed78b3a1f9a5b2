//! The NBD export of a tiered volume.

use std::sync::Arc;

use tiercache_nbd::{async_trait, Backend, BlockSize, Errno, Error, Result};

use crate::volume::TieredVolume;

/// A [`TieredVolume`] as an NBD export: READ, WRITE (with FUA), FLUSH,
/// TRIM, WRITE_ZEROES (zero buffers through the write path), CACHE (a no-op:
/// placement is the planner's job) and multi-conn (one shared state; FLUSH
/// covers every connection).
pub struct TierExport {
    /// The volume served.
    pub volume: Arc<TieredVolume>,
    /// Refuse writes, trims and zeroes.
    pub read_only: bool,
}

fn eio(e: std::io::Error) -> Error {
    Error::new(Errno::Io, e.to_string())
}

#[async_trait]
impl Backend for TierExport {
    fn size(&self) -> u64 {
        self.volume.size()
    }
    fn block_size(&self) -> BlockSize {
        BlockSize {
            minimum: 1,
            preferred: 4096,
            maximum: 32 << 20,
        }
    }
    fn description(&self) -> Option<String> {
        Some("tiercache: OODT tiered volume (fast and slow tier)".into())
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
        true
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.volume.read(offset, buf).await.map_err(eio)
    }
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        self.volume.write(offset, data, fua).await.map_err(eio)
    }
    async fn flush(&self) -> Result<()> {
        self.volume.flush().await.map_err(eio)
    }
    async fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.volume.trim(offset, len).await.map_err(eio)?;
        if fua {
            self.volume.flush().await.map_err(eio)?;
        }
        Ok(())
    }
}
