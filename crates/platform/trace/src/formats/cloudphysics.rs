//! CloudPhysics block-id traces (as redistributed with caffeine's simulator).
//!
//! A flat array of big-endian u32 block ids, one per request, usually
//! xz-compressed. Each id is one read of one block: `offset = id * block_size`,
//! `len = block_size` ([`ReadOptions::block_size`](crate::ReadOptions::block_size),
//! default 512). No time (`time_ns` 0). A trailing partial id (1–3 bytes) is
//! reported as a truncated record.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use tiercache_core::IoKind;

use crate::compress::DynBufRead;
use crate::error::{Location, Result, TraceError};
use crate::{Record, Source};

/// Reader of big-endian u32 id streams.
pub(crate) struct CloudPhysicsSource {
    path: PathBuf,
    reader: DynBufRead,
    block_size: u32,
    index: u64,
    done: bool,
}

impl CloudPhysicsSource {
    pub(crate) fn new(path: &Path, reader: DynBufRead, block_size: u32) -> Self {
        CloudPhysicsSource {
            path: path.to_path_buf(),
            reader,
            block_size,
            index: 0,
            done: false,
        }
    }
}

impl Source for CloudPhysicsSource {
    fn next_record(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        let mut id = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match self.reader.read(&mut id[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(TraceError::Read {
                        path: self.path.clone(),
                        at: Location::Record(self.index + 1),
                        cause: e,
                    }));
                }
            }
        }
        self.index += 1;
        match got {
            4 => {}
            0 => {
                self.done = true;
                return None;
            }
            n => {
                self.done = true;
                return Some(Err(TraceError::parse(
                    &self.path,
                    Location::Record(self.index),
                    format!("truncated block id: {n} of 4 bytes"),
                )));
            }
        }
        let id = u64::from(u32::from_be_bytes(id));
        Some(Ok(Record {
            time_ns: 0,
            // u32 id * u32 block size always fits in u64.
            offset: id * u64::from(self.block_size),
            len: self.block_size,
            kind: IoKind::Read,
            class: None,
        }))
    }
}
