//! Per-device counters.

use serde::{Deserialize, Serialize};
use tiercache_block::IoKind;

use crate::ModelOp;

/// Counters of one device model since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// All operations submitted.
    pub ops: u64,
    pub reads: u64,
    pub writes: u64,
    pub trims: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Bytes covered by trim operations.
    pub bytes_trimmed: u64,
    /// Time during which the device (at least one of its units) was busy.
    pub busy_ns: u64,
}

impl DeviceStats {
    /// Fraction of `elapsed_ns` the device was busy, in `[0, 1]` when
    /// `elapsed_ns` covers all submitted work; 0 when `elapsed_ns` is 0.
    pub fn utilization(&self, elapsed_ns: u64) -> f64 {
        if elapsed_ns == 0 {
            0.0
        } else {
            self.busy_ns as f64 / elapsed_ns as f64
        }
    }

    /// Count one submitted operation.
    #[inline]
    pub(crate) fn record(&mut self, op: &ModelOp) {
        self.ops += 1;
        match op.kind {
            IoKind::Read => {
                self.reads += 1;
                self.bytes_read = self.bytes_read.saturating_add(op.len);
            }
            IoKind::Write => {
                self.writes += 1;
                self.bytes_written = self.bytes_written.saturating_add(op.len);
            }
            IoKind::Trim => {
                self.trims += 1;
                self.bytes_trimmed = self.bytes_trimmed.saturating_add(op.len);
            }
            IoKind::Flush => self.flushes += 1,
        }
    }
}
