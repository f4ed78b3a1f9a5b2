//! Transparent decompression of trace files.
//!
//! The codec is chosen from the file's magic bytes, not its extension, so a
//! renamed or extension-less compressed trace still reads: gzip (`1f 8b`),
//! xz (`fd 37 7a 58 5a 00`), zstd (`28 b5 2f fd`) and bzip2 (`BZh`).
//! Concatenated streams (multi-member gzip/bzip2/xz, multi-frame zstd) are read
//! to the end. A truncated compressed stream surfaces as a read error, never as
//! a silently shorter trace.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::error::{Result, TraceError};

/// Buffer size of the file and decoder readers: large reads keep the
/// decoders and the parsers streaming.
pub(crate) const BUF_SIZE: usize = 1 << 20;

/// Compression codec of a trace file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Xz,
    Zstd,
    Bzip2,
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
            Compression::Bzip2 => "bzip2",
        })
    }
}

impl Compression {
    /// Codec of a stream starting with `head` (at least 6 bytes to recognise xz).
    pub fn from_magic(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
            Compression::Xz
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else if head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]) {
            Compression::Bzip2
        } else {
            Compression::None
        }
    }

    /// File-name extensions (without dot) that conventionally mark this codec.
    pub fn extensions(self) -> &'static [&'static str] {
        match self {
            Compression::None => &[],
            Compression::Gzip => &["gz", "gzip"],
            Compression::Xz => &["xz", "lzma"],
            Compression::Zstd => &["zst", "zstd"],
            Compression::Bzip2 => &["bz2", "bzip2"],
        }
    }
}

/// Decompressing reader over a trace file.
pub type DynBufRead = Box<dyn BufRead + Send>;

/// Opens `path`, sniffs its codec and returns a buffered reader of the
/// decompressed bytes together with the codec found.
pub fn open_decompressed(path: &Path) -> Result<(DynBufRead, Compression)> {
    let file = File::open(path).map_err(|e| TraceError::io(path, e))?;
    let mut raw = BufReader::with_capacity(BUF_SIZE, file);
    // One fill of a fresh reader over a regular file returns min(capacity,
    // file size) bytes, plenty for the longest magic (6 bytes).
    let head = raw.fill_buf().map_err(|e| TraceError::io(path, e))?;
    let codec = Compression::from_magic(head);
    let reader: DynBufRead = match codec {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            BUF_SIZE,
            flate2::bufread::MultiGzDecoder::new(raw),
        )),
        Compression::Xz => Box::new(BufReader::with_capacity(
            BUF_SIZE,
            xz2::bufread::XzDecoder::new_multi_decoder(raw),
        )),
        Compression::Zstd => {
            let dec = zstd::stream::read::Decoder::with_buffer(raw)
                .map_err(|e| TraceError::io(path, e))?;
            Box::new(BufReader::with_capacity(BUF_SIZE, dec))
        }
        Compression::Bzip2 => Box::new(BufReader::with_capacity(
            BUF_SIZE,
            bzip2::bufread::MultiBzDecoder::new(raw),
        )),
    };
    Ok((reader, codec))
}

/// Uncompressed file mapped into memory, read as a [`BufRead`] whose buffer
/// is the whole rest of the file: no copy out of the page cache.
///
/// Pages already consumed are released from the process (MADV_DONTNEED) every
/// few MiB, so a replay's resident memory does not grow with the trace size.
pub(crate) struct Mapped {
    map: memmap2::Mmap,
    pos: usize,
    /// Consumed bytes before this offset were released.
    released: usize,
}

/// Release consumed pages in steps of this many bytes.
const RELEASE_STEP: usize = 8 << 20;

impl Mapped {
    /// Maps `path` read-only, or returns `None` when it is compressed, empty
    /// or cannot be mapped (the caller then falls back to buffered reads).
    pub(crate) fn open(path: &Path) -> Option<Mapped> {
        let file = File::open(path).ok()?;
        // SAFETY: the map is read-only and private to this reader. Traces are
        // inputs that are not modified while being read; if another process
        // truncated the file meanwhile, reads of the lost pages would fault,
        // as with any memory-mapped reader.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        if map.is_empty() || Compression::from_magic(&map[..map.len().min(6)]) != Compression::None
        {
            return None;
        }
        let _ = map.advise(memmap2::Advice::Sequential);
        Some(Mapped {
            map,
            pos: 0,
            released: 0,
        })
    }
}

impl std::io::Read for Mapped {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = self.map.get(self.pos..).unwrap_or(&[]);
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
}

impl BufRead for Mapped {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        Ok(self.map.get(self.pos..).unwrap_or(&[]))
    }

    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.map.len());
        if self.pos - self.released >= RELEASE_STEP {
            let end = self.pos & !(RELEASE_STEP - 1);
            // SAFETY: the range lies below `pos`, so no slice handed out by
            // `fill_buf` that is still in use points into it (callers consume
            // only what they are done with); the mapping is a private read-only
            // file mapping, so dropped pages are reread from the file if ever
            // touched again.
            let _ = unsafe {
                self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.released,
                    end - self.released,
                )
            };
            self.released = end;
        }
    }
}
