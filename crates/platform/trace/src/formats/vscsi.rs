//! VMware vscsi binary traces (CloudPhysics, as read by libCacheSim).
//!
//! Fixed-size little-endian records, version told by the `ver` field whose
//! high byte is the version:
//!
//! ```text
//! v1, 32 bytes: u32 serial, u32 len (bytes), u32 nSG, u16 cmd, u16 ver (0x01xx),
//!               u64 lbn, u64 timestamp_us
//! v2, 40 bytes: u16 cmd, u16 ver (0x02xx), u32 serial, u32 len, u32 nSG,
//!               u64 lbn, u64 timestamp_us, u64 response_us
//! ```
//!
//! The version is detected from the first two records, as libCacheSim does.
//! `cmd` is the SCSI opcode: READ(6/10/12/16) `0x08 0x28 0xa8 0x88` are reads,
//! WRITE(6/10/12/16) `0x0a 0x2a 0xaa 0x8a` writes; other commands are
//! reported as malformed records. `lbn` is in 512-byte sectors.

use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use tiercache_block::IoKind;

use crate::compress::DynBufRead;
use crate::error::{Location, Result, TraceError};
use crate::{Record, Source};

/// Version of a vscsi trace starting with `head`, if it looks like one:
/// 1 or 2, checked on the first two records (or the only one).
pub(crate) fn sniff_version(head: &[u8]) -> Option<u8> {
    let ver_at = |off: usize| head.get(off..off + 2).map(|b| b[1]);
    if ver_at(2) == Some(2) && matches!(ver_at(42), Some(2) | None) {
        Some(2)
    } else if ver_at(14) == Some(1) && matches!(ver_at(46), Some(1) | None) {
        Some(1)
    } else {
        None
    }
}

/// Reader of vscsi records.
pub(crate) struct VscsiSource {
    path: PathBuf,
    reader: DynBufRead,
    version: u8,
    index: u64,
    done: bool,
}

impl VscsiSource {
    pub(crate) fn new(path: &Path, mut reader: DynBufRead) -> Result<Self> {
        let head = reader.fill_buf().map_err(|e| TraceError::io(path, e))?;
        let version = if head.is_empty() {
            1 // empty trace: no records either way
        } else {
            sniff_version(head).ok_or_else(|| TraceError::Invalid {
                path: path.to_path_buf(),
                msg: "not a vscsi trace: the first two records carry neither a v1 (0x01xx at byte 14) nor a v2 (0x02xx at byte 2) version field".into(),
            })?
        };
        Ok(VscsiSource {
            path: path.to_path_buf(),
            reader,
            version,
            index: 0,
            done: false,
        })
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl Source for VscsiSource {
    fn next_record(&mut self) -> Option<Result<Record>> {
        if self.done {
            return None;
        }
        let mut buf = [0u8; 40];
        let size = if self.version == 2 { 40 } else { 32 };
        let mut got = 0;
        while got < size {
            match self.reader.read(&mut buf[got..size]) {
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
        if got == 0 {
            self.done = true;
            return None;
        }
        self.index += 1;
        let at = Location::Record(self.index);
        if got < size {
            self.done = true;
            return Some(Err(TraceError::parse(
                &self.path,
                at,
                format!(
                    "truncated vscsi v{} record: {got} of {size} bytes",
                    self.version
                ),
            )));
        }
        // Field offsets: (len, cmd, ver, lbn, ts).
        let (len, cmd, ver, lbn, ts) = if self.version == 2 {
            (
                le32(&buf, 8),
                le16(&buf, 0),
                le16(&buf, 2),
                le64(&buf, 16),
                le64(&buf, 24),
            )
        } else {
            (
                le32(&buf, 4),
                le16(&buf, 12),
                le16(&buf, 14),
                le64(&buf, 16),
                le64(&buf, 24),
            )
        };
        if ver >> 8 != u16::from(self.version) {
            return Some(Err(TraceError::parse(
                &self.path,
                at,
                format!("version field {ver:#06x} does not match v{}", self.version),
            )));
        }
        let kind = match cmd {
            0x08 | 0x28 | 0xa8 | 0x88 => IoKind::Read,
            0x0a | 0x2a | 0xaa | 0x8a => IoKind::Write,
            _ => {
                return Some(Err(TraceError::parse(
                    &self.path,
                    at,
                    format!("SCSI opcode {cmd:#04x} is neither a READ nor a WRITE"),
                )))
            }
        };
        if len == 0 {
            return Some(Err(TraceError::parse(&self.path, at, "length is 0")));
        }
        let Some(offset) = lbn.checked_mul(512) else {
            return Some(Err(TraceError::parse(
                &self.path,
                at,
                format!("LBN {lbn} x 512 bytes overflows 64 bits"),
            )));
        };
        Some(Ok(Record {
            time_ns: ts.saturating_mul(1000),
            offset,
            len,
            kind,
            class: None,
        }))
    }
}
