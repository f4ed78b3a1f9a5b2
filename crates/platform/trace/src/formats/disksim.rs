//! DiskSim ASCII traces.
//!
//! One request per line: `time_ms devno blkno nsectors flags`, 512-byte
//! sectors, time in milliseconds (decimal), flags bit 0 set = read, clear =
//! write (other flag bits are ignored). The volume filter matches `devno`.

use tiercache_block::IoKind;

use super::{decimal_ns, len_u32, mul_bytes, uint, ws_fields_exact, LineParser};
use crate::Record;

const LAYOUT: &str = "time_ms devno blkno nsectors flags";

/// Line parser of DiskSim ASCII traces.
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
        let [time, dev, blkno, n, flags] = ws_fields_exact::<5>(line, LAYOUT)?;
        let time_ns = decimal_ns(time, 1_000_000, "time")?;
        let _: u64 = uint(dev, "device number")?;
        let offset = mul_bytes(uint(blkno, "block number")?, 512, "block number")?;
        let len = len_u32(
            mul_bytes(uint(n, "sector count")?, 512, "sector count")?,
            "sector count",
        )?;
        let flags: u64 = uint(flags, "flags")?;
        if self.volume.as_deref().is_some_and(|v| v != dev) {
            return Ok(None);
        }
        Ok(Some(Record {
            time_ns,
            offset,
            len,
            kind: if flags & 1 == 1 {
                IoKind::Read
            } else {
                IoKind::Write
            },
            class: None,
        }))
    }
}
