//! FIU SRCMap / IODedup traces.
//!
//! One request per line, nine space-separated fields:
//! `ts_ns pid process lba nblocks op major minor md5` with `lba` and
//! `nblocks` in 512-byte blocks and `op` `R` or `W`. The volume filter
//! matches `major,minor`.

use tiercache_block::IoKind;

use super::{clip, len_u32, mul_bytes, uint, ws_fields_exact, LineParser};
use crate::Record;

const LAYOUT: &str = "ts_ns pid process lba nblocks R/W major minor md5";

/// Line parser of FIU traces.
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
        let [ts, pid, _process, lba, n, op, major, minor, _md5] =
            ws_fields_exact::<9>(line, LAYOUT)?;
        let time_ns: u64 = uint(ts, "timestamp")?;
        let _: u64 = uint(pid, "pid")?;
        let offset = mul_bytes(uint(lba, "LBA")?, 512, "LBA")?;
        let len = len_u32(
            mul_bytes(uint(n, "block count")?, 512, "block count")?,
            "block count",
        )?;
        let kind = match op {
            "R" | "r" => IoKind::Read,
            "W" | "w" => IoKind::Write,
            _ => return Err(format!("invalid op '{}': expected R or W", clip(op))),
        };
        let _: u32 = uint(major, "major")?;
        let _: u32 = uint(minor, "minor")?;
        if let Some(v) = &self.volume {
            if v.split_once(',') != Some((major, minor)) {
                return Ok(None);
            }
        }
        Ok(Some(Record {
            time_ns,
            offset,
            len,
            kind,
            class: None,
        }))
    }
}
