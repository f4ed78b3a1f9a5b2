//! Block trace readers. Every format yields [`Record`]s in bytes and nanoseconds.
//!
//! [`open`] reads any supported [`Format`] (guessed by [`detect`] when not
//! given), transparently decompressing gzip, xz, zstd and bzip2 files (see
//! [`compress`]). Times are normalised so that the first record of a trace is
//! at 0 ns; records earlier than the first one (some traces are not strictly
//! time ordered) are clamped to 0. The [`native`] format stores records as
//! written, without normalisation, and is the fast path for benchmarks.
//! [`stats`] summarises a trace and [`convert()`] writes one in another format.

use std::path::Path;

use tiercache_block::{Class, IoKind};

pub mod compress;
pub mod convert;
pub mod error;
pub mod formats;
pub mod native;
pub mod stats;

pub use convert::convert;
pub use error::{Location, Result, TraceError};
pub use formats::{detect, Format};
pub use native::{write_native, NativeWriter};
pub use stats::{trace_stats, TraceStats};

/// One block request of a trace, normalised to bytes and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Issue time since the start of the trace, in ns (0 when the trace has none).
    pub time_ns: u64,
    /// Byte offset on the traced device.
    pub offset: u64,
    /// Length in bytes (> 0).
    pub len: u32,
    /// Read, write or trim.
    pub kind: IoKind,
    /// Metadata/data class when the format carries one (blkparse RWBS 'M').
    pub class: Option<Class>,
}

impl Record {
    /// End of the request (exclusive byte offset), saturating at `u64::MAX`.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }

    /// Ids of the `block_size`-byte blocks (cache lines, pages) the request
    /// overlaps, e.g. to expand an ARC `.lis` record into page requests.
    /// Empty when `len` or `block_size` is 0.
    pub fn blocks(&self, block_size: u32) -> std::ops::Range<u64> {
        let bs = u64::from(block_size);
        if bs == 0 || self.len == 0 {
            return 0..0;
        }
        self.offset / bs..(self.end() - 1) / bs + 1
    }
}

/// How to read a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Skip malformed lines/records (counted in [`TraceReader::skipped`])
    /// instead of returning an error for them.
    pub skip_bad: bool,
    /// Bytes per block id for formats that carry ids or block numbers in a
    /// trace-specific unit: `blockid`, `cloudphysics` and `arc-lis`. Default 512.
    pub block_size: u32,
    /// Keep only requests of this volume/LUN/disk: MSR `DiskNumber`, DiskSim
    /// `devno`, blkparse and FIU device `major,minor`, Tencent volume id,
    /// SYSTOR `LUN`. An error for formats without such a field.
    pub volume: Option<String>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            skip_bad: false,
            block_size: 512,
            volume: None,
        }
    }
}

/// A source of raw records (times not yet normalised) behind a [`TraceReader`].
pub(crate) trait Source: Send {
    fn next_record(&mut self) -> Option<Result<Record>>;
}

enum Inner {
    /// Native traces are read without dynamic dispatch per record.
    Native(native::NativeReader),
    Other(Box<dyn Source>),
}

/// Iterator over the records of a trace opened with [`open`].
///
/// Yields `Err` for a malformed line (unless `skip_bad`) and continues with
/// the next line if iterated further; after a read error (I/O failure,
/// truncated compressed stream) it ends.
pub struct TraceReader {
    inner: Inner,
    format: Format,
    path: std::path::PathBuf,
    volume: Option<String>,
    skip_bad: bool,
    skipped: u64,
    /// Records returned so far.
    yielded: u64,
    /// The first malformed record skipped, for the error when most are.
    first_bad: Option<String>,
    /// Raw time of the first record, the zero of normalised times.
    base: Option<u64>,
    /// Files of a rotated recording still to read, oldest first ([`rotated_set`]).
    rest: std::vec::IntoIter<std::path::PathBuf>,
    done: bool,
}

impl TraceReader {
    /// Number of malformed lines/records skipped so far (with `skip_bad`).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Format being read.
    pub fn format(&self) -> Format {
        self.format
    }

    fn fail(&mut self, e: TraceError) -> Option<Result<Record>> {
        if !e.is_bad_record() {
            self.done = true;
        }
        Some(Err(e))
    }
}

impl Iterator for TraceReader {
    type Item = Result<Record>;

    #[inline]
    fn next(&mut self) -> Option<Result<Record>> {
        if let Inner::Native(r) = &mut self.inner {
            // Fast path: native records are stored as read, no normalisation.
            if let Some(rec) = r.next_buffered() {
                self.yielded += 1;
                return Some(Ok(rec));
            }
        }
        self.next_slow()
    }
}

impl TraceReader {
    #[inline(never)]
    fn next_slow(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        loop {
            let item = match &mut self.inner {
                Inner::Native(r) => r.next_record(),
                Inner::Other(s) => s.next_record(),
            };
            match item {
                None => {
                    if let Some(next) = self.rest.next() {
                        match open_native(&next) {
                            Ok(r) => {
                                self.inner = Inner::Native(r);
                                self.path = next;
                                continue;
                            }
                            Err(e) => return self.fail(e),
                        }
                    }
                    self.done = true;
                    return self.at_end().map(Err);
                }
                Some(Ok(mut rec)) => {
                    if let Inner::Other(_) = self.inner {
                        let base = *self.base.get_or_insert(rec.time_ns);
                        rec.time_ns = rec.time_ns.saturating_sub(base);
                    }
                    self.yielded += 1;
                    return Some(Ok(rec));
                }
                Some(Err(e)) if self.skip_bad && e.is_bad_record() => {
                    self.skipped += 1;
                    if self.first_bad.is_none() {
                        self.first_bad = Some(e.to_string());
                    }
                    if let Some(e) = self.mostly_bad(false) {
                        return self.fail(e);
                    }
                }
                Some(Err(e)) => return self.fail(e),
            }
        }
    }
}

/// With `--skip-bad`, a binary trace with a malformed record among its first
/// this many is refused (a binary format read from another kind of file
/// yields garbage from the start).
const BINARY_BAD_AT_START: u64 = 64;

/// With `--skip-bad`, a trace is refused when most of its records (more
/// than [`MAX_BAD_PERCENT`]) are malformed: at its end, or as soon as this
/// many malformed ones are.
const BAD_EARLY: u64 = 1000;

/// Largest share of malformed records (in percent) a trace read with
/// `--skip-bad` may hold.
pub const MAX_BAD_PERCENT: u64 = 50;

impl TraceReader {
    /// The error that ends a trace which held nothing or mostly garbage.
    fn at_end(&self) -> Option<TraceError> {
        if let Some(e) = self.mostly_bad(true) {
            return Some(e);
        }
        (self.yielded == 0).then(|| TraceError::Empty {
            path: self.path.clone(),
            format: self.format.to_string(),
            volume: self.volume.clone(),
        })
    }

    /// Whether the malformed records skipped so far make the trace garbage.
    fn mostly_bad(&self, at_end: bool) -> Option<TraceError> {
        let (bad, total) = (self.skipped, self.skipped + self.yielded);
        let binary = matches!(
            self.format,
            Format::Cloudphysics | Format::Vscsi | Format::Native
        );
        let why = if binary && bad > 0 && total <= BINARY_BAD_AT_START {
            format!("record {total} of the first {BINARY_BAD_AT_START} is malformed")
        } else if (at_end || bad >= BAD_EARLY) && bad * 100 > total * MAX_BAD_PERCENT {
            let whose = if at_end { "its" } else { "the first" };
            format!(
                "{bad} of {whose} {total} records are malformed (more than {MAX_BAD_PERCENT} %)"
            )
        } else {
            return None;
        };
        let first = self.first_bad.as_deref().unwrap_or("");
        Some(TraceError::NotFormat {
            path: self.path.clone(),
            format: self.format.to_string(),
            msg: format!("{why}; the first: {first}"),
        })
    }
}

/// Opens a trace for reading, detecting its format with [`detect`] when
/// `format` is `None`. Compressed files are decompressed on the fly.
pub fn open(path: &Path, format: Option<Format>, opts: &ReadOptions) -> Result<TraceReader> {
    let format = match format {
        Some(f) => f,
        None => detect(path)?,
    };
    if opts.block_size == 0 {
        return Err(TraceError::InvalidArgument("block size must be > 0".into()));
    }
    if opts.volume.is_some() && !format.has_volume() {
        return Err(TraceError::Invalid {
            path: path.to_path_buf(),
            msg: format!(
                "format {format} has no volume/LUN/disk field to filter on; formats with one: {}",
                Format::ALL
                    .iter()
                    .filter(|f| f.has_volume())
                    .map(|f| f.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    // A native trace is read with the older files of its rotated recording.
    let mut files = match format {
        Format::Native => rotated_set(path),
        _ => vec![path.to_path_buf()],
    }
    .into_iter();
    let path = files.next().expect("a trace has a first file");
    let inner = match format {
        Format::Native => Inner::Native(open_native(&path)?),
        other => {
            let (reader, _codec) = compress::open_decompressed(&path)?;
            Inner::Other(formats::source(other, &path, reader, opts)?)
        }
    };
    Ok(TraceReader {
        inner,
        format,
        path,
        volume: opts.volume.clone(),
        skip_bad: opts.skip_bad,
        skipped: 0,
        yielded: 0,
        first_bad: None,
        base: None,
        rest: files,
        done: false,
    })
}

/// A native trace file's reader.
fn open_native(path: &Path) -> Result<native::NativeReader> {
    // Uncompressed native files are memory-mapped: the benchmark path.
    let reader: compress::DynBufRead = match compress::Mapped::open(path) {
        Some(m) => Box::new(m),
        None => compress::open_decompressed(path)?.0,
    };
    native::NativeReader::new(path, reader)
}

/// FILE.`n` (FILE itself for 0): the names a rotated recording takes
/// (`tiercache serve --record FILE --record-max SIZE`).
pub fn rotated_file(path: &Path, n: u32) -> std::path::PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    s.into()
}

/// The files that hold the native trace FILE, oldest first: a recording
/// rotated by size keeps its older requests in FILE.1 (the newer) ... FILE.N
/// (the oldest), so FILE.N, ..., FILE.1, FILE when FILE.1 is a native trace
/// (N the last of FILE.1, FILE.2, ... that is one), FILE alone otherwise.
/// [`open`] reads a native trace this way: a rotated recording is one trace.
pub fn rotated_set(path: &Path) -> Vec<std::path::PathBuf> {
    let mut older: Vec<std::path::PathBuf> = (1..)
        .map(|n| rotated_file(path, n))
        .take_while(|p| is_native(p))
        .collect();
    older.reverse();
    older.push(path.to_path_buf());
    older
}

/// Whether `p` is a file that starts as a native trace.
fn is_native(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == native::MAGIC
}
