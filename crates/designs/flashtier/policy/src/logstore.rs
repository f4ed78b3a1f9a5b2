//! The log-structured store's segments and which one to clean next: pure
//! state and decisions shared by the live store (`tiercache-flashtier-live`)
//! and its simulation.
//!
//! Cleaning a segment drops its live clean blocks silently (the backing
//! device holds them: FlashTier's silent eviction) and moves only its live
//! dirty blocks (to the open segment, or back to the backing device when
//! they do not fit). The victim is the segment whose reclaiming pays most:
//! fewest live blocks (greedy), or most free space weighted by age
//! (cost-benefit, as in LFS): old segments hold cold data, so evicting them
//! is also an approximation of LRU.

use crate::gc::{self, Candidate, GcPolicy, Reclaim};
use crate::sparse::{Entry, SparseMap};
use serde::Serialize;
use std::collections::VecDeque;

/// Where a segment is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegState {
    /// Holds nothing the map points at; may be opened.
    Free,
    /// Being appended to.
    Open,
    /// Full (or closed by a restart); a cleaning candidate.
    Sealed,
}

/// What cleaning knows about one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegInfo {
    pub state: SegState,
    /// Sequence number of its current life (higher = younger).
    pub seq: u64,
    /// Mapped blocks in it.
    pub live: u32,
}

/// Bytes of a segment summary's header (the live store's on-disk format:
/// magic, segment, sequence, version, count, crc32c, padding).
pub const SUMMARY_HEADER: u64 = 40;

/// Blocks of one summary copy in a segment of `seg_blocks` 4 KiB blocks: the
/// header plus 8 bytes per data block, rounded up to blocks (a segment holds
/// two copies, then `seg_blocks - 2 * summary_blocks` data slots).
pub fn summary_blocks(seg_blocks: u32) -> u32 {
    let mut n = 1u32;
    while SUMMARY_HEADER + 8 * u64::from(seg_blocks.saturating_sub(2 * n))
        > u64::from(n) * BLOCK_BYTES as u64
    {
        n += 1;
    }
    n
}

/// Data slots of a segment of `seg_bytes` (a multiple of 4 KiB from 64 KiB
/// to 64 MiB).
pub fn data_blocks(seg_bytes: u64) -> Result<u32, String> {
    let b = BLOCK_BYTES as u64;
    if !seg_bytes.is_multiple_of(b) || !(16 * b..=64 << 20).contains(&seg_bytes) {
        return Err(format!(
            "segment size {seg_bytes} must be a multiple of 4 KiB between 64 KiB and 64 MiB"
        ));
    }
    let seg_blocks = (seg_bytes / b) as u32;
    Ok(seg_blocks - 2 * summary_blocks(seg_blocks))
}

/// Free segments kept ready; segment cleaning starts below this.
pub const RESERVE: usize = 2;

/// The store's decision counters: the same names in the live store's
/// `stats --json` and in `sim --mode ssc --ftl log --json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LogCounters {
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    /// Read misses cached.
    pub fills: u64,
    /// Blocks appended to the log (client data, fills and moved dirty blocks).
    pub appended_blocks: u64,
    pub segments_opened: u64,
    pub segments_cleaned: u64,
    /// Live clean blocks dropped by segment cleaning (FlashTier's silent eviction).
    pub silent_evictions: u64,
    /// Live dirty blocks moved by segment cleaning to the open segment.
    pub moved_dirty: u64,
    /// Live dirty blocks segment cleaning wrote back instead (no room to move).
    pub cleaning_written_back: u64,
    /// Dirty blocks written back by write-back cleaning (dirty target, flush, detach).
    pub written_back: u64,
}

/// What a driver of the log does with devices (the live store) or without
/// (the simulator): the store's decisions ([`Log`]'s methods) call these at
/// the points where the live store does I/O. `Self` is the driver's own
/// state, kept in [`Log::ext`].
pub trait LogIo: Sized {
    /// What the driver needs besides its state (the live store's devices).
    type Ctx: ?Sized;
    /// A failed operation.
    type Error;
    /// Seal the open segment and open the next free one through
    /// [`Log::seal_open`], [`Log::begin_open`] and [`Log::finish_open`].
    /// `Ok(false)`: the cache device failed (the caller goes around the cache).
    fn roll(log: &mut Log<Self>, ctx: &Self::Ctx) -> Result<bool, Self::Error>;
    /// Write whole blocks `lbas` (their bytes in `data`, empty in a
    /// simulation) into the open segment, which has room for them, then
    /// [`Log::place`] them; on a cache write error [`Log::burn`] the slots and
    /// return `Ok(false)`.
    fn append_open(
        log: &mut Log<Self>,
        ctx: &Self::Ctx,
        lbas: &[u64],
        data: &[u8],
        dirty: bool,
    ) -> Result<bool, Self::Error>;
    /// How many of the first `n` blocks `lbas` (bytes in `data`) fit the
    /// open segment's data area, which has at least `n` free slots. A driver
    /// that stores variable-size records (a compressed layout) can fill the
    /// area before the slots run out: it returns 0 only after [`Log::burn`]ing
    /// the open segment's remaining slots, so that the next append rolls.
    /// Default: all `n`.
    fn fits(
        _log: &mut Log<Self>,
        _ctx: &Self::Ctx,
        _lbas: &[u64],
        _data: &[u8],
        n: usize,
    ) -> usize {
        n
    }
    /// The live blocks of sealed segment `seg` as `(block, slot)` in slot
    /// order ([`Log::live_by_scan`] does it from the map).
    fn live_blocks(log: &mut Log<Self>, ctx: &Self::Ctx, seg: u32) -> Vec<(u64, u32)>;
    /// The bytes of `blocks` (`(block, slot)`), for moving them.
    fn read_slots(
        log: &mut Log<Self>,
        ctx: &Self::Ctx,
        blocks: &[(u64, u32)],
    ) -> Result<Vec<u8>, Self::Error>;
    /// Write one block's bytes to the backing device (cleaning a dirty block
    /// that cannot move).
    fn write_back_block(
        log: &mut Log<Self>,
        ctx: &Self::Ctx,
        lba: u64,
        data: &[u8],
    ) -> Result<(), Self::Error>;
    /// Write the cached copies of dirty blocks `lbas` (ascending) to the
    /// backing device; the log then marks them clean.
    fn write_back(log: &mut Log<Self>, ctx: &Self::Ctx, lbas: &[u64]) -> Result<(), Self::Error>;
    /// Nothing new is cached (too many cache device errors).
    fn degraded(log: &Log<Self>) -> bool;
    /// `lba` left the map by cleaning (silent eviction or write-back) with
    /// entry `e`.
    fn evicted(_log: &mut Log<Self>, _lba: u64, _e: Entry) {}
    /// A dirty block moved by cleaning from slot `old` to slot `new`.
    fn moved(_log: &mut Log<Self>, _old: u32, _new: u32) {}
}

/// The log-structured store's state and decisions, without I/O: the
/// unified sparse map, the segment table, free segments in the order they
/// were freed, the open segment, the write-back cursor and the counters.
/// `ext` is the driver's state (reached through `Deref`).
#[derive(Debug)]
pub struct Log<X> {
    pub map: SparseMap,
    pub segs: Vec<SegInfo>,
    /// Free segments, reused in the order they were freed.
    pub free: VecDeque<u32>,
    /// The open segment.
    pub open: Option<u32>,
    /// Slots of the open segment used (appended or burnt by a failed write).
    pub used: u32,
    pub next_seq: u64,
    /// Slots per segment.
    pub data_blocks: u32,
    /// Write-back cleaning resumes at this block.
    pub clean_cursor: u64,
    /// Segments in use: those from here on are being retired (a shrink,
    /// [`Self::retire_from`]): never opened again, and cleaning one leaves
    /// it free but off the free list.
    pub active: u32,
    /// How segment cleaning picks its victim.
    pub victim: GcPolicy,
    pub counters: LogCounters,
    /// The driver's state.
    pub ext: X,
}

impl<X> std::ops::Deref for Log<X> {
    type Target = X;
    fn deref(&self) -> &X {
        &self.ext
    }
}

impl<X> std::ops::DerefMut for Log<X> {
    fn deref_mut(&mut self) -> &mut X {
        &mut self.ext
    }
}

/// The blocks `a..b` of `data` (4 KiB each), or nothing when `data` is empty.
fn blocks_of(data: &[u8], a: usize, b: usize) -> &[u8] {
    if data.is_empty() {
        data
    } else {
        &data[a * BLOCK_BYTES..b * BLOCK_BYTES]
    }
}

/// Bytes of a block of the store.
pub const BLOCK_BYTES: usize = 4096;

impl<X> Log<X> {
    /// A log over `map` and the segment table `segs` (segments of
    /// `data_blocks` slots; the free ones become the free list in index
    /// order), next sequence number `next_seq`, no segment open.
    pub fn new(
        map: SparseMap,
        segs: Vec<SegInfo>,
        next_seq: u64,
        data_blocks: u32,
        ext: X,
    ) -> Self {
        let free = segs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == SegState::Free)
            .map(|(i, _)| i as u32)
            .collect();
        Log {
            active: segs.len() as u32,
            map,
            segs,
            free,
            open: None,
            used: 0,
            next_seq,
            data_blocks,
            clean_cursor: 0,
            victim: GcPolicy::CostBenefit,
            counters: LogCounters::default(),
            ext,
        }
    }

    /// Slots left in the open segment.
    pub fn room(&self) -> usize {
        self.open
            .map_or(0, |_| (self.data_blocks - self.used) as usize)
    }

    /// The segment of `slot`.
    pub fn seg_of(&self, slot: u32) -> usize {
        (slot / self.data_blocks) as usize
    }

    /// Count an access to `lba` as a hit or a miss.
    pub fn count(&mut self, lba: u64, read: bool) -> bool {
        let hit = self.map.get(lba).is_some();
        let c = &mut self.counters;
        match (read, hit) {
            (true, true) => c.read_hits += 1,
            (true, false) => c.read_misses += 1,
            (false, true) => c.write_hits += 1,
            (false, false) => c.write_misses += 1,
        }
        hit
    }

    /// Map `lbas` to the next slots of the open segment (their write
    /// completed). Returns, per block, its slot and the entry it replaced.
    pub fn place(
        &mut self,
        lbas: &[u64],
        dirty: bool,
    ) -> Result<Vec<(u32, Option<Entry>)>, String> {
        let seg = self.open.ok_or("no open segment")?;
        debug_assert!(lbas.len() <= self.room(), "append past the open segment");
        let mut out = Vec::with_capacity(lbas.len());
        for &lba in lbas {
            let slot = seg * self.data_blocks + self.used;
            let old = self.map.insert(lba, Entry { slot, dirty })?;
            if let Some(o) = old {
                let s = self.seg_of(o.slot);
                self.segs[s].live -= 1;
            }
            self.segs[seg as usize].live += 1;
            self.used += 1;
            out.push((slot, old));
        }
        self.counters.appended_blocks += lbas.len() as u64;
        Ok(out)
    }

    /// `n` slots of the open segment hold nothing (their write failed).
    pub fn burn(&mut self, n: usize) {
        self.used += n as u32;
        debug_assert!(self.used <= self.data_blocks);
    }

    /// Unmap `lba`, returning its entry.
    pub fn evict(&mut self, lba: u64) -> Option<Entry> {
        let o = self.map.remove(lba)?;
        let s = self.seg_of(o.slot);
        self.segs[s].live -= 1;
        Some(o)
    }

    /// Mark a cached block clean (its write-back landed).
    pub fn set_clean(&mut self, lba: u64) {
        if let Some(e) = self.map.get(lba) {
            let _ = self.map.insert(
                lba,
                Entry {
                    slot: e.slot,
                    dirty: false,
                },
            );
        }
    }

    /// Seal the open segment (it becomes a cleaning candidate).
    pub fn seal_open(&mut self) {
        if let Some(seg) = self.open.take() {
            self.segs[seg as usize].state = SegState::Sealed;
        }
    }

    /// Take the next free segment for a new life: its number and sequence
    /// number (`None` when no segment is free).
    pub fn begin_open(&mut self) -> Option<(u32, u64)> {
        debug_assert!(self.open.is_none(), "a segment is open");
        let seg = self.free.pop_front()?;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.segs[seg as usize] = SegInfo {
            state: SegState::Open,
            seq,
            live: 0,
        };
        Some((seg, seq))
    }

    /// The new life of `seg` is on disk (`ok`): it is the open segment; or
    /// opening failed, and it stays used as a sealed empty segment.
    pub fn finish_open(&mut self, seg: u32, ok: bool) {
        if ok {
            self.open = Some(seg);
            self.used = 0;
            self.counters.segments_opened += 1;
        } else {
            self.segs[seg as usize].state = SegState::Sealed;
        }
    }

    /// The live blocks of `seg` as `(block, slot)` in slot order, from the map.
    pub fn live_by_scan(&self, seg: u32) -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = self
            .map
            .iter()
            .filter(|(_, e)| e.slot / self.data_blocks == seg)
            .map(|(l, e)| (l, e.slot))
            .collect();
        v.sort_unstable_by_key(|x| x.1);
        v
    }

    /// The next segment to clean under the victim rule.
    pub fn victim_segment(&self) -> Option<u32> {
        pick_victim(&self.segs, self.data_blocks, self.next_seq, self.victim)
    }

    /// The dirty blocks write-back cleaning takes next: up to `max` in
    /// backing order from the cursor, wrapping around once.
    pub fn write_back_plan(&mut self, max: usize) -> Vec<u64> {
        let mut lbas = self.map.dirty_from(self.clean_cursor, max);
        if lbas.is_empty() && self.clean_cursor > 0 {
            self.clean_cursor = 0;
            lbas = self.map.dirty_from(0, max);
        }
        lbas
    }

    /// The dirty blocks allowed: a share `target` of `slots`.
    pub fn dirty_limit(target: f64, slots: u64) -> usize {
        (target * slots as f64) as usize
    }

    /// Grow to `nsegs` segments (more than now, none being retired): the
    /// new ones are free, reused after the free ones there are; the map is
    /// reshaped for the new slots. Fails, changing nothing, when the map
    /// cannot take them.
    pub fn add_segments(&mut self, nsegs: u32) -> Result<(), String> {
        let old = self.segs.len() as u32;
        if nsegs <= old || self.active != old {
            return Err(format!("cannot grow {old} segments to {nsegs}"));
        }
        self.map = self
            .map
            .with_slots(nsegs as u64 * self.data_blocks as u64)?;
        for s in old..nsegs {
            self.segs.push(SegInfo {
                state: SegState::Free,
                seq: 0,
                live: 0,
            });
            self.free.push_back(s);
        }
        self.active = nsegs;
        Ok(())
    }

    /// Start shrinking to `nsegs` segments: segments `nsegs..` leave the
    /// free list and are never opened again; the caller cleans the ones
    /// still in use ([`Self::retiring`], [`Self::clean_segment`]), then
    /// drops them ([`Self::drop_retired`]) or takes the shrink back
    /// ([`Self::unretire`]).
    pub fn retire_from(&mut self, nsegs: u32) {
        self.active = nsegs.min(self.segs.len() as u32);
        let keep = self.active;
        self.free.retain(|&s| s < keep);
    }

    /// The next retired segment still in use (sealed or open), if any.
    pub fn retiring(&self) -> Option<u32> {
        (self.active..self.segs.len() as u32)
            .find(|&s| self.segs[s as usize].state != SegState::Free)
    }

    /// Take back [`Self::retire_from`]: every segment is in use again, the
    /// retired ones cleaned meanwhile back on the free list.
    pub fn unretire(&mut self) {
        for s in self.active..self.segs.len() as u32 {
            if self.segs[s as usize].state == SegState::Free && !self.free.contains(&s) {
                self.free.push_back(s);
            }
        }
        self.active = self.segs.len() as u32;
    }

    /// The map reshaped for the segments in use (all retired ones free): the
    /// first step of [`Self::drop_retired`], which fails without changing
    /// anything.
    pub fn map_for_active(&self) -> Result<SparseMap, String> {
        if let Some(s) = self.retiring() {
            return Err(format!("retired segment {s} is still in use"));
        }
        self.map
            .with_slots(self.active as u64 * self.data_blocks as u64)
    }

    /// Finish a shrink: the retired segments (all free) leave the segment
    /// table, and `map` (from [`Self::map_for_active`]) replaces the map.
    pub fn drop_retired(&mut self, map: SparseMap) {
        debug_assert!(self.retiring().is_none());
        self.segs.truncate(self.active as usize);
        self.map = map;
    }

    /// Debug builds: the segment table agrees with the map (cheap counts only).
    pub fn debug_check(&self) {
        debug_assert!(self.map.len() <= self.segs.len() * self.data_blocks as usize);
        debug_assert!(self
            .open
            .is_none_or(|s| self.segs[s as usize].state == SegState::Open));
        debug_assert!(self.used <= self.data_blocks);
    }
}

impl<X: LogIo> Log<X> {
    /// Append whole blocks `lbas` (bytes in `data`, empty in a simulation)
    /// to the log, cleaning segments to keep [`RESERVE`] free and opening
    /// segments as needed. Returns how many were appended before the cache
    /// device failed (the rest were not).
    pub fn append(
        &mut self,
        ctx: &X::Ctx,
        lbas: &[u64],
        data: &[u8],
        dirty: bool,
    ) -> Result<usize, X::Error> {
        let mut done = 0;
        while done < lbas.len() {
            if self.free.len() < RESERVE {
                self.ensure_free(ctx, RESERVE)?;
            }
            if self.room() == 0 {
                if self.free.is_empty() {
                    self.ensure_free(ctx, RESERVE)?;
                }
                if !X::roll(self, ctx)? {
                    return Ok(done);
                }
            }
            let n = self.room().min(lbas.len() - done);
            let n = X::fits(
                self,
                ctx,
                &lbas[done..done + n],
                blocks_of(data, done, done + n),
                n,
            );
            if n == 0 {
                debug_assert_eq!(self.room(), 0, "fits returned 0 without burning");
                continue;
            }
            if !X::append_open(
                self,
                ctx,
                &lbas[done..done + n],
                blocks_of(data, done, done + n),
                dirty,
            )? {
                return Ok(done);
            }
            done += n;
        }
        self.debug_check();
        Ok(done)
    }

    /// Read misses `lbas` cached clean: [`Self::append`], counted as fills.
    pub fn fill(&mut self, ctx: &X::Ctx, lbas: &[u64], data: &[u8]) -> Result<usize, X::Error> {
        let done = self.append(ctx, lbas, data, false)?;
        self.counters.fills += done as u64;
        Ok(done)
    }

    /// Clean segments until `n` are free (or no sealed segment is left).
    pub fn ensure_free(&mut self, ctx: &X::Ctx, n: usize) -> Result<(), X::Error> {
        while self.free.len() < n {
            let Some(v) = self.victim_segment() else {
                break;
            };
            self.clean_segment(ctx, v)?;
        }
        Ok(())
    }

    /// Reclaim segment `v`: its live clean blocks are evicted silently, its
    /// live dirty blocks move to the open segment (or are written back when
    /// they do not fit or nothing new is cached); then it is free.
    pub fn clean_segment(&mut self, ctx: &X::Ctx, v: u32) -> Result<(), X::Error> {
        let live = X::live_blocks(self, ctx, v);
        let mut dirty = Vec::new();
        for (lba, slot) in live {
            let d = self.map.get(lba).is_some_and(|e| e.dirty);
            match gc::reclaim(d, true) {
                Reclaim::Move => dirty.push((lba, slot)),
                Reclaim::Evict => {
                    if let Some(e) = self.evict(lba) {
                        X::evicted(self, lba, e);
                    }
                    self.counters.silent_evictions += 1;
                }
            }
        }
        if !dirty.is_empty() {
            self.move_dirty(ctx, &dirty)?;
        }
        debug_assert_eq!(
            self.segs[v as usize].live, 0,
            "segment {v} still has live blocks"
        );
        self.segs[v as usize].state = SegState::Free;
        if v < self.active {
            self.free.push_back(v);
        }
        self.counters.segments_cleaned += 1;
        Ok(())
    }

    fn move_dirty(&mut self, ctx: &X::Ctx, dirty: &[(u64, u32)]) -> Result<(), X::Error> {
        let data = X::read_slots(self, ctx, dirty)?;
        let lbas: Vec<u64> = dirty.iter().map(|d| d.0).collect();
        let moved = !X::degraded(self)
            && self.room() >= lbas.len()
            && X::append_open(self, ctx, &lbas, &data, true)?;
        if moved {
            for &(lba, old) in dirty {
                let new = self.map.get(lba).map_or(old, |e| e.slot);
                X::moved(self, old, new);
            }
            self.counters.moved_dirty += lbas.len() as u64;
        } else {
            for (i, &lba) in lbas.iter().enumerate() {
                X::write_back_block(self, ctx, lba, blocks_of(&data, i, i + 1))?;
                if let Some(e) = self.evict(lba) {
                    X::evicted(self, lba, e);
                }
                self.counters.cleaning_written_back += 1;
            }
        }
        Ok(())
    }

    /// Write back up to `max` dirty blocks in backing order from the
    /// cursor; they stay cached, clean. Returns how many.
    pub fn write_back_some(&mut self, ctx: &X::Ctx, max: usize) -> Result<usize, X::Error> {
        let lbas = self.write_back_plan(max);
        if lbas.is_empty() {
            return Ok(0);
        }
        X::write_back(self, ctx, &lbas)?;
        for &l in &lbas {
            self.set_clean(l);
        }
        self.counters.written_back += lbas.len() as u64;
        self.clean_cursor = lbas[lbas.len() - 1] + 1;
        Ok(lbas.len())
    }

    /// Write back until at most `limit` blocks are dirty.
    pub fn clean_to(&mut self, ctx: &X::Ctx, limit: usize) -> Result<(), X::Error> {
        while self.map.dirty() > limit {
            if self.write_back_some(ctx, 256)? == 0 {
                break;
            }
        }
        Ok(())
    }
}

/// The sealed segment to clean next (`None` if there is none): the one
/// victim rule ([`crate::gc::pick_victim`]) on the sealed segments' live
/// counts and sequence numbers. `data_blocks` is the slot count of a segment,
/// `now` the next sequence number.
pub fn pick_victim(segs: &[SegInfo], data_blocks: u32, now: u64, policy: GcPolicy) -> Option<u32> {
    gc::pick_victim(
        policy,
        data_blocks,
        now,
        segs.iter()
            .enumerate()
            .filter(|(_, s)| s.state == SegState::Sealed)
            .map(|(i, s)| Candidate {
                id: i as u32,
                valid: s.live,
                stamp: s.seq,
            }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(state: SegState, seq: u64, live: u32) -> SegInfo {
        SegInfo { state, seq, live }
    }

    /// Growing adds free segments after the free ones and a map for the
    /// new slots; retiring takes segments off the free list until they are
    /// emptied and dropped, or given back.
    #[test]
    fn segments_are_added_retired_and_given_back() {
        let d = 4u32;
        let mut map = SparseMap::new(16, 1000, 16).unwrap();
        // Block 7 in segment 1, block 9 (dirty) in segment 3.
        map.insert(
            7,
            Entry {
                slot: 5,
                dirty: false,
            },
        )
        .unwrap();
        map.insert(
            9,
            Entry {
                slot: 13,
                dirty: true,
            },
        )
        .unwrap();
        let segs = vec![
            s(SegState::Free, 0, 0),
            s(SegState::Sealed, 1, 1),
            s(SegState::Free, 0, 0),
            s(SegState::Sealed, 2, 1),
        ];
        let mut log = Log::new(map, segs, 3, d, ());
        assert_eq!(Vec::from(log.free.clone()), vec![0, 2]);
        // Grow to 6 segments: 4 and 5 free, after 0 and 2; slot 23 fits.
        log.add_segments(6).unwrap();
        assert_eq!(Vec::from(log.free.clone()), vec![0, 2, 4, 5]);
        assert_eq!(
            log.map.get(9),
            Some(Entry {
                slot: 13,
                dirty: true
            })
        );
        log.map
            .insert(
                11,
                Entry {
                    slot: 23,
                    dirty: false,
                },
            )
            .unwrap();
        log.map.remove(11);
        assert!(log.add_segments(6).is_err(), "not a growth");
        // Shrink to 2: 2..6 leave the free list; segment 3 is still in use.
        log.retire_from(2);
        assert_eq!(Vec::from(log.free.clone()), vec![0]);
        assert_eq!(log.retiring(), Some(3));
        assert!(log.map_for_active().is_err());
        // Given back: every free segment is on the free list again.
        log.unretire();
        assert_eq!(log.active, 6);
        assert_eq!(Vec::from(log.free.clone()), vec![0, 2, 4, 5]);
        // Shrink to 3 with segment 3 emptied (as cleaning does).
        log.retire_from(3);
        log.evict(9);
        log.segs[3].state = SegState::Free;
        assert_eq!(log.retiring(), None);
        let m = log.map_for_active().unwrap();
        log.drop_retired(m);
        assert_eq!(log.segs.len(), 3);
        assert_eq!(
            log.map.get(7),
            Some(Entry {
                slot: 5,
                dirty: false
            })
        );
        // A map for fewer slots than an entry needs is refused.
        assert!(log.map.with_slots(5).is_err());
        assert!(log.map.with_slots(6).is_ok());
        assert_eq!(Vec::from(log.free.clone()), vec![0, 2]);
    }

    #[test]
    fn greedy_takes_the_emptiest_sealed_segment() {
        let segs = [
            s(SegState::Sealed, 1, 200),
            s(SegState::Open, 9, 0),
            s(SegState::Sealed, 5, 10),
            s(SegState::Free, 0, 0),
            s(SegState::Sealed, 6, 10),
        ];
        assert_eq!(pick_victim(&segs, 254, 10, GcPolicy::Greedy), Some(2));
        assert_eq!(pick_victim(&segs[1..2], 254, 10, GcPolicy::Greedy), None);
    }

    #[test]
    fn cost_benefit_prefers_old_segments_at_equal_use() {
        let segs = [
            s(SegState::Sealed, 100, 100),
            s(SegState::Sealed, 10, 100),
            s(SegState::Sealed, 99, 20),
        ];
        // Old and half full beats young and nearly empty when it is old enough.
        assert_eq!(pick_victim(&segs, 254, 101, GcPolicy::CostBenefit), Some(1));
        assert_eq!(pick_victim(&segs, 254, 101, GcPolicy::Greedy), Some(2));
    }
}
