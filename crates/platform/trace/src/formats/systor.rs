//! SYSTOR '17 enterprise VDI traces (SNIA IOTTA).
//!
//! CSV with header `Timestamp,Response,IOType,LUN,Offset,Size`: Timestamp in
//! Unix seconds with sub-second decimals, Response in seconds, IOType `R` or
//! `W`, Offset and Size in bytes. Rows are not strictly time ordered; rows
//! before the first one get time 0. Rows with Size 0 carry no data and are
//! skipped. The volume filter matches `LUN`.

use tiercache_block::IoKind;

use super::{clip, decimal_ns, fields_exact, len_u32, uint, LineParser};
use crate::Record;

const LAYOUT: &str = "Timestamp,Response,IOType,LUN,Offset,Size";

/// Line parser of SYSTOR '17 CSV.
pub(crate) struct Parser {
    volume: Option<String>,
}

impl Parser {
    pub(crate) fn new(volume: Option<String>) -> Self {
        Parser { volume }
    }
}

impl LineParser for Parser {
    fn parse(&mut self, line: &str) -> Result<Option<Record>, String> {
        let [ts, resp, kind, lun, offset, size] = fields_exact::<6>(line, ',', LAYOUT)?;
        if ts.eq_ignore_ascii_case("timestamp") {
            return Ok(None);
        }
        let time_ns = decimal_ns(ts, 1_000_000_000, "timestamp")?;
        decimal_ns(resp, 1_000_000_000, "response time")?;
        let kind = match kind {
            "R" | "r" => IoKind::Read,
            "W" | "w" => IoKind::Write,
            _ => return Err(format!("invalid IOType '{}': expected R or W", clip(kind))),
        };
        let _: u64 = uint(lun, "LUN")?;
        let offset: u64 = uint(offset, "offset")?;
        let size: u64 = uint(size, "size")?;
        if size == 0 || self.volume.as_deref().is_some_and(|v| v != lun) {
            return Ok(None);
        }
        Ok(Some(Record {
            time_ns,
            offset,
            len: len_u32(size, "size")?,
            kind,
            class: None,
        }))
    }
}
