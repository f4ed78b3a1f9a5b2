//! Device failure handling: failed cache and backing ops, poisoned
//! sub-blocks, rerouted writes, and degraded mode after repeated cache errors.

use super::LiveCache;
use super::{Core, LiveError, Poison, ReqBuf, DEGRADE_AFTER};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tiercache_azor_policy::eviction::Slot;
use tiercache_azor_policy::{Dev, IoKind, Op, Purpose, WritePolicy};

impl LiveCache {
    /// Device error handling: data safe on the backing device is never lost.
    pub(super) async fn on_error(
        self: &Arc<Self>,
        op: &Op,
        buf: Option<&Arc<ReqBuf>>,
        e: std::io::Error,
        then: &mut Vec<Op>,
    ) -> Result<(), LiveError> {
        match op.dev {
            Dev::Backing => self.backing_failed(op, e),
            Dev::Cache => self.cache_failed(op, buf, e, then).await,
        }
    }

    /// A backing op failed: a failed writeback leaves its lines dirty and
    /// releases the unmap barriers waiting for it; the client gets the error.
    fn backing_failed(&self, op: &Op, e: std::io::Error) -> Result<(), LiveError> {
        self.stats.backing_errors.fetch_add(1, Ordering::Relaxed);
        let down = self
            .backing
            .remote_status()
            .is_some_and(|s| s.state != tiercache_io::RemoteState::Connected);
        if op.kind == IoKind::Flush && down && self.write_policy() == WritePolicy::WriteBack {
            // A client FLUSH while a remote backing device is unreachable: in
            // write-back the data it covers is in the cache (the commit that
            // follows makes it durable there); the remote keeps what it
            // acknowledged, and is flushed once it is back.
            self.core.lock().expect("core").needs_backing_flush = true;
            tracing::debug!("backing flush skipped during a remote outage: {e}");
            return Ok(());
        }
        if op.purpose == Purpose::WritebackWrite {
            // Keep the data dirty: it is still only in the cache.
            let mut c = self.core.lock().expect("core");
            for (s, f, l) in self.cached_pieces(&c, op) {
                c.engine.redirty(s, f, l);
            }
            // Slots already given to another line while this writeback of
            // their old line ran: the log still maps them to the old line,
            // dirty, and their bytes are its only copy (the core forgot it).
            // They are stranded: never overwritten nor unmapped.
            let lost: Vec<(Slot, u64)> = c
                .pending_unmap
                .iter()
                .filter(|(_, bs)| bs.iter().any(|w| w.0.contains(&op.id)))
                .filter_map(|(&s, _)| {
                    c.view
                        .get(s)
                        .filter(|v| !v.dirty.is_empty())
                        .map(|v| (s, v.line))
                })
                .collect();
            for bs in c.pending_unmap.values_mut() {
                bs.retain(|w| !w.0.contains(&op.id));
            }
            c.pending_unmap.retain(|_, bs| !bs.is_empty());
            if !lost.is_empty() {
                self.strand(&mut c, &lost, &e);
            }
        }
        if op.kind == IoKind::Write
            && op.purpose == Purpose::WriteBacking
            && self.write_policy() != WritePolicy::WriteBack
        {
            // A write-through copy of data the backing device refused: the
            // client is told the write failed, so the cache must not go on
            // answering with it (the backing device may still hold the old
            // data, and `detach` or an eviction would show that).
            let mut c = self.core.lock().expect("core");
            for (s, f, l) in self.cached_pieces(&c, op) {
                c.engine.invalidate(s, f, l);
            }
        }
        tracing::error!(
            "backing device error ({} at byte {}): {e}",
            op_name(op.kind),
            op.offset
        );
        Err(LiveError(format!("backing device I/O error: {e}")))
    }

    /// The writeback of the old dirty lines of `slots` (slot, line) failed for
    /// good after the slots went to other lines: keep each slot as its old
    /// line's only copy (no cache write may overwrite it, the log never
    /// unmaps it; cache writes bound for it fail as failed cache writes do),
    /// fail requests on those lines (the backing device holds older data),
    /// and degrade the cache (nothing new is cached, so no line claims the
    /// slots). A restart recovers the lines from the log and writes them back.
    fn strand(&self, c: &mut Core, slots: &[(Slot, u64)], e: &std::io::Error) {
        for &(s, line) in slots {
            tracing::error!(
                "the writeback of dirty line {line} (evicted from slot {s}) failed for good ({e}): the slot keeps its only copy until the cache is reopened; requests on the line fail"
            );
            c.stranded.insert(s, line);
        }
        self.any_stranded.store(true, Ordering::Release);
        c.engine.degrade();
        if !self.degraded.swap(true, Ordering::Relaxed) {
            tracing::error!("cache degraded: a dirty line could not be written back");
        }
    }

    /// An error for `op` if it is a client op on the backing device over a
    /// stranded line: its data there is older than the slot's, which the
    /// cache cannot reach until it is reopened.
    pub(super) fn stranded_error(&self, op: &Op) -> Option<std::io::Error> {
        if op.dev != Dev::Backing
            || !matches!(
                op.purpose,
                Purpose::ReadMiss | Purpose::WriteBacking | Purpose::Trim
            )
        {
            return None;
        }
        self.stranded_range_error(op.offset, op.len)
            .map(|e| std::io::Error::other(e.0))
    }

    /// An error if bytes `offset..offset+len` of the exported device touch a
    /// stranded line (`Core::stranded`).
    pub(super) fn stranded_range_error(&self, offset: u64, len: u64) -> Option<LiveError> {
        if !self.any_stranded.load(Ordering::Acquire) {
            return None;
        }
        let (first, last) = (offset / self.line, (offset + len.max(1) - 1) / self.line);
        let c = self.core.lock().expect("core");
        let line = c
            .stranded
            .values()
            .copied()
            .find(|l| (first..=last).contains(l))?;
        Some(LiveError(format!(
            "cache device I/O error on dirty data: line {line} could not be written back to the backing device; it stays in the cache until the cache is reopened"
        )))
    }

    /// An error if `slot` is stranded: no cache write may overwrite it.
    pub(super) fn stranded_slot_error(c: &Core, slot: Slot) -> Option<LiveError> {
        c.stranded.get(&slot).map(|line| {
            LiveError(format!(
                "slot {slot} keeps dirty line {line}, whose writeback failed: not overwritten until the cache is reopened"
            ))
        })
    }

    /// The cached slots of the lines a backing op covers, with the
    /// sub-blocks `first..=last` it touches in each.
    fn cached_pieces(&self, c: &Core, op: &Op) -> Vec<(Slot, u32, u32)> {
        (op.offset / self.line..=(op.offset + op.len.max(1) - 1) / self.line)
            .filter_map(|line| {
                let s = c.engine.mapping().lookup(line)?;
                let start = op.offset.max(line * self.line);
                let end = (op.offset + op.len).min((line + 1) * self.line);
                let (f, l) = self.subs_of(start, end - start);
                Some((s, f, l))
            })
            .collect()
    }

    /// A cache op failed: count it (degrading after repeated errors), poison
    /// what a failed write should have left, then recover by the op's kind:
    /// a clean read hit is served from the backing device, a write-back write
    /// is rerouted there, other writes just drop their sub-blocks.
    async fn cache_failed(
        self: &Arc<Self>,
        op: &Op,
        buf: Option<&Arc<ReqBuf>>,
        e: std::io::Error,
        then: &mut Vec<Op>,
    ) -> Result<(), LiveError> {
        self.stats.cache_errors.fetch_add(1, Ordering::Relaxed);
        let slot = (op.offset / self.line) as Slot;
        let (f, l) = self.subs_of(op.offset, op.len);
        // The client offset of this op's data: from the request, not from the
        // slot (which may hold another line by now).
        let client_off = buf.map(|b| b.offset + op.buf_off);
        let line = client_off.map(|o| o / self.line);
        let (dirty, errors) = {
            let mut c = self.core.lock().expect("core");
            c.cache_errors += 1;
            // Only the log's view knows whether the backing device already has the
            // data (a Clean record follows the writeback); the core marks lines
            // clean when their writeback starts.
            let dirty = match c.view.get(slot) {
                Some(v) if Some(v.line) == line => (f..=l).any(|i| v.dirty.get(i)),
                _ => false,
            };
            (dirty, c.cache_errors)
        };
        if let (IoKind::Write, Some(line), Some(b)) = (op.kind, line, buf) {
            self.poison_failed_write(op, slot, (f, l), line, b);
        }
        tracing::warn!(
            "cache device error ({} at byte {}): {e}",
            op_name(op.kind),
            op.offset
        );
        if errors >= DEGRADE_AFTER && !self.degraded.swap(true, Ordering::Relaxed) {
            tracing::error!("cache device failing ({errors} errors in a row): no longer caching new data; dirty data is kept and cleaned");
            self.core.lock().expect("core").engine.degrade();
        }
        match (op.kind, op.purpose) {
            (IoKind::Read, Purpose::ReadHit) if !dirty => {
                let Some(boff) = client_off else {
                    return Err(LiveError(format!("cache read error: {e}")));
                };
                self.read_hit_from_backing(op, buf, slot, (f, l), boff)
                    .await
            }
            (IoKind::Write, Purpose::WriteCache)
                if self.write_policy() == WritePolicy::WriteBack =>
            {
                // The only copy would have been the cache: write it to the backing
                // device instead, through the core so that it lands after any
                // writeback of the line in flight. Invalidate and reroute under one
                // lock: a read miss in between would read the backing device
                // before the reroute is ordered ahead of it.
                let (Some(line), Some(b)) = (line, buf) else {
                    Self::invalidate_failed(&mut self.core.lock().expect("core"), op, slot, f, l);
                    return Err(LiveError(format!("cache write error: {e}")));
                };
                //
                // Sub-blocks the log holds dirty (an acknowledged, maybe
                // flushed, older version whose only copy is the slot) are
                // not dropped yet: if the rerouted write fails too, the slot
                // still holds the old version (or the new one), as a device
                // keeps after a failed write. They are held clean (out of
                // cleaning: a writeback of the old bytes would land after the
                // reroute) and dropped once the reroute landed (`finish`).
                let rerouted = {
                    let mut c = self.core.lock().expect("core");
                    if dirty {
                        c.engine.hold_clean(slot, f, l);
                    } else {
                        Self::invalidate_failed(&mut c, op, slot, f, l);
                    }
                    let mut out = Vec::new();
                    c.engine.reroute_failed_write(op, line, &mut out);
                    self.register(&mut c, &out);
                    if dirty {
                        for o in out
                            .iter()
                            .filter(|o| o.dev == Dev::Backing && o.kind == IoKind::Write)
                        {
                            c.held.insert(o.id, (slot, f, l, line));
                        }
                    }
                    out
                };
                // Run it once this op is finished: a writeback of the line
                // queued behind this op may be what it waits for.
                let _ = b;
                then.extend(rerouted);
                Ok(())
            }
            (IoKind::Flush, _) if self.write_policy() != WritePolicy::WriteBack => {
                // Nothing in the cache is the only copy: a FLUSH of the backing
                // device alone makes every acknowledged write durable.
                Ok(())
            }
            (IoKind::Write, _) => {
                // A fill or a write-through copy: the backing device has the data.
                Self::invalidate_failed(&mut self.core.lock().expect("core"), op, slot, f, l);
                Ok(())
            }
            _ => Err(LiveError(format!(
                "cache device I/O error on dirty data: {e}"
            ))),
        }
    }

    /// A metadata write to the cache device failed (its commit or
    /// checkpoint): counted as a cache error, which degrades the cache like
    /// failed data ops do.
    pub(super) fn note_metadata_error(&self) {
        self.stats.cache_errors.fetch_add(1, Ordering::Relaxed);
        self.stats.device_error(Dev::Cache, IoKind::Write);
        let errors = {
            let mut c = self.core.lock().expect("core");
            c.cache_errors += 1;
            c.cache_errors
        };
        if errors >= DEGRADE_AFTER && !self.degraded.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "cache device failing ({errors} errors in a row): no longer caching new data"
            );
            self.core.lock().expect("core").engine.degrade();
        }
    }

    /// The metadata store went fail-stop in write-back mode (`why`: the I/O
    /// error that failed its commit). Dirty data written to the cache from
    /// now on can never be recorded, so the cache stops relying on its log:
    /// it degrades (no new data is cached; misses go to the backing device,
    /// dirty lines are kept and cleaned) and every request that waits for a
    /// commit, every FLUSH and every FUA write fails with EIO until the cache
    /// is reopened (recovery replays the log as last committed). Nothing
    /// acknowledged as durable depends on a record that was lost: the last
    /// successful FLUSH committed everything before it.
    pub(super) fn metadata_store_failed(&self, why: &str) {
        if self.metadata_failed.set(why.to_string()).is_err() {
            return;
        }
        tracing::error!(
            "cache metadata store failed ({why}): write-back cache degraded; FLUSH, FUA and writes that need a metadata commit fail with EIO until the cache is reopened"
        );
        self.stats.cache_errors.fetch_add(1, Ordering::Relaxed);
        self.stats.device_error(Dev::Cache, IoKind::Write);
        self.degraded.store(true, Ordering::Relaxed);
        {
            let mut c = self.core.lock().expect("core");
            c.engine.degrade();
            // Nothing will ever commit these.
            c.pending.clear();
        }
        // Wake every request waiting for a commit: it fails now.
        self.committed.send_modify(|_| {});
    }

    /// Why the metadata store failed in write-back mode, if it did.
    pub fn metadata_failure(&self) -> Option<&str> {
        self.metadata_failed.get().map(String::as_str)
    }

    /// The error for a request that needs a commit after the store failed.
    pub(super) fn metadata_failed_error(&self) -> Option<LiveError> {
        self.metadata_failure().map(|why| {
            LiveError(format!(
                "cache metadata store failed earlier ({why}): write-back data cannot be made durable; reopen the cache"
            ))
        })
    }

    /// Keep the bytes a failed cache write of `line` should have left in each
    /// of its sub-blocks `f..=l`, for the reads queued behind it.
    fn poison_failed_write(
        &self,
        op: &Op,
        slot: Slot,
        (f, l): (u32, u32),
        line: u64,
        b: &Arc<ReqBuf>,
    ) {
        let data = {
            let d = b.data.lock().expect("buf");
            Arc::new(d[op.buf_off as usize..(op.buf_off + op.len) as usize].to_vec())
        };
        let mut c = self.core.lock().expect("core");
        self.any_poison.store(true, Ordering::Release);
        for i in f..=l {
            // The piece of the write within sub-block `i`.
            let sb = (op.offset / self.line) * self.line + i as u64 * self.sub;
            let (ps, pe) = (sb.max(op.offset), (sb + self.sub).min(op.offset + op.len));
            let piece = data[(ps - op.offset) as usize..(pe - op.offset) as usize].to_vec();
            c.poisoned.entry((slot, i)).or_default().push(Poison {
                id: op.id,
                line,
                start: ps,
                data: Arc::new(piece),
            });
        }
    }

    /// A clean read hit failed: serve it from the backing device at client
    /// offset `boff` instead, and drop the unreadable sub-blocks `f..=l`.
    async fn read_hit_from_backing(
        &self,
        op: &Op,
        buf: Option<&Arc<ReqBuf>>,
        slot: Slot,
        (f, l): (u32, u32),
        boff: u64,
    ) -> Result<(), LiveError> {
        let dev = Arc::clone(&self.backing);
        let len = op.len as usize;
        let r = tokio::task::spawn_blocking(move || {
            let mut v = vec![0u8; len];
            dev.read_at(&mut v, boff).map(|_| v)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        Self::invalidate_failed(&mut self.core.lock().expect("core"), op, slot, f, l);
        match r {
            Ok(bytes) => {
                if let Some(b) = buf {
                    let mut d = b.data.lock().expect("buf");
                    let s = op.buf_off as usize;
                    d[s..s + bytes.len()].copy_from_slice(&bytes);
                }
                Ok(())
            }
            Err(e) => Err(LiveError(format!("backing device I/O error: {e}"))),
        }
    }

    /// Drop sub-blocks `f..=l` of `slot` after a failed cache op, except those a
    /// later cache write still in flight rewrites (dropping them would lose that write).
    pub(super) fn invalidate_failed(c: &mut Core, op: &Op, slot: Slot, f: u32, l: u32) {
        let later: Vec<(u32, u32)> = c
            .inflight_writes
            .get(&slot)
            .map(|ws| {
                ws.iter()
                    .filter(|w| w.0 > op.id)
                    .map(|w| (w.1, w.2))
                    .collect()
            })
            .unwrap_or_default();
        for i in f..=l {
            if !later.iter().any(|&(a, b)| a <= i && i <= b) {
                c.engine.invalidate(slot, i, i);
            }
        }
    }
}

/// An op's kind in a log line.
fn op_name(kind: IoKind) -> &'static str {
    match kind {
        IoKind::Read => "read",
        IoKind::Write => "write",
        IoKind::Trim => "trim",
        IoKind::Flush => "flush",
    }
}
