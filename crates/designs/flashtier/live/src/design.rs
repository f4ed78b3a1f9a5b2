//! The log-structured cache as a design of the live runtime: a
//! [`SyncStore`] served on the blocking pool (the store does synchronous
//! device I/O under its lock).

use std::path::PathBuf;

use serde_json::Value;
use tiercache_runtime::{Error, OnBlockingPool, Result, SyncStore};

use crate::cache::{CacheError, LogCache};

/// A [`LogCache`] as the runtime serves it (`LogStructured::new(cache)`).
pub type LogStructured = OnBlockingPool<LogCache>;

fn conv(e: CacheError) -> Error {
    Error::io(e.0)
}

impl SyncStore for LogCache {
    fn name(&self) -> &'static str {
        "log-structured"
    }
    fn description(&self) -> String {
        format!("tiercache: log-structured {} cache", self.write_policy())
    }
    fn size(&self) -> u64 {
        LogCache::size(self)
    }
    fn backing_path(&self) -> PathBuf {
        LogCache::backing_path(self).to_path_buf()
    }
    fn unit(&self) -> &'static str {
        "blocks"
    }
    fn can_prefetch(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        LogCache::read(self, offset, len).map_err(conv)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        LogCache::write(self, offset, data, fua).map_err(conv)
    }
    fn flush(&self) -> Result<()> {
        LogCache::flush(self).map_err(conv)
    }
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        LogCache::trim(self, offset, len).map_err(conv)
    }
    fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        LogCache::prefetch(self, offset, len).map_err(conv)
    }
    fn stats(&self) -> Value {
        self.stats_json()
    }
    fn dirty(&self) -> u64 {
        self.stats_json()["dirty_blocks"].as_u64().unwrap_or(0)
    }
    fn write_back_all(&self) -> Result<u64> {
        LogCache::write_back_all(self).map_err(conv)
    }
    fn close(&self, detach: bool) -> Result<()> {
        self.shutdown(detach).map_err(conv)
    }
}
