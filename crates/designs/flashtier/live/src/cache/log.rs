//! The log: appending blocks to the open segment, rolling it (journal
//! record, then the segment summary), and keeping free segments ready.

use super::LogCache;
use super::{err, set_shadows, OpenSeg, Res, State};
use crate::checkpoint::JournalRecord;
use crate::compress::{self, Record, UNIT};
use crate::segment::{entry, Summary, BLOCK, EMPTY};

impl LogCache {
    /// Make every entry so far durable: flush the data, write the newest
    /// summary of every sealed segment whose summary is not durable yet and
    /// of the open segment (each into its older copy), flush again.
    pub(super) fn persist_summary(&self, st: &mut State) -> Res<()> {
        let open_behind = st
            .open_seg
            .as_ref()
            .is_some_and(|o| o.durable < o.entries.len());
        if st.sealed.is_empty() && !open_behind {
            return Ok(());
        }
        // After an unclean shutdown a clean entry unmaps its block (the
        // backing device holds the same data): the backing writes a clean
        // copy was read from or written with must be durable before the
        // entry is, or a power loss could take the backing device back to
        // data older than a dirty entry the clean one superseded.
        self.flush_backing(st)?;
        let writes: Vec<(u64, Vec<u8>)> = st
            .sealed
            .iter()
            .chain(st.open_seg.iter().filter(|_| open_behind))
            .map(|o| {
                let s = Summary {
                    seg: o.seg,
                    seq: o.seq,
                    version: o.version + 1,
                    entries: o.entries.clone(),
                };
                let off = self.seg_offset(st, o.seg) + self.geo.summary_offset(s.copy());
                (off, s.encode(&self.geo))
            })
            .collect();
        let r = self.cache.flush().and_then(|_| {
            for (off, b) in &writes {
                self.cache.write_at(b, *off)?;
            }
            self.cache.flush()
        });
        if let Err(e) = r {
            self.cache_error(st, "writing a segment summary", &e);
            return Err(err(format!("cache device: writing a segment summary: {e}")));
        }
        st.stats.summary_writes += writes.len() as u64;
        st.sealed.clear();
        if open_behind {
            let o = st.open_seg.as_mut().expect("open segment");
            o.version += 1;
            o.durable = o.entries.len();
        }
        Ok(())
    }

    /// Seal the open segment and open the next free one.
    ///
    /// When the next free segment was announced ahead (`announce`), this
    /// does no I/O: the sealed segment's summary joins `sealed`, written by
    /// the next commit, checkpoint or announcement. Otherwise every summary
    /// is made durable and the backing device flushed first (a free
    /// segment's live dirty blocks moved to entries logged since; its
    /// written-back ones went to the backing device), a checkpoint is
    /// written if one is due, and a batch of free segments is announced.
    pub(super) fn roll(&self, st: &mut State) -> Res<()> {
        let ready = announced_ready(st);
        if !ready {
            st.announced.clear();
            self.persist_summary(st)?;
        }
        if let Some(o) = st.open_seg.take() {
            if o.durable < o.entries.len() {
                st.sealed.push(o);
            }
            st.seal_open();
        }
        if !ready {
            self.flush_backing(st)?;
            if st.journal_next >= st.sb.journal_records || st.ckpt_before_reuse {
                self.checkpoint(st)?;
            }
            self.announce(st);
        }
        let announced = st.announced.pop_front();
        // Free segments are reused in the order they were freed (`evict`).
        let Some((seg, seq)) = st.begin_open() else {
            return Err(err("no free segment (cleaning could not free one)"));
        };
        if announced != Some((seg, seq)) {
            // Its journal record or summaries did not land: the segment's
            // new life may or may not be on disk; it stays used, as a sealed
            // empty segment.
            st.announced.clear();
            st.finish_open(seg, false);
            return Err(err("cache device: opening a segment: announcing it failed"));
        }
        // Fast-path reads of the old life's slots see the new life begin
        // before any of its data is written (`fast`).
        self.gens.reopen(seg, seq);
        st.finish_open(seg, true);
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

    /// Announce the next free segments' new lives (up to [`ANNOUNCE_AHEAD`],
    /// as the journal has room): their journal records, flushed, then each
    /// one's two empty summaries, not flushed. The caller made every entry
    /// so far durable and flushed the backing device, so no announced
    /// segment's old life holds anything recovery still needs; a checkpoint
    /// (a new epoch) forgets the announcements.
    ///
    /// The records are flushed before anything of the new lives: a crash
    /// after them leaves records whose segments hold no summary of the new
    /// life (recovery skips them and drops the checkpoint's entries into
    /// them), never new data or a new summary that no record names while the
    /// checkpoint still maps blocks into the old life. The journal is read
    /// up to its first missing record, so `journal_next` moves past the
    /// records only once they are durable (a record that did land before a
    /// failed flush names a segment with no data of its life, replayed as
    /// empty). The empty summaries are written so that a segment whose
    /// summary area fails to write is never opened; they need not be
    /// durable: until they are, the segment holds its old life's summaries,
    /// which recovery rejects (their sequence number is not the record's) or
    /// does not read (it replays only a segment's last life in the journal).
    fn announce(&self, st: &mut State) {
        debug_assert!(st.announced.is_empty());
        let room = st.sb.journal_records.saturating_sub(st.journal_next) as usize;
        let n = ANNOUNCE_AHEAD.min(room).min(st.free.len());
        if n == 0 {
            return;
        }
        let recs: Vec<JournalRecord> = st
            .free
            .iter()
            .take(n)
            .zip(st.next_seq..)
            .enumerate()
            .map(|(i, (&seg, seq))| JournalRecord {
                epoch: st.epoch,
                index: st.journal_next + i as u32,
                seg,
                seq,
            })
            .collect();
        let mut buf = Vec::with_capacity(n * BLOCK as usize);
        for r in &recs {
            buf.extend_from_slice(&r.encode());
        }
        let r = self
            .cache
            .write_at(&buf, st.sb.journal_off + recs[0].index as u64 * BLOCK)
            .and_then(|_| self.cache.flush());
        if let Err(e) = r {
            self.cache_error(st, "writing journal records", &e);
            return;
        }
        st.journal_next += n as u32;
        for rec in recs {
            let base = self.seg_offset(st, rec.seg);
            let r = (0..2u64).try_for_each(|v| {
                let s = Summary {
                    seg: rec.seg,
                    seq: rec.seq,
                    version: v,
                    entries: Vec::new(),
                };
                self.cache.write_at(
                    &s.encode(&self.geo),
                    base + self.geo.summary_offset(s.copy()),
                )
            });
            if let Err(e) = r {
                self.cache_error(st, "opening a segment", &e);
                return;
            }
            st.announced.push_back((rec.seg, rec.seq));
        }
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

/// The next free segment's new life was announced (`announce`): a roll
/// opens it without I/O.
pub(super) fn announced_ready(st: &State) -> bool {
    st.announced
        .front()
        .is_some_and(|&(seg, seq)| st.free.front() == Some(&seg) && st.next_seq == seq)
}

/// Free segments announced in one batch (`announce`): one journal flush and
/// one summary flush per batch instead of per roll.
pub(super) const ANNOUNCE_AHEAD: usize = 8;

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
