//! `blkparse` default text output.
//!
//! Event lines look like
//! `maj,min cpu seq time_s pid action RWBS sector + nsectors [process]`.
//! The request stream is the **queue (`Q`) events**: one per request the
//! block layer accepted, before merging, splitting or scheduling, which is
//! what a cache in front of the device would see. Completion (`C`) events
//! are not used because the traced device's scheduler has already merged
//! requests by then, and captures often lose completions (the shared sample
//! has 15,524 `Q` but 171 `C`).
//!
//! RWBS decides the kind: `D` (discard) → trim, else `W` → write, else `R` →
//! read; queue events with none of these (pure flush `F`, or `N`) and
//! zero-length ones are skipped. `M` in RWBS marks metadata
//! ([`Class::Metadata`]), otherwise the class is [`Class::Data`]. Lines that
//! are not I/O events (other actions, per-CPU summaries, cfq `m` messages,
//! plugs) are ignored. Sectors are 512 bytes; times are seconds with decimals.
//! The volume filter matches the device `maj,min`.

use tiercache_block::{Class, IoKind};

use super::{clip, decimal_ns, len_u32, mul_bytes, uint, LineParser};
use crate::Record;

/// Line parser of blkparse text.
pub(crate) struct Parser {
    volume: Option<String>,
}

impl Parser {
    pub(crate) fn new(volume: Option<String>) -> Self {
        Parser { volume }
    }
}

fn is_device(s: &str) -> bool {
    s.split_once(',').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.bytes().all(|c| c.is_ascii_digit())
    })
}

impl LineParser for Parser {
    fn parse(&mut self, line: &str) -> Result<Option<Record>, String> {
        let mut f = line.split_ascii_whitespace();
        let dev = f.next().unwrap_or("");
        if !is_device(dev) {
            return Ok(None); // summary or other non-event line
        }
        let (_cpu, _seq, time, _pid, action) = (f.next(), f.next(), f.next(), f.next(), f.next());
        if action != Some("Q") {
            return Ok(None);
        }
        const LAYOUT: &str = "maj,min cpu seq time pid Q RWBS sector + nsectors";
        let (Some(time), Some(rwbs), Some(sector), Some(plus), Some(n)) =
            (time, f.next(), f.next(), f.next(), f.next())
        else {
            return Err(format!("truncated queue event: expected {LAYOUT}"));
        };
        if plus != "+" {
            return Err(format!(
                "malformed queue event: expected '+' between sector and count, found '{}'",
                clip(plus)
            ));
        }
        let time_ns = decimal_ns(time, 1_000_000_000, "time")?;
        if !rwbs.bytes().all(|c| b"RWDFNSMABE".contains(&c)) {
            return Err(format!(
                "invalid RWBS '{}': expected letters from R W D F N S M A B E",
                clip(rwbs)
            ));
        }
        let sector: u64 = uint(sector, "sector")?;
        let n: u64 = uint(n, "sector count")?;
        let kind = if rwbs.contains('D') {
            IoKind::Trim
        } else if rwbs.contains('W') {
            IoKind::Write
        } else if rwbs.contains('R') {
            IoKind::Read
        } else {
            return Ok(None); // flush-only or no-data request
        };
        if n == 0 || self.volume.as_deref().is_some_and(|v| v != dev) {
            return Ok(None);
        }
        Ok(Some(Record {
            time_ns,
            offset: mul_bytes(sector, 512, "sector")?,
            len: len_u32(mul_bytes(n, 512, "sector count")?, "sector count")?,
            kind,
            class: Some(if rwbs.contains('M') {
                Class::Metadata
            } else {
                Class::Data
            }),
        }))
    }
}
