//! MSR Cambridge block traces (SNIA IOTTA).
//!
//! CSV without header: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
//! Timestamp and ResponseTime are in 100 ns ticks (Windows FILETIME), Type is
//! `Read` or `Write` (any case), Offset and Size are bytes. The volume filter
//! matches `DiskNumber`, or `Hostname:DiskNumber` / `Hostname_DiskNumber`
//! (the naming of the published per-volume files, e.g. `hm_0`).

use tiercache_block::IoKind;

use super::{clip, fields_exact, len_u32, uint, LineParser};
use crate::Record;

const LAYOUT: &str = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime";

/// Line parser of MSR Cambridge CSV.
pub(crate) struct Parser {
    volume: Option<String>,
}

impl Parser {
    pub(crate) fn new(volume: Option<String>) -> Self {
        Parser { volume }
    }

    fn selected(&self, host: &str, disk: &str) -> bool {
        match &self.volume {
            None => true,
            Some(v) => {
                v == disk
                    || v.split_once([':', '_'])
                        .is_some_and(|(h, d)| h == host && d == disk)
            }
        }
    }
}

impl LineParser for Parser {
    fn parse(&mut self, line: &str) -> Result<Option<Record>, String> {
        let [ts, host, disk, kind, offset, size, resp] = fields_exact::<7>(line, ',', LAYOUT)?;
        if ts.eq_ignore_ascii_case("timestamp") {
            return Ok(None); // header added by some tools
        }
        let ticks: u64 = uint(ts, "timestamp")?;
        let _: u64 = uint(disk, "disk number")?;
        let kind = if kind.eq_ignore_ascii_case("read") {
            IoKind::Read
        } else if kind.eq_ignore_ascii_case("write") {
            IoKind::Write
        } else {
            return Err(format!(
                "invalid type '{}': expected Read or Write",
                clip(kind)
            ));
        };
        let offset: u64 = uint(offset, "offset")?;
        let len = len_u32(uint(size, "size")?, "size")?;
        let _: u64 = uint(resp, "response time")?;
        if !self.selected(host, disk) {
            return Ok(None);
        }
        Ok(Some(Record {
            time_ns: ticks.saturating_mul(100),
            offset,
            len,
            kind,
            class: None,
        }))
    }
}
