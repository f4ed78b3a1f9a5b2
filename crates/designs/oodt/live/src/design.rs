//! The tiered volume as a [`Design`] of the live runtime.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tiercache_runtime::{async_trait, blocking, Design, Result, WriteBack};

use crate::volume::TieredVolume;

/// A [`TieredVolume`] served by the live runtime.
pub struct Tiered(pub Arc<TieredVolume>);

#[async_trait]
impl Design for Tiered {
    fn name(&self) -> &'static str {
        "tier"
    }
    fn description(&self) -> String {
        "tiercache: OODT tiered volume (fast and slow tier)".into()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn backing_path(&self) -> PathBuf {
        PathBuf::from(&self.0.superblock().tiers[1].identity.path)
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.0.read(offset, buf).await?)
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        Ok(self.0.write(offset, &data, fua).await?)
    }
    async fn flush(&self) -> Result<()> {
        Ok(self.0.flush().await?)
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        Ok(self.0.trim(offset, len).await?)
    }
    async fn stats(&self) -> Value {
        self.0.stats_json()
    }
    async fn write_back(&self) -> Result<WriteBack> {
        // Every block has one home (a tier); nothing is dirty: flush makes it durable.
        self.0.flush().await?;
        Ok(WriteBack {
            written_back: 0,
            dirty_left: 0,
            unit: "blocks",
        })
    }
    fn detach_refusal(&self) -> Option<String> {
        self.0.evacuation_refusal()
    }
    async fn detach(&self) -> Result<WriteBack> {
        if let Some(why) = self.detach_refusal() {
            return Err(tiercache_runtime::Error::not_supported(why));
        }
        let v = Arc::clone(&self.0);
        let moved = blocking(move || Ok(v.evacuate()?)).await?;
        Ok(WriteBack {
            written_back: moved,
            dirty_left: 0,
            unit: "blocks",
        })
    }
    async fn shutdown(&self) -> Result<()> {
        let v = Arc::clone(&self.0);
        blocking(move || Ok(v.shutdown()?)).await
    }
}
