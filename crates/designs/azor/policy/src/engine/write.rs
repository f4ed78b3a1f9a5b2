//! Write and trim requests under each write policy.

use super::Engine;
use super::Where;
use crate::config::WritePolicy;
use crate::eviction::Slot;
use crate::ops::{Op, Purpose, Request, Source};
use tiercache_block::IoKind;

impl Engine {
    /// One line's piece of a write request: find (or allocate) its slot, then
    /// write it as the write policy says.
    pub(super) fn write_line(
        &mut self,
        req: &Request,
        line: u64,
        in_line: u64,
        n: u64,
        out: &mut Vec<Op>,
    ) {
        let _ = out;
        self.stats.block_accesses += 1;
        self.stats.write_accesses += 1;
        let meta = req.class.is_metadata();
        if let Some(t) = &mut self.two_level {
            t.record(line);
        }
        let policy = self.cfg.write_policy;
        let slot = self.write_slot(line, meta, policy);
        match policy {
            WritePolicy::WriteBack => self.write_line_back(req, line, in_line, n, slot),
            WritePolicy::WriteThrough
            | WritePolicy::WriteHddUpd
            | WritePolicy::WriteHddInv
            | WritePolicy::ReadOnly => self.write_line_through(req, line, in_line, n, slot, policy),
        }
    }

    /// The slot a write lands in: a hit (counted, its recency and class
    /// updated), or a new slot when the policy allocates on writes.
    fn write_slot(&mut self, line: u64, meta: bool, policy: WritePolicy) -> Option<Slot> {
        let mut slot = self.map.lookup(line);
        if let Some(s) = slot {
            self.touch(s);
            self.stats.hits += 1;
            self.stats.write_hits += 1;
            let set = self.map.set_of(line);
            self.evict.on_hit(set, s);
            if meta {
                self.map.set_metadata(s, true);
            }
        } else if policy.may_allocate() && self.cfg.write_allocate {
            slot = self.allocate(line, meta);
            if slot.is_some() {
                self.stats.fills += 1;
            }
        }
        slot
    }

    /// Write-back: sub-blocks the slot can take go to the cache dirty, the
    /// rest (partial sub-blocks not cached) straight to the backing device.
    fn write_line_back(
        &mut self,
        req: &Request,
        line: u64,
        in_line: u64,
        n: u64,
        slot: Option<Slot>,
    ) {
        let buf0 = (line << self.line_shift) + in_line - req.offset;
        let (first, last) = self.sub_range(in_line, n);
        let fua = req.fua;
        for i in first..=last {
            let (s, len, whole) = self.sub_piece(i, in_line, n);
            let buf = buf0 + (s - in_line);
            let to = match slot {
                Some(sl) if whole || self.map.bits.valid(sl, i) => Where::Cache,
                _ => Where::Backing,
            };
            match (to, slot) {
                (Where::Cache, Some(sl)) => {
                    self.map.bits.set_valid(sl, i, i, true);
                    self.map.bits.set_dirty(sl, i, i, true);
                    self.emit_cache(
                        sl,
                        IoKind::Write,
                        s,
                        len,
                        req.id,
                        buf,
                        Source::Request,
                        0,
                        true,
                        Purpose::WriteCache,
                        fua,
                    );
                }
                _ => {
                    self.emit_backing(
                        line,
                        IoKind::Write,
                        s,
                        len,
                        req.id,
                        buf,
                        Source::Request,
                        true,
                        Purpose::WriteBacking,
                        fua,
                    );
                }
            }
        }
        if let Some(sl) = slot {
            if self.map.bits.any_dirty(sl) {
                self.dirty.insert(line);
            } else {
                self.drop_if_empty(sl, line);
            }
        }
    }

    /// Write-through, write-around and read-only: the backing device gets the
    /// write; a cached copy is updated (write-through, hdd-upd) or invalidated.
    fn write_line_through(
        &mut self,
        req: &Request,
        line: u64,
        in_line: u64,
        n: u64,
        slot: Option<Slot>,
        policy: WritePolicy,
    ) {
        let buf0 = (line << self.line_shift) + in_line - req.offset;
        let (first, last) = self.sub_range(in_line, n);
        let fua = req.fua;
        // The backing device gets the write; the requester waits for it.
        self.emit_backing(
            line,
            IoKind::Write,
            in_line,
            n,
            req.id,
            buf0,
            Source::Request,
            true,
            Purpose::WriteBacking,
            fua,
        );
        let Some(sl) = slot else { return };
        if matches!(policy, WritePolicy::WriteThrough | WritePolicy::WriteHddUpd) {
            // Update the cached copy (in the background): whole sub-blocks, or partial ones already valid.
            for i in first..=last {
                let (s, len, whole) = self.sub_piece(i, in_line, n);
                if whole || self.map.bits.valid(sl, i) {
                    self.map.bits.set_valid(sl, i, i, true);
                    let buf = buf0 + (s - in_line);
                    self.emit_cache(
                        sl,
                        IoKind::Write,
                        s,
                        len,
                        req.id,
                        buf,
                        Source::Request,
                        0,
                        false,
                        Purpose::WriteCache,
                        false,
                    );
                }
            }
        } else {
            // Invalidate the cached copy.
            self.map.bits.set_valid(sl, first, last, false);
            self.map.bits.set_dirty(sl, first, last, false);
            self.stats.invalidations += 1;
        }
        self.drop_if_empty(sl, line);
    }

    /// One line's piece of a trim: drop the wholly trimmed sub-blocks and pass
    /// the trim on to the backing device.
    pub(super) fn trim_line(
        &mut self,
        req: &Request,
        line: u64,
        in_line: u64,
        n: u64,
        out: &mut Vec<Op>,
    ) {
        let _ = out;
        if let Some(sl) = self.map.lookup(line) {
            self.touch(sl);
            let (first, last) = self.sub_range(in_line, n);
            let mut any = false;
            for i in first..=last {
                if self.sub_piece(i, in_line, n).2 {
                    self.map.bits.set_valid(sl, i, i, false);
                    self.map.bits.set_dirty(sl, i, i, false);
                    any = true;
                }
            }
            if any {
                self.stats.invalidations += 1;
                if !self.map.bits.any_dirty(sl) {
                    self.dirty.remove(&line);
                }
                self.drop_if_empty(sl, line);
            }
        }
        let buf0 = (line << self.line_shift) + in_line - req.offset;
        self.emit_backing(
            line,
            IoKind::Trim,
            in_line,
            n,
            req.id,
            buf0,
            Source::None,
            true,
            Purpose::Trim,
            false,
        );
    }
}
