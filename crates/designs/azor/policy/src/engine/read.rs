//! Read requests: hits, partial hits and misses with their fills.

use super::Engine;
use crate::eviction::Slot;
use crate::ops::{Op, Purpose, Request, Source};
use crate::types::IoKind;

impl Engine {
    /// One line's piece of a read request: a hit when every sub-block it
    /// touches is valid, otherwise a (partial) miss.
    pub(super) fn read_line(
        &mut self,
        req: &Request,
        line: u64,
        in_line: u64,
        n: u64,
        out: &mut Vec<Op>,
    ) {
        let _ = out;
        self.stats.block_accesses += 1;
        self.stats.read_accesses += 1;
        let meta = req.class.is_metadata();
        if meta {
            self.stats.metadata_accesses += 1;
        }
        if let Some(t) = &mut self.two_level {
            t.record(line);
        }
        let buf0 = (line << self.line_shift) + in_line - req.offset;
        let (first, last) = self.sub_range(in_line, n);
        let slot = self.map.lookup(line);
        if let Some(s) = slot {
            let set = self.map.set_of(line);
            self.evict.on_hit(set, s);
            if self.map.bits.all_valid(s, first, last) {
                self.stats.hits += 1;
                self.stats.read_hits += 1;
                if meta {
                    self.stats.metadata_hits += 1;
                }
                self.emit_cache(
                    s,
                    IoKind::Read,
                    in_line,
                    n,
                    req.id,
                    buf0,
                    Source::None,
                    0,
                    true,
                    Purpose::ReadHit,
                    false,
                );
                return;
            }
        }
        self.read_miss(req, line, in_line, n, slot, meta);
    }

    /// Miss (whole or partial): valid sub-blocks from the cache, the rest from
    /// the backing device, filling the slot with the whole sub-blocks read.
    /// Allocates only when at least one sub-block is read whole (partial ones
    /// cannot be filled).
    fn read_miss(
        &mut self,
        req: &Request,
        line: u64,
        in_line: u64,
        n: u64,
        slot: Option<Slot>,
        meta: bool,
    ) {
        let buf0 = (line << self.line_shift) + in_line - req.offset;
        let (first, last) = self.sub_range(in_line, n);
        let slot = match slot {
            Some(s) => Some(s),
            None if (first..=last).any(|i| self.sub_piece(i, in_line, n).2) => {
                self.allocate(line, meta)
            }
            None => None,
        };
        let mut filled = false;
        for i in first..=last {
            let (s, len, whole) = self.sub_piece(i, in_line, n);
            let buf = buf0 + (s - in_line);
            match slot {
                Some(sl) if self.map.bits.valid(sl, i) => {
                    self.emit_cache(
                        sl,
                        IoKind::Read,
                        s,
                        len,
                        req.id,
                        buf,
                        Source::None,
                        0,
                        true,
                        Purpose::ReadHit,
                        false,
                    );
                }
                _ => {
                    let rd = self.emit_backing(
                        line,
                        IoKind::Read,
                        s,
                        len,
                        req.id,
                        buf,
                        Source::None,
                        true,
                        Purpose::ReadMiss,
                        false,
                    );
                    if let (Some(sl), true) = (slot, whole) {
                        self.map.bits.set_valid(sl, i, i, true);
                        self.emit_cache(
                            sl,
                            IoKind::Write,
                            s,
                            len,
                            req.id,
                            buf,
                            Source::Request,
                            rd,
                            false,
                            Purpose::Fill,
                            false,
                        );
                        filled = true;
                    }
                }
            }
        }
        if filled {
            self.stats.fills += 1;
        }
        if let Some(sl) = slot {
            self.drop_if_empty(sl, line);
        }
    }
}
