//! A device held in memory.

use std::io;
use std::sync::{PoisonError, RwLock};

use crate::{check_range, Access, BlockDev};

/// A [`BlockDev`] in memory: zero-filled at creation, trim writes zeros,
/// flush does nothing. For tests and as the "media" under wrappers.
pub struct MemDev {
    name: String,
    data: RwLock<Vec<u8>>,
}

impl MemDev {
    /// A zero-filled device of `len` bytes.
    pub fn new(name: impl Into<String>, len: usize) -> MemDev {
        MemDev::from_vec(name, vec![0; len])
    }

    /// A device holding `data`.
    pub fn from_vec(name: impl Into<String>, data: Vec<u8>) -> MemDev {
        MemDev {
            name: name.into(),
            data: RwLock::new(data),
        }
    }

    /// A copy of the whole contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl BlockDev for MemDev {
    fn len(&self) -> u64 {
        self.data
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let data = self.data.read().unwrap_or_else(PoisonError::into_inner);
        check_range(
            &self.name,
            data.len() as u64,
            Access::Read,
            offset,
            buf.len() as u64,
        )?;
        let start = offset as usize;
        buf.copy_from_slice(&data[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut data = self.data.write().unwrap_or_else(PoisonError::into_inner);
        check_range(
            &self.name,
            data.len() as u64,
            Access::Write,
            offset,
            buf.len() as u64,
        )?;
        let start = offset as usize;
        data[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut data = self.data.write().unwrap_or_else(PoisonError::into_inner);
        check_range(&self.name, data.len() as u64, Access::Trim, offset, len)?;
        data[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_trim_and_bounds() {
        let d = MemDev::new("m", 64);
        d.write_at(b"abcdef", 10).unwrap();
        let mut b = [0u8; 8];
        d.read_at(&mut b, 9).unwrap();
        assert_eq!(&b, b"\0abcdef\0");
        d.trim(11, 2).unwrap();
        d.read_at(&mut b, 9).unwrap();
        assert_eq!(&b, b"\0a\0\0def\0");
        assert_eq!(
            d.read_at(&mut b, 60).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(
            d.write_at(&b, 60).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        // A failed write changes nothing.
        assert_eq!(d.snapshot()[60..], [0; 4]);
    }
}
