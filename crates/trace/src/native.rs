//! Native binary trace format: compact, exact and fast to read.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! header, 16 bytes:
//!   0..8   magic  "TCTRACE1"
//!   8..10  u16    version = 1
//!   10..12 u16    flags = 0 (reserved; readers reject unknown flags)
//!   12..16 u32    reserved = 0
//! then records of 16 bytes each:
//!   0..8   u64    word: bits 0..=58 byte offset (< 2^59)
//!                       bit  59     time-base marker (see below)
//!                       bits 60..61 class: 0 none, 1 data, 2 metadata, 3 journal
//!                       bits 62..63 kind: 0 read, 1 write, 2 trim, 3 flush
//!   8..12  u32    length in bytes
//!   12..16 u32    time delta in ns since the previous record
//! ```
//!
//! A *time-base* record (word exactly `1 << 59`) carries no request: its
//! bytes 8..16 are a u64 absolute time in ns that becomes the current time.
//! The writer emits one whenever a delta does not fit in u32 ns (gaps over
//! ~4.29 s) or time goes backwards, so times round-trip exactly while
//! ordinary records stay 16 bytes. Times start from 0 before the first record.
//!
//! The reader decodes straight out of a 1 MiB buffer with no allocation and
//! no dynamic dispatch per record; a file with a partial trailing record is
//! reported as truncated. Native files may also be compressed (any codec of
//! [`crate::compress`]).

use std::fs::File;
use std::io::{BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use tiercache_core::{Class, IoKind};

use crate::compress::DynBufRead;
use crate::error::{Location, Result, TraceError};
use crate::Record;

/// Magic bytes at the start of a native trace.
pub const MAGIC: &[u8; 8] = b"TCTRACE1";
/// Format version written and read by this crate.
pub const VERSION: u16 = 1;
/// Size of the header in bytes.
pub const HEADER_LEN: usize = 16;
/// Size of one record in bytes.
pub const RECORD_LEN: usize = 16;
/// Largest byte offset the format can store, exclusive.
pub const MAX_OFFSET: u64 = 1 << 59;

const OFFSET_MASK: u64 = MAX_OFFSET - 1;
const TIME_BASE: u64 = 1 << 59;
const CLASS_SHIFT: u32 = 60;
const KIND_SHIFT: u32 = 62;
const BUF_LEN: usize = 1 << 20;

fn kind_bits(k: IoKind) -> u64 {
    match k {
        IoKind::Read => 0,
        IoKind::Write => 1,
        IoKind::Trim => 2,
        IoKind::Flush => 3,
    }
}

fn class_bits(c: Option<Class>) -> u64 {
    match c {
        None => 0,
        Some(Class::Data) => 1,
        Some(Class::Metadata) => 2,
        Some(Class::Journal) => 3,
    }
}

const KINDS: [IoKind; 4] = [IoKind::Read, IoKind::Write, IoKind::Trim, IoKind::Flush];
const CLASSES: [Option<Class>; 4] = [
    None,
    Some(Class::Data),
    Some(Class::Metadata),
    Some(Class::Journal),
];

/// Streaming writer of native traces.
pub struct NativeWriter {
    path: PathBuf,
    out: BufWriter<File>,
    time: u64,
    count: u64,
}

impl NativeWriter {
    /// Creates (truncates) `path` and writes the header.
    pub fn create(path: &Path) -> Result<NativeWriter> {
        let file = File::create(path).map_err(|e| TraceError::io(path, e))?;
        let mut out = BufWriter::with_capacity(BUF_LEN, file);
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(MAGIC);
        header[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out.write_all(&header)
            .map_err(|e| TraceError::io(path, e))?;
        Ok(NativeWriter {
            path: path.to_path_buf(),
            out,
            time: 0,
            count: 0,
        })
    }

    /// Appends one record. Fails if its offset is `>= 2^59`.
    pub fn write(&mut self, r: &Record) -> Result<()> {
        if r.offset >= MAX_OFFSET {
            return Err(TraceError::Unrepresentable {
                index: self.count,
                format: "native".into(),
                msg: format!("offset {} is not below 2^59", r.offset),
            });
        }
        let delta = match r.time_ns.checked_sub(self.time) {
            Some(d) if d <= u64::from(u32::MAX) => d as u32,
            _ => {
                let mut base = [0u8; RECORD_LEN];
                base[..8].copy_from_slice(&TIME_BASE.to_le_bytes());
                base[8..].copy_from_slice(&r.time_ns.to_le_bytes());
                self.put(&base)?;
                0
            }
        };
        self.time = r.time_ns;
        let word = r.offset | class_bits(r.class) << CLASS_SHIFT | kind_bits(r.kind) << KIND_SHIFT;
        let mut rec = [0u8; RECORD_LEN];
        rec[..8].copy_from_slice(&word.to_le_bytes());
        rec[8..12].copy_from_slice(&r.len.to_le_bytes());
        rec[12..].copy_from_slice(&delta.to_le_bytes());
        self.put(&rec)?;
        self.count += 1;
        Ok(())
    }

    fn put(&mut self, bytes: &[u8; RECORD_LEN]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| TraceError::io(&self.path, e))
    }

    /// Flushes the file and returns the number of records written.
    pub fn finish(mut self) -> Result<u64> {
        self.out
            .flush()
            .map_err(|e| TraceError::io(&self.path, e))?;
        self.out
            .get_ref()
            .sync_data()
            .map_err(|e| TraceError::io(&self.path, e))?;
        Ok(self.count)
    }
}

/// Writes `records` to `path` as a native trace; returns how many were written.
pub fn write_native(path: &Path, records: impl IntoIterator<Item = Record>) -> Result<u64> {
    let mut w = NativeWriter::create(path)?;
    for r in records {
        w.write(&r)?;
    }
    w.finish()
}

/// Reader of native traces, decoding from a large buffer.
pub(crate) struct NativeReader {
    path: PathBuf,
    reader: DynBufRead,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
    /// Number of 16-byte slots consumed, for error locations.
    index: u64,
    time: u64,
    eof: bool,
}

impl NativeReader {
    /// Checks the header and prepares to read records.
    pub(crate) fn new(path: &Path, mut reader: DynBufRead) -> Result<NativeReader> {
        let mut header = [0u8; HEADER_LEN];
        let got = read_full(&mut reader, &mut header).map_err(|e| TraceError::io(path, e))?;
        let invalid = |msg: String| TraceError::Invalid {
            path: path.to_path_buf(),
            msg,
        };
        if got < HEADER_LEN || &header[..8] != MAGIC {
            return Err(invalid(format!(
                "not a native trace: expected a 16-byte header starting with {:?}",
                std::str::from_utf8(MAGIC).unwrap_or("TCTRACE1")
            )));
        }
        let version = u16::from_le_bytes([header[8], header[9]]);
        let flags = u16::from_le_bytes([header[10], header[11]]);
        if version != VERSION {
            return Err(invalid(format!(
                "native trace version {version} is not supported (this build reads version {VERSION})"
            )));
        }
        if flags != 0 {
            return Err(invalid(format!(
                "native trace has unknown header flags {flags:#06x}"
            )));
        }
        Ok(NativeReader {
            path: path.to_path_buf(),
            reader,
            buf: vec![0u8; BUF_LEN].into_boxed_slice(),
            pos: 0,
            end: 0,
            index: 0,
            time: 0,
            eof: false,
        })
    }

    /// Next record, decoded in place.
    #[inline]
    pub(crate) fn next_record(&mut self) -> Option<Result<Record>> {
        loop {
            let avail = self.buf.get(self.pos..self.end).unwrap_or(&[]);
            let Some((c, _)) = avail.split_first_chunk::<RECORD_LEN>() else {
                match self.refill() {
                    Ok(true) => continue,
                    Ok(false) => return None,
                    Err(e) => return Some(Err(e)),
                }
            };
            let word = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            let len = u32::from_le_bytes([c[8], c[9], c[10], c[11]]);
            let delta = u32::from_le_bytes([c[12], c[13], c[14], c[15]]);
            self.pos += RECORD_LEN;
            self.index += 1;
            if word & TIME_BASE != 0 {
                if word != TIME_BASE {
                    return Some(Err(TraceError::parse(
                        &self.path,
                        Location::Record(self.index),
                        format!("invalid time-base record (word {word:#018x})"),
                    )));
                }
                self.time = u64::from(len) | u64::from(delta) << 32;
                continue;
            }
            self.time = self.time.wrapping_add(u64::from(delta));
            return Some(Ok(Record {
                time_ns: self.time,
                offset: word & OFFSET_MASK,
                len,
                kind: KINDS[(word >> KIND_SHIFT) as usize & 3],
                class: CLASSES[(word >> CLASS_SHIFT) as usize & 3],
            }));
        }
    }

    /// Moves the partial record (if any) to the front and reads more bytes.
    /// Returns false at a clean end of file.
    #[cold]
    fn refill(&mut self) -> Result<bool> {
        if self.eof {
            return Ok(false);
        }
        let left = self.end - self.pos;
        self.buf.copy_within(self.pos..self.end, 0);
        self.pos = 0;
        self.end = left;
        while self.end < RECORD_LEN {
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    if self.end == 0 {
                        return Ok(false);
                    }
                    let n = self.end;
                    self.end = 0;
                    return Err(TraceError::parse(
                        &self.path,
                        Location::Record(self.index + 1),
                        format!("truncated record: {n} of {RECORD_LEN} bytes"),
                    ));
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.eof = true;
                    return Err(TraceError::Read {
                        path: self.path.clone(),
                        at: Location::Record(self.index + 1),
                        source: e,
                    });
                }
            }
        }
        Ok(true)
    }
}

/// Reads until `buf` is full or end of file; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
