//! Block trace readers. Every format yields [`Record`]s in bytes and nanoseconds.

use tiercache_core::{Class, IoKind};

/// One block request of a trace, normalised to bytes and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Issue time since the start of the trace, in ns (0 when the trace has none).
    pub time_ns: u64,
    /// Byte offset on the traced device.
    pub offset: u64,
    /// Length in bytes (> 0).
    pub len: u32,
    /// Read, write or trim.
    pub kind: IoKind,
    /// Metadata/data class when the format carries one (blkparse RWBS 'M').
    pub class: Option<Class>,
}
