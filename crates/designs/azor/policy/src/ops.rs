//! What the core asks its driver to do: device operations with dependencies.

use serde::Serialize;
use tiercache_block::{Class, IoKind};

/// Identifies a device operation; 0 means "none".
pub type OpId = u64;
/// Identifies a client request; 0 means "none".
pub type ReqId = u64;

/// A block request from a client or a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Non-zero, unique among requests in flight.
    pub id: ReqId,
    pub kind: IoKind,
    /// Byte offset on the exported (backing) address space.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    pub class: Class,
    /// Force unit access: durable before acknowledgement.
    pub fua: bool,
}

/// The byte range `(start, len)` of the backing address space that the
/// buffer of `req` covers, with sub-blocks of `sub_block_bytes`: every op's
/// `buf_off` is relative to `start`. A read's buffer is the request widened
/// to whole sub-blocks, since a read miss on part of a sub-block reads and
/// fills the whole sub-block (the client's bytes are at `req.offset -
/// start`); it exceeds the request by less than two sub-blocks. A write's or
/// trim's buffer is the request itself.
pub fn buffer_span(req: &Request, sub_block_bytes: u64) -> (u64, u64) {
    if req.kind != IoKind::Read || req.len == 0 {
        return (req.offset, req.len);
    }
    let mask = sub_block_bytes - 1;
    let start = req.offset & !mask;
    let end = (req.offset + req.len).saturating_add(mask) & !mask;
    (start, end - start)
}

/// Which device an operation targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dev {
    /// The fast cache device (SSD). Offsets are slot * line size + offset in line.
    Cache,
    /// The slow backing device (HDD). Offsets are the client's offsets.
    Backing,
}

/// Why an operation exists (for statistics and for the live driver's buffers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Purpose {
    /// Read of valid cached data for a request.
    ReadHit,
    /// Read of the backing device for a request (miss or bypass).
    ReadMiss,
    /// Asynchronous write of missed data into the cache (the requester does not wait).
    Fill,
    /// Write of request data into the cache.
    WriteCache,
    /// Write of request data to the backing device.
    WriteBacking,
    /// Read of dirty data out of the cache, for cleaning or eviction.
    WritebackRead,
    /// Write of cleaned/evicted dirty data to the backing device.
    WritebackWrite,
    /// Discard on the backing device for a trim request.
    Trim,
    /// Flush of a device's volatile cache.
    Flush,
}

/// Where the bytes of a write come from (reads land in the request buffer or
/// in the op's own buffer for writeback reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Source {
    /// No data (reads, trims, flushes).
    None,
    /// The request's buffer at `buf_off`.
    Request,
    /// The buffer of a previous op (a writeback read).
    Op(OpId),
    /// The buffers of `count` ops with consecutive ids from `first`, concatenated
    /// (a merged writeback of contiguous dirty lines). The op waits for all of them.
    Ops(OpId, u32),
}

/// One device operation. Start it only once every op in `deps` has completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Op {
    pub id: OpId,
    pub dev: Dev,
    pub kind: IoKind,
    pub offset: u64,
    pub len: u64,
    /// The request this op serves or takes its data from (0: none).
    pub req: ReqId,
    /// Offset of this op's bytes in the request's buffer, which covers
    /// [`buffer_span`] (for a read, the request widened to
    /// whole sub-blocks).
    pub buf_off: u64,
    pub src: Source,
    /// Ops that must complete before this one starts (0: none).
    pub deps: [OpId; 2],
    /// Whether the request waits for this op before it completes.
    pub foreground: bool,
    pub purpose: Purpose,
    /// Force unit access (writes for FUA requests).
    pub fua: bool,
}

impl Op {
    /// Dependencies that are set.
    pub fn deps(&self) -> impl Iterator<Item = OpId> + '_ {
        self.deps.iter().copied().filter(|&d| d != 0)
    }

    /// Every op this one must wait for: its dependencies and its data sources.
    pub fn waits_for(&self) -> impl Iterator<Item = OpId> + '_ {
        let srcs = match self.src {
            Source::Ops(first, n) => first..first + n as u64,
            _ => 0..0,
        };
        self.deps().chain(srcs)
    }
}
