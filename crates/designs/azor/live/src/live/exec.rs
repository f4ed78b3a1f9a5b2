//! Op execution: an op task waits for its dependencies and barriers, does
//! its I/O on the cache or backing device, and reports the completion.

use super::LiveCache;
use super::{Core, LiveError, Poison, ReqBuf, PENDING_COMMIT, WRITEBACK_RETRIES};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tiercache_azor_policy::eviction::Slot;
use tiercache_azor_policy::{Dev, IoKind, Op, Purpose, Source};
use tiercache_io::{BlockDev, IoOp};
use tiercache_store::SubBlocks;

impl LiveCache {
    /// Run one op: wait for its dependencies and slot barriers, do the I/O,
    /// record the outcome, then run the ops that replace it on failure.
    pub(super) async fn exec(
        self: Arc<Self>,
        op: Op,
        buf: Option<Arc<ReqBuf>>,
    ) -> Result<(), LiveError> {
        self.phase(&op, "deps");
        for d in op.waits_for() {
            self.wait_op(d).await;
        }
        let slot = (op.offset / self.line) as Slot;
        if op.purpose == Purpose::Fill && self.drop_failed_fill(&op, slot, buf.as_ref()) {
            return Ok(());
        }
        if op.purpose == Purpose::ReadHit && self.behind_failed_fill(&op) {
            self.finish(&op, buf.as_ref().map(|b| b.offset), false);
            return Err(LiveError(
                "backing device I/O error: the read that was to bring this data into the cache failed"
                    .into(),
            ));
        }
        // A cache write whose barrier can never be released (the metadata
        // store failed): it must not overwrite the slot. It is handled as a
        // failed cache write (a write-back write of client data is rerouted
        // to the backing device, a fill dropped), and the request fails: its
        // data cannot be made durable as the client will expect after FLUSH.
        let mut never = None;
        if op.dev == Dev::Cache && op.kind == IoKind::Write {
            never = self
                .wait_write_barriers(&op, slot, buf.as_ref())
                .await
                .err();
        }
        let res = match &never {
            Some(e) => Err(std::io::Error::other(e.0.clone())),
            None if Self::is_writeback(&op) => self.run_writeback_io(&op).await,
            None => match self.stranded_error(&op) {
                Some(e) => Err(e),
                None => self.run_io(&op, buf.as_ref(), None).await,
            },
        };
        let res = match res {
            Ok(mut bytes) if matches!(op.purpose, Purpose::ReadHit | Purpose::WritebackRead) => {
                self.patch_poisoned(&op, buf.as_ref(), &mut bytes);
                Ok(bytes)
            }
            r => r,
        };
        let mut then = Vec::new();
        // Whether the I/O itself succeeded: only then may the log record what it wrote
        // (a failed cache write may still succeed for the client, rerouted).
        let io_ok = res.is_ok();
        let result = match res {
            Ok(bytes) => {
                self.deliver_read(&op, buf.as_ref(), bytes);
                Ok(())
            }
            Err(e) => self.on_error(&op, buf.as_ref(), e, &mut then).await,
        };
        self.finish(&op, buf.as_ref().map(|b| b.offset), io_ok);
        // Ops that replace this one (a failed cache write rerouted to the backing device).
        let mut result = result;
        for o in then {
            let r = Arc::clone(&self)
                .spawn_exec(o, buf.clone())
                .await
                .unwrap_or_else(|e| Err(LiveError(format!("op task failed: {e}"))));
            result = result.and(r);
        }
        match never {
            Some(e) => Err(e),
            None => result,
        }
    }

    /// A fill whose feeding backing read failed: the buffer holds no data, so
    /// the fill's sub-blocks are invalidated and the op finishes unrun.
    /// Returns whether it did so.
    fn drop_failed_fill(&self, op: &Op, slot: Slot, buf: Option<&Arc<ReqBuf>>) -> bool {
        let failed = {
            let c = self.core.lock().expect("core");
            // Kept, not removed: one backing read may feed the fills of
            // several lines (a read spanning lines), and each must be dropped.
            op.deps().any(|d| c.failed_reads.contains(&d))
        };
        if failed {
            let (f, l) = self.subs_of(op.offset, op.len);
            let mut c = self.core.lock().expect("core");
            Self::invalidate_failed(&mut c, op, slot, f, l);
            c.failed_fills.insert(op.id);
            for i in f..=l {
                c.dropped_subs.insert((slot, i), op.id);
            }
            self.any_failed_fill.store(true, Ordering::Release);
            drop(c);
            self.finish(op, buf.map(|b| b.offset), false);
        }
        failed
    }

    /// Whether a cache read waits on a dropped fill (directly, or through
    /// another such read): the slot lacks its data. Marks it so for the reads
    /// queued behind it.
    fn behind_failed_fill(&self, op: &Op) -> bool {
        if !self.any_failed_fill.load(Ordering::Acquire) {
            return false;
        }
        let mut c = self.core.lock().expect("core");
        let slot = (op.offset / self.line) as Slot;
        let (f, l) = self.subs_of(op.offset, op.len);
        let on_dropped =
            (f..=l).any(|i| c.dropped_subs.get(&(slot, i)).is_some_and(|&d| d < op.id));
        if !on_dropped
            && (c.failed_fills.is_empty() || !op.deps().any(|d| c.failed_fills.contains(&d)))
        {
            return false;
        }
        c.failed_fills.insert(op.id);
        if c.failed_fills.len() > 4096 {
            // Ops that finished long ago: nothing waits on them any more.
            let oldest = c.signals.keys().copied().min().unwrap_or(op.id);
            c.failed_fills.retain(|&id| id >= oldest);
        }
        true
    }

    /// Before a cache write: wait until the slot's barriers are released and
    /// the log withdrew every claim on the bytes it overwrites.
    /// `Err` if a barrier can never be released (the metadata store failed).
    async fn wait_write_barriers(
        self: &Arc<Self>,
        op: &Op,
        slot: Slot,
        buf: Option<&Arc<ReqBuf>>,
    ) -> Result<(), LiveError> {
        let line = buf.map(|b| (b.offset + op.buf_off) / self.line);
        // The usual case under one lock: no barrier on the slot, and the
        // log claims nothing the write overwrites (what `wait_slot_ready`
        // and `guard_overwrite` would find, without their two locks).
        let ready = line.is_some_and(|line| self.slot_ready_now(op, slot, line));
        if !ready {
            self.phase(op, "slot");
            self.wait_slot_ready(slot, op.id, line).await?;
            if let Some(line) = line {
                self.phase(op, "log");
                self.guard_overwrite(op, slot, line).await?;
            }
        }
        Ok(())
    }

    fn is_writeback(op: &Op) -> bool {
        matches!(op.purpose, Purpose::WritebackRead | Purpose::WritebackWrite)
    }

    /// A writeback's read (of the cache) or write (to the backing device),
    /// retried up to [`WRITEBACK_RETRIES`] times after an error, with a short
    /// backoff: the line written back may already have been evicted, and then
    /// its only copy is the slot, which the new line overwrites once the
    /// writeback finished. A transient error must not end that copy's life;
    /// a writeback that fails for good strands the slot (`backing_failed`).
    async fn run_writeback_io(&self, op: &Op) -> std::io::Result<Vec<u8>> {
        // A write's payload, kept for its retries (the reads' buffers are taken once).
        let payload = (op.purpose == Purpose::WritebackWrite)
            .then(|| self.write_payload(op, None))
            .flatten();
        let mut res = self.run_io(op, None, payload.clone()).await;
        let mut attempt = 0;
        while let Err(e) = &res {
            let missing = op.purpose == Purpose::WritebackWrite && payload.is_none();
            if missing || attempt >= WRITEBACK_RETRIES || self.stopping.load(Ordering::Acquire) {
                break;
            }
            attempt += 1;
            match op.dev {
                Dev::Cache => self.stats.cache_errors.fetch_add(1, Ordering::Relaxed),
                Dev::Backing => self.stats.backing_errors.fetch_add(1, Ordering::Relaxed),
            };
            tracing::warn!(
                "writeback {} of {} bytes at {} on the {} failed ({e}): retry {attempt} of {WRITEBACK_RETRIES}",
                if op.kind == IoKind::Read { "read" } else { "write" },
                op.len,
                op.offset,
                match op.dev {
                    Dev::Cache => "cache device",
                    Dev::Backing => "backing device",
                }
            );
            tokio::time::sleep(std::time::Duration::from_millis(1 << attempt)).await;
            res = self.run_io(op, None, payload.clone()).await;
        }
        res
    }

    /// Do the op's I/O on its device, by the cheapest path that applies
    /// (buffered pwrite or page-cache read here, else the I/O engine or the
    /// blocking pool), and count its latency. `wb_payload`: a writeback
    /// write's bytes (taken by the caller, `None` when its read failed).
    async fn run_io(
        &self,
        op: &Op,
        buf: Option<&Arc<ReqBuf>>,
        wb_payload: Option<Vec<u8>>,
    ) -> std::io::Result<Vec<u8>> {
        self.phase(op, "io");
        tracing::trace!(target: "tiercache::ops", "start {}", op.id);
        let dev = match op.dev {
            Dev::Cache => Arc::clone(&self.cache),
            Dev::Backing => Arc::clone(&self.backing),
        };
        let off = match op.dev {
            Dev::Cache => self.data_offset + op.offset,
            Dev::Backing => op.offset,
        };
        let started = Instant::now();
        let kind = op.kind;
        let len = op.len as usize;
        // A WRITE_ZEROES's write to the backing device: the device's zeroing
        // command (NBD WRITE_ZEROES on a remote), not the zero buffer.
        if op.dev == Dev::Backing
            && kind == IoKind::Write
            && matches!(op.src, Source::Request)
            && buf.is_some_and(|b| b.zeroes)
        {
            let (fua, op_len) = (op.fua, op.len);
            let res = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
                dev.write_zeroes(off, op_len)?;
                if fua {
                    dev.flush()?;
                }
                Ok(Vec::new())
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            self.stats.record_op(op.dev, started.elapsed());
            if res.is_err() {
                self.stats.device_error(op.dev, kind);
            }
            return res;
        }
        // A small buffered write (no FUA) of client data to a file or block
        // device without O_DIRECT: a pwrite into the page cache straight from
        // the request's buffer, here, with no copy and no hand-off.
        let mut written: Option<std::io::Result<Vec<u8>>> = None;
        if kind == IoKind::Write && !op.fua && matches!(op.src, Source::Request) {
            let b = buf.expect("request buffer");
            let d = b.data.lock().expect("buf");
            let s = op.buf_off as usize;
            written = tiercache_io::write_buffered(&*dev, &d[s..s + len], off)
                .map(|r| r.map(|_| Vec::new()));
        }
        // The bytes a write carries (when not written above).
        let payload = if op.purpose == Purpose::WritebackWrite {
            wb_payload
        } else if written.is_some() {
            None
        } else {
            self.write_payload(op, buf)
        };
        let missing_source = kind == IoKind::Write && payload.is_none() && written.is_none();
        // A cache read whose data is in the page cache: read it here, no hand-off
        // to an I/O thread (all-hit reads; declined for O_DIRECT and wrappers).
        let cached = if kind == IoKind::Read && op.dev == Dev::Cache {
            let mut v = vec![0u8; len];
            matches!(tiercache_io::read_cached(&*dev, &mut v, off), Some(Ok(()))).then_some(v)
        } else {
            None
        };
        // Other small buffered writes (writebacks): a pwrite here too.
        if written.is_none() {
            written = match (&payload, kind, op.fua) {
                (Some(p), IoKind::Write, false) => {
                    tiercache_io::write_buffered(&*dev, p, off).map(|r| r.map(|_| Vec::new()))
                }
                _ => None,
            };
        }
        let res: std::io::Result<Vec<u8>> = if let Some(v) = cached {
            Ok(v)
        } else if let Some(r) = written {
            r
        } else if missing_source {
            Err(std::io::Error::other(
                "writeback data is missing (its read failed)",
            ))
        } else {
            self.device_io(dev, off, op, payload).await
        };
        self.stats.record_op(op.dev, started.elapsed());
        if res.is_err() && !missing_source {
            self.stats.device_error(op.dev, kind);
        }
        res
    }

    /// The bytes a write carries: the request's, or those its writeback
    /// read(s) left (`None` when such a read failed, or for other ops).
    fn write_payload(&self, op: &Op, buf: Option<&Arc<ReqBuf>>) -> Option<Vec<u8>> {
        match (op.kind, op.src) {
            (IoKind::Write, Source::Request) => {
                let b = buf.expect("request buffer");
                let d = b.data.lock().expect("buf");
                let s = op.buf_off as usize;
                Some(d[s..s + op.len as usize].to_vec())
            }
            (IoKind::Write, Source::Op(rd)) => {
                let mut c = self.core.lock().expect("core");
                let data = c.wb_reads.get_mut(&rd).and_then(|w| w.1.take());
                c.wb_reads.remove(&rd);
                data
            }
            (IoKind::Write, Source::Ops(first, n)) => {
                // A merged writeback: the reads' buffers, concatenated.
                let mut c = self.core.lock().expect("core");
                let mut all = Vec::with_capacity(op.len as usize);
                let mut complete = true;
                for rd in first..first + n as u64 {
                    match c.wb_reads.remove(&rd).and_then(|w| w.1) {
                        Some(d) => all.extend_from_slice(&d),
                        None => complete = false,
                    }
                }
                complete.then_some(all)
            }
            _ => None,
        }
    }

    /// The I/O handed off: to the I/O engine when one is set, else as
    /// positional I/O on tokio's blocking pool.
    async fn device_io(
        &self,
        dev: Arc<dyn BlockDev>,
        off: u64,
        op: &Op,
        payload: Option<Vec<u8>>,
    ) -> std::io::Result<Vec<u8>> {
        let kind = op.kind;
        let len = op.len as usize;
        let fua = op.fua;
        let op_len = op.len;
        let engine = self.io.lock().expect("io").clone();
        match engine {
            // An I/O engine (io_uring or a thread pool) of tiercache-io.
            Some(engine) => {
                let io_op = match kind {
                    IoKind::Read => IoOp::Read { offset: off, len },
                    IoKind::Write => IoOp::Write {
                        offset: off,
                        data: payload.expect("payload"),
                        fua,
                    },
                    IoKind::Trim => IoOp::Trim {
                        offset: off,
                        len: op_len,
                    },
                    IoKind::Flush => IoOp::Flush,
                };
                engine.run(&dev, io_op).await
            }
            // Portable default: positional I/O on tokio's blocking pool.
            None => tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
                match kind {
                    IoKind::Read => {
                        let mut v = vec![0u8; len];
                        dev.read_at(&mut v, off)?;
                        Ok(v)
                    }
                    IoKind::Write => {
                        let p = payload.expect("payload");
                        if fua {
                            dev.write_at_fua(&p, off)?;
                        } else {
                            dev.write_at(&p, off)?;
                        }
                        Ok(Vec::new())
                    }
                    IoKind::Trim => dev.trim(off, op_len).map(|_| Vec::new()),
                    IoKind::Flush => dev.flush().map(|_| Vec::new()),
                }
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
        }
    }

    /// Hand the bytes a successful read returned to their consumer: the
    /// writeback write that uses them, or the request's buffer.
    fn deliver_read(&self, op: &Op, buf: Option<&Arc<ReqBuf>>, bytes: Vec<u8>) {
        if op.kind == IoKind::Read {
            if op.purpose == Purpose::WritebackRead {
                if let Some(w) = self.core.lock().expect("core").wb_reads.get_mut(&op.id) {
                    w.1 = Some(bytes);
                }
            } else if let Some(b) = buf {
                let mut d = b.data.lock().expect("buf");
                let s = op.buf_off as usize;
                d[s..s + bytes.len()].copy_from_slice(&bytes);
            }
        }
    }

    /// The rerouted write of a failed cache write over dirty sub-blocks
    /// `f..=l` of `slot` (for `line`) finished: if it landed, the old bytes
    /// held in the slot are stale, and those sub-blocks still held (not
    /// rewritten since) are dropped, with the record appended at once (a FUA
    /// commit follows) and committed only after a backing flush; if it failed, they are dirty again (the slot has the
    /// old version, or the new one: what a device keeps after a failed write).
    fn release_held(&self, c: &mut Core, slot: Slot, (f, l): (u32, u32), line: u64, ok: bool) {
        let Some(b) = c.engine.slot_bits(slot).filter(|b| b.line == line) else {
            return;
        };
        let (valid, dirty) = (SubBlocks(b.valid), SubBlocks(b.dirty));
        for i in (f..=l).filter(|&i| valid.get(i) && !dirty.get(i)) {
            if ok {
                c.engine.invalidate(slot, i, i);
            } else {
                c.engine.redirty(slot, i, i);
            }
        }
        let before = c.appended_gen;
        for s in c.engine.take_touched() {
            self.journal_submit(c, s, &[]);
        }
        if ok {
            // Dropping the old version's claim needs the rerouted data
            // durable on the backing device first.
            for g in before + 1..=c.appended_gen {
                c.flushed_unmaps.insert(g);
                c.needs_backing_flush = true;
            }
        }
    }

    /// A cache read queued behind a failed cache write of the same line: the
    /// bytes that write should have left in the slot come from its payload.
    /// A writeback read too (of any line: it reads only dirty sub-blocks,
    /// last written by the slot's line, and a successful write drops older
    /// poisons): else it would carry bytes the slot never got for its line
    /// (another line's) to the backing device.
    pub(super) fn patch_poisoned(&self, op: &Op, buf: Option<&Arc<ReqBuf>>, bytes: &mut [u8]) {
        if !self.any_poison.load(Ordering::Acquire) {
            return;
        }
        let line = if op.purpose == Purpose::WritebackRead {
            None
        } else {
            let Some(b) = buf else { return };
            Some((b.offset + op.buf_off) / self.line)
        };
        let slot = (op.offset / self.line) as Slot;
        let (f, l) = self.subs_of(op.offset, op.len);
        let c = self.core.lock().expect("core");
        if c.poisoned.is_empty() {
            return;
        }
        let mut hits: Vec<&Poison> = (f..=l)
            .filter_map(|i| c.poisoned.get(&(slot, i)))
            .flatten()
            .filter(|p| p.id < op.id && line.is_none_or(|l| p.line == l))
            .collect();
        hits.sort_by_key(|p| p.id);
        for p in hits {
            let s = p.start.max(op.offset);
            let e = (p.start + p.data.len() as u64).min(op.offset + op.len);
            if s < e {
                bytes[(s - op.offset) as usize..(e - op.offset) as usize]
                    .copy_from_slice(&p.data[(s - p.start) as usize..(e - p.start) as usize]);
            }
        }
    }

    /// Run `op` as its own task (a plain fn, so that `exec` may start ops without
    /// its future type depending on itself).
    pub(super) fn spawn_exec(
        self: Arc<Self>,
        op: Op,
        buf: Option<Arc<ReqBuf>>,
    ) -> tokio::task::JoinHandle<Result<(), LiveError>> {
        tokio::spawn(self.exec(op, buf))
    }

    /// Report a finished op to the core and append the records its completion allows.
    pub(super) fn finish(&self, op: &Op, req_offset: Option<u64>, ok: bool) {
        tracing::trace!(target: "tiercache::ops", "done {} ok={ok}", op.id);
        if self.track_phases.load(Ordering::Relaxed) {
            self.phases.lock().expect("phases").remove(&op.id);
        }
        let mut c = self.core.lock().expect("core");
        if ok && op.dev == Dev::Cache {
            c.cache_errors = 0;
        }
        let mut more = Vec::new();
        c.engine.complete(op, &mut more);
        if ok {
            match (op.dev, op.kind, op.purpose) {
                (Dev::Cache, IoKind::Write, _) => self.journal_cache_write(&mut c, op, req_offset),
                (Dev::Backing, IoKind::Write, Purpose::WritebackWrite) => {
                    self.journal_writeback(&mut c, op)
                }
                _ => {}
            }
        }
        if op.dev == Dev::Cache && op.kind == IoKind::Write {
            let slot = (op.offset / self.line) as Slot;
            if ok && !c.dropped_subs.is_empty() {
                // Sub-blocks this write filled whole hold data again.
                let (f, l) = self.subs_of(op.offset, op.len);
                let line_start = (op.offset / self.line) * self.line;
                for i in f..=l {
                    let sb = line_start + i as u64 * self.sub;
                    let whole = op.offset <= sb && sb + self.sub <= op.offset + op.len;
                    if whole && c.dropped_subs.get(&(slot, i)).is_some_and(|&d| d < op.id) {
                        c.dropped_subs.remove(&(slot, i));
                    }
                }
            }
            if ok && !c.poisoned.is_empty() {
                let (f, l) = self.subs_of(op.offset, op.len);
                // Older failed bytes this write rewrote are in the slot now: keep
                // only the parts of older poisons outside its range.
                let (s, e) = (op.offset, op.offset + op.len);
                for i in f..=l {
                    if let Some(v) = c.poisoned.get_mut(&(slot, i)) {
                        let mut kept = Vec::with_capacity(v.len());
                        for p in v.drain(..) {
                            let pe = p.start + p.data.len() as u64;
                            if p.id >= op.id || pe <= s || e <= p.start {
                                kept.push(p);
                                continue;
                            }
                            for (a, z) in [(p.start, s), (e, pe)] {
                                if a < z {
                                    kept.push(Poison {
                                        id: p.id,
                                        line: p.line,
                                        start: a,
                                        data: Arc::new(
                                            p.data[(a - p.start) as usize..(z - p.start) as usize]
                                                .to_vec(),
                                        ),
                                    });
                                }
                            }
                        }
                        *v = kept;
                        if v.is_empty() {
                            c.poisoned.remove(&(slot, i));
                        }
                    }
                }
            }
            if let Some(v) = c.inflight_writes.get_mut(&slot) {
                v.retain(|w| w.0 != op.id);
                if v.is_empty() {
                    c.inflight_writes.remove(&slot);
                }
            }
        }
        if let Some((slot, f, l, line)) = c.held.remove(&op.id) {
            self.release_held(&mut c, slot, (f, l), line, ok);
        }
        if op.purpose == Purpose::WritebackWrite {
            for slot in c.wb_write_slots.remove(&op.id).unwrap_or_default() {
                if let Some(v) = c.wb_slots.get_mut(&slot) {
                    v.retain(|&(_, w)| w != op.id);
                    if v.is_empty() {
                        c.wb_slots.remove(&slot);
                    }
                }
            }
        }
        if op.purpose == Purpose::ReadMiss && !ok {
            c.failed_reads.insert(op.id);
            if c.failed_reads.len() > 4096 {
                // A fill is submitted with the read that feeds it, so its id
                // is close above the read's: reads far older than every op
                // in flight feed nothing any more.
                let oldest = c.signals.keys().copied().min().unwrap_or(op.id);
                let keep = oldest.saturating_sub(1 << 16);
                c.failed_reads.retain(|&id| id >= keep);
            }
        }
        if c.pending.len() >= PENDING_COMMIT {
            // Without FLUSHes nothing else commits write-back records: keep the
            // buffer (and the log tail a crash loses) bounded.
            self.commit_wanted.notify_one();
        }
        if op.purpose == Purpose::WritebackRead && !ok {
            c.wb_reads.remove(&op.id);
        }
        if let Some(Some(tx)) = c.signals.remove(&op.id) {
            let _ = tx.send(true);
        }
    }
}
