//! Op emission: op ids, merging contiguous pieces into runs, and the
//! per-slot / per-line dependencies that order device ops.

use super::Engine;
use crate::eviction::Slot;
use crate::ops::{Dev, Op, OpId, Purpose, ReqId, Source};
use tiercache_block::IoKind;

/// Number of [`Purpose`] variants (the run index has one entry per device and purpose).
pub(super) const PURPOSES: usize = 9;
const _: () = assert!(
    Purpose::Flush as usize + 1 == PURPOSES,
    "Flush is the last purpose"
);

/// The run index's entry for `dev` and `purpose`.
#[inline]
fn run_key(dev: Dev, purpose: Purpose) -> usize {
    let d = match dev {
        Dev::Cache => 0,
        Dev::Backing => 1,
    };
    d * PURPOSES + purpose as usize
}

impl Engine {
    pub(super) fn new_op_id(&mut self) -> OpId {
        let id = self.next_op;
        self.next_op += 1;
        id
    }

    pub(super) fn plain_op(
        &self,
        id: OpId,
        dev: Dev,
        kind: IoKind,
        req: ReqId,
        deps: [OpId; 2],
    ) -> Op {
        Op {
            id,
            dev,
            kind,
            offset: 0,
            len: 0,
            req,
            buf_off: 0,
            src: Source::None,
            deps,
            foreground: true,
            purpose: Purpose::Flush,
            fua: false,
        }
    }

    #[inline]
    pub(super) fn flush_runs(&mut self, out: &mut Vec<Op>) {
        self.last_run = [0; 2 * PURPOSES];
        if self.count_only {
            self.runs.clear();
        } else {
            out.append(&mut self.runs);
        }
    }

    /// Emit a piece of I/O, merged into an open run when contiguous and when the
    /// union of dependencies fits. Returns the op id carrying the piece.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit(
        &mut self,
        dev: Dev,
        kind: IoKind,
        offset: u64,
        len: u64,
        req: ReqId,
        buf_off: u64,
        src: Source,
        deps: [OpId; 2],
        foreground: bool,
        purpose: Purpose,
        fua: bool,
    ) -> OpId {
        match (dev, kind) {
            (Dev::Backing, IoKind::Read) => self.stats.hdd_read_bytes += len,
            (Dev::Backing, IoKind::Write) => self.stats.hdd_write_bytes += len,
            (Dev::Cache, IoKind::Read) => self.stats.ssd_read_bytes += len,
            (Dev::Cache, IoKind::Write) => self.stats.ssd_write_bytes += len,
            _ => {}
        }
        let deps = if self.synchronous { [0, 0] } else { deps };
        let line_shift = self.line_shift;
        // With the journal on (the live server), a cache op stays within one
        // slot: the server tracks in-flight writes, records and errors per slot.
        let one_slot = |r: &Op| {
            !(dev == Dev::Cache && self.journal)
                || r.offset >> line_shift == (offset + len - 1) >> line_shift
        };
        // A piece that would join a run but for the two-dependency limit of an
        // op starts a new op; counters still see one op, so that op counts do
        // not depend on whether dependencies are tracked (timed or not).
        let mut split_by_deps = false;
        let key = run_key(dev, purpose);
        if let Some(r) = self.last_run[key]
            .checked_sub(1)
            .map(|i| &mut self.runs[i as usize])
        {
            let contiguous = r.offset + r.len == offset
                && match src {
                    Source::Request => r.src == Source::Request && r.buf_off + r.len == buf_off,
                    Source::None => {
                        r.src == Source::None && req != 0 && r.buf_off + r.len == buf_off
                    }
                    Source::Op(_) | Source::Ops(..) => false,
                };
            if one_slot(r)
                && contiguous
                && r.dev == dev
                && r.kind == kind
                && r.req == req
                && r.fua == fua
            {
                let mut merged = r.deps;
                let mut fits = true;
                for d in deps {
                    if d == 0 || d == r.id || merged.contains(&d) {
                        continue;
                    }
                    if let Some(z) = merged.iter_mut().find(|x| **x == 0) {
                        *z = d;
                    } else {
                        fits = false;
                    }
                }
                if fits {
                    r.deps = merged;
                    r.len += len;
                    return r.id;
                }
                split_by_deps = true;
            }
        }
        match (dev, kind) {
            _ if split_by_deps => {}
            (Dev::Backing, _) => self.stats.hdd_ops += 1,
            (Dev::Cache, IoKind::Read) => self.stats.ssd_read_ops += 1,
            (Dev::Cache, IoKind::Write) => self.stats.ssd_write_ops += 1,
            _ => {}
        }
        let id = self.new_op_id();
        let deps = if deps[0] == 0 { [deps[1], 0] } else { deps };
        self.last_run[key] = self.runs.len() as u32 + 1;
        self.runs.push(Op {
            id,
            dev,
            kind,
            offset,
            len,
            req,
            buf_off,
            src,
            deps,
            foreground,
            purpose,
            fua,
        });
        id
    }

    /// Emit a cache-device op on `slot`, ordered after the slot's previous op and after `extra_dep`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_cache(
        &mut self,
        slot: Slot,
        kind: IoKind,
        in_line: u64,
        len: u64,
        req: ReqId,
        buf_off: u64,
        src: Source,
        extra_dep: OpId,
        foreground: bool,
        purpose: Purpose,
        fua: bool,
    ) -> OpId {
        let off = ((slot as u64) << self.line_shift) + in_line;
        let prev = if self.synchronous {
            0
        } else {
            self.slot_last.get(&slot).copied().unwrap_or(0)
        };
        let id = self.emit(
            Dev::Cache,
            kind,
            off,
            len,
            req,
            buf_off,
            src,
            [prev, extra_dep],
            foreground,
            purpose,
            fua,
        );
        if !self.synchronous {
            self.slot_last.insert(slot, id);
        }
        id
    }

    /// Emit a backing-device op on `line`, ordered after a pending writeback of that line.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_backing(
        &mut self,
        line: u64,
        kind: IoKind,
        in_line: u64,
        len: u64,
        req: ReqId,
        buf_off: u64,
        src: Source,
        foreground: bool,
        purpose: Purpose,
        fua: bool,
    ) -> OpId {
        let dep = if self.synchronous || self.backing_pending.is_empty() {
            0
        } else {
            self.backing_pending.get(&line).copied().unwrap_or(0)
        };
        let off = (line << self.line_shift) + in_line;
        let data = if let Source::Op(d) = src { d } else { 0 };
        let id = self.emit(
            Dev::Backing,
            kind,
            off,
            len,
            req,
            buf_off,
            src,
            [dep, data],
            foreground,
            purpose,
            fua,
        );
        // Every backing write in flight orders later backing ops of its line: a
        // read miss then sees it, so the fill it feeds cannot cache older data
        // (a client may read a range while its write to the backing device runs).
        if kind == IoKind::Write && !self.synchronous {
            self.backing_pending.insert(line, id);
        }
        id
    }

    /// Sub-block index range `first..=last` touched by bytes `in_line..in_line+n`.
    #[inline]
    pub(super) fn sub_range(&self, in_line: u64, n: u64) -> (u32, u32) {
        (
            (in_line >> self.sub_shift) as u32,
            ((in_line + n - 1) >> self.sub_shift) as u32,
        )
    }

    /// Byte range of sub-block `i` clipped to `in_line..in_line+n`, and whether it covers the whole sub-block.
    #[inline]
    pub(super) fn sub_piece(&self, i: u32, in_line: u64, n: u64) -> (u64, u64, bool) {
        let sb = self.geo.sub_block_bytes as u64;
        let s = (i as u64 * sb).max(in_line);
        let e = ((i as u64 + 1) * sb).min(in_line + n);
        (s, e - s, e - s == sb)
    }
}
