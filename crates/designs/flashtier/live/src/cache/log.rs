//! The log: appending blocks to the open segment, rolling it (journal
//! record, then the segment summary), and keeping free segments ready.

use super::LogCache;
use super::{err, set_shadows, OpenSeg, Res, State};
use crate::checkpoint::JournalRecord;
use crate::compress::{self, Record, UNIT};
use crate::segment::{entry, Summary, BLOCK, EMPTY};

impl LogCache {
    /// Flush the data, write the open segment's summary (into the older
    /// copy), flush again: afterwards every entry so far is durable.
    pub(super) fn persist_summary(&self, st: &mut State) -> Res<()> {
        if st
            .open_seg
            .as_ref()
            .is_none_or(|o| o.durable == o.entries.len())
        {
            return Ok(());
        }
        // After an unclean shutdown a clean entry unmaps its block (the
        // backing device holds the same data): the backing writes a clean
        // copy was read from or written with must be durable before the
        // entry is, or a power loss could take the backing device back to
        // data older than a dirty entry the clean one superseded.
        if st.backing_dirty {
            if let Err(e) = self.backing.flush() {
                return Err(self.backing_error(st, "flush", e));
            }
            st.backing_dirty = false;
        }
        let o = st.open_seg.as_ref().expect("open segment");
        let s = Summary {
            seg: o.seg,
            seq: o.seq,
            version: o.version + 1,
            entries: o.entries.clone(),
        };
        let off = self.seg_offset(st, o.seg) + self.geo.summary_offset(s.copy());
        let r = self
            .cache
            .flush()
            .and_then(|_| self.cache.write_at(&s.encode(&self.geo), off))
            .and_then(|_| self.cache.flush());
        if let Err(e) = r {
            self.cache_error(st, "writing a segment summary", &e);
            return Err(err(format!("cache device: writing a segment summary: {e}")));
        }
        st.stats.summary_writes += 1;
        let o = st.open_seg.as_mut().expect("open segment");
        o.version += 1;
        o.durable = o.entries.len();
        Ok(())
    }

    /// Seal the open segment and open a free one: the sealed summary and a
    /// backing flush are durable first; then the journal record naming the
    /// new segment, before any data goes into it; then its two empty
    /// summaries, not flushed. They are written so that a segment whose
    /// summary area fails to write is never opened (its appends would fail
    /// and its first commit with them); they need not be durable: until
    /// they are, the segment holds its old life's summaries, which recovery
    /// rejects (their sequence number is not the record's) or does not read
    /// (it replays only a segment's last life in the journal).
    pub(super) fn roll(&self, st: &mut State) -> Res<()> {
        if st.open_seg.is_some() {
            self.persist_summary(st)?;
            st.open_seg = None;
            st.seal_open();
        }
        if st.backing_dirty {
            if let Err(e) = self.backing.flush() {
                return Err(self.backing_error(st, "flush", e));
            }
            st.backing_dirty = false;
        }
        if st.journal_next >= st.sb.journal_records || st.ckpt_before_reuse {
            self.checkpoint(st)?;
        }
        // Free segments are reused in the order they were freed (`evict`).
        let Some((seg, seq)) = st.begin_open() else {
            return Err(err("no free segment (cleaning could not free one)"));
        };
        // Fast-path reads of the old life's slots see the new life begin
        // before any of its data is written (`fast`).
        self.gens.reopen(seg, seq);
        let rec = JournalRecord {
            epoch: st.epoch,
            index: st.journal_next,
            seg,
            seq,
        };
        // The journal record, flushed, before anything of the new life: a
        // crash after it leaves a record whose segment holds no summary of
        // the new life (recovery skips it and drops the checkpoint's entries
        // into it), never new data or a new summary that no record names
        // while the checkpoint still maps blocks into the old life.
        let mut r = self
            .cache
            .write_at(&rec.encode(), st.sb.journal_off + rec.index as u64 * BLOCK)
            .and_then(|_| self.cache.flush());
        // Recovery reads the journal up to the first record that is not
        // there: the next record goes after this one only if this one is
        // durable. Otherwise the next segment opened takes this index (a
        // record here that did land names a segment that holds no data,
        // which recovery replays as empty), or a record after a hole would
        // be ignored and the checkpoint's entries into its segment
        // recovered onto the new life's data.
        if r.is_ok() {
            st.journal_next += 1;
        }
        let base = self.seg_offset(st, seg);
        for v in 0..2u64 {
            let s = Summary {
                seg,
                seq,
                version: v,
                entries: Vec::new(),
            };
            r = r.and_then(|_| {
                self.cache.write_at(
                    &s.encode(&self.geo),
                    base + self.geo.summary_offset(s.copy()),
                )
            });
        }
        st.finish_open(seg, r.is_ok());
        if let Err(e) = r {
            // The segment's new life may or may not be on disk: it stays used, as a sealed empty segment.
            self.cache_error(st, "opening a segment", &e);
            return Err(err(format!("cache device: opening a segment: {e}")));
        }
        st.open_seg = Some(OpenSeg {
            seg,
            seq,
            entries: Vec::new(),
            version: 1,
            durable: 0,
            units: 0,
            started: 0,
        });
        Ok(())
    }

    /// Append whole blocks `lbas` (data in `data`, 4 KiB each) to the log
    /// and map them (the policy's `Log::append`). Returns how many were
    /// appended before a cache error (the rest were not).
    pub(super) fn append(
        &self,
        st: &mut State,
        lbas: &[u64],
        data: &[u8],
        dirty: bool,
    ) -> Res<usize> {
        st.append(self, lbas, data, dirty)
    }

    /// Write blocks that fit the open segment into it; `false` on a cache
    /// write error (the slots are burnt: summary entries EMPTY).
    pub(super) fn append_into_open(
        &self,
        st: &mut State,
        lbas: &[u64],
        data: &[u8],
        dirty: bool,
    ) -> Res<bool> {
        let o = st.open_seg.as_ref().expect("open segment");
        debug_assert!(lbas.len() <= self.data_blocks as usize - o.entries.len());
        debug_assert_eq!(
            o.entries.len(),
            st.used as usize,
            "summary and policy disagree"
        );
        if self.geo.is_compressed() {
            return self.append_records(st, lbas, data, dirty);
        }
        let slot0 = o.seg * self.data_blocks + o.entries.len() as u32;
        let off = self.slot_offset(st, slot0);
        if let Err(e) = self.cache.write_at(data, off) {
            st.open_seg
                .as_mut()
                .expect("open")
                .entries
                .extend(std::iter::repeat_n(EMPTY, lbas.len()));
            st.burn(lbas.len());
            self.cache_error(st, "appending to a segment", &e);
            return Ok(false);
        }
        let placed = st.place(lbas, dirty).map_err(err)?;
        for (i, (&lba, (slot, old))) in lbas.iter().zip(placed).enumerate() {
            debug_assert_eq!(
                slot,
                slot0 + i as u32,
                "the policy placed the block elsewhere"
            );
            set_shadows(st, slot, old.is_some());
            st.open_seg
                .as_mut()
                .expect("open")
                .entries
                .push(entry(lba, dirty));
        }
        self.start_write_out(st);
        Ok(true)
    }

    /// Plain layout on a buffered file: every [`WRITE_OUT`] blocks appended,
    /// ask the kernel to start writing them to the device
    /// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait for
    /// the writes), so the data flush of the next commit or roll, which runs
    /// under the lock, finds most of the segment written already. Only a
    /// hint: durability still comes from the flushes.
    fn start_write_out(&self, st: &mut State) {
        let Some(t) = self.cache.raw_target() else {
            return;
        };
        let o = st.open_seg.as_ref().expect("open");
        let (from, to) = (o.started, o.entries.len());
        if t.direct_align.is_some() || to - from < WRITE_OUT {
            return;
        }
        let off = self.seg_offset(st, o.seg) + self.geo.data_offset(from as u32);
        // SAFETY: `raw_target` promises the descriptor stays open while the
        // device lives; `sync_file_range` only reads its arguments.
        unsafe {
            libc::sync_file_range(
                t.fd,
                off as libc::off64_t,
                ((to - from) as u64 * BLOCK) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        st.open_seg.as_mut().expect("open").started = to;
    }
}

/// Blocks appended between two write-out hints (`start_write_out`).
const WRITE_OUT: usize = 64;

/// Records encoded for a buffer of whole blocks: its address, the number
/// of its first block and one record per block.
pub(crate) struct Staged {
    at: usize,
    lba0: u64,
    recs: Vec<Record>,
}

impl Staged {
    /// Encode the blocks of `data` (whole blocks from `lba0`): the pure
    /// step a write runs before it takes the lock.
    pub(crate) fn encode(codec: compress::Codec, lba0: u64, data: &[u8]) -> Staged {
        Staged {
            at: data.as_ptr() as usize,
            lba0,
            recs: data
                .chunks_exact(BLOCK as usize)
                .zip(lba0..)
                .map(|(b, lba)| compress::encode(codec, lba, b))
                .collect(),
        }
    }

    /// The records of `lbas` (bytes in `data`) if this buffer holds them.
    fn get(&self, lbas: &[u64], data: &[u8]) -> Option<Vec<Record>> {
        let d = (data.as_ptr() as usize).checked_sub(self.at)?;
        let k = d / BLOCK as usize;
        let same = d % BLOCK as usize == 0
            && k + lbas.len() <= self.recs.len()
            && lbas
                .iter()
                .zip(self.lba0 + k as u64..)
                .all(|(a, b)| *a == b);
        same.then(|| self.recs[k..k + lbas.len()].to_vec())
    }
}

impl LogCache {
    /// The records of `lbas` (bytes in `data`): those prepared or staged
    /// for this buffer, else encoded now (under the lock).
    fn records(&self, st: &mut State, lbas: &[u64], data: &[u8]) -> Vec<Record> {
        if let Some(recs) = st.prepared.as_ref().and_then(|s| s.get(lbas, data)) {
            return recs;
        }
        if let Some(recs) = st.staged.take().and_then(|s| s.get(lbas, data)) {
            return recs;
        }
        lbas.iter()
            .zip(data.chunks_exact(BLOCK as usize))
            .map(|(&lba, b)| compress::encode(self.codec, lba, b))
            .collect()
    }

    /// Compressed layout: how many of the first `n` blocks fit the open
    /// segment's data area (see `LogIo::fits`); when none does, its
    /// remaining slots are burnt so that the next append rolls.
    pub(super) fn fits(&self, st: &mut State, lbas: &[u64], data: &[u8], n: usize) -> usize {
        if !self.geo.is_compressed() || data.is_empty() {
            return n;
        }
        let recs = self.records(st, &lbas[..n], &data[..n * BLOCK as usize]);
        let Some(o) = st.open_seg.as_ref() else {
            return n;
        };
        let mut free = self.geo.data_units() - o.units;
        let mut k = 0;
        while k < n && recs[k].units <= free {
            free -= recs[k].units;
            k += 1;
        }
        if k == 0 {
            self.burn_open(st);
        } else {
            st.staged = Some(Staged {
                at: data.as_ptr() as usize,
                lba0: lbas[0],
                recs,
            });
        }
        k
    }

    /// Give up the open segment's remaining slots (entries EMPTY).
    fn burn_open(&self, st: &mut State) {
        let room = st.room();
        st.open_seg
            .as_mut()
            .expect("open")
            .entries
            .extend(std::iter::repeat_n(EMPTY, room));
        st.burn(room);
    }

    /// Compressed layout: append `lbas` as records packed after the open
    /// segment's last one. `Ok(false)` when they do not all fit (nothing
    /// written: segment cleaning then writes moved blocks back) or the
    /// write failed (the segment's remaining slots are burnt: no record
    /// may follow one whose place is unknown).
    fn append_records(&self, st: &mut State, lbas: &[u64], data: &[u8], dirty: bool) -> Res<bool> {
        let recs = self.records(st, lbas, data);
        let o = st.open_seg.as_ref().expect("open segment");
        let (seg, unit0) = (o.seg, o.units);
        let total: u32 = recs.iter().map(|r| r.units).sum();
        if total > self.geo.data_units() - unit0 {
            return Ok(false);
        }
        let mut buf = Vec::with_capacity(total as usize * UNIT);
        for r in &recs {
            buf.extend_from_slice(&r.bytes);
        }
        let off = self.seg_offset(st, seg) + self.geo.data_offset(0) + unit0 as u64 * UNIT as u64;
        if let Err(e) = self.cache.write_at(&buf, off) {
            self.burn_open(st);
            self.cache_error(st, "appending to a segment", &e);
            return Ok(false);
        }
        let placed = st.place(lbas, dirty).map_err(err)?;
        let mut unit = unit0;
        for ((&lba, (slot, old)), r) in lbas.iter().zip(placed).zip(&recs) {
            set_shadows(st, slot, old.is_some());
            st.loc[slot as usize] = unit << 4 | r.units;
            unit += r.units;
            if r.is_raw() {
                st.stats.stored_raw += 1;
            } else {
                st.stats.stored_compressed += 1;
                st.stats.stored_compressed_bytes += r.units as u64 * UNIT as u64;
            }
            let e = self.geo.entry(lba, dirty, r.units);
            let o = st.open_seg.as_mut().expect("open");
            o.entries.push(e);
        }
        st.open_seg.as_mut().expect("open").units = unit;
        Ok(true)
    }
}
