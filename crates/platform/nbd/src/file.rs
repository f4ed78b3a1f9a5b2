//! File backend: positioned reads/writes on a regular file (or block device),
//! run on tokio's blocking thread pool.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use rustix::fs::FallocateFlags;

use crate::backend::{Backend, BlockSize};
use crate::error::{Errno, Error, Result};

/// Exports a file with `pread`/`pwrite`; FLUSH and FUA use `fdatasync`, TRIM
/// punches holes and WRITE_ZEROES uses `fallocate` (falling back to writing
/// zeroes where the filesystem lacks it). Multi-conn safe: all connections
/// share the kernel page cache, and `fdatasync` covers every writer.
#[derive(Debug, Clone)]
pub struct FileBackend {
    file: Arc<File>,
    size: u64,
    read_only: bool,
}

impl FileBackend {
    /// Open an existing file read-write; its current length is the export size.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Self::from_file(file, false)
    }

    /// Open an existing file read-only.
    pub fn open_read_only(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let file = OpenOptions::new().read(true).open(path)?;
        Self::from_file(file, true)
    }

    /// Create (or truncate) a sparse file of `size` bytes and export it.
    pub fn create(path: impl AsRef<Path>, size: u64) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(size)?;
        Self::from_file(file, false)
    }

    fn from_file(file: File, read_only: bool) -> std::io::Result<Self> {
        let size = file.metadata()?.len();
        Ok(FileBackend {
            file: Arc::new(file),
            size,
            read_only,
        })
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&File) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T> {
        let file = Arc::clone(&self.file);
        match tokio::task::spawn_blocking(move || f(&file)).await {
            Ok(r) => r.map_err(Error::from),
            Err(e) => Err(Error::io(format!("blocking I/O task failed: {e}"))),
        }
    }
}

fn zero_fill(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    const PIECE: u64 = 1 << 20;
    let zeroes = vec![0u8; PIECE.min(len) as usize];
    let mut done = 0;
    while done < len {
        let n = PIECE.min(len - done);
        file.write_all_at(&zeroes[..n as usize], offset + done)?;
        done += n;
    }
    Ok(())
}

fn not_supported(e: &rustix::io::Errno) -> bool {
    *e == rustix::io::Errno::OPNOTSUPP || *e == rustix::io::Errno::NOSYS
}

#[async_trait]
impl Backend for FileBackend {
    fn size(&self) -> u64 {
        self.size
    }
    fn block_size(&self) -> BlockSize {
        BlockSize::default()
    }
    fn description(&self) -> Option<String> {
        Some("tiercache file-backed disk".to_string())
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
        let len = buf.len();
        let data = self
            .blocking(move |f| {
                let mut v = vec![0u8; len];
                f.read_exact_at(&mut v, offset)?;
                Ok(v)
            })
            .await?;
        buf.copy_from_slice(&data);
        Ok(())
    }

    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        if self.read_only {
            return Err(Error::new(Errno::Perm, "export is read-only"));
        }
        let data = data.to_vec();
        self.blocking(move |f| {
            f.write_all_at(&data, offset)?;
            if fua {
                f.sync_data()?;
            }
            Ok(())
        })
        .await
    }

    async fn flush(&self) -> Result<()> {
        self.blocking(|f| f.sync_data()).await
    }

    async fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.blocking(move |f| {
            let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
            match rustix::fs::fallocate(f, flags, offset, len) {
                Ok(()) => {}
                // Trim is advisory: a filesystem without hole punching simply keeps the data.
                Err(e) if not_supported(&e) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            if fua {
                f.sync_data()?;
            }
            Ok(())
        })
        .await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, no_hole: bool, fua: bool) -> Result<()> {
        if self.read_only {
            return Err(Error::new(Errno::Perm, "export is read-only"));
        }
        self.blocking(move |f| {
            let flags = if no_hole {
                FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE
            } else {
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE
            };
            match rustix::fs::fallocate(f, flags, offset, len) {
                Ok(()) => {}
                Err(e) if not_supported(&e) => zero_fill(f, offset, len)?,
                Err(e) => return Err(e.into()),
            }
            if fua {
                f.sync_data()?;
            }
            Ok(())
        })
        .await
    }

    async fn cache(&self, offset: u64, len: u64) -> Result<()> {
        self.blocking(move |f| {
            let _ = rustix::fs::fadvise(
                f,
                offset,
                std::num::NonZeroU64::new(len),
                rustix::fs::Advice::WillNeed,
            );
            Ok(())
        })
        .await
    }
}
