//! Request intake: client requests split into ops, submitted to the core
//! under one lock, registered for tracking, and run to completion.

use super::LiveCache;
use super::{Core, LiveError, ReqBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tiercache_azor_policy::eviction::Slot;
use tiercache_azor_policy::{Class, Dev, IoKind, Op, Purpose, Request, Source};

impl LiveCache {
    /// Run one client request. `data` is the write payload; reads return their bytes.
    pub async fn request(
        self: &Arc<Self>,
        kind: IoKind,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        fua: bool,
    ) -> Result<Vec<u8>, LiveError> {
        self.request_with_class(kind, offset, len, data, fua, None)
            .await
    }

    /// A request whose class is given (`Some`), or found by the filesystem classifier (`None`).
    pub async fn request_with_class(
        self: &Arc<Self>,
        kind: IoKind,
        offset: u64,
        len: u64,
        data: Option<&[u8]>,
        fua: bool,
        class: Option<Class>,
    ) -> Result<Vec<u8>, LiveError> {
        let classify = class.is_none() && self.classify.load(Ordering::Relaxed);
        let class = match (class, kind, data) {
            (Some(c), ..) => c,
            (None, _, _) if !classify => Class::Data,
            (None, IoKind::Write, Some(d)) => {
                let me = Arc::clone(self);
                let d = d.to_vec();
                tokio::task::spawn_blocking(move || {
                    crate::classify::write_class(&me.fs, offset, &d)
                })
                .await
                .unwrap_or(Class::Data)
            }
            (None, IoKind::Read, _) => self.with_fs(move |fs| fs.read_class(offset, len)).await,
            _ => Class::Data,
        };
        let out = self
            .run_request(
                kind,
                offset,
                len,
                data.map(std::borrow::Cow::Borrowed),
                fua,
                class,
            )
            .await?;
        if classify {
            match kind {
                IoKind::Read => {
                    let learned = self
                        .fs
                        .try_lock()
                        .map(|mut fs| fs.learn(offset, &out))
                        .is_ok();
                    if !learned {
                        let d = out.clone();
                        self.with_fs(move |fs| fs.learn(offset, &d)).await
                    }
                }
                IoKind::Write if offset < (1 << 20) && self.filesystem().is_none() => {
                    self.spawn_attach()
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// A client write whose payload the cache may keep (no copy), unless
    /// filesystem classification needs to look at it first.
    pub async fn write_owned(
        self: &Arc<Self>,
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    ) -> Result<(), LiveError> {
        if self.classify.load(Ordering::Relaxed) {
            return self
                .request(IoKind::Write, offset, data.len() as u64, Some(&data), fua)
                .await
                .map(|_| ());
        }
        let len = data.len() as u64;
        self.run_request(
            IoKind::Write,
            offset,
            len,
            Some(std::borrow::Cow::Owned(data)),
            fua,
            Class::Data,
        )
        .await
        .map(|_| ())
    }

    /// A client WRITE_ZEROES. It takes the write path, so the cache's state
    /// and op ordering are exactly those of a write of zeros (cached copies
    /// updated with zeros in write-through, invalidated in write-around,
    /// dirty zeros in write-back), but every write of it to the backing
    /// device is sent as that device's zeroing command (NBD WRITE_ZEROES on a
    /// remote backing, zero buffers on a local file). Large ranges go as
    /// requests of at most 8 MiB each.
    pub async fn write_zeroes(
        self: &Arc<Self>,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> Result<(), LiveError> {
        const PIECE: u64 = 8 << 20;
        let mut done = 0u64;
        while done < len {
            let n = PIECE.min(len - done);
            let off = offset + done;
            let zeros = vec![0u8; n as usize];
            let classify = self.classify.load(Ordering::Relaxed);
            let class = if classify {
                let me = Arc::clone(self);
                let d = zeros.clone();
                tokio::task::spawn_blocking(move || crate::classify::write_class(&me.fs, off, &d))
                    .await
                    .unwrap_or(Class::Data)
            } else {
                Class::Data
            };
            let last = done + n == len;
            self.run_request_as(
                IoKind::Write,
                off,
                n,
                Some(std::borrow::Cow::Owned(zeros)),
                fua && last,
                class,
                true,
            )
            .await?;
            if classify && off < (1 << 20) && self.filesystem().is_none() {
                self.spawn_attach()
            }
            done += n;
        }
        Ok(())
    }

    pub(super) async fn run_request(
        self: &Arc<Self>,
        kind: IoKind,
        offset: u64,
        len: u64,
        data: Option<std::borrow::Cow<'_, [u8]>>,
        fua: bool,
        class: Class,
    ) -> Result<Vec<u8>, LiveError> {
        self.run_request_as(kind, offset, len, data, fua, class, false)
            .await
    }

    /// [`LiveCache::run_request`]; `zeroes`: a WRITE_ZEROES whose `data` is zeros.
    #[allow(clippy::too_many_arguments)]
    async fn run_request_as(
        self: &Arc<Self>,
        kind: IoKind,
        offset: u64,
        len: u64,
        data: Option<std::borrow::Cow<'_, [u8]>>,
        fua: bool,
        class: Class,
        zeroes: bool,
    ) -> Result<Vec<u8>, LiveError> {
        if self.stopping.load(Ordering::Acquire) && matches!(kind, IoKind::Write | IoKind::Trim) {
            // The clean shutdown's checkpoint is (being) written: the cache is detached.
            return Err(LiveError(
                "the cache is shutting down (detached): writes are refused".into(),
            ));
        }
        if kind != IoKind::Flush {
            if let Some(e) = self.stranded_range_error(offset, len) {
                return Err(e);
            }
        }
        let id = self.next_req.fetch_add(1, Ordering::Relaxed);
        let req = Request {
            id,
            kind,
            offset,
            len,
            class,
            fua,
        };
        // A read's buffer spans the request widened to whole sub-blocks: a
        // read miss reads and fills whole sub-blocks (less than two
        // sub-blocks more than the request).
        let (start, span) = tiercache_azor_policy::buffer_span(&req, self.sub);
        let buf = Arc::new(ReqBuf {
            offset: start,
            data: Mutex::new(match (kind, data) {
                (IoKind::Write, Some(d)) => d.into_owned(),
                (IoKind::Read, _) => vec![0; span as usize],
                _ => Vec::new(),
            }),
            zeroes,
        });
        let (ops, need_commit) = loop {
            if let Some(r) = self.submit(&req) {
                break r;
            }
            // A write policy change is switching: wait until it is done.
            let _ = self.pause.subscribe().wait_for(|paused| !paused).await;
        };
        tracing::trace!(target: "tiercache::ops", "req {req:?} -> {ops:?}");
        // Background ops of this request (a read miss's fills) use its buffer
        // after it is answered: then the answer is a copy.
        let shared_buf = ops.iter().any(|o| o.req == id && !o.foreground);
        if need_commit {
            self.spawn_commit(false);
        }
        // The request's one foreground op (the usual case) runs on this task;
        // several run as tasks of their own, in parallel; background ops
        // (fills, writebacks) always do, as they outlive the request.
        let n_fg = ops.iter().filter(|o| o.foreground && o.req == id).count();
        let mut fg = Vec::new();
        let mut inline = None;
        for op in ops {
            if n_fg == 1 && op.foreground && op.req == id {
                inline = Some(op);
                continue;
            }
            let me = Arc::clone(self);
            let b = Arc::clone(&buf);
            let h = tokio::spawn(async move { me.exec(op, Some(b)).await });
            if op.foreground && op.req == id {
                fg.push(h);
            }
        }
        let mut err = None;
        if let Some(op) = inline {
            if let Err(e) = Arc::clone(self).exec(op, Some(Arc::clone(&buf))).await {
                err = Some(e);
            }
        }
        for h in fg {
            match h.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => err = Some(e),
                Err(e) => err = Some(LiveError(format!("op task failed: {e}"))),
            }
        }
        if let Some(e) = err {
            return Err(e);
        }
        if fua || kind == IoKind::Flush {
            self.commit(true).await?;
        }
        self.stats.count_request(kind, len);
        // The client's bytes of a read's (possibly widened) buffer.
        let skip = (offset - start) as usize;
        let out = if kind != IoKind::Read {
            Vec::new()
        } else if shared_buf || span != len {
            buf.data.lock().expect("buf")[skip..skip + len as usize].to_vec()
        } else {
            std::mem::take(&mut *buf.data.lock().expect("buf"))
        };
        Ok(out)
    }

    /// Submit to the core and derive the journal's downgrades. Returns the ops to run.
    /// Also says whether a slot barrier of this or an earlier batch waits for a commit.
    /// `None` (nothing submitted) while a write policy change is switching.
    pub(super) fn submit(&self, req: &Request) -> Option<(Vec<Op>, bool)> {
        let mut c = self.core.lock().expect("core");
        if c.paused {
            return None;
        }
        let mut out = Vec::new();
        // Recorded under the core's lock: the order the engine takes them.
        if let Some(r) = self.recorder.get() {
            r.record(req.kind, req.offset, req.len, Some(req.class));
        }
        if let Some(w) = c.whatif.as_mut() {
            w.observe(req);
        }
        c.engine.submit(req, &mut out);
        // Foreground-coupled cleaning only under eviction pressure: once a
        // victim was dirty (a writeback before reuse), the next requests each
        // clean a little too, so victims are clean again. Otherwise cleaning
        // is the background controller's (a write burst is not slowed).
        // The decision is the shared scheduler's (`CleaningScheduler`).
        let de = c.engine.stats().dirty_evictions;
        let budget = c.sched.after_request(de);
        if budget > 0 {
            let n = c.engine.clean(budget, false, &mut out) as u64;
            self.stats.cleaned_lines.fetch_add(n, Ordering::Relaxed);
            self.stats
                .pressure_cleaned_lines
                .fetch_add(n, Ordering::Relaxed);
        }
        self.register(&mut c, &out);
        let done = self.committed_gen();
        let need_commit = c
            .slot_gen
            .values()
            .any(|v| v.iter().any(|&(g, _)| g > done))
            || !c.pending_unmap.is_empty();
        Some((out, need_commit))
    }

    /// Register signals for new ops and append the records their submission implies.
    pub(super) fn register(&self, c: &mut Core, out: &[Op]) {
        for o in out {
            c.signals.insert(o.id, None);
            if o.purpose == Purpose::WritebackRead {
                let slot = (o.offset / self.line) as Slot;
                c.wb_reads.insert(o.id, (slot, None));
            }
            if o.purpose == Purpose::WritebackWrite {
                let reads = match o.src {
                    Source::Op(r) => r..r + 1,
                    Source::Ops(first, n) => first..first + n as u64,
                    _ => 0..0,
                };
                let mut slots = Vec::new();
                for r in reads {
                    if let Some(&(slot, _)) = c.wb_reads.get(&r) {
                        c.wb_slots.entry(slot).or_default().push((r, o.id));
                        slots.push(slot);
                    }
                }
                c.wb_write_slots.insert(o.id, slots);
            }
        }
        let touched = c.engine.take_touched();
        for s in touched {
            self.journal_submit(c, s, out);
        }
        for o in out {
            if o.dev == Dev::Cache && o.kind == IoKind::Write {
                let slot = (o.offset / self.line) as Slot;
                let (f, l) = self.subs_of(o.offset, o.len);
                c.inflight_writes
                    .entry(slot)
                    .or_default()
                    .push((o.id, f, l));
            }
        }
    }

    pub(super) fn subs_of(&self, cache_off: u64, len: u64) -> (u32, u32) {
        let in_line = cache_off % self.line;
        (
            (in_line / self.sub) as u32,
            ((in_line + len.max(1) - 1) / self.sub) as u32,
        )
    }
}
