//! Trace formats: names, detection and the per-format parsers.
//!
//! Text formats implement a line parser and share one line reader that
//! tracks line numbers for error messages; binary formats implement
//! a record source directly.

use std::borrow::Cow;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::compress::{self, Compression, DynBufRead};
use crate::error::{Location, Result, TraceError};
use crate::{ReadOptions, Record, Source};

pub mod arc_lis;
pub mod blkparse;
pub mod blockid;
pub mod cloudphysics;
pub mod disksim;
pub mod fiu;
pub mod msr;
pub mod systor;
pub mod tencent;
pub mod vscsi;

/// A supported trace format, spelled on the command line as shown by
/// `Display` (`msr`, `arc-lis`, `disksim`, `blkparse`, `fiu`, `tencent`,
/// `systor`, `cloudphysics`, `vscsi`, `blockid`, `native`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// MSR Cambridge CSV: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
    Msr,
    /// ARC paper `.lis` text: `start nblocks ignore reqno` in blocks.
    ArcLis,
    /// DiskSim ASCII: `time_ms devno blkno nsectors flags`.
    Disksim,
    /// `blkparse` default text output (queue events are the requests).
    Blkparse,
    /// FIU traces: `ts_ns pid process lba nblocks W/R major minor md5`.
    Fiu,
    /// Tencent CBS CSV: `timestamp_s,offset_sectors,size_sectors,op,volume`.
    Tencent,
    /// SYSTOR '17 CSV with header `Timestamp,Response,IOType,LUN,Offset,Size`.
    Systor,
    /// CloudPhysics block-id traces: big-endian u32 ids, one per request.
    Cloudphysics,
    /// VMware vscsi binary traces (v1 32-byte and v2 40-byte records).
    Vscsi,
    /// One decimal block id per line.
    Blockid,
    /// This crate's binary format (see [`crate::native`]).
    Native,
}

impl Format {
    /// Every format, in CLI listing order.
    pub const ALL: [Format; 11] = [
        Format::Msr,
        Format::ArcLis,
        Format::Disksim,
        Format::Blkparse,
        Format::Fiu,
        Format::Tencent,
        Format::Systor,
        Format::Cloudphysics,
        Format::Vscsi,
        Format::Blockid,
        Format::Native,
    ];

    /// CLI name of the format.
    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::ArcLis => "arc-lis",
            Format::Disksim => "disksim",
            Format::Blkparse => "blkparse",
            Format::Fiu => "fiu",
            Format::Tencent => "tencent",
            Format::Systor => "systor",
            Format::Cloudphysics => "cloudphysics",
            Format::Vscsi => "vscsi",
            Format::Blockid => "blockid",
            Format::Native => "native",
        }
    }

    /// Whether [`ReadOptions::volume`] can filter this format.
    pub fn has_volume(self) -> bool {
        matches!(
            self,
            Format::Msr
                | Format::Disksim
                | Format::Blkparse
                | Format::Fiu
                | Format::Tencent
                | Format::Systor
        )
    }

    /// Comma-separated list of all CLI names, for error messages.
    pub fn allowed_names() -> String {
        Format::ALL
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<Format> {
        let wanted = s.trim().to_ascii_lowercase();
        Format::ALL
            .iter()
            .copied()
            .find(|f| f.name() == wanted)
            .ok_or_else(|| TraceError::UnknownFormat {
                name: s.to_string(),
                allowed: Format::allowed_names(),
            })
    }
}

/// Builds the record source of a non-native format.
pub(crate) fn source(
    format: Format,
    path: &Path,
    reader: DynBufRead,
    opts: &ReadOptions,
) -> Result<Box<dyn Source>> {
    let vol = opts.volume.clone();
    let bs = opts.block_size;
    Ok(match format {
        Format::ArcLis => LineSource::boxed(path, reader, arc_lis::Parser::new(bs)),
        Format::Blockid => LineSource::boxed(path, reader, blockid::Parser::new(bs)),
        Format::Msr => LineSource::boxed(path, reader, msr::Parser::new(vol)),
        Format::Disksim => LineSource::boxed(path, reader, disksim::Parser::new(vol)),
        Format::Blkparse => LineSource::boxed(path, reader, blkparse::Parser::new(vol)),
        Format::Fiu => LineSource::boxed(path, reader, fiu::Parser::new(vol)),
        Format::Tencent => LineSource::boxed(path, reader, tencent::Parser::new(vol)),
        Format::Systor => LineSource::boxed(path, reader, systor::Parser::new(vol)),
        Format::Cloudphysics => Box::new(cloudphysics::CloudPhysicsSource::new(path, reader, bs)),
        Format::Vscsi => Box::new(vscsi::VscsiSource::new(path, reader)?),
        Format::Native => {
            return Err(TraceError::Invalid {
                path: path.to_path_buf(),
                msg: "native traces are read by the native reader".into(),
            })
        }
    })
}

/// Parser of one line of a text trace.
pub(crate) trait LineParser: Send + 'static {
    /// Parses a line with its end-of-line removed. `Ok(None)` means the line
    /// carries no request (header, comment, filtered out, non-I/O event).
    /// Times in the returned record are raw (absolute) nanoseconds.
    fn parse(&mut self, line: &str) -> std::result::Result<Option<Record>, String>;
}

/// Line-by-line reader driving a [`LineParser`].
pub(crate) struct LineSource<P> {
    path: PathBuf,
    reader: DynBufRead,
    buf: Vec<u8>,
    line: u64,
    parser: P,
    done: bool,
}

impl<P: LineParser> LineSource<P> {
    fn boxed(path: &Path, reader: DynBufRead, parser: P) -> Box<dyn Source> {
        Box::new(LineSource {
            path: path.to_path_buf(),
            reader,
            buf: Vec::with_capacity(256),
            line: 0,
            parser,
            done: false,
        })
    }
}

impl<P: LineParser> Source for LineSource<P> {
    fn next_record(&mut self) -> Option<Result<Record>> {
        loop {
            if self.done {
                return None;
            }
            let too_long = match read_line_capped(&mut self.reader, &mut self.buf) {
                Ok(None) => {
                    self.done = true;
                    return None;
                }
                Ok(Some(too_long)) => too_long,
                Err(e) => {
                    self.done = true;
                    return Some(Err(TraceError::Read {
                        path: self.path.clone(),
                        at: Location::Line(self.line + 1),
                        cause: e,
                    }));
                }
            };
            self.line += 1;
            if too_long {
                return Some(Err(TraceError::parse(
                    &self.path,
                    Location::Line(self.line),
                    format!("line longer than {MAX_LINE} bytes; is this a text trace?"),
                )));
            }
            let mut bytes = &self.buf[..];
            while let [rest @ .., b'\n' | b'\r'] = bytes {
                bytes = rest;
            }
            let text = match std::str::from_utf8(bytes) {
                Ok(s) => Cow::Borrowed(s),
                Err(_) => String::from_utf8_lossy(bytes),
            };
            if text.trim().is_empty() {
                continue;
            }
            match self.parser.parse(&text) {
                Ok(Some(rec)) => return Some(Ok(rec)),
                Ok(None) => continue,
                Err(msg) => {
                    return Some(Err(TraceError::parse(
                        &self.path,
                        Location::Line(self.line),
                        msg,
                    )))
                }
            }
        }
    }
}

/// Longest text line kept; longer lines are errors (binary data read as
/// text would otherwise be buffered whole).
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// Reads one line (with its `\n`) into `buf`, keeping at most [`MAX_LINE`]
/// bytes. Returns `None` at end of input, else whether the line was too long
/// (then the rest of it has been consumed).
fn read_line_capped(r: &mut DynBufRead, buf: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut seen = 0usize;
    loop {
        let avail = match r.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok((seen > 0).then_some(seen > MAX_LINE));
        }
        let (chunk, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (&avail[..=i], true),
            None => (avail, false),
        };
        let n = chunk.len();
        if seen < MAX_LINE {
            buf.extend_from_slice(&chunk[..n.min(MAX_LINE - seen)]);
        }
        seen += n;
        r.consume(n);
        if done {
            return Ok(Some(seen > MAX_LINE + 1));
        }
    }
}

// ---------------------------------------------------------------------------
// Field helpers shared by the text parsers. They return messages that say
// what was expected, for `file:line: message` errors.

/// Splits `line` on `sep` into exactly `N` fields.
pub(crate) fn fields_exact<'a, const N: usize>(
    line: &'a str,
    sep: char,
    layout: &str,
) -> std::result::Result<[&'a str; N], String> {
    let mut out = [""; N];
    let mut n = 0usize;
    for f in line.split(sep) {
        if n < N {
            out[n] = f.trim();
        }
        n += 1;
    }
    if n != N {
        return Err(format!(
            "expected {N} {}-separated fields ({layout}), found {n}",
            sep_name(sep)
        ));
    }
    Ok(out)
}

/// Splits `line` on whitespace into exactly `N` fields.
pub(crate) fn ws_fields_exact<'a, const N: usize>(
    line: &'a str,
    layout: &str,
) -> std::result::Result<[&'a str; N], String> {
    let mut out = [""; N];
    let mut n = 0usize;
    for f in line.split_ascii_whitespace() {
        if n < N {
            out[n] = f;
        }
        n += 1;
    }
    if n != N {
        return Err(format!(
            "expected {N} space-separated fields ({layout}), found {n}"
        ));
    }
    Ok(out)
}

fn sep_name(sep: char) -> &'static str {
    match sep {
        ',' => "comma",
        '\t' => "tab",
        ' ' => "space",
        _ => "separator",
    }
}

/// Parses an unsigned decimal integer field.
pub(crate) fn uint<T: FromStr>(s: &str, what: &str) -> std::result::Result<T, String> {
    s.parse::<T>()
        .map_err(|_| format!("invalid {what} '{}': expected an unsigned integer", clip(s)))
}

/// Parses a non-negative decimal number (`123`, `123.456`) in `unit_ns`
/// nanoseconds per unit into nanoseconds, exactly (no floating point), with
/// digits beyond nanosecond precision truncated.
pub(crate) fn decimal_ns(s: &str, unit_ns: u64, what: &str) -> std::result::Result<u64, String> {
    let bad = || {
        format!(
            "invalid {what} '{}': expected a non-negative decimal number",
            clip(s)
        )
    };
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, f),
        None => (s, ""),
    };
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(bad());
    }
    let int_v: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| bad())?
    };
    let mut ns = int_v
        .checked_mul(unit_ns)
        .ok_or_else(|| format!("{what} '{}' is too large", clip(s)))?;
    // Fractional part: digit k (1-based) is worth unit_ns / 10^k.
    let mut scale = unit_ns;
    for d in frac.bytes() {
        scale /= 10;
        if scale == 0 {
            break;
        }
        ns = ns
            .checked_add(u64::from(d - b'0') * scale)
            .ok_or_else(|| format!("{what} '{}' is too large", clip(s)))?;
    }
    Ok(ns)
}

/// `a * b` as bytes, or an error naming the quantity.
pub(crate) fn mul_bytes(a: u64, b: u64, what: &str) -> std::result::Result<u64, String> {
    a.checked_mul(b)
        .ok_or_else(|| format!("{what} {a} x {b} bytes overflows 64 bits"))
}

/// A byte length that must fit the record's u32 and be > 0.
pub(crate) fn len_u32(bytes: u64, what: &str) -> std::result::Result<u32, String> {
    if bytes == 0 {
        return Err(format!("{what} is 0; requests must have a length > 0"));
    }
    u32::try_from(bytes).map_err(|_| format!("{what} of {bytes} bytes exceeds 4 GiB - 1"))
}

/// Field text shortened for error messages.
pub(crate) fn clip(s: &str) -> Cow<'_, str> {
    if s.chars().count() <= 40 {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("{}...", s.chars().take(40).collect::<String>()))
    }
}

// ---------------------------------------------------------------------------
// Detection.

/// Guesses the format of a trace file from its name (after stripping a
/// compression extension) and by sniffing the start of its decompressed
/// content. Content wins over the name when they disagree, and a file whose
/// content matches no format is refused (an error listing the formats)
/// rather than guessed.
pub fn detect(path: &Path) -> Result<Format> {
    let (mut reader, _codec) = compress::open_decompressed(path)?;
    let mut head = Vec::with_capacity(64 * 1024);
    (&mut reader)
        .take(64 * 1024)
        .read_to_end(&mut head)
        .map_err(|e| TraceError::io(path, e))?;
    let by_name = by_extension(path);
    let whole = head.len() < 64 * 1024;
    match sniff(&head, by_name, whole) {
        Some(f) => Ok(f),
        None => Err(TraceError::Detect {
            path: path.to_path_buf(),
            reason: if head.is_empty() {
                "the file is empty".into()
            } else {
                "its first bytes match no format with confidence".into()
            },
            allowed: Format::allowed_names(),
        }),
    }
}

/// Format suggested by the file name alone.
fn by_extension(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let mut stem: &str = &name;
    // Strip any compression extension, whatever the actual codec.
    for c in [
        Compression::Gzip,
        Compression::Xz,
        Compression::Zstd,
        Compression::Bzip2,
    ] {
        for ext in c.extensions() {
            if let Some(s) = stem.strip_suffix(&format!(".{ext}")) {
                stem = s;
            }
        }
    }
    let ext = stem.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "lis" => Some(Format::ArcLis),
        "vscsi" => Some(Format::Vscsi),
        "tctrace" | "tct" => Some(Format::Native),
        "blkparse" => Some(Format::Blkparse),
        "blockid" | "ids" => Some(Format::Blockid),
        _ => None,
    }
}

/// Format recognised from the first bytes of the decompressed content, only
/// when it can be recognised with confidence: otherwise `None`, and the
/// caller asks for `--format`. `whole` says whether `head` is the whole file.
fn sniff(head: &[u8], by_name: Option<Format>, whole: bool) -> Option<Format> {
    if head.starts_with(crate::native::MAGIC) {
        return Some(Format::Native);
    }
    if head.is_empty() {
        return by_name;
    }
    if !looks_text(head) {
        if vscsi::sniff_version(head).is_some() {
            return Some(Format::Vscsi);
        }
        if by_name == Some(Format::Vscsi) {
            return by_name;
        }
        // The only binary format without a header: accept it only when the
        // bytes look like an array of u32 block ids.
        if looks_u32_ids(head, whole) {
            return Some(Format::Cloudphysics);
        }
        return None;
    }
    let text = String::from_utf8_lossy(head);
    // Look at the first few non-empty lines (the last may be cut short).
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(20)
        .collect();
    let first = *lines.first()?;
    if first.starts_with("Timestamp,Response,IOType") {
        return Some(Format::Systor);
    }
    let votes = |f: fn(&str) -> bool| -> bool {
        let n = lines.len().clamp(1, 10);
        lines.iter().take(n).filter(|l| f(l)).count() * 2 > n
    };
    if votes(looks_msr) {
        return Some(Format::Msr);
    }
    if votes(looks_tencent) {
        return Some(Format::Tencent);
    }
    if votes(looks_blkparse) {
        return Some(Format::Blkparse);
    }
    if votes(looks_fiu) {
        return Some(Format::Fiu);
    }
    if votes(looks_disksim) && by_name != Some(Format::ArcLis) {
        return Some(Format::Disksim);
    }
    if votes(looks_arc) {
        return Some(Format::ArcLis);
    }
    if votes(looks_blockid) {
        return Some(Format::Blockid);
    }
    // Text that matches no text format: the name alone is not enough
    // (a `.lis` file of prose is not an ARC trace), except for the binary
    // formats, which cannot be text.
    None
}

/// Text: valid UTF-8 (a character cut at the end of `head` allowed) without
/// control characters other than tab, CR and LF.
fn looks_text(head: &[u8]) -> bool {
    let valid = match std::str::from_utf8(head) {
        Ok(_) => head.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => return false,
    };
    head[..valid]
        .iter()
        .all(|&b| b == b'\n' || b == b'\r' || b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// An array of u32 block ids (CloudPhysics): at least 16 ids, a whole number
/// of them when `head` is the whole file, and the high byte (in either byte
/// order) zero in at least 90 % of them, as ids below 2^24 make it.
fn looks_u32_ids(head: &[u8], whole: bool) -> bool {
    if head.len() < 64 || (whole && head.len() & 3 != 0) {
        return false;
    }
    let words = head.len() / 4;
    let zero_in =
        |lane: usize| head.chunks_exact(4).filter(|w| w[lane] == 0).count() * 10 >= words * 9;
    zero_in(0) || zero_in(3)
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_decimal(s: &str) -> bool {
    match s.split_once('.') {
        Some((a, b)) => all_digits(a) && all_digits(b),
        None => all_digits(s),
    }
}

fn looks_msr(l: &str) -> bool {
    let f: Vec<&str> = l.split(',').collect();
    f.len() == 7
        && all_digits(f[0])
        && matches!(f[3].trim(), "Read" | "Write")
        && all_digits(f[4])
        && all_digits(f[5])
}

fn looks_tencent(l: &str) -> bool {
    let f: Vec<&str> = l.split(',').collect();
    f.len() == 5 && f.iter().all(|x| all_digits(x.trim())) && matches!(f[3].trim(), "0" | "1")
}

fn looks_blkparse(l: &str) -> bool {
    let f: Vec<&str> = l.split_ascii_whitespace().collect();
    f.len() >= 7
        && f[0]
            .split_once(',')
            .is_some_and(|(a, b)| all_digits(a) && all_digits(b))
        && is_decimal(f[3])
}

fn looks_fiu(l: &str) -> bool {
    let f: Vec<&str> = l.split_ascii_whitespace().collect();
    f.len() == 9 && all_digits(f[0]) && all_digits(f[3]) && matches!(f[5], "R" | "W")
}

fn looks_disksim(l: &str) -> bool {
    let f: Vec<&str> = l.split_ascii_whitespace().collect();
    f.len() == 5 && is_decimal(f[0]) && f[1..].iter().all(|x| all_digits(x))
}

fn looks_arc(l: &str) -> bool {
    let f: Vec<&str> = l.split_ascii_whitespace().collect();
    f.len() == 4 && f.iter().all(|x| all_digits(x))
}

fn looks_blockid(l: &str) -> bool {
    all_digits(l.trim())
}
