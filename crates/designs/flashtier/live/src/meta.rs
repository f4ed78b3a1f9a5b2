//! A [`BlockDev`] seen as the store's metadata device (for its probes).

use std::sync::Arc;

use tiercache_io::BlockDev;
use tiercache_store::MetaDevice;

/// A block device as a `tiercache-store` metadata device.
pub struct Meta(pub Arc<dyn BlockDev>);

impl MetaDevice for Meta {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.0.write_at(buf, offset)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.0.flush()
    }
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0.len())
    }
}
