//! Tencent CBS block traces (USENIX ATC '20, SNIA IOTTA).
//!
//! CSV without header: `timestamp_s,offset_sectors,size_sectors,op,volume`,
//! 512-byte sectors, op 0 = read and 1 = write. The volume filter matches the
//! volume id.

use tiercache_block::IoKind;

use super::{clip, fields_exact, len_u32, mul_bytes, uint, LineParser};
use crate::Record;

const LAYOUT: &str = "timestamp_s,offset_sectors,size_sectors,op,volume";

/// Line parser of Tencent CBS CSV.
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
        let [ts, offset, size, op, volume] = fields_exact::<5>(line, ',', LAYOUT)?;
        let secs: u64 = uint(ts, "timestamp")?;
        let offset = mul_bytes(uint(offset, "offset")?, 512, "offset sector")?;
        let len = len_u32(mul_bytes(uint(size, "size")?, 512, "size")?, "size")?;
        let kind = match op {
            "0" => IoKind::Read,
            "1" => IoKind::Write,
            _ => {
                return Err(format!(
                    "invalid op '{}': expected 0 (read) or 1 (write)",
                    clip(op)
                ))
            }
        };
        let _: u64 = uint(volume, "volume id")?;
        if self.volume.as_deref().is_some_and(|v| v != volume) {
            return Ok(None);
        }
        Ok(Some(Record {
            time_ns: secs.saturating_mul(1_000_000_000),
            offset,
            len,
            kind,
            class: None,
        }))
    }
}
