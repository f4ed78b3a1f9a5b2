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
//! The reader decodes batches of records straight out of the file's 1 MiB
//! read buffer, with no allocation and no dynamic dispatch per record; a file with a partial trailing record is
//! reported as truncated. Native files may also be compressed (any codec of
//! [`crate::compress`]).

use std::fs::File;
use std::io::{BufRead, BufWriter, ErrorKind, Read, Write};
use std::path::{Path, PathBuf};

use tiercache_block::{Class, IoKind};

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
    bytes: u64,
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
            bytes: HEADER_LEN as u64,
        })
    }

    /// Bytes of the file so far (header and records, buffered or written).
    pub fn bytes(&self) -> u64 {
        self.bytes
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
        self.bytes += RECORD_LEN as u64;
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

/// Records decoded per batch: small enough to stay in L2 cache.
const BATCH: usize = 4096;

/// Reader of native traces. Records are decoded in batches straight from
/// the decompressor's (or file's) buffer; `next_record` then only copies one
/// decoded record out.
pub(crate) struct NativeReader {
    path: PathBuf,
    reader: DynBufRead,
    batch: Vec<Record>,
    next: usize,
    /// Error found while decoding, reported once the batch before it is out.
    pending: Option<TraceError>,
    /// Bytes of a record split across two buffer fills.
    stash: [u8; RECORD_LEN],
    stash_len: usize,
    /// Number of 16-byte slots decoded, for error locations.
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
            return Err(invalid(
                "not a native trace: expected a 16-byte header starting with \"TCTRACE1\"".into(),
            ));
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
            batch: Vec::with_capacity(BATCH),
            next: 0,
            pending: None,
            stash: [0; RECORD_LEN],
            stash_len: 0,
            index: 0,
            time: 0,
            eof: false,
        })
    }

    /// Next already decoded record, if the current batch has one.
    #[inline]
    pub(crate) fn next_buffered(&mut self) -> Option<Record> {
        let r = self.batch.get(self.next).copied();
        self.next += usize::from(r.is_some());
        r
    }

    /// Next record.
    #[inline]
    pub(crate) fn next_record(&mut self) -> Option<Result<Record>> {
        if let Some(r) = self.batch.get(self.next) {
            self.next += 1;
            return Some(Ok(*r));
        }
        self.next_slow()
    }

    #[cold]
    fn next_slow(&mut self) -> Option<Result<Record>> {
        loop {
            if let Some(e) = self.pending.take() {
                return Some(Err(e));
            }
            if self.eof {
                return None;
            }
            self.batch.clear();
            self.next = 0;
            self.fill_batch();
            if let Some(r) = self.batch.first() {
                self.next = 1;
                return Some(Ok(*r));
            }
        }
    }

    /// Decodes the next run of records into `batch`; sets `pending` on an
    /// error and `eof` at the end of the input.
    fn fill_batch(&mut self) {
        loop {
            let avail = match self.reader.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.eof = true;
                    self.pending = Some(TraceError::Read {
                        path: self.path.clone(),
                        at: Location::Record(self.index + 1),
                        cause: e,
                    });
                    return;
                }
            };
            if avail.is_empty() {
                self.eof = true;
                if self.stash_len > 0 {
                    self.pending = Some(TraceError::parse(
                        &self.path,
                        Location::Record(self.index + 1),
                        format!("truncated record: {} of {RECORD_LEN} bytes", self.stash_len),
                    ));
                }
                return;
            }
            if self.stash_len > 0 {
                // Complete a record split across buffer fills.
                let take = (RECORD_LEN - self.stash_len).min(avail.len());
                self.stash[self.stash_len..self.stash_len + take].copy_from_slice(&avail[..take]);
                self.stash_len += take;
                self.reader.consume(take);
                if self.stash_len == RECORD_LEN {
                    self.stash_len = 0;
                    let stash = self.stash;
                    let used = decode(
                        &stash,
                        &mut self.batch,
                        &mut self.time,
                        &mut self.index,
                        &mut self.pending,
                        &self.path,
                    );
                    debug_assert_eq!(used, RECORD_LEN);
                    if self.pending.is_some() {
                        return;
                    }
                }
                continue;
            }
            let whole = (avail.len() / RECORD_LEN).min(BATCH - self.batch.len()) * RECORD_LEN;
            if whole == 0 {
                let n = avail.len();
                self.stash[..n].copy_from_slice(avail);
                self.stash_len = n;
                self.reader.consume(n);
                continue;
            }
            let used = decode(
                &avail[..whole],
                &mut self.batch,
                &mut self.time,
                &mut self.index,
                &mut self.pending,
                &self.path,
            );
            self.reader.consume(used);
            if self.pending.is_some() || !self.batch.is_empty() {
                return;
            }
        }
    }
}

/// Decodes whole records of `bytes` into `out`, stopping after a bad one
/// (then `pending` is set). Returns the bytes used.
#[inline]
fn decode(
    bytes: &[u8],
    out: &mut Vec<Record>,
    time: &mut u64,
    index: &mut u64,
    pending: &mut Option<TraceError>,
    path: &Path,
) -> usize {
    let mut t = *time;
    // Common case, no time-base record in the run: a branch-free decode
    // that `extend` writes without per-element capacity checks.
    let time_base_byte = (TIME_BASE >> 56) as u8;
    if !bytes
        .chunks_exact(RECORD_LEN)
        .any(|c| c[7] & time_base_byte != 0)
    {
        out.extend(bytes.chunks_exact(RECORD_LEN).map(|c| {
            let word = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            let len = u32::from_le_bytes([c[8], c[9], c[10], c[11]]);
            let delta = u32::from_le_bytes([c[12], c[13], c[14], c[15]]);
            t = t.wrapping_add(u64::from(delta));
            Record {
                time_ns: t,
                offset: word & OFFSET_MASK,
                len,
                kind: KINDS[(word >> KIND_SHIFT) as usize & 3],
                class: CLASSES[(word >> CLASS_SHIFT) as usize & 3],
            }
        }));
        *time = t;
        let used = bytes.len() / RECORD_LEN * RECORD_LEN;
        *index += (used / RECORD_LEN) as u64;
        return used;
    }
    let mut used = 0;
    for c in bytes.chunks_exact(RECORD_LEN) {
        used += RECORD_LEN;
        let word = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let len = u32::from_le_bytes([c[8], c[9], c[10], c[11]]);
        let delta = u32::from_le_bytes([c[12], c[13], c[14], c[15]]);
        if word & TIME_BASE != 0 {
            if word != TIME_BASE {
                *pending = Some(TraceError::parse(
                    path,
                    Location::Record(*index + (used / RECORD_LEN) as u64),
                    format!("invalid time-base record (word {word:#018x})"),
                ));
                break;
            }
            t = u64::from(len) | u64::from(delta) << 32;
            continue;
        }
        t = t.wrapping_add(u64::from(delta));
        out.push(Record {
            time_ns: t,
            offset: word & OFFSET_MASK,
            len,
            kind: KINDS[(word >> KIND_SHIFT) as usize & 3],
            class: CLASSES[(word >> CLASS_SHIFT) as usize & 3],
        });
    }
    *time = t;
    *index += (used / RECORD_LEN) as u64;
    used
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor};

    fn encode(recs: &[Record]) -> Vec<u8> {
        let dir = std::env::temp_dir().join(format!("tc-native-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("t{}.tctrace", recs.len()));
        write_native(&p, recs.iter().copied()).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        bytes
    }

    fn decode_with_capacity(bytes: Vec<u8>, cap: usize) -> Vec<Result<Record>> {
        let reader: DynBufRead = Box::new(BufReader::with_capacity(cap, Cursor::new(bytes)));
        let mut r = NativeReader::new(Path::new("t"), reader).unwrap();
        std::iter::from_fn(|| r.next_record()).collect()
    }

    fn sample(n: u64) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                time_ns: if i % 10 == 9 { i << 40 } else { i * 3 },
                offset: i * 512,
                len: 512 + i as u32,
                kind: KINDS[(i % 4) as usize],
                class: CLASSES[(i % 3) as usize],
            })
            .collect()
    }

    #[test]
    fn records_split_across_buffer_fills_decode_exactly() {
        let recs = sample(100);
        let bytes = encode(&recs);
        // Buffer sizes that are not multiples of 16 split records.
        for cap in [1, 7, 17, 33, 1000] {
            let got: Vec<Record> = decode_with_capacity(bytes.clone(), cap)
                .into_iter()
                .map(|r| r.unwrap())
                .collect();
            assert_eq!(got, recs, "capacity {cap}");
        }
    }

    #[test]
    fn corrupt_time_base_record_is_reported_and_skippable() {
        let recs = sample(3);
        let mut bytes = encode(&recs);
        // Corrupt record 2 (slot 2): set the time-base bit plus offset bits.
        let at = HEADER_LEN + RECORD_LEN;
        bytes[at] = 1;
        bytes[at + 7] |= 0x08;
        let items = decode_with_capacity(bytes, 64);
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().unwrap(), &recs[0]);
        let msg = items[1].as_ref().unwrap_err().to_string();
        assert!(
            msg.starts_with("t: record 2: invalid time-base record"),
            "{msg}"
        );
        assert_eq!(items[2].as_ref().unwrap().offset, recs[2].offset);
    }
}
