//! Conversion of a record stream into another trace format.
//!
//! Targets: [`Format::Native`] (exact), [`Format::Blockid`] (one id per
//! covered block; times and kinds are dropped) and [`Format::Msr`] (reads and
//! writes only; times rounded down to 100 ns ticks, host `tiercache`, disk 0,
//! response time 0) and [`Format::Disksim`] (reads and writes on device 0,
//! 512-byte aligned; times in ms with 6 decimals, i.e. ns exact), the input
//! of DiskSim, MQSim and FlashSim.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use tiercache_block::IoKind;

use crate::error::{Result, TraceError};
use crate::native::NativeWriter;
use crate::{Format, Record};

/// Formats [`convert`] can write.
pub const OUTPUT_FORMATS: [Format; 4] = [
    Format::Native,
    Format::Blockid,
    Format::Msr,
    Format::Disksim,
];

/// Writes every record of `records` to `out` in `format` and returns the
/// number of output records (ids for `blockid`). `block_size` (> 0) is the
/// id unit of `blockid` output: a request becomes the ids of all blocks it
/// overlaps. Stops at the first error of the input.
pub fn convert<I>(records: I, out: &Path, format: Format, block_size: u32) -> Result<u64>
where
    I: IntoIterator<Item = Result<Record>>,
{
    match format {
        Format::Native => to_native(records, out),
        Format::Blockid => to_blockid(records, out, block_size),
        Format::Msr => to_msr(records, out),
        Format::Disksim => to_disksim(records, out),
        other => Err(TraceError::InvalidArgument(format!(
            "cannot convert to {other}; output formats: {}",
            OUTPUT_FORMATS.map(|f| f.name()).join(", ")
        ))),
    }
}

/// Native output: every record, exactly.
fn to_native<I>(records: I, out: &Path) -> Result<u64>
where
    I: IntoIterator<Item = Result<Record>>,
{
    let mut w = NativeWriter::create(out)?;
    for r in records {
        w.write(&r?)?;
    }
    w.finish()
}

/// Blockid output: one line per `block_size` block each request overlaps
/// (empty requests and flushes cover none).
fn to_blockid<I>(records: I, out: &Path, block_size: u32) -> Result<u64>
where
    I: IntoIterator<Item = Result<Record>>,
{
    if block_size == 0 {
        return Err(TraceError::InvalidArgument("block size must be > 0".into()));
    }
    let mut w = Text::create(out)?;
    let mut n = 0u64;
    for r in records {
        let r = r?;
        if r.len == 0 || r.kind == IoKind::Flush {
            continue;
        }
        for id in r.blocks(block_size) {
            w.line(format_args!("{id}"))?;
            n += 1;
        }
    }
    w.finish(n)
}

/// MSR Cambridge CSV output: reads and writes only, times in 100 ns ticks.
fn to_msr<I>(records: I, out: &Path) -> Result<u64>
where
    I: IntoIterator<Item = Result<Record>>,
{
    let mut w = Text::create(out)?;
    let mut n = 0u64;
    for r in records {
        let r = r?;
        let kind = match r.kind {
            IoKind::Read => "Read",
            IoKind::Write => "Write",
            other => {
                return Err(TraceError::Unrepresentable {
                    index: n,
                    format: "msr".into(),
                    msg: format!("MSR traces carry only reads and writes, not {other:?}"),
                })
            }
        };
        w.line(format_args!(
            "{},tiercache,0,{kind},{},{},0",
            r.time_ns / 100,
            r.offset,
            r.len
        ))?;
        n += 1;
    }
    w.finish(n)
}

/// DiskSim ASCII output: reads and writes of whole 512-byte sectors on
/// device 0, times in ms with 6 decimals.
fn to_disksim<I>(records: I, out: &Path) -> Result<u64>
where
    I: IntoIterator<Item = Result<Record>>,
{
    let mut w = Text::create(out)?;
    let mut n = 0u64;
    for r in records {
        let r = r?;
        let flags = match r.kind {
            IoKind::Read => 1,
            IoKind::Write => 0,
            other => {
                return Err(TraceError::Unrepresentable {
                    index: n,
                    format: "disksim".into(),
                    msg: format!("DiskSim traces carry only reads and writes, not {other:?}"),
                })
            }
        };
        if r.offset % 512 != 0 || r.len % 512 != 0 {
            return Err(TraceError::Unrepresentable {
                index: n,
                format: "disksim".into(),
                msg: format!(
                    "offset {} / length {} are not whole 512-byte sectors",
                    r.offset, r.len
                ),
            });
        }
        w.line(format_args!(
            "{}.{:06} 0 {} {} {flags}",
            r.time_ns / 1_000_000,
            r.time_ns % 1_000_000,
            r.offset / 512,
            r.len / 512
        ))?;
        n += 1;
    }
    w.finish(n)
}

/// Buffered text output with path-carrying errors.
struct Text<'a> {
    path: &'a Path,
    out: BufWriter<File>,
}

impl<'a> Text<'a> {
    fn create(path: &'a Path) -> Result<Self> {
        let f = File::create(path).map_err(|e| TraceError::io(path, e))?;
        Ok(Text {
            path,
            out: BufWriter::with_capacity(1 << 20, f),
        })
    }

    fn line(&mut self, args: std::fmt::Arguments<'_>) -> Result<()> {
        self.out
            .write_fmt(args)
            .and_then(|_| self.out.write_all(b"\n"))
            .map_err(|e| TraceError::io(self.path, e))
    }

    fn finish(mut self, n: u64) -> Result<u64> {
        self.out.flush().map_err(|e| TraceError::io(self.path, e))?;
        Ok(n)
    }
}
