//! The cache engine: requests in, device operations out.
//!
//! [`Engine::submit`] updates the cache state at once (eagerly) and returns
//! the device operations the request needs. Ordering that the eager state
//! relies on is expressed as op dependencies, never as waiting inside the
//! core:
//! - every cache-device op on a slot depends on the previous op on that slot
//!   (a fill finishes before the line is read; a victim's data is read out
//!   before the slot is overwritten), which is Azor 2.3's "lock only lines
//!   with I/O pending";
//! - every backing-device op on a line depends on a pending writeback of that
//!   line (a read miss never overtakes the write of newer data).
//!
//! A driver runs an op once its dependencies completed and reports it with
//! [`Engine::complete`]. A driver that completes every op before submitting
//! the next request (the `--no-timing` simulator) may switch dependency
//! tracking off with [`Engine::set_synchronous`]: decisions are identical.

use crate::admission::nhit::Nhit;
use crate::admission::seq_cutoff::SeqCutoff;
use crate::admission::two_level::TwoLevel;
use crate::admission::AdmissionKind;
use crate::config::{Assoc, CacheConfig, ConfigError, Geometry, WritePolicy};
use crate::eviction::{Eviction, Slot};
use crate::mapping::Mapping;
use crate::ops::{Dev, Op, OpId, Purpose, ReqId, Request, Source};
use crate::stats::Stats;
use crate::types::IoKind;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;

/// One slot of a recovered table: `(slot, line, valid, dirty, metadata)`, with
/// one bool per sub-block in `valid` and `dirty`.
pub type RestoredSlot = (Slot, u64, Vec<bool>, Vec<bool>, bool);

/// The policy core of one cache.
pub struct Engine {
    cfg: CacheConfig,
    geo: Geometry,
    map: Mapping,
    evict: Box<dyn Eviction>,
    seq: Option<SeqCutoff>,
    nhit: Option<Nhit>,
    two_level: Option<TwoLevel>,
    stats: Stats,
    next_op: OpId,
    synchronous: bool,
    /// Last cache op on each slot with ops in flight.
    slot_last: FxHashMap<Slot, OpId>,
    /// Pending backing write of a line's cleaned or evicted data.
    backing_pending: FxHashMap<u64, OpId>,
    /// Dirty lines in backing order (write-back cleaning walks it).
    dirty: BTreeSet<u64>,
    clean_cursor: u64,
    /// Open op runs being merged while a request is decoded.
    runs: Vec<Op>,
    /// The request being decoded bypasses the cache (sequential cutoff).
    bypass: bool,
    /// Dirty lines above which cleaning runs.
    dirty_target_lines: usize,
    /// Count ops without handing them out (synchronous drivers that only need counters).
    count_only: bool,
    /// Record the slots whose mapping or bits change (for a persistent journal).
    journal: bool,
    /// The cache device failed: no new allocations.
    degraded: bool,
    touched: Vec<Slot>,
    line_shift: u32,
    sub_shift: u32,
}

/// What the engine does with one sub-block range of a line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Where {
    Cache,
    Backing,
}

impl Engine {
    /// Build an engine; refuses impossible configurations with a message saying what is allowed.
    pub fn new(cfg: CacheConfig) -> Result<Self, ConfigError> {
        let geo = cfg.geometry()?;
        let evict = match cfg.assoc {
            // One way per set: every policy degenerates to "replace the occupant".
            Assoc::Direct => Box::new(crate::eviction::direct::Occupant),
            _ => cfg.eviction.build(geo.sets, geo.ways),
        };
        let a = &cfg.admission;
        let seq = (a.kind == AdmissionKind::SeqCutoff).then(|| SeqCutoff::new(a.seq_cutoff_bytes));
        let nhit = (a.kind == AdmissionKind::Nhit)
            .then(|| Nhit::new(a.nhit_threshold, a.nhit_trigger, 4 * geo.slots as usize));
        let cfg_dirty_target = cfg.dirty_target;
        let two_level = (a.kind == AdmissionKind::TwoLevel)
            .then(|| TwoLevel::new(a.twolbs_metadata, a.twolbs_frequency, a.twolbs_window));
        Ok(Engine {
            map: Mapping::new(geo, cfg.assoc),
            line_shift: geo.line_bytes.trailing_zeros(),
            sub_shift: geo.sub_block_bytes.trailing_zeros(),
            cfg,
            geo,
            evict,
            seq,
            nhit,
            two_level,
            stats: Stats::default(),
            next_op: 1,
            synchronous: false,
            slot_last: FxHashMap::default(),
            backing_pending: FxHashMap::default(),
            dirty: BTreeSet::new(),
            clean_cursor: 0,
            runs: Vec::with_capacity(4),
            bypass: false,
            dirty_target_lines: (cfg_dirty_target * geo.slots as f64) as usize,
            count_only: false,
            journal: false,
            degraded: false,
            touched: Vec::new(),
        })
    }

    /// Drop dependency tracking: the driver completes every op before the next submit.
    pub fn set_synchronous(&mut self, on: bool) {
        self.synchronous = on;
    }

    /// Synchronous and, further, hand out no ops at all: only the counters
    /// move. Decisions and counters are exactly those of a synchronous run
    /// (the `--no-timing` simulator uses it; a test checks the equality).
    pub fn set_count_only(&mut self, on: bool) {
        self.count_only = on;
        if on {
            self.synchronous = true;
        }
    }

    /// Record which slots change, for [`Engine::take_touched`] (the live server's journal).
    pub fn set_journal(&mut self, on: bool) {
        self.journal = on;
    }

    /// Slots whose mapping, bits or class changed since the last call (deduplicated).
    pub fn take_touched(&mut self) -> Vec<Slot> {
        let mut t = std::mem::take(&mut self.touched);
        t.sort_unstable();
        t.dedup();
        t
    }

    #[inline]
    fn touch(&mut self, slot: Slot) {
        if self.journal {
            self.touched.push(slot);
        }
    }

    /// Load a recovered slot table into an empty engine.
    pub fn restore(&mut self, entries: &[RestoredSlot]) -> Result<(), String> {
        let subs = self.geo.subs as usize;
        let lines: Vec<(Slot, u64, bool)> = entries.iter().map(|e| (e.0, e.1, e.4)).collect();
        self.map.restore(&lines)?;
        for (slot, line, valid, dirty, _) in entries {
            if valid.len() != subs || dirty.len() != subs {
                return Err(format!(
                    "slot {slot}: {} sub-block bits, expected {subs}",
                    valid.len()
                ));
            }
            for i in 0..subs {
                if dirty[i] && !valid[i] {
                    return Err(format!("slot {slot}: sub-block {i} dirty but not valid"));
                }
                self.map.bits.set_valid(*slot, i as u32, i as u32, valid[i]);
                self.map.bits.set_dirty(*slot, i as u32, i as u32, dirty[i]);
            }
            let set = self.map.set_of(*line);
            self.evict.on_miss(set, *line);
            self.evict.on_insert(set, *slot, *line);
            if dirty.iter().any(|d| *d) {
                self.dirty.insert(*line);
            }
        }
        // Slots restored with nothing valid hold nothing.
        for (slot, line, ..) in entries {
            if !self.map.bits.any_valid(*slot) {
                self.drop_if_empty(*slot, *line);
            }
        }
        Ok(())
    }

    /// Drop sub-blocks `first..=last` of a slot (a failed cache write or read), freeing it if empty.
    pub fn invalidate(&mut self, slot: Slot, first: u32, last: u32) {
        let Some(line) = self.map.line_of(slot) else {
            return;
        };
        self.touch(slot);
        self.map.bits.set_valid(slot, first, last, false);
        self.map.bits.set_dirty(slot, first, last, false);
        self.stats.invalidations += 1;
        if !self.map.bits.any_dirty(slot) {
            self.dirty.remove(&line);
        }
        self.drop_if_empty(slot, line);
    }

    /// A write-back cache write of request data (`op`, for backing `line`)
    /// failed: emit the write of the same bytes to the backing device, ordered
    /// after any backing write of the line still in flight, so that the client's
    /// data lands last. The caller invalidates the sub-blocks it left behind.
    pub fn reroute_failed_write(&mut self, op: &Op, line: u64, out: &mut Vec<Op>) {
        let in_line = op.offset & ((1u64 << self.line_shift) - 1);
        self.emit_backing(
            line,
            IoKind::Write,
            in_line,
            op.len,
            op.req,
            op.buf_off,
            Source::Request,
            true,
            Purpose::WriteBacking,
            op.fua,
        );
        self.flush_runs(out);
    }

    /// Mark valid sub-blocks `first..=last` of a slot dirty again (their writeback failed).
    pub fn redirty(&mut self, slot: Slot, first: u32, last: u32) {
        let Some(line) = self.map.line_of(slot) else {
            return;
        };
        self.touch(slot);
        for i in first..=last {
            if self.map.bits.valid(slot, i) {
                self.map.bits.set_dirty(slot, i, i, true);
            }
        }
        if self.map.bits.any_dirty(slot) {
            self.dirty.insert(line);
        }
    }

    /// The cache device is failing: admit nothing new; write-through modes stop
    /// updating cached copies (writes invalidate them instead). Dirty data stays
    /// and is cleaned as usual.
    pub fn degrade(&mut self) {
        self.degraded = true;
        if self.cfg.write_policy != WritePolicy::WriteBack {
            self.cfg.write_policy = WritePolicy::WriteHddInv;
        }
    }

    /// Whether [`Engine::degrade`] was called.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// A slot's line, valid and dirty bits (one bool per sub-block) and class bit.
    /// [`Engine::slot_state`] without allocating: `(line, valid, dirty,
    /// metadata)` with bit `i` of the 256-bit masks for sub-block `i` (the
    /// live server asks on every op completion).
    pub fn slot_bits(&self, slot: Slot) -> Option<(u64, [u64; 4], [u64; 4], bool)> {
        let line = self.map.line_of(slot)?;
        let mut v = [0u64; 4];
        let mut d = [0u64; 4];
        for i in 0..self.geo.subs.min(256) {
            if self.map.bits.valid(slot, i) {
                v[i as usize / 64] |= 1 << (i % 64);
            }
            if self.map.bits.dirty(slot, i) {
                d[i as usize / 64] |= 1 << (i % 64);
            }
        }
        Some((line, v, d, self.map.is_metadata(slot)))
    }

    pub fn slot_state(&self, slot: Slot) -> Option<(u64, Vec<bool>, Vec<bool>, bool)> {
        let line = self.map.line_of(slot)?;
        let subs = self.geo.subs;
        let v = (0..subs).map(|i| self.map.bits.valid(slot, i)).collect();
        let d = (0..subs).map(|i| self.map.bits.dirty(slot, i)).collect();
        Some((line, v, d, self.map.is_metadata(slot)))
    }

    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }
    /// Dirty lines above which cleaning runs (the dirty target share of the slots).
    pub fn dirty_target_lines(&self) -> usize {
        self.dirty_target_lines
    }

    /// Lines with dirty data.
    pub fn dirty_lines(&self) -> usize {
        self.dirty.len()
    }

    /// DRAM used by the cache's metadata: line table, replacement state and admission state.
    pub fn metadata_bytes(&self) -> usize {
        self.map.metadata_bytes()
            + self.evict.metadata_bytes()
            + self.seq.as_ref().map_or(0, |s| s.metadata_bytes())
            + self.nhit.as_ref().map_or(0, |s| s.metadata_bytes())
            + self.two_level.as_ref().map_or(0, |s| s.metadata_bytes())
    }

    /// Metadata of the line table and replacement state only, per GiB of cache (Azor's measure).
    pub fn metadata_bytes_per_gib(&self) -> f64 {
        let cache = self.geo.slots as f64 * self.geo.line_bytes as f64;
        (self.map.metadata_bytes() + self.evict.metadata_bytes()) as f64 * (1u64 << 30) as f64
            / cache
    }

    /// Handle one request: update the cache state and append the device ops it needs to `out`.
    pub fn submit(&mut self, req: &Request, out: &mut Vec<Op>) {
        self.stats.requests += 1;
        match req.kind {
            IoKind::Read => {
                self.stats.read_requests += 1;
                self.stats.workload_read_bytes += req.len;
                self.for_each_line(req, out);
            }
            IoKind::Write => {
                self.stats.write_requests += 1;
                self.stats.workload_write_bytes += req.len;
                // FUA travels on the write ops themselves.
                self.for_each_line(req, out);
            }
            IoKind::Trim => {
                self.stats.trim_requests += 1;
                self.for_each_line(req, out);
            }
            IoKind::Flush => {
                self.stats.flush_requests += 1;
                for dev in [Dev::Cache, Dev::Backing] {
                    let id = self.new_op_id();
                    out.push(self.plain_op(id, dev, IoKind::Flush, req.id, [0, 0]));
                }
            }
        }
        self.flush_runs(out);
        #[cfg(debug_assertions)]
        if self.stats.requests.is_multiple_of(4096) {
            self.check_invariants();
        }
    }

    /// Report a completed op. Successful ops only release ordering state.
    pub fn complete(&mut self, op: &Op, out: &mut Vec<Op>) {
        let _ = out;
        if self.synchronous {
            return;
        }
        match op.dev {
            Dev::Cache if op.kind != IoKind::Flush => {
                let first = (op.offset >> self.line_shift) as Slot;
                let last = ((op.offset + op.len.max(1) - 1) >> self.line_shift) as Slot;
                for s in first..=last {
                    if self.slot_last.get(&s) == Some(&op.id) {
                        self.slot_last.remove(&s);
                    }
                }
            }
            Dev::Backing if op.kind == IoKind::Write => {
                let first = op.offset >> self.line_shift;
                let last = (op.offset + op.len.max(1) - 1) >> self.line_shift;
                for l in first..=last {
                    if self.backing_pending.get(&l) == Some(&op.id) {
                        self.backing_pending.remove(&l);
                    }
                }
            }
            _ => {}
        }
    }

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

    fn clean_some(&mut self, max_lines: usize, force: bool, cap: bool, out: &mut Vec<Op>) -> usize {
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

    // ---- request decoding ----

    fn for_each_line(&mut self, req: &Request, out: &mut Vec<Op>) {
        if req.len == 0 {
            return;
        }
        let bypass = match (&mut self.seq, req.kind) {
            (Some(s), IoKind::Read | IoKind::Write) => s.bypass(req.offset, req.len),
            _ => false,
        };
        self.bypass = bypass;
        let lb = self.geo.line_bytes as u64;
        let mut off = req.offset;
        let end = req.offset + req.len;
        while off < end {
            let line = off >> self.line_shift;
            let in_line = off & (lb - 1);
            let n = (lb - in_line).min(end - off);
            match req.kind {
                IoKind::Read => self.read_line(req, line, in_line, n, out),
                IoKind::Write => self.write_line(req, line, in_line, n, out),
                IoKind::Trim => self.trim_line(req, line, in_line, n, out),
                IoKind::Flush => {}
            }
            off += n;
            if self.runs.len() >= 4 {
                self.flush_runs(out);
            }
        }
        let _ = out;
    }
}

// Per-request scratch state kept outside the struct definition above for readability.
impl Engine {
    fn new_op_id(&mut self) -> OpId {
        let id = self.next_op;
        self.next_op += 1;
        id
    }

    fn plain_op(&self, id: OpId, dev: Dev, kind: IoKind, req: ReqId, deps: [OpId; 2]) -> Op {
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
    fn flush_runs(&mut self, out: &mut Vec<Op>) {
        if self.count_only {
            self.runs.clear();
        } else {
            out.append(&mut self.runs);
        }
    }

    /// Emit a piece of I/O, merged into an open run when contiguous and when the
    /// union of dependencies fits. Returns the op id carrying the piece.
    #[allow(clippy::too_many_arguments)]
    fn emit(
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
        for r in self.runs.iter_mut() {
            if !one_slot(r) {
                continue;
            }
            let contiguous = r.offset + r.len == offset
                && match src {
                    Source::Request => r.src == Source::Request && r.buf_off + r.len == buf_off,
                    Source::None => {
                        r.src == Source::None && req != 0 && r.buf_off + r.len == buf_off
                    }
                    Source::Op(_) | Source::Ops(..) => false,
                };
            if !(contiguous
                && r.dev == dev
                && r.kind == kind
                && r.purpose == purpose
                && r.req == req
                && r.fua == fua)
            {
                continue;
            }
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
        }
        match (dev, kind) {
            (Dev::Backing, _) => self.stats.hdd_ops += 1,
            (Dev::Cache, IoKind::Read) => self.stats.ssd_read_ops += 1,
            (Dev::Cache, IoKind::Write) => self.stats.ssd_write_ops += 1,
            _ => {}
        }
        let id = self.new_op_id();
        let deps = if deps[0] == 0 { [deps[1], 0] } else { deps };
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
    fn emit_cache(
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
    fn emit_backing(
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
    fn sub_range(&self, in_line: u64, n: u64) -> (u32, u32) {
        (
            (in_line >> self.sub_shift) as u32,
            ((in_line + n - 1) >> self.sub_shift) as u32,
        )
    }

    /// Byte range of sub-block `i` clipped to `in_line..in_line+n`, and whether it covers the whole sub-block.
    #[inline]
    fn sub_piece(&self, i: u32, in_line: u64, n: u64) -> (u64, u64, bool) {
        let sb = self.geo.sub_block_bytes as u64;
        let s = (i as u64 * sb).max(in_line);
        let e = ((i as u64 + 1) * sb).min(in_line + n);
        (s, e - s, e - s == sb)
    }

    // ---- reads ----

    fn read_line(&mut self, req: &Request, line: u64, in_line: u64, n: u64, out: &mut Vec<Op>) {
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
        // Miss (whole or partial): valid sub-blocks from the cache, the rest from the backing device.
        // Allocate only when at least one sub-block is read whole (partial ones cannot be filled).
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

    /// Find or make room for `line`, subject to admission. Returns the slot it now occupies (no valid data yet).
    fn allocate(&mut self, line: u64, meta: bool) -> Option<Slot> {
        if self.bypass || self.degraded || !self.map.representable(line) {
            self.stats.admission_rejects += 1;
            return None;
        }
        if let Some(n) = &mut self.nhit {
            let occ = self.map.used() as f64 / self.geo.slots as f64;
            if !n.admit(line, occ) {
                self.stats.admission_rejects += 1;
                return None;
            }
        }
        let set = self.map.set_of(line);
        if let Some(free) = self.map.free_slot(set) {
            self.touch(free);
            self.evict.on_miss(set, line);
            self.map.insert(free, line, meta);
            self.evict.on_insert(set, free, line);
            return Some(free);
        }
        if let Some(t) = &self.two_level {
            let v = self.evict.peek_victim(set, line);
            let occ = self.map.line_of(v).expect("victim is occupied");
            if !t
                .decide(line, meta, Some((occ, self.map.is_metadata(v))))
                .admits()
            {
                self.stats.admission_rejects += 1;
                return None;
            }
        }
        self.evict.on_miss(set, line);
        let map = &self.map;
        let victim = self
            .evict
            .evict(set, &|s| map.line_of(s).unwrap_or(u64::MAX));
        let vline = self.map.line_of(victim).expect("victim is occupied");
        self.touch(victim);
        if self.map.bits.any_dirty(victim) {
            self.stats.dirty_evictions += 1;
            self.write_back_run(victim, vline, usize::MAX);
        }
        self.map.remove(victim);
        self.stats.evictions += 1;
        self.map.insert(victim, line, meta);
        self.evict.on_insert(set, victim, line);
        Some(victim)
    }

    /// Write back a dirty line and, when it is wholly dirty, the wholly dirty
    /// lines that follow it on the backing device, as one sequential write of up
    /// to 1 MiB or `limit` lines (cleaning merges contiguous dirty lines).
    /// Returns the lines cleaned.
    fn write_back_run(&mut self, slot: Slot, line: u64, limit: usize) -> usize {
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
                Some(s) if whole(self, s) && !self.backing_pending.contains_key(&l) => {
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
    fn write_back(&mut self, slot: Slot, line: u64) {
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

    /// Free a slot that ended up holding nothing valid (a refused partial fill).
    fn drop_if_empty(&mut self, slot: Slot, line: u64) {
        self.touch(slot);
        if !self.map.bits.any_valid(slot) {
            let set = self.map.set_of(line);
            self.evict.on_remove(set, slot);
            self.map.remove(slot);
        }
    }

    // ---- writes ----

    fn write_line(&mut self, req: &Request, line: u64, in_line: u64, n: u64, out: &mut Vec<Op>) {
        let _ = out;
        self.stats.block_accesses += 1;
        self.stats.write_accesses += 1;
        let meta = req.class.is_metadata();
        if let Some(t) = &mut self.two_level {
            t.record(line);
        }
        let buf0 = (line << self.line_shift) + in_line - req.offset;
        let (first, last) = self.sub_range(in_line, n);
        let policy = self.cfg.write_policy;
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
        let fua = req.fua;
        match policy {
            WritePolicy::WriteBack => {
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
            WritePolicy::WriteThrough
            | WritePolicy::WriteHddUpd
            | WritePolicy::WriteHddInv
            | WritePolicy::ReadOnly => {
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
        }
    }

    // ---- trims ----

    fn trim_line(&mut self, req: &Request, line: u64, in_line: u64, n: u64, out: &mut Vec<Op>) {
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

    /// Assert the engine's invariants (debug builds call it periodically; tests call it freely).
    pub fn check_invariants(&self) {
        self.map.check_invariants();
        let mut dirty = 0;
        for (slot, line) in self.map.iter() {
            assert!(
                self.map.bits.any_valid(slot),
                "slot {slot} (line {line}) mapped with nothing valid"
            );
            if self.map.bits.any_dirty(slot) {
                dirty += 1;
                assert!(
                    self.dirty.contains(&line),
                    "dirty line {line} missing from the cleaning set"
                );
            }
        }
        assert_eq!(
            dirty,
            self.dirty.len(),
            "cleaning set holds only dirty lines"
        );
        let s = &self.stats;
        assert!(s.hits <= s.block_accesses);
        assert_eq!(s.read_accesses + s.write_accesses, s.block_accesses);
        assert_eq!(s.read_hits + s.write_hits, s.hits);
    }
}
