//! Positioned reads from the backing device.

use std::io;

/// Random-access read source. It must return the *latest* contents of the
/// device: in a write-back cache, read through the cache, not from the
/// slow device alone, so that a layout re-parse sees recent writes.
pub trait ReadAt {
    /// Fill `buf` from byte `offset`; an error if the range is not readable.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
}

impl ReadAt for std::fs::File {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| eof())?;
        let end = start.checked_add(buf.len()).ok_or_else(eof)?;
        let src = self.get(start..end).ok_or_else(eof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.as_slice().read_at(offset, buf)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Box<T> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
}

fn eof() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "read past the end of the device",
    )
}

/// A device view where some byte ranges are replaced by pending write
/// data (used to re-parse the layout before a write reaches the device).
pub(crate) struct Overlay<'a> {
    pub dev: &'a dyn ReadAt,
    pub offset: u64,
    pub data: &'a [u8],
}

impl ReadAt for Overlay<'_> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.dev.read_at(offset, buf)?;
        let (w0, w1) = (self.offset, self.offset + self.data.len() as u64);
        let (r0, r1) = (offset, offset + buf.len() as u64);
        let (s, e) = (w0.max(r0), w1.min(r1));
        if s < e {
            buf[(s - r0) as usize..(e - r0) as usize]
                .copy_from_slice(&self.data[(s - w0) as usize..(e - w0) as usize]);
        }
        Ok(())
    }
}
