//! Slot barriers: what a cache write waits for before it may overwrite a
//! slot (unmaps and withdrawn claims committed, old writebacks done), and
//! the final check right before it starts (`guard_overwrite`).

use super::LiveCache;
use super::{range_bits, Core, LiveError};
use std::sync::Arc;
use tiercache_azor_policy::eviction::Slot;
use tiercache_azor_policy::{Op, OpId};
use tiercache_store::{LineMeta, Record, SubBlocks};
use tokio::sync::watch;

impl LiveCache {
    /// Writeback writes in flight whose read of `slot` was issued before op
    /// `before`: they carry the slot's older bytes to the backing device.
    pub(super) fn writebacks_reading(c: &Core, slot: Slot, before: OpId) -> Vec<OpId> {
        let mut w: Vec<OpId> = c
            .wb_slots
            .get(&slot)
            .map(|v| {
                v.iter()
                    .filter(|&&(r, _)| r < before)
                    .map(|&(_, w)| w)
                    .collect()
            })
            .unwrap_or_default();
        w.dedup();
        w
    }

    pub(super) async fn wait_op(&self, id: OpId) {
        let rx = self
            .core
            .lock()
            .expect("core")
            .signals
            .get_mut(&id)
            .map(|tx| {
                tx.get_or_insert_with(|| watch::channel(false).0)
                    .subscribe()
            });
        if let Some(mut rx) = rx {
            let _ = rx.wait_for(|d| *d).await;
        }
    }

    /// Wait until log generation `gen` is durable. `Err` (at once, or as
    /// soon as it happens) if the metadata store failed before: that commit
    /// will never come.
    pub(super) async fn wait_committed(self: &Arc<Self>, gen: u64) -> Result<(), LiveError> {
        let mut rx = self.committed.subscribe();
        if *rx.borrow() >= gen {
            return Ok(());
        }
        if let Some(e) = self.metadata_failed_error() {
            return Err(e);
        }
        self.spawn_commit(false);
        // `metadata_store_failed` sets the failure, then wakes every receiver.
        let _ = rx
            .wait_for(|c| *c >= gen || self.metadata_failure().is_some())
            .await;
        if *self.committed.borrow() >= gen {
            return Ok(());
        }
        Err(self
            .metadata_failed_error()
            .unwrap_or_else(|| LiveError("metadata commit did not happen".into())))
    }

    /// Cache writes on a slot wait until the slot's previous line is durably gone,
    /// for the barriers set by this op's batch or earlier ones (`Err`: the
    /// metadata store failed, the barrier can never be released).
    pub(super) async fn wait_slot_ready(
        self: &Arc<Self>,
        slot: Slot,
        op_id: OpId,
        line: Option<u64>,
    ) -> Result<(), LiveError> {
        loop {
            let (wbs, gen) = {
                let c = self.core.lock().expect("core");
                if let Some(e) = Self::stranded_slot_error(&c, slot) {
                    return Err(e);
                }
                if let Some(e) = line.and_then(|l| Self::stranded_line_error(&c, slot, l)) {
                    return Err(e);
                }
                let mut w: Vec<OpId> = c
                    .pending_unmap
                    .get(&slot)
                    .map(|bs| {
                        bs.iter()
                            .filter(|(_, f)| *f <= op_id)
                            .flat_map(|(w, _)| w.iter().copied())
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(l) = line {
                    w.extend(Self::old_slot_writebacks(&c, slot, l));
                }
                (
                    (!w.is_empty()).then_some(w),
                    c.slot_gen
                        .get(&slot)
                        .and_then(|v| v.iter().filter(|(_, f)| *f <= op_id).map(|(g, _)| *g).max()),
                )
            };
            if let Some(wbs) = wbs {
                for w in wbs {
                    self.wait_op(w).await;
                }
                tokio::task::yield_now().await;
                continue;
            }
            if let Some(g) = gen {
                self.wait_committed(g).await?;
                let done = self.committed_gen();
                let mut c = self.core.lock().expect("core");
                if let Some(v) = c.slot_gen.get_mut(&slot) {
                    v.retain(|&(g, _)| g > done);
                    if v.is_empty() {
                        c.slot_gen.remove(&slot);
                    }
                }
            }
            return Ok(());
        }
    }

    /// Writebacks in flight from another slot that the log still maps to
    /// `line`: a dirty line evicted from one slot keeps that slot mapped in
    /// the log until its writeback lands (rule 7 of tiercache-store). A cache
    /// write of the line into `slot` waits for them, so that the old slot's
    /// `Unmap` is appended before the new slot's `Map` and no commit maps
    /// the line twice (rule 10; recovery would refuse such a log).
    pub(super) fn old_slot_writebacks(c: &Core, slot: Slot, line: u64) -> Vec<OpId> {
        c.pending_unmap
            .iter()
            .filter(|(&s, _)| s != slot && c.view.get(s).is_some_and(|v| v.line == line))
            .flat_map(|(_, bs)| bs.iter().flat_map(|(w, _)| w.iter().copied()))
            .collect()
    }

    /// An error if another slot is stranded holding `line` (its writeback
    /// failed for good, `Core::stranded`): the log keeps that slot mapped to
    /// the line, so the line may not be mapped in `slot` too.
    pub(super) fn stranded_line_error(c: &Core, slot: Slot, line: u64) -> Option<LiveError> {
        c.stranded
            .iter()
            .find(|(&s, &l)| s != slot && l == line)
            .and_then(|(&s, _)| Self::stranded_slot_error(c, s))
    }

    /// Clean valid sub-blocks of the durable slot state `v` that cache write `op` overwrites.
    pub(super) fn clean_overwritten(&self, op: &Op, v: LineMeta) -> SubBlocks {
        let (f, l) = self.subs_of(op.offset, op.len);
        range_bits(f, l).intersect(v.valid).minus(v.dirty)
    }

    /// Whether a cache write of `line` into `slot` may start at once: no
    /// unmap or commit barrier on the slot, no undurable withdrawal of its
    /// claims, and the durable log claims none of the bytes it overwrites for
    /// anything else (then `wait_slot_ready` and `guard_overwrite` return at once).
    pub(super) fn slot_ready_now(&self, op: &Op, slot: Slot, line: u64) -> bool {
        let c = self.core.lock().expect("core");
        if c.pending_unmap.contains_key(&slot)
            || c.slot_gen.contains_key(&slot)
            || c.withdrawn.contains_key(&slot)
            || c.stranded.contains_key(&slot)
        {
            return false;
        }
        if (!c.pending_unmap.is_empty() && !Self::old_slot_writebacks(&c, slot, line).is_empty())
            || (!c.stranded.is_empty() && Self::stranded_line_error(&c, slot, line).is_some())
        {
            return false;
        }
        match c.view.get(slot) {
            Some(v) if v.line != line => false,
            Some(_) if Self::overwrites_in_place(&c, op) => true,
            Some(v) => self.clean_overwritten(op, v).is_empty(),
            None => true,
        }
    }

    /// Last check before a cache write of `line`'s data into `slot`: the durable
    /// log must not claim the bytes it overwrites for anything else. Barriers
    /// set at submission cover the usual case; this covers a log that changed
    /// since (an older write of another line completed and was recorded after
    /// this write was submitted). The log then first unmaps the slot (after the
    /// old line's writeback, if it is dirty) or drops the clean sub-blocks about
    /// to be overwritten, and that is committed before the write starts.
    pub(super) async fn guard_overwrite(
        self: &Arc<Self>,
        op: &Op,
        slot: Slot,
        line: u64,
    ) -> Result<(), LiveError> {
        loop {
            let (wait_wb, gen) = {
                let mut c = self.core.lock().expect("core");
                if let Some(e) = Self::stranded_slot_error(&c, slot) {
                    return Err(e);
                }
                match c.view.get(slot) {
                    Some(v) if v.line != line => {
                        if !v.dirty.is_empty() {
                            if let Some(&w) = Self::writebacks_reading(&c, slot, op.id).first() {
                                (Some(w), None)
                            } else {
                                // Its writeback completed: flush the backing device before the unmap.
                                c.needs_backing_flush = true;
                                Self::append(&mut c, Record::Unmap { slot });
                                let g = c.appended_gen;
                                c.flushed_unmaps.insert(g);
                                (None, Some(g))
                            }
                        } else {
                            Self::append(&mut c, Record::Unmap { slot });
                            (None, Some(c.appended_gen))
                        }
                    }
                    Some(_) if Self::overwrites_in_place(&c, op) => (None, None),
                    Some(v) => {
                        let over = self.clean_overwritten(op, v);
                        if over.is_empty() {
                            (None, None)
                        } else {
                            Self::append(
                                &mut c,
                                Record::Valid {
                                    slot,
                                    bitmap: v.valid.minus(over),
                                },
                            );
                            (None, Some(c.appended_gen))
                        }
                    }
                    None => (None, None),
                }
            };
            if let Some(w) = wait_wb {
                self.wait_op(w).await;
                tokio::task::yield_now().await;
                continue;
            }
            // Whoever withdrew the slot's old claims (this write's barrier, or another
            // batch's), that record must be durable before the bytes change.
            let withdrawn = {
                let mut c = self.core.lock().expect("core");
                let done = self.committed_gen();
                match c.withdrawn.get(&slot) {
                    Some(&g) if g > done => Some(g),
                    Some(_) => {
                        c.withdrawn.remove(&slot);
                        None
                    }
                    None => None,
                }
            };
            if let Some(g) = gen.max(withdrawn) {
                self.wait_committed(g).await?;
            }
            return Ok(());
        }
    }
}
