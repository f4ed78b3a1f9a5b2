//! Segment cleaning and write-back: emptying a victim segment (live dirty
//! blocks written back or moved), background write-back to the dirty target,
//! and checkpoints of the map.

use super::LogCache;
use super::{err, evicted, set_shadows, shadows, CacheError, Ext, Res, State};
use crate::checkpoint::{write_streamed, CheckpointHead, NONE};
use crate::map::Entry;
use crate::segment::{Summary, BLOCK};
use tiercache_flashtier_policy::logstore::LogIo;

/// The live store drives the policy's [`tiercache_flashtier_policy::logstore::Log`]:
/// its decisions call back here where the store does I/O.
impl LogIo for Ext {
    type Ctx = LogCache;
    type Error = CacheError;

    fn roll(st: &mut State, c: &LogCache) -> Res<bool> {
        match c.roll(st) {
            Ok(()) => Ok(true),
            // The cache device failed: the caller goes around it.
            Err(e) if e.0.starts_with("cache device") => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn append_open(
        st: &mut State,
        c: &LogCache,
        lbas: &[u64],
        data: &[u8],
        dirty: bool,
    ) -> Res<bool> {
        c.append_into_open(st, lbas, data, dirty)
    }

    fn fits(st: &mut State, c: &LogCache, lbas: &[u64], data: &[u8], n: usize) -> usize {
        c.fits(st, lbas, data, n)
    }

    fn live_blocks(st: &mut State, c: &LogCache, seg: u32) -> Vec<(u64, u32)> {
        c.live_blocks(st, seg)
    }

    fn read_slots(st: &mut State, c: &LogCache, blocks: &[(u64, u32)]) -> Res<Vec<u8>> {
        let mut data = vec![0u8; blocks.len() * BLOCK as usize];
        for (i, &(lba, slot)) in blocks.iter().enumerate() {
            if c.geo.is_compressed() {
                let out = &mut data[i * BLOCK as usize..(i + 1) * BLOCK as usize];
                c.read_decoded(st, lba, slot, out)?;
                continue;
            }
            let off = c.slot_offset(st, slot);
            if let Err(e) = c
                .cache
                .read_at(&mut data[i * BLOCK as usize..(i + 1) * BLOCK as usize], off)
            {
                c.cache_error(st, "reading a dirty block to clean", &e);
                return Err(err(format!(
                    "cache device: reading dirty block {lba} to move it: {e}"
                )));
            }
        }
        Ok(data)
    }

    fn write_back_block(st: &mut State, c: &LogCache, lba: u64, data: &[u8]) -> Res<()> {
        if let Err(e) = c.backing.write_at(data, lba * BLOCK) {
            return Err(c.backing_error(st, "writing back a dirty block", e));
        }
        st.backing_dirty = true;
        Ok(())
    }

    fn write_back(st: &mut State, c: &LogCache, lbas: &[u64]) -> Res<()> {
        c.write_back_runs(st, lbas)
    }

    fn degraded(st: &State) -> bool {
        st.degraded.is_some()
    }

    fn evicted(st: &mut State, _lba: u64, e: Entry) {
        evicted(st, e);
    }

    fn moved(st: &mut State, old: u32, new: u32) {
        // A moved copy supersedes what its old copy superseded, and the old
        // copy itself, which holds the same data.
        let s = shadows(st, old);
        set_shadows(st, new, s);
    }
}

impl LogCache {
    /// Reclaim segment `v` (the policy's `Log::clean_segment`): drop its
    /// live clean blocks, move its live dirty blocks into the open segment
    /// (or write them back if they do not fit).
    #[cfg(test)]
    pub(crate) fn clean_segment(&self, st: &mut State, v: u32) -> Res<()> {
        st.clean_segment(self, v)
    }

    /// The live blocks of segment `v` as `(block, slot)` in slot order:
    /// from its summary when readable and complete, else by scanning the map.
    fn live_blocks(&self, st: &mut State, v: u32) -> Vec<(u64, u32)> {
        // A sealed segment whose newest summary is not written yet: its
        // entries in memory; else the summary on the device.
        let pending = st
            .sealed
            .iter()
            .find(|o| o.seg == v)
            .map(|o| o.entries.clone());
        let entries = match pending {
            Some(entries) => entries,
            None => {
                let base = self.seg_offset(st, v);
                let mut head = vec![0u8; 2 * self.geo.summary_blocks as usize * BLOCK as usize];
                let summary = match self.cache.read_at(&mut head, base) {
                    Ok(()) => Summary::pick(&head, v, &self.geo)
                        .filter(|s| s.seq == st.segs[v as usize].seq),
                    Err(e) => {
                        self.cache_error(st, "reading a segment summary", &e);
                        None
                    }
                };
                let Some(summary) = summary else {
                    return st.live_by_scan(v);
                };
                summary.entries
            }
        };
        let live: Vec<(u64, u32)> = entries
            .iter()
            .enumerate()
            .filter_map(|(k, &e)| {
                let (lba, _, _) = self.geo.decode(e)?;
                let slot = v * self.data_blocks + k as u32;
                (st.map.get(lba)?.slot == slot).then_some((lba, slot))
            })
            .collect();
        if live.len() < st.segs[v as usize].live as usize {
            // The summary misses live blocks (it must not): never free a segment the map points into.
            tracing::warn!(
                "segment {v}: summary lists {} of {} live blocks; scanning the map",
                live.len(),
                st.segs[v as usize].live
            );
            return st.live_by_scan(v);
        }
        live
    }

    /// Write the cached copies of dirty blocks `lbas` (ascending) back, a
    /// run of consecutive blocks in consecutive slots of one segment at a time.
    fn write_back_runs(&self, st: &mut State, lbas: &[u64]) -> Res<()> {
        let mut i = 0;
        while i < lbas.len() {
            let first = st.map.get(lbas[i]).expect("dirty block is mapped");
            let mut n = 1;
            while i + n < lbas.len()
                && lbas[i + n] == lbas[i] + n as u64
                && st.map.get(lbas[i + n]).map(|e| e.slot) == Some(first.slot + n as u32)
                && !(first.slot + n as u32).is_multiple_of(self.data_blocks)
            {
                n += 1;
            }
            let mut buf = vec![0u8; n * BLOCK as usize];
            if self.geo.is_compressed() {
                // One record per block; consecutive blocks, one backing write.
                let mut n = 1;
                while i + n < lbas.len() && lbas[i + n] == lbas[i] + n as u64 && n < 256 {
                    n += 1;
                }
                let mut buf = vec![0u8; n * BLOCK as usize];
                for (j, b) in buf.chunks_exact_mut(BLOCK as usize).enumerate() {
                    let lba = lbas[i + j];
                    let slot = st.map.get(lba).expect("dirty block is mapped").slot;
                    self.read_decoded(st, lba, slot, b)?;
                }
                if let Err(e) = self.backing.write_at(&buf, lbas[i] * BLOCK) {
                    return Err(self.backing_error(st, "writing back", e));
                }
                st.backing_dirty = true;
                i += n;
                continue;
            }
            if let Err(e) = self
                .cache
                .read_at(&mut buf, self.slot_offset(st, first.slot))
            {
                self.cache_error(st, "reading dirty data to write back", &e);
                return Err(err(format!(
                    "cache device: reading dirty block {}: {e}",
                    lbas[i]
                )));
            }
            if let Err(e) = self.backing.write_at(&buf, lbas[i] * BLOCK) {
                return Err(self.backing_error(st, "writing back", e));
            }
            st.backing_dirty = true;
            i += n;
        }
        Ok(())
    }

    /// Write back up to `max` dirty blocks in backing order from the
    /// cleaning cursor (the policy's `Log::write_back_some`); they stay
    /// cached, clean. Returns how many.
    pub(super) fn write_back_some(&self, st: &mut State, max: usize) -> Res<usize> {
        st.write_back_some(self, max)
    }

    /// Dirty blocks allowed: the target share of slots (none in degraded mode).
    pub(super) fn dirty_limit(&self, st: &State) -> usize {
        if st.degraded.is_some() {
            0
        } else {
            // Compressed layout: the target is a share of the data area
            // (dirty blocks that do not compress fill it at one per block).
            State::dirty_limit(st.sb.dirty_target, st.sb.slots() / self.geo.ratio as u64)
        }
    }

    /// Keep dirty blocks under the target share of slots (all of them in
    /// degraded mode). While the background cleaner runs, a request writes
    /// back only past the target plus a slack (the cleaner keeps the target).
    pub(super) fn clean_to_target(&self, st: &mut State) -> Res<()> {
        let limit = if self.cleaner_on() && st.degraded.is_none() {
            self.foreground_dirty_limit(st)
        } else {
            self.dirty_limit(st)
        };
        st.clean_to(self, limit)?;
        self.nudge_cleaner(st);
        Ok(())
    }

    /// Write a checkpoint of the map (a new epoch; the journal starts over).
    pub(crate) fn checkpoint(&self, st: &mut State) -> Res<()> {
        self.write_checkpoint(st, false)
    }

    /// Checkpoint `st`, or with `empty` a checkpoint of no mapped block and
    /// no open segment (a detach: every later open starts cold).
    pub(crate) fn write_checkpoint(&self, st: &mut State, empty: bool) -> Res<()> {
        // Announcements are journal records of this epoch: a new checkpoint
        // (even one that fails, it may land all the same) hides them.
        st.announced.clear();
        self.flush_backing(st)?;
        // The open segment's summary must cover what the checkpoint says it
        // covers: after a restart the segment is cleaned from its summary.
        self.persist_summary(st)?;
        let (open_seg, open_seq, open_count) = match &st.open_seg {
            Some(o) if !empty => (o.seg, o.seq, o.entries.len() as u32),
            _ => (NONE, 0, 0),
        };
        let head = CheckpointHead {
            epoch: st.epoch + 1,
            next_seq: st.next_seq,
            open_seg,
            open_seq,
            open_count,
            seg_seqs: st.segs.iter().map(|s| s.seq).collect(),
        };
        // The entries are streamed from the map: no copy of it is made (none
        // at all for the empty checkpoint of a detach).
        let entries = st
            .map
            .iter()
            .filter(|_| !empty)
            .map(|(l, e)| (l, e.dirty, e.slot));
        if let Err(e) = self
            .cache
            .flush()
            .and_then(|_| write_streamed(self.cache.as_ref(), &st.sb, &head, entries))
        {
            // The new checkpoint may have landed all the same (its header
            // written, the last flush failed): a later flush can make it
            // durable, and recovery would then take it and look only for
            // journal records of its epoch. No segment may be reused under
            // the old epoch's journal, which that checkpoint hides: the
            // next segment opened checkpoints first (retrying this epoch).
            st.ckpt_before_reuse = true;
            self.cache_error(st, "writing a checkpoint", &e);
            return Err(err(format!("cache device: writing a checkpoint: {e}")));
        }
        st.epoch += 1;
        st.journal_next = 0;
        st.need_ckpt = false;
        st.shadows.fill(0);
        st.ckpt_before_reuse = false;
        st.stats.checkpoints += 1;
        Ok(())
    }
}

impl LogCache {
    /// Compressed layout: read and decode the record of `lba` in `slot`
    /// into `out` (under the lock: cleaning and write-back). A record that
    /// fails its checksum is an error.
    pub(super) fn read_decoded(
        &self,
        st: &mut State,
        lba: u64,
        slot: u32,
        out: &mut [u8],
    ) -> Res<()> {
        let units = self.slot_units(st, slot);
        let rec = match self.read_record(st, slot) {
            Ok(r) => r,
            Err(e) => {
                self.cache_error(st, "reading a cached record", &e);
                return Err(err(format!("cache device: reading block {lba}: {e}")));
            }
        };
        crate::compress::decode(&rec, units, lba, out).map_err(|e| {
            st.stats.checksum_errors += 1;
            err(format!("cache device: {e}"))
        })
    }
}
