//! Block-id traces: one decimal block id per line.
//!
//! Each id is one read of one block: `offset = id * block_size`,
//! `len = block_size` ([`ReadOptions::block_size`](crate::ReadOptions::block_size),
//! default 512). Lines starting with `#` are comments. No time (`time_ns` 0).

use tiercache_block::IoKind;

use super::{mul_bytes, uint, LineParser};
use crate::Record;

/// Line parser of block-id traces.
pub(crate) struct Parser {
    block_size: u32,
}

impl Parser {
    pub(crate) fn new(block_size: u32) -> Self {
        Parser { block_size }
    }
}

impl LineParser for Parser {
    fn parse(&mut self, line: &str) -> Result<Option<Record>, String> {
        let line = line.trim();
        if line.starts_with('#') {
            return Ok(None);
        }
        if line.split_ascii_whitespace().nth(1).is_some() {
            return Err(format!(
                "expected 1 field (block id), found {}",
                line.split_ascii_whitespace().count()
            ));
        }
        let id: u64 = uint(line, "block id")?;
        Ok(Some(Record {
            time_ns: 0,
            offset: mul_bytes(id, u64::from(self.block_size), "block id")?,
            len: self.block_size,
            kind: IoKind::Read,
            class: None,
        }))
    }
}
