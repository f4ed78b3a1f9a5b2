//! ARC paper `.lis` traces (Megiddo and Modha, FAST '03).
//!
//! One request per line, four space-separated fields:
//! `start nblocks ignore reqno`, with `start` and `nblocks` in blocks of
//! [`ReadOptions::block_size`](crate::ReadOptions::block_size) bytes (512 for
//! the published traces). Each line yields one read [`Record`] with
//! `offset = start * block_size` and `len = nblocks * block_size`; the ARC
//! paper counts pages, so a cache engine splits records into lines (pages).
//! The traces carry no time: `time_ns` is 0.

use tiercache_block::IoKind;

use super::{len_u32, mul_bytes, uint, ws_fields_exact, LineParser};
use crate::Record;

/// Line parser of `.lis` traces.
pub(crate) struct Parser {
    block_size: u64,
}

impl Parser {
    pub(crate) fn new(block_size: u32) -> Self {
        Parser {
            block_size: u64::from(block_size),
        }
    }
}

impl LineParser for Parser {
    fn parse(&mut self, line: &str) -> Result<Option<Record>, String> {
        let [start, n, ignore, reqno] = ws_fields_exact::<4>(line, "start nblocks ignore reqno")?;
        let start: u64 = uint(start, "start block")?;
        let n: u64 = uint(n, "block count")?;
        let _: u64 = uint(ignore, "third field")?;
        let _: u64 = uint(reqno, "request number")?;
        let offset = mul_bytes(start, self.block_size, "start block")?;
        let len = len_u32(mul_bytes(n, self.block_size, "block count")?, "block count")?;
        Ok(Some(Record {
            time_ns: 0,
            offset,
            len,
            kind: IoKind::Read,
            class: None,
        }))
    }
}
