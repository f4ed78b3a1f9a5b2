//! In-memory backend: a `Vec<u8>` behind a lock, for tests and benchmarks.

use std::sync::RwLock;

use async_trait::async_trait;

use crate::backend::{in_range, out_of_range, Backend, BlockSize, Extent};
use crate::error::{Error, Result};

/// A RAM disk. Volatile, so flush/FUA are no-ops; all connections share the
/// one buffer, so it supports multi-conn. Zeroing is a `memset` (fast zero).
#[derive(Debug)]
pub struct MemBackend {
    data: RwLock<Vec<u8>>,
    read_only: bool,
    block_size: BlockSize,
}

impl MemBackend {
    /// A zero-filled disk of `size` bytes.
    pub fn new(size: usize) -> Self {
        Self::from_vec(vec![0u8; size])
    }

    /// A disk with the given initial contents.
    pub fn from_vec(data: Vec<u8>) -> Self {
        MemBackend {
            data: RwLock::new(data),
            read_only: false,
            block_size: BlockSize::default(),
        }
    }

    /// Export it read-only (writes fail with `EPERM`).
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Advertise other block size constraints.
    pub fn with_block_size(mut self, block_size: BlockSize) -> Self {
        self.block_size = block_size;
        self
    }

    /// A copy of the current contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.lock_read().clone()
    }

    fn lock_read(&self) -> std::sync::RwLockReadGuard<'_, Vec<u8>> {
        // A panic while holding the lock cannot leave the bytes inconsistent
        // in a way that matters for a RAM disk, so poisoning is ignored.
        self.data.read().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<u8>> {
        self.data.write().unwrap_or_else(|p| p.into_inner())
    }

    fn fill_zero(&self, offset: u64, len: u64) -> Result<()> {
        let mut d = self.lock_write();
        let size = d.len() as u64;
        if !in_range(offset, len, size) {
            return Err(out_of_range(offset, len, size));
        }
        d[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
}

#[async_trait]
impl Backend for MemBackend {
    fn size(&self) -> u64 {
        self.lock_read().len() as u64
    }
    fn block_size(&self) -> BlockSize {
        self.block_size
    }
    fn description(&self) -> Option<String> {
        Some("tiercache in-memory disk".to_string())
    }
    fn is_read_only(&self) -> bool {
        self.read_only
    }
    fn can_trim(&self) -> bool {
        true
    }
    fn can_fast_zero(&self) -> bool {
        true
    }
    fn can_cache(&self) -> bool {
        true
    }
    fn can_multi_conn(&self) -> bool {
        true
    }

    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let d = self.lock_read();
        let len = buf.len() as u64;
        if !in_range(offset, len, d.len() as u64) {
            return Err(out_of_range(offset, len, d.len() as u64));
        }
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    async fn write(&self, offset: u64, data: &[u8], _fua: bool) -> Result<()> {
        if self.read_only {
            return Err(Error::new(crate::Errno::Perm, "export is read-only"));
        }
        let mut d = self.lock_write();
        let len = data.len() as u64;
        if !in_range(offset, len, d.len() as u64) {
            return Err(out_of_range(offset, len, d.len() as u64));
        }
        d[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Reports 4 KiB-aligned all-zero runs as `zero` (never `hole`: the
    /// memory is always allocated).
    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        const GRAIN: u64 = 4096;
        let d = self.lock_read();
        let size = d.len() as u64;
        if !in_range(offset, len, size) {
            return Err(out_of_range(offset, len, size));
        }
        let end = offset + len;
        let mut extents: Vec<Extent> = Vec::new();
        let mut pos = offset;
        while pos < end {
            let next = ((pos / GRAIN + 1) * GRAIN).min(end);
            let zero = d[pos as usize..next as usize].iter().all(|&b| b == 0);
            match extents.last_mut() {
                Some(last) if last.zero == zero => last.length += next - pos,
                _ => extents.push(Extent {
                    length: next - pos,
                    hole: false,
                    zero,
                }),
            }
            pos = next;
        }
        Ok(extents)
    }

    async fn trim(&self, offset: u64, len: u64, _fua: bool) -> Result<()> {
        // Contents after trim are unspecified; zeroing keeps reads deterministic.
        self.fill_zero(offset, len)
    }

    async fn write_zeroes(&self, offset: u64, len: u64, _no_hole: bool, _fua: bool) -> Result<()> {
        self.fill_zero(offset, len)
    }
}
