//! The device the metadata lives on, as a small trait so tests can wrap it
//! with fault and crash injectors (see [`crate::crash_sim`]).

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Positional I/O on the cache device. Writes may sit in a volatile cache
/// until [`MetaDevice::sync`] returns; after a crash any subset of the
/// sectors written since the last sync may or may not have reached the media.
pub trait MetaDevice {
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable (fdatasync / device cache flush).
    fn sync(&self) -> io::Result<()>;
    /// Size of the device in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Whether the device has zero bytes.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// Regular files and block devices, through pread/pwrite/fdatasync.
impl MetaDevice for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        FileExt::write_all_at(self, buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        let md = self.metadata()?;
        if md.is_file() {
            Ok(md.len())
        } else {
            // Block devices report st_size 0; seeking to the end gives their size.
            let mut f: &File = self;
            f.seek(SeekFrom::End(0))
        }
    }
}

impl<T: MetaDevice + ?Sized> MetaDevice for &T {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
    fn len(&self) -> io::Result<u64> {
        (**self).len()
    }
}

impl<T: MetaDevice + ?Sized> MetaDevice for Arc<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
    fn len(&self) -> io::Result<u64> {
        (**self).len()
    }
}
