//! Read requests: hits, partial hits and misses with their fills.
//!
//! The fill unit is the sub-block: a miss on part of a sub-block reads the
//! whole sub-block from the backing device (as bcache and dm-cache read the
//! whole block) and fills it, so small requests populate the cache. A read's
//! buffer therefore spans the request widened to whole sub-blocks
//! ([`Engine::buffer_span`]).

use super::Engine;
use crate::eviction::Slot;
use crate::ops::{Op, Purpose, Request, Source};
use tiercache_block::IoKind;

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
        let buf0 = (line << self.line_shift) + in_line - self.buffer_span(req).0;
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
    /// the backing device. With a slot (found, or allocated when admission
    /// allows), each missing sub-block is read whole, even where the request
    /// covers only part of it, and filled; contiguous ones merge into one
    /// backing read. Without a slot only the requested bytes are read.
    fn read_miss(
        &mut self,
        req: &Request,
        line: u64,
        in_line: u64,
        n: u64,
        slot: Option<Slot>,
        meta: bool,
    ) {
        let base = self.buffer_span(req).0;
        let line_start = line << self.line_shift;
        let (first, last) = self.sub_range(in_line, n);
        let slot = match slot {
            Some(s) => Some(s),
            None => self.allocate(line, meta),
        };
        let sb = self.geo.sub_block_bytes as u64;
        let mut filled = false;
        for i in first..=last {
            let (s, len, _) = self.sub_piece(i, in_line, n);
            match slot {
                Some(sl) if self.map.bits.valid(sl, i) => {
                    self.emit_cache(
                        sl,
                        IoKind::Read,
                        s,
                        len,
                        req.id,
                        line_start + s - base,
                        Source::None,
                        0,
                        true,
                        Purpose::ReadHit,
                        false,
                    );
                }
                Some(sl) => {
                    // The whole sub-block: its bytes beyond the request land
                    // in the widened buffer and go into the cache with the rest.
                    let s = i as u64 * sb;
                    let buf = line_start + s - base;
                    let rd = self.emit_backing(
                        line,
                        IoKind::Read,
                        s,
                        sb,
                        req.id,
                        buf,
                        Source::None,
                        true,
                        Purpose::ReadMiss,
                        false,
                    );
                    self.map.bits.set_valid(sl, i, i, true);
                    self.emit_cache(
                        sl,
                        IoKind::Write,
                        s,
                        sb,
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
                None => {
                    self.emit_backing(
                        line,
                        IoKind::Read,
                        s,
                        len,
                        req.id,
                        line_start + s - base,
                        Source::None,
                        true,
                        Purpose::ReadMiss,
                        false,
                    );
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
