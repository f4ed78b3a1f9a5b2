//! Segment cleaning and write-back: emptying a victim segment (live dirty
//! blocks written back or moved), background write-back to the dirty target,
//! and checkpoints of the map.

use super::LogCache;
use super::{err, set_shadows, shadows, Res, State};
use crate::checkpoint::{Checkpoint, NONE};
use crate::cleaning::SegState;
use crate::map::Entry;
use crate::segment::{decode_entry, Summary, BLOCK};

impl LogCache {
    /// Reclaim segment `v`: drop its live clean blocks, move its live dirty
    /// blocks into the open segment (or write them back if they do not fit).
    pub(crate) fn clean_segment(&self, st: &mut State, v: u32) -> Res<()> {
        let live = self.live_blocks(st, v);
        let mut dirty = Vec::new();
        for (lba, slot) in live {
            if st.map.get(lba).is_some_and(|e| e.dirty) {
                dirty.push((lba, slot));
            } else {
                self.evict(st, lba);
                st.stats.silent_evictions += 1;
            }
        }
        if !dirty.is_empty() {
            self.move_dirty(st, &dirty)?;
        }
        debug_assert_eq!(
            st.segs[v as usize].live, 0,
            "segment {v} still has live blocks"
        );
        st.segs[v as usize].state = SegState::Free;
        st.free.push_back(v);
        st.stats.segments_cleaned += 1;
        Ok(())
    }

    /// The live blocks of segment `v` as `(block, slot)`: from its summary
    /// when readable and complete, else by scanning the map.
    fn live_blocks(&self, st: &mut State, v: u32) -> Vec<(u64, u32)> {
        let base = self.seg_offset(st, v);
        let mut head = vec![0u8; 2 * self.geo.summary_blocks as usize * BLOCK as usize];
        let summary = match self.cache.read_at(&mut head, base) {
            Ok(()) => {
                Summary::pick(&head, v, &self.geo).filter(|s| s.seq == st.segs[v as usize].seq)
            }
            Err(e) => {
                self.cache_error(st, "reading a segment summary", &e);
                None
            }
        };
        // (block, slot) of every live block; without a summary, scan the map.
        let mut live: Vec<(u64, u32)> = match &summary {
            Some(s) => s
                .entries
                .iter()
                .enumerate()
                .filter_map(|(k, &e)| {
                    let (lba, _) = decode_entry(e)?;
                    let slot = v * self.data_blocks + k as u32;
                    (st.map.get(lba)?.slot == slot).then_some((lba, slot))
                })
                .collect(),
            None => st
                .map
                .iter()
                .filter(|(_, e)| e.slot / self.data_blocks == v)
                .map(|(l, e)| (l, e.slot))
                .collect(),
        };
        if summary.is_some() && live.len() < st.segs[v as usize].live as usize {
            // The summary misses live blocks (it must not): never free a segment the map points into.
            tracing::warn!(
                "segment {v}: summary lists {} of {} live blocks; scanning the map",
                live.len(),
                st.segs[v as usize].live
            );
            live = st
                .map
                .iter()
                .filter(|(_, e)| e.slot / self.data_blocks == v)
                .map(|(l, e)| (l, e.slot))
                .collect();
        }
        live
    }

    /// Move the live dirty blocks `dirty` (`(block, old slot)`) of a segment
    /// being cleaned into the open segment, or write them back when they do
    /// not fit (or the cache is degraded).
    fn move_dirty(&self, st: &mut State, dirty: &[(u64, u32)]) -> Res<()> {
        let mut data = vec![0u8; dirty.len() * BLOCK as usize];
        for (i, &(_, slot)) in dirty.iter().enumerate() {
            let off = self.slot_offset(st, slot);
            if let Err(e) = self
                .cache
                .read_at(&mut data[i * BLOCK as usize..(i + 1) * BLOCK as usize], off)
            {
                self.cache_error(st, "reading a dirty block to clean", &e);
                return Err(err(format!(
                    "cache device: reading dirty block {} to move it: {e}",
                    dirty[i].0
                )));
            }
        }
        let lbas: Vec<u64> = dirty.iter().map(|d| d.0).collect();
        let moved = st.degraded.is_none()
            && self.room(st) >= lbas.len()
            && self.append_into_open(st, &lbas, &data, true)?;
        if moved {
            // A moved copy supersedes what its old copy superseded, and
            // the old copy itself, which holds the same data.
            for &(lba, old) in dirty {
                let slot = st.map.get(lba).expect("moved block is mapped").slot;
                let s = shadows(st, old);
                set_shadows(st, slot, s);
            }
            st.stats.moved_dirty += lbas.len() as u64;
        } else {
            for (i, &lba) in lbas.iter().enumerate() {
                if let Err(e) = self.backing.write_at(
                    &data[i * BLOCK as usize..(i + 1) * BLOCK as usize],
                    lba * BLOCK,
                ) {
                    return Err(self.backing_error(st, "writing back a dirty block", e));
                }
                st.backing_dirty = true;
                self.evict(st, lba);
                st.stats.cleaning_written_back += 1;
            }
        }
        Ok(())
    }

    /// Write back up to `max` dirty blocks in backing order from the
    /// cleaning cursor; they stay cached, clean. Returns how many.
    pub(super) fn write_back_some(&self, st: &mut State, max: usize) -> Res<usize> {
        let mut lbas = st.map.dirty_from(st.clean_cursor, max);
        if lbas.is_empty() && st.clean_cursor > 0 {
            st.clean_cursor = 0;
            lbas = st.map.dirty_from(0, max);
        }
        let mut i = 0;
        while i < lbas.len() {
            // A run of consecutive blocks in consecutive slots of one segment.
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
            for k in 0..n {
                let e = st.map.get(lbas[i + k]).expect("mapped");
                st.map
                    .insert(
                        lbas[i + k],
                        Entry {
                            slot: e.slot,
                            dirty: false,
                        },
                    )
                    .map_err(err)?;
            }
            st.stats.written_back += n as u64;
            i += n;
        }
        if let Some(&l) = lbas.last() {
            st.clean_cursor = l + 1;
        }
        Ok(lbas.len())
    }

    /// Keep dirty blocks under the target share of slots (all of them in degraded mode).
    pub(super) fn clean_to_target(&self, st: &mut State) -> Res<()> {
        let target = if st.degraded.is_some() {
            0
        } else {
            (st.sb.dirty_target * st.sb.slots() as f64) as usize
        };
        while st.map.dirty() > target {
            if self.write_back_some(st, 256)? == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Write a checkpoint of the map (a new epoch; the journal starts over).
    pub(crate) fn checkpoint(&self, st: &mut State) -> Res<()> {
        if st.backing_dirty {
            if let Err(e) = self.backing.flush() {
                return Err(self.backing_error(st, "flush", e));
            }
            st.backing_dirty = false;
        }
        // The open segment's summary must cover what the checkpoint says it
        // covers: after a restart the segment is cleaned from its summary.
        self.persist_summary(st)?;
        let (open_seg, open_seq, open_count) = match &st.open {
            Some(o) => (o.seg, o.seq, o.entries.len() as u32),
            None => (NONE, 0, 0),
        };
        let ck = Checkpoint {
            epoch: st.epoch + 1,
            next_seq: st.next_seq,
            open_seg,
            open_seq,
            open_count,
            seg_seqs: st.segs.iter().map(|s| s.seq).collect(),
            entries: st.map.iter().map(|(l, e)| (l, e.dirty, e.slot)).collect(),
        };
        if let Err(e) = self
            .cache
            .flush()
            .and_then(|_| ck.write(self.cache.as_ref(), &st.sb))
        {
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
