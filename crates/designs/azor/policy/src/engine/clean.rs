//! Write-back cleaning: picking dirty lines in backing order and writing them
//! back, merged into sequential runs where whole lines follow each other.

use super::Engine;
use crate::eviction::Slot;
use crate::ops::{Op, Purpose, Source};
use tiercache_block::IoKind;

impl Engine {
    /// Background work: write-back cleaning of up to `max_lines` dirty lines, in
    /// backing order from a rotating cursor, when more than the dirty target is dirty
    /// (or always when `force`, as `flush`/`detach` need). Returns lines cleaned.
    #[inline]
    pub fn clean(&mut self, max_lines: usize, force: bool, out: &mut Vec<Op>) -> usize {
        if self.dirty.is_empty() || (!force && self.dirty.len() <= self.dirty_target_lines) {
            return 0;
        }
        self.clean_some(max_lines, force, false, out)
    }

    /// [`Engine::clean`] that never writes back more than `max_lines` lines
    /// (a merged run stops at the budget; `clean` may finish a run of up to
    /// 1 MiB past it). For a cleaner paced by a rate, where the budget is the rate.
    pub fn clean_at_most(&mut self, max_lines: usize, out: &mut Vec<Op>) -> usize {
        if self.dirty.len() <= self.dirty_target_lines {
            return 0;
        }
        self.clean_some(max_lines, false, true, out)
    }

    pub(super) fn clean_some(
        &mut self,
        max_lines: usize,
        force: bool,
        cap: bool,
        out: &mut Vec<Op>,
    ) -> usize {
        let target = self.dirty_target_lines;
        let mut n = 0;
        while n < max_lines && !self.dirty.is_empty() && (force || self.dirty.len() > target) {
            let line = match self.dirty.range(self.clean_cursor..).next() {
                Some(&l) => l,
                None => *self.dirty.iter().next().expect("non-empty"),
            };
            let slot = self.map.lookup(line).expect("dirty line is mapped");
            let limit = if cap { max_lines - n } else { usize::MAX };
            let k = self.write_back_run(slot, line, limit);
            self.clean_cursor = line + k as u64;
            n += k;
        }
        self.flush_runs(out);
        n
    }

    /// Write back a dirty line and, when it is wholly dirty, the wholly dirty
    /// lines that follow it on the backing device, as one sequential write of up
    /// to 1 MiB or `limit` lines (cleaning merges contiguous dirty lines).
    /// Returns the lines cleaned.
    pub(super) fn write_back_run(&mut self, slot: Slot, line: u64, limit: usize) -> usize {
        let subs = self.geo.subs;
        let whole = |e: &Self, s: Slot| (0..subs).all(|i| e.map.bits.dirty(s, i));
        if !whole(self, slot) {
            self.write_back(slot, line);
            return 1;
        }
        let max = (((1u64 << 20) >> self.line_shift).max(1) as usize).min(limit.max(1));
        let mut run = vec![(slot, line)];
        while run.len() < max {
            let l = line + run.len() as u64;
            match self.map.lookup(l) {
                Some(s)
                    if whole(self, s)
                        && (self.model_only || !self.backing_pending.contains_key(&l)) =>
                {
                    run.push((s, l))
                }
                _ => break,
            }
        }
        if run.len() == 1 {
            self.write_back(slot, line);
            return 1;
        }
        let lb = self.geo.line_bytes as u64;
        // Writeback reads never merge, so their ids are consecutive.
        let first = self.next_op;
        for &(s, _) in &run {
            self.touch(s);
            self.emit_cache(
                s,
                IoKind::Read,
                0,
                lb,
                0,
                0,
                Source::None,
                0,
                false,
                Purpose::WritebackRead,
                false,
            );
        }
        debug_assert_eq!(
            self.next_op,
            first + run.len() as u64,
            "writeback reads have consecutive ids"
        );
        let n = run.len() as u32;
        let wr = self.emit_backing(
            line,
            IoKind::Write,
            0,
            n as u64 * lb,
            0,
            0,
            Source::Ops(first, n),
            false,
            Purpose::WritebackWrite,
            false,
        );
        for &(s, l) in &run {
            self.map.bits.set_dirty(s, 0, subs - 1, false);
            self.dirty.remove(&l);
            if !self.synchronous {
                self.backing_pending.insert(l, wr);
            }
            self.stats.writebacks += 1;
        }
        run.len()
    }

    /// Write a line's dirty sub-blocks to the backing device and mark them clean.
    pub(super) fn write_back(&mut self, slot: Slot, line: u64) {
        self.touch(slot);
        let subs = self.geo.subs;
        let sb = self.geo.sub_block_bytes as u64;
        let mut i = 0;
        while i < subs {
            if !self.map.bits.dirty(slot, i) {
                i += 1;
                continue;
            }
            let mut j = i;
            while j + 1 < subs && self.map.bits.dirty(slot, j + 1) {
                j += 1;
            }
            let (s, len) = (i as u64 * sb, (j - i + 1) as u64 * sb);
            let rd = self.emit_cache(
                slot,
                IoKind::Read,
                s,
                len,
                0,
                0,
                Source::None,
                0,
                false,
                Purpose::WritebackRead,
                false,
            );
            // The write depends on the read (its data source) and on an older pending writeback.
            let wr = self.emit_backing(
                line,
                IoKind::Write,
                s,
                len,
                0,
                0,
                Source::Op(rd),
                false,
                Purpose::WritebackWrite,
                false,
            );
            if !self.synchronous {
                self.backing_pending.insert(line, wr);
            }
            self.map.bits.set_dirty(slot, i, j, false);
            i = j + 1;
        }
        self.dirty.remove(&line);
        self.stats.writebacks += 1;
    }
}
