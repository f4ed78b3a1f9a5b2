//! The metadata journal: log records derived from op submissions and
//! completions, appended under the core lock, and committed (cache sync, then
//! records) in the background, on FLUSH/FUA, or when a barrier needs it.

use super::LiveCache;
use super::{range_bits, Core, LiveError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tiercache_azor_policy::eviction::Slot;
use tiercache_azor_policy::SlotBits;
use tiercache_azor_policy::{Dev, IoKind, Op, OpId, Purpose, WritePolicy};
use tiercache_store::{Record, SubBlocks};

impl LiveCache {
    /// Whether `op` may overwrite clean valid sub-blocks of its own line in
    /// place with no invalidation commit first (rule 3b): a write-back write
    /// of client data while the superblock says "open". Fills, write-through
    /// copies and the other policies keep the invalidate-first rule.
    pub(super) fn overwrites_in_place(c: &Core, op: &Op) -> bool {
        c.fast_overwrite
            && op.dev == Dev::Cache
            && op.kind == IoKind::Write
            && op.purpose == Purpose::WriteCache
    }

    pub(super) fn append(core: &mut Core, rec: Record) {
        let withdraws = match rec {
            Record::Unmap { .. } => true,
            Record::Valid { slot, bitmap } => core
                .view
                .get(slot)
                .is_some_and(|v| !v.valid.minus(bitmap).is_empty()),
            _ => false,
        };
        rec.apply(&mut core.view);
        core.pending.push(rec);
        core.appended_gen += 1;
        if withdraws {
            core.withdrawn.insert(rec.slot(), core.appended_gen);
        }
        tracing::trace!(target: "tiercache::log", "append {} {rec:?}", core.appended_gen);
    }

    pub(super) fn committed_gen(&self) -> u64 {
        *self.committed.borrow()
    }

    pub(super) fn journal_submit(&self, c: &mut Core, s: Slot, out: &[Op]) {
        // Barriers bind the cache writes of this batch and later ones only: an
        // older write on the slot may be what this batch's writeback waits for.
        let from = out.iter().map(|o| o.id).min().unwrap_or(OpId::MAX);
        let e = c.engine.slot_bits(s);
        let v = c.view.get(s);
        if c.stranded.contains_key(&s) {
            // The slot keeps its old line's only copy: never unmapped.
            return;
        }
        match (v, &e) {
            (Some(v), e) if e.as_ref().is_none_or(|e| e.line != v.line) => {
                // The slot's durable line is gone: unmap it before the slot is reused.
                // The writebacks of the old line are those that read this slot before
                // the new line's first write on it (this batch's eviction writeback, or
                // a cleaning writeback started earlier: the log says dirty until it
                // lands). Not "those covering the old line": that line may be cached in
                // another slot again, and its writeback there may read this slot after
                // the new line's write, which would make that write wait for itself.
                let first_write = out
                    .iter()
                    .filter(|o| {
                        o.dev == Dev::Cache
                            && o.kind == IoKind::Write
                            && o.offset / self.line == s as u64
                    })
                    .map(|o| o.id)
                    .min()
                    .unwrap_or(OpId::MAX);
                let wbs = Self::writebacks_reading(c, s, first_write);
                let waiting = c.pending_unmap.contains_key(&s);
                if !wbs.is_empty() && (waiting || !v.dirty.is_empty()) {
                    // Already waiting for the old line's writeback (an earlier batch),
                    // or waiting now: this batch's writes wait for its own barrier
                    // and every older one.
                    c.pending_unmap.entry(s).or_default().push((wbs, from));
                } else if waiting {
                    // Nothing of this batch to wait for: the older barriers bind its
                    // writes too, and their release unmaps the slot.
                } else {
                    Self::append(c, Record::Unmap { slot: s });
                    let g = c.appended_gen;
                    if !v.dirty.is_empty() {
                        // Its writeback completed: the backing device is flushed before the unmap.
                        c.needs_backing_flush = true;
                        c.flushed_unmaps.insert(g);
                    }
                    c.slot_gen.entry(s).or_default().push((g, from));
                }
            }
            (Some(v), Some(e)) => {
                // Same line: drop clean sub-blocks that are invalid now or about to be overwritten.
                let mut writing = SubBlocks::default();
                // (Write-back writes of client data overwrite clean sub-blocks of
                // their own line in place: rule 3b, recovery after a crash makes
                // every valid sub-block dirty.)
                for o in out.iter().filter(|o| {
                    o.dev == Dev::Cache
                        && o.kind == IoKind::Write
                        && o.offset / self.line == s as u64
                        && !Self::overwrites_in_place(c, o)
                }) {
                    let (f, l) = self.subs_of(o.offset, o.len);
                    writing = writing.union(range_bits(f, l));
                }
                let valid_e = SubBlocks(e.valid);
                let gone = v.valid.minus(valid_e);
                let overwritten = writing.intersect(v.valid).minus(v.dirty);
                let drop = gone.union(overwritten);
                if !drop.is_empty() {
                    Self::append(
                        c,
                        Record::Valid {
                            slot: s,
                            bitmap: v.valid.minus(drop),
                        },
                    );
                    if !overwritten.is_empty() {
                        let g = c.appended_gen;
                        c.slot_gen.entry(s).or_default().push((g, from));
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn journal_cache_write(&self, c: &mut Core, op: &Op, req_offset: Option<u64>) {
        let slot = (op.offset / self.line) as Slot;
        let Some(SlotBits {
            line,
            valid,
            dirty,
            metadata: meta,
        }) = c.engine.slot_bits(slot)
        else {
            return;
        };
        // The line this write was for: from the request's offset.
        let Some(ro) = req_offset else { return };
        if (ro + op.buf_off) / self.line != line {
            return;
        }
        let (f, l) = self.subs_of(op.offset, op.len);
        let mut x = range_bits(f, l);
        // Sub-blocks another in-flight write will still change are recorded by that write.
        if let Some(ws) = c.inflight_writes.get(&slot) {
            for &(id, wf, wl) in ws {
                if id != op.id && id > op.id {
                    x = x.minus(range_bits(wf, wl));
                }
            }
        }
        let x = x.intersect(SubBlocks(valid));
        if x.is_empty() {
            return;
        }
        if c.view.get(slot).map(|v| v.line) != Some(line) {
            Self::append(
                c,
                Record::Map {
                    slot,
                    line,
                    class: meta as u8,
                },
            );
        }
        // A write-back write of client data is dirty in the log even when the core
        // already counts it clean (a cleaning writeback was issued behind it): only
        // that writeback's completion may record it clean.
        let dirty_x =
            if self.write_policy() == WritePolicy::WriteBack && op.purpose == Purpose::WriteCache {
                x
            } else {
                x.intersect(SubBlocks(dirty))
            };
        // Sub-blocks the log already has dirty for this line need no new record
        // (rewriting dirty data in place, rule 2 of tiercache-store).
        let logged_dirty = c
            .view
            .get(slot)
            .filter(|v| v.line == line)
            .map(|v| v.dirty)
            .unwrap_or_default();
        if !dirty_x.minus(logged_dirty).is_empty() {
            Self::append(
                c,
                Record::Dirty {
                    slot,
                    bitmap: dirty_x.minus(logged_dirty),
                },
            );
        }
        let clean_x = x.minus(dirty_x);
        if !clean_x.is_empty() {
            let v = c.view.get(slot).expect("mapped above");
            Self::append(
                c,
                Record::Valid {
                    slot,
                    bitmap: v.valid.union(clean_x),
                },
            );
        }
    }

    pub(super) fn journal_writeback(&self, c: &mut Core, op: &Op) {
        // A dirty victim's writeback: unmap its slot once all of them are done.
        // A merged writeback can carry several victims: finish every slot waiting for it.
        // Barriers are released oldest first, each once its writebacks are done.
        let mut unmapped = Vec::new();
        for (s, bs) in c.pending_unmap.iter_mut() {
            for (w, _) in bs.iter_mut() {
                w.retain(|&x| x != op.id);
            }
            while bs.first().is_some_and(|(w, _)| w.is_empty()) {
                let (_, from) = bs.remove(0);
                unmapped.push((*s, from));
            }
        }
        c.pending_unmap.retain(|_, bs| !bs.is_empty());
        for &(s, from) in &unmapped {
            if c.stranded.contains_key(&s) {
                continue;
            }
            if c.view.get(s).is_some() {
                Self::append(c, Record::Unmap { slot: s });
                let g = c.appended_gen;
                c.flushed_unmaps.insert(g);
            }
            c.needs_backing_flush = true;
            let g = c.appended_gen;
            c.slot_gen.entry(s).or_default().push((g, from));
        }
        // Cleaning: the written sub-blocks are clean unless rewritten since
        // (a merged writeback covers several lines).
        let end = op.offset + op.len.max(1);
        for line in op.offset / self.line..=(end - 1) / self.line {
            let Some(slot) = c.engine.mapping().lookup(line) else {
                continue;
            };
            if unmapped.iter().any(|&(s, _)| s == slot) {
                continue;
            }
            let Some(SlotBits { dirty, .. }) = c.engine.slot_bits(slot) else {
                continue;
            };
            let Some(v) = c.view.get(slot) else {
                continue;
            };
            if v.line != line {
                continue;
            }
            let start = op.offset.max(line * self.line);
            let stop = end.min((line + 1) * self.line);
            let (f, l) = self.subs_of(start, stop - start);
            let clean = range_bits(f, l).minus(SubBlocks(dirty)).intersect(v.dirty);
            if !clean.is_empty() {
                Self::append(
                    c,
                    Record::Clean {
                        slot,
                        bitmap: clean,
                    },
                );
                c.needs_backing_flush = true;
            }
        }
    }

    /// Ask the committer task for a commit (coalesced: one commit covers every append before it).
    pub(super) fn spawn_commit(&self, _force_backing: bool) {
        self.commit_wanted.notify_one();
    }

    /// Put records taken for a commit back in front of the pending ones.
    fn requeue(&self, mut recs: Vec<Record>, need_backing: bool) {
        let mut c = self.core.lock().expect("core");
        recs.append(&mut c.pending);
        c.pending = recs;
        c.needs_backing_flush |= need_backing;
    }

    /// Make every appended record durable (and, with `force_backing` or when
    /// clean records need it, the backing device first).
    pub async fn commit(self: &Arc<Self>, force_backing: bool) -> Result<(), LiveError> {
        let _g = self.commit_lock.lock().await;
        if self.write_policy() == WritePolicy::WriteBack {
            if let Some(e) = self.metadata_failed_error() {
                // Fail-stop: the records appended since can never be committed.
                self.core.lock().expect("core").pending.clear();
                return Err(e);
            }
        }
        let (mut recs, mut gen, need_backing) = {
            let mut c = self.core.lock().expect("core");
            (
                std::mem::take(&mut c.pending),
                c.appended_gen,
                std::mem::take(&mut c.needs_backing_flush),
            )
        };
        let write_back = self.write_policy() == WritePolicy::WriteBack;
        let mut waiting = 0;
        if need_backing || force_backing || !write_back {
            // A remote backing device in an outage: don't wait for it here.
            let down = self
                .backing
                .remote_status()
                .is_some_and(|s| s.state != tiercache_io::RemoteState::Connected);
            let r = if down {
                Err(std::io::Error::other(
                    "the remote backing device is unreachable",
                ))
            } else {
                let dev = Arc::clone(&self.backing);
                tokio::task::spawn_blocking(move || dev.flush())
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
            };
            if r.is_ok() {
                let mut c = self.core.lock().expect("core");
                c.flushed_unmaps = c.flushed_unmaps.split_off(&(gen + 1));
            }
            if let Err(e) = r {
                // A client FLUSH in write-back mode during a remote outage
                // still commits the cache: the remote keeps what it
                // acknowledged across its restarts, and the records that
                // need its flush wait for it (see below).
                let down = self
                    .backing
                    .remote_status()
                    .is_some_and(|s| s.state != tiercache_io::RemoteState::Connected);
                if !write_back || (force_backing && !down) {
                    self.requeue(recs, need_backing);
                    return Err(LiveError(format!("backing device flush failed: {e}")));
                }
                // Write-back with the backing device unreachable (a remote in
                // an outage): commit what does not need it, so writes stay
                // durable in the cache. `Clean` records are dropped (the log
                // keeps those sub-blocks dirty: recovery writes them back
                // again, which is harmless); the first `Unmap` that needs
                // the backing flushed (of a line just written back) and
                // every record after it wait for the backing device.
                let first = gen + 1 - recs.len() as u64;
                let cut = {
                    let c = self.core.lock().expect("core");
                    c.flushed_unmaps
                        .range(first..=gen)
                        .next()
                        .map_or(recs.len(), |&g| (g - first) as usize)
                };
                let rest = recs.split_off(cut);
                gen -= rest.len() as u64;
                recs.retain(|r| !matches!(r, Record::Clean { .. }));
                tracing::debug!(
                    "backing device flush failed ({e}): committing {} records without it, {} wait",
                    recs.len(),
                    rest.len()
                );
                waiting = rest.len();
                self.requeue(rest, true);
                if recs.is_empty() {
                    self.committed.send_modify(|c| *c = (*c).max(gen));
                    return self.partial_commit_result(force_backing, waiting);
                }
            }
        }
        let started = Instant::now();
        let me = Arc::clone(self);
        let n = recs.len();
        let res = tokio::task::spawn_blocking(move || -> Result<u64, LiveError> {
            let mut st = me.store.lock().expect("store");
            for r in recs {
                st.append(r)
                    .map_err(|e| LiveError(format!("metadata log: {e}")))?;
            }
            if !st.wants_checkpoint() {
                st.commit()
                    .map_err(|e| LiveError(format!("metadata commit: {e}")))?;
                return Ok(gen);
            }
            // The log is two-thirds full (or these records would not fit): a
            // checkpoint of the view replaces the commit. It covers every record
            // appended so far, also those appended after `recs` were taken; `Clean`
            // records among them need the backing device flushed first.
            let c = loop {
                let mut c = me.core.lock().expect("core");
                if !std::mem::take(&mut c.needs_backing_flush) {
                    break c;
                }
                drop(c);
                if let Err(e) = me.backing.flush() {
                    // Still needed by the records that wait for it.
                    me.core.lock().expect("core").needs_backing_flush = true;
                    let u = st.log_usage();
                    if u.used + u.pending <= u.capacity {
                        // The backing device is unreachable (a remote in an
                        // outage): commit without the checkpoint while the
                        // log has room; the checkpoint follows once it is back.
                        st.commit()
                            .map_err(|e| LiveError(format!("metadata commit: {e}")))?;
                        return Ok(gen);
                    }
                    return Err(LiveError(format!("backing device flush failed: {e}")));
                }
            };
            // Snapshot the view and let requests go on while the checkpoint is
            // written: records appended from now on wait in `pending` for the
            // next commit, which appends them after this checkpoint.
            // The snapshot is a copy of the compact table (the memory
            // bound counts it), not a list of entries.
            let (snapshot, gen) = {
                let mut c = c;
                c.pending.clear();
                (c.view.clone(), c.appended_gen)
            };
            st.checkpoint(snapshot.iter())
                .map_err(|e| LiveError(format!("checkpoint: {e}")))?;
            me.stats.checkpoints.fetch_add(1, Ordering::Relaxed);
            Ok(gen)
        })
        .await
        .unwrap_or_else(|e| Err(LiveError(e.to_string())));
        let gen = match res {
            Ok(g) => g,
            // Write-through and write-around: the backing device was just
            // flushed and holds every acknowledged write, and a restart after
            // an unclean shutdown drops every clean copy (store rule 3), so a
            // cache device that cannot take its metadata (pulled, full) fails
            // no FLUSH. The in-memory view stays the truth for reads; a clean
            // shutdown writes it out whole, or the next start recovers cold.
            Err(e) if !write_back => {
                tracing::warn!("{e}: the backing device holds all data (the cache metadata lags)");
                self.note_metadata_error();
                // Slot barriers wait for this generation: in these modes a
                // restart after a crash drops every clean copy, so no stale
                // mapping can outlive the bytes it guarded.
                self.committed.send_modify(|c| *c = (*c).max(gen));
                return Ok(());
            }
            Err(e) => {
                // An I/O error makes the store fail-stop: no commit can
                // happen any more (see `metadata_store_failed`).
                let failed = self
                    .store
                    .lock()
                    .expect("store")
                    .failure()
                    .map(String::from);
                if let Some(why) = failed {
                    self.metadata_store_failed(&why);
                }
                return Err(e);
            }
        };
        self.stats.record_commit(n, started.elapsed());
        tracing::trace!(target: "tiercache::log", "committed {gen}");
        self.committed.send_modify(|c| *c = (*c).max(gen));
        self.partial_commit_result(force_backing, waiting)
    }

    /// A commit that left `waiting` records for the backing device: fine in
    /// the background, an error for a client FLUSH or FUA (not all it covers is durable).
    fn partial_commit_result(&self, force_backing: bool, waiting: usize) -> Result<(), LiveError> {
        if force_backing && waiting > 0 {
            return Err(LiveError(format!(
                "the backing device is unreachable and {waiting} metadata records wait for its flush"
            )));
        }
        Ok(())
    }
}
