//! CloudPhysics block-id traces (as redistributed with caffeine's simulator).
//!
//! A flat array of big-endian u32 block ids, one per request, usually
//! xz-compressed. Each id is one read of one block: `offset = id * block_size`,
//! `len = block_size` ([`ReadOptions::block_size`](crate::ReadOptions::block_size),
//! default 512). No time (`time_ns` 0). A trailing partial id (1–3 bytes) is
//! reported as a truncated record.
//!
//! Any 4 bytes are an id, so other data read as this format is refused by
//! how its ids look: the first [`SNIFF_IDS`] ids of a block trace repeat or
//! lie near each other (w106: 783 distinct ids among its first 4096), while
//! random bytes give distinct ids spread over the whole u32 range.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use tiercache_block::IoKind;

use crate::compress::DynBufRead;
use crate::error::{Location, Result, TraceError};
use crate::{Record, Source};

/// Ids looked at to tell a block-id trace from random data.
pub(crate) const SNIFF_IDS: usize = 4096;

/// Fewest ids that let [`looks_random`] judge (a shorter trace is accepted).
const SNIFF_MIN: usize = 256;

/// Ids at most this far apart count as near.
const NEAR: u32 = 1 << 12;

/// Whether `ids` (the first of a trace) look like random data rather than
/// block ids: no id repeats and fewer than 1 % of successive ids are near.
pub(crate) fn looks_random(ids: &[u32]) -> bool {
    if ids.len() < SNIFF_MIN {
        return false;
    }
    let distinct: rustc_hash::FxHashSet<u32> = ids.iter().copied().collect();
    let near = ids
        .windows(2)
        .filter(|w| w[0].abs_diff(w[1]) <= NEAR)
        .count();
    distinct.len() == ids.len() && near * 100 < ids.len()
}

/// Reader of big-endian u32 id streams.
pub(crate) struct CloudPhysicsSource {
    path: PathBuf,
    reader: DynBufRead,
    block_size: u32,
    index: u64,
    done: bool,
    /// The first ids, until [`looks_random`] judged them.
    head: Option<Vec<u32>>,
}

impl CloudPhysicsSource {
    pub(crate) fn new(path: &Path, reader: DynBufRead, block_size: u32) -> Self {
        CloudPhysicsSource {
            path: path.to_path_buf(),
            reader,
            block_size,
            index: 0,
            done: false,
            head: Some(Vec::with_capacity(SNIFF_IDS)),
        }
    }

    /// Judge the ids read so far (at [`SNIFF_IDS`] ids or at the end).
    fn judge(&mut self) -> Option<TraceError> {
        let head = self.head.take()?;
        looks_random(&head).then(|| TraceError::NotFormat {
            path: self.path.clone(),
            format: "cloudphysics".into(),
            msg: format!(
                "its first {} block ids (bytes 0 to {}) look random: none repeats and almost none is near the one before, unlike any block trace",
                head.len(),
                head.len() * 4
            ),
        })
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
                return self.judge().map(Err);
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
        let raw = u32::from_be_bytes(id);
        if let Some(h) = &mut self.head {
            h.push(raw);
            if h.len() == SNIFF_IDS {
                if let Some(e) = self.judge() {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        let id = u64::from(raw);
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
