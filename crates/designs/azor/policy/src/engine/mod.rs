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
//!
//! This file holds the engine's state, setup, recovery, accessors, request
//! decoding and completion; the rest is split by step: `read` and `write`
//! (per-line request paths), `allocate` (admission and eviction), `clean`
//! (write-back cleaning) and `emit` (op merging and ordering).

use crate::admission::nhit::Nhit;
use crate::admission::seq_cutoff::SeqCutoff;
use crate::admission::two_level::TwoLevel;
use crate::admission::AdmissionKind;
use crate::config::{Assoc, CacheConfig, ConfigError, Geometry, WritePolicy};
use crate::eviction::{Eviction, Slot};
use crate::mapping::Mapping;
use crate::ops::{Dev, Op, OpId, Purpose, Request, Source};
use crate::stats::Stats;
use emit::PURPOSES;
use rustc_hash::FxHashMap;
use std::collections::BTreeSet;
use tiercache_block::IoKind;

mod allocate;
mod clean;
mod emit;
mod read;
mod write;

/// One slot of a recovered table, with one bool per sub-block in `valid` and `dirty`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoredSlot {
    /// The cache slot.
    pub slot: Slot,
    /// The backing line it holds.
    pub line: u64,
    /// Which sub-blocks hold valid data.
    pub valid: Vec<bool>,
    /// Which sub-blocks are dirty (a subset of `valid`).
    pub dirty: Vec<bool>,
    /// The line was last accessed as filesystem metadata.
    pub metadata: bool,
}

/// A slot's state as 256-bit masks: bit `i` stands for sub-block `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotBits {
    /// The backing line the slot holds.
    pub line: u64,
    /// Valid sub-blocks.
    pub valid: [u64; 4],
    /// Dirty sub-blocks.
    pub dirty: [u64; 4],
    /// The line was last accessed as filesystem metadata.
    pub metadata: bool,
}

/// A slot's state with one bool per sub-block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotState {
    /// The backing line the slot holds.
    pub line: u64,
    /// Valid sub-blocks.
    pub valid: Vec<bool>,
    /// Dirty sub-blocks.
    pub dirty: Vec<bool>,
    /// The line was last accessed as filesystem metadata.
    pub metadata: bool,
}

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
    /// Per device and purpose, 1 + the index in `runs` of the newest run (0:
    /// none): the one run a new piece can extend. An index instead of a scan,
    /// so a request's runs stay open for its whole length: a set-associative
    /// cache scatters a request's lines over many cache runs, and flushing
    /// them all every few lines also cut its one backing-device run into
    /// pieces (9x the HDD requests of a fully associative cache on PostMark).
    last_run: [u32; 2 * PURPOSES],
    /// The request being decoded bypasses the cache (sequential cutoff).
    bypass: bool,
    /// Dirty lines above which cleaning runs.
    dirty_target_lines: usize,
    /// Count ops without handing them out (synchronous drivers that only need counters).
    count_only: bool,
    /// No data moves (the timed simulator): see [`Engine::set_model_only`].
    model_only: bool,
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
            last_run: [0; 2 * PURPOSES],
            bypass: false,
            dirty_target_lines: (cfg_dirty_target * geo.slots as f64) as usize,
            count_only: false,
            model_only: false,
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

    /// The driver models time only and moves no data (the timed simulator).
    /// Then a writeback run may take in a line whose previous writeback is
    /// still in flight: ordering those writes matters for data only, and
    /// without this the lines cleaned together, and so the counters, would
    /// depend on device timing (`--no-timing` must count what a timed run counts).
    pub fn set_model_only(&mut self, on: bool) {
        self.model_only = on;
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
        if let Some(e) = entries
            .iter()
            .find(|e| e.valid.len() != subs || e.dirty.len() != subs)
        {
            return Err(format!(
                "slot {}: {} sub-block bits, expected {subs}",
                e.slot,
                e.valid.len()
            ));
        }
        let mask = |v: &[bool]| {
            let mut m = [0u64; 4];
            for (i, _) in v.iter().enumerate().filter(|(_, b)| **b) {
                m[i / 64] |= 1 << (i % 64);
            }
            m
        };
        self.restore_slots(entries.iter().map(|e| {
            (
                e.slot,
                SlotBits {
                    line: e.line,
                    valid: mask(&e.valid),
                    dirty: mask(&e.dirty),
                    metadata: e.metadata,
                },
            )
        }))
    }

    /// Load a recovered slot table into an empty engine, streamed: nothing
    /// proportional to the table is allocated besides the engine's own state
    /// (the iterator is walked three times, hence `Clone`).
    pub fn restore_slots<I>(&mut self, entries: I) -> Result<(), String>
    where
        I: IntoIterator<Item = (Slot, SlotBits)>,
        I::IntoIter: Clone,
    {
        let subs = self.geo.subs;
        let entries = entries.into_iter();
        self.map
            .restore(entries.clone().map(|(s, b)| (s, b.line, b.metadata)))?;
        let bit = |m: &[u64; 4], i: u32| m[(i / 64) as usize] >> (i % 64) & 1 == 1;
        for (slot, b) in entries.clone() {
            for i in 0..subs {
                let (v, d) = (bit(&b.valid, i), bit(&b.dirty, i));
                if d && !v {
                    return Err(format!("slot {slot}: sub-block {i} dirty but not valid"));
                }
                self.map.bits.set_valid(slot, i, i, v);
                self.map.bits.set_dirty(slot, i, i, d);
            }
            let set = self.map.set_of(b.line);
            self.evict.on_miss(set, b.line);
            self.evict.on_insert(set, slot, b.line);
            if self.map.bits.any_dirty(slot) {
                self.dirty.insert(b.line);
            }
        }
        // Slots restored with nothing valid hold nothing.
        for (slot, b) in entries {
            if !self.map.bits.any_valid(slot) {
                self.drop_if_empty(slot, b.line);
            }
        }
        Ok(())
    }

    /// The engine of the same configuration and counters with `slots` slots
    /// (a cache resized while it serves), holding this engine's lines of the
    /// slots below `slots`, in their eviction order (coldest first, as this
    /// engine's policy would evict them). That is for a fully associative
    /// cache; elsewhere the slot count decides each line's set, so the new
    /// engine starts empty (and every line must be clean).
    ///
    /// The driver calls it with no op in flight, after writing back every
    /// dirty line of the slots that go (of all slots, when not fully
    /// associative). It empties this engine's eviction
    /// state: replace this engine with the result.
    pub fn resized(&mut self, slots: u32) -> Result<Engine, String> {
        // Elsewhere the slot count decides which set holds each line: such a
        // cache starts again empty, so every line must be clean.
        let keep = self.cfg.assoc == Assoc::Full;
        if !keep {
            if let Some(s) = (0..self.geo.slots).find(|s| self.map.bits.any_dirty(*s)) {
                return Err(format!(
                    "slot {s} is still dirty: a {} cache starts again empty at its new size, so every line must be written back first",
                    self.cfg.assoc
                ));
            }
        }
        if let Some(s) = (slots..self.geo.slots).find(|s| self.map.bits.any_dirty(*s)) {
            return Err(format!(
                "slot {s} past the new end ({slots} slots) is still dirty"
            ));
        }
        let mut cfg = self.cfg.clone();
        cfg.cache_bytes = slots as u64 * self.geo.line_bytes as u64;
        let mut e = Engine::new(cfg).map_err(|e| e.0)?;
        let mapped: Vec<Slot> = (0..self.geo.slots)
            .filter(|s| keep && self.map.line_of(*s).is_some())
            .collect();
        // Coldest first: what this engine's policy would evict, in order.
        let mut seen = rustc_hash::FxHashSet::default();
        let mut order = Vec::with_capacity(mapped.len());
        let map = &self.map;
        for _ in 0..mapped.len() {
            let v = self.evict.evict(0, &|s| map.line_of(s).unwrap_or(u64::MAX));
            if map.line_of(v).is_some() && seen.insert(v) {
                order.push(v);
            }
        }
        order.extend(mapped.into_iter().filter(|s| !seen.contains(s)));
        let entries: Vec<(Slot, SlotBits)> = order
            .into_iter()
            .filter(|s| *s < slots)
            .filter_map(|s| self.slot_bits(s).map(|b| (s, b)))
            .collect();
        e.restore_slots(entries)?;
        e.stats = self.stats.clone();
        e.next_op = self.next_op;
        e.synchronous = self.synchronous;
        e.count_only = self.count_only;
        e.model_only = self.model_only;
        e.journal = self.journal;
        e.clean_cursor = self.clean_cursor;
        Ok(e)
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

    /// Mark valid sub-blocks `first..=last` of a slot clean without a
    /// writeback: the driver holds them out of cleaning while it writes their
    /// data to the backing device another way (a failed cache write rerouted).
    pub fn hold_clean(&mut self, slot: Slot, first: u32, last: u32) {
        let Some(line) = self.map.line_of(slot) else {
            return;
        };
        self.map.bits.set_dirty(slot, first, last, false);
        if !self.map.bits.any_dirty(slot) {
            self.dirty.remove(&line);
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

    /// Change the write policy of a running engine (`tiercache set`). The
    /// driver must call it with no op in flight, and, when leaving
    /// write-back, with no dirty line left (every policy but write-back
    /// expects the backing device to hold every line).
    pub fn set_write_policy(&mut self, p: WritePolicy) {
        self.cfg.write_policy = p;
    }

    /// Change the dirty target (a share of the lines, 0.0 to 1.0).
    pub fn set_dirty_target(&mut self, share: f64) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&share) {
            return Err(ConfigError(format!(
                "dirty target {share} is not a share (allowed: 0.0 to 1.0)"
            )));
        }
        self.cfg.dirty_target = share;
        self.dirty_target_lines = (share * self.geo.slots as f64) as usize;
        Ok(())
    }

    /// Change the sequential cutoff (only with seq-cutoff admission; the
    /// streams seen so far are forgotten).
    pub fn set_seq_cutoff(&mut self, bytes: u64) -> Result<(), ConfigError> {
        if self.cfg.admission.kind != AdmissionKind::SeqCutoff {
            return Err(ConfigError(format!(
                "the sequential cutoff applies only to seq-cutoff admission, and this cache admits with {} (chosen at format)",
                self.cfg.admission.kind
            )));
        }
        if bytes == 0 {
            return Err(ConfigError(
                "sequential cutoff of 0 bytes (allowed: at least 1 B, e.g. 4MiB)".into(),
            ));
        }
        self.cfg.admission.seq_cutoff_bytes = bytes;
        self.seq = Some(SeqCutoff::new(bytes));
        Ok(())
    }

    /// Whether [`Engine::degrade`] was called.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// [`Engine::slot_state`] without allocating: bit `i` of the 256-bit masks
    /// stands for sub-block `i` (the live server asks on every op completion).
    pub fn slot_bits(&self, slot: Slot) -> Option<SlotBits> {
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
        Some(SlotBits {
            line,
            valid: v,
            dirty: d,
            metadata: self.map.is_metadata(slot),
        })
    }

    /// A slot's line, valid and dirty bits (one bool per sub-block) and class bit.
    pub fn slot_state(&self, slot: Slot) -> Option<SlotState> {
        let line = self.map.line_of(slot)?;
        let subs = self.geo.subs;
        let v = (0..subs).map(|i| self.map.bits.valid(slot, i)).collect();
        let d = (0..subs).map(|i| self.map.bits.dirty(slot, i)).collect();
        Some(SlotState {
            line,
            valid: v,
            dirty: d,
            metadata: self.map.is_metadata(slot),
        })
    }

    /// The configuration (its write policy changes on [`Engine::degrade`]).
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }
    /// The cache geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }
    /// Counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// The line table.
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

    /// The span of a request's buffer in this cache's geometry: see
    /// [`crate::ops::buffer_span`].
    pub fn buffer_span(&self, req: &Request) -> (u64, u64) {
        crate::ops::buffer_span(req, self.geo.sub_block_bytes as u64)
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
        // The check walks the whole table: every 4096 requests, or for a
        // larger cache every (its slots rounded up to a power of two)
        // requests, so that it costs about one slot per request at most.
        #[cfg(debug_assertions)]
        if self
            .stats
            .requests
            .is_multiple_of(4096u64.max(u64::from(self.geo.slots).next_power_of_two()))
        {
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

    /// Split a request into per-line pieces and hand each to the read, write or trim path.
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
        }
        let _ = out;
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
