//! The three-level (TICA) cache as a design of the live runtime: a
//! [`SyncStore`] served on the blocking pool (the cache does synchronous
//! device I/O under its lock).

use std::path::PathBuf;

use serde_json::Value;
use tiercache_runtime::{Error, OnBlockingPool, Result, SyncStore};

use crate::cache::{CacheError, ThreeLevel};

/// A [`ThreeLevel`] cache as the runtime serves it (`Tica::new(cache)`).
pub type Tica = OnBlockingPool<ThreeLevel>;

fn conv(e: CacheError) -> Error {
    Error::io(e.0)
}

impl SyncStore for ThreeLevel {
    fn name(&self) -> &'static str {
        "tica"
    }
    fn description(&self) -> String {
        "tiercache: TICA three-level cache (DRAM, RO-SSD, WO-SSD)".into()
    }
    fn size(&self) -> u64 {
        ThreeLevel::size(self)
    }
    fn backing_path(&self) -> PathBuf {
        ThreeLevel::backing_path(self).to_path_buf()
    }
    fn unit(&self) -> &'static str {
        "pages"
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        ThreeLevel::read(self, offset, len).map_err(conv)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        ThreeLevel::write(self, offset, data, fua).map_err(conv)
    }
    fn flush(&self) -> Result<()> {
        ThreeLevel::flush(self).map_err(conv)
    }
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        ThreeLevel::trim(self, offset, len).map_err(conv)
    }
    fn stats(&self) -> Value {
        self.stats_json()
    }
    fn dirty(&self) -> u64 {
        self.stats_json()["dirty_pages"].as_u64().unwrap_or(0)
    }
    fn write_back_all(&self) -> Result<u64> {
        ThreeLevel::write_back_all(self).map_err(conv)
    }
    fn close(&self, detach: bool) -> Result<()> {
        self.shutdown(detach).map_err(conv)
    }
}
