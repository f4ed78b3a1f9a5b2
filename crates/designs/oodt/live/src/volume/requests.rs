//! Requests: registering a request's claims on its blocks, waiting for
//! migrations, routing each part to its tier and slot, and the I/O.

use super::TieredVolume;
use super::{lock, tier_err, Held, Kind, Part};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tiercache_block::IoKind;
use tiercache_oodt_policy::dispatcher::{split, ReqId};
use tiercache_oodt_policy::planner::PlanClock;
use tiercache_oodt_policy::policy::Access;

/// How a request's I/O runs on the calling task.
#[derive(Clone, Copy)]
enum Inline {
    /// The fast tier is a local file or device opened buffered: reads only
    /// from the page cache (`RWF_NOWAIT`), buffered writes.
    PageCache,
    /// Forced ([`TieredVolume::force_inline_fast`]): the device's own calls.
    Plain,
}

impl TieredVolume {
    /// Record every request from now on where the policy takes it
    /// (`serve --record`); a second recorder is ignored.
    pub fn attach_recorder(&self, recorder: Arc<tiercache_runtime::Recorder>) {
        let _ = self.recorder.set(recorder);
    }

    /// Claim the blocks of `[offset, offset + len)` (waiting while any is
    /// under migration), wait until no earlier overlapping claim conflicts,
    /// and route each part.
    pub(super) async fn acquire(
        self: &Arc<Self>,
        offset: u64,
        len: u64,
        kind: Kind,
    ) -> io::Result<Held> {
        if len == 0 || offset.checked_add(len).is_none_or(|e| e > self.size()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "range {offset}+{len} is outside the volume of {} bytes",
                    self.size()
                ),
            ));
        }
        let mut held = loop {
            let notified = self.unlocked.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(h) = self.register(offset, len, kind)? {
                break h;
            }
            notified.await;
        };
        loop {
            let notified = self.unlocked.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_route(&mut held, offset, len, kind) {
                return Ok(held);
            }
            notified.await;
        }
    }

    /// Register the request's claims with the dispatcher unless a block is
    /// under migration.
    pub(super) fn register(
        self: &Arc<Self>,
        offset: u64,
        len: u64,
        kind: Kind,
    ) -> io::Result<Option<Held>> {
        let bs = self.sb.block_bytes;
        let mut c = lock(&self.core);
        for (block, _, _) in split(offset, len, bs) {
            if c.poisoned.contains(&block) {
                return Err(io::Error::other(format!(
                    "block {block}: its migration's metadata write failed; the block is unavailable until restart"
                )));
            }
        }
        let c = &mut *c;
        let id = c
            .disp
            .register(&c.table, offset, len, kind != Kind::Read)
            .map_err(tier_err)?;
        Ok(id.map(|id| Held {
            vol: Arc::clone(self),
            id,
            offset,
            len,
            parts: Vec::new(),
        }))
    }

    /// If no earlier claim conflicts with the request's, route its parts
    /// through the dispatcher (and let the policy observe them).
    pub(super) fn try_route(&self, held: &mut Held, offset: u64, len: u64, kind: Kind) -> bool {
        let bs = self.sb.block_bytes;
        let mut c = lock(&self.core);
        if !c.disp.ready(held.id, offset, len, bs) {
            return false;
        }
        let c = &mut *c;
        // Recorded under the core's lock: the order the policy takes them.
        if let Some(r) = self.recorder.get() {
            let k = match kind {
                Kind::Read => IoKind::Read,
                Kind::Write => IoKind::Write,
                Kind::Trim => IoKind::Trim,
            };
            r.record(k, offset, len, None);
        }
        let mut subs = Vec::new();
        c.disp.route(&c.table, offset, len, &mut subs);
        for (i, p) in subs.iter().enumerate() {
            let (_, base) = self.locate(p.loc);
            debug_assert_eq!(
                base + p.offset % u64::from(bs),
                if p.loc.tier == 0 {
                    self.sb.layout.data_offset + p.tier_offset
                } else {
                    p.tier_offset
                }
            );
            held.parts.push(Part {
                at: (p.offset - offset) as usize,
                len: p.len as usize,
                tier: p.loc.tier,
                dev_offset: base + p.offset % u64::from(bs),
            });
            if kind != Kind::Trim {
                c.policy.observe(&Access {
                    block: p.block,
                    offset: p.offset,
                    len: p.len,
                    read: kind == Kind::Read,
                    meta: false,
                    request_offset: offset,
                    request_len: len,
                    first_part: i == 0,
                });
            }
        }
        if kind != Kind::Trim {
            c.last_request = Instant::now();
            if c.trigger.on_request(&c.planner) {
                if self.cfg.plan_clock == PlanClock::Requests {
                    c.request_round_due = true;
                } else {
                    c.plan_due = true;
                    self.wake_worker();
                }
            }
        }
        true
    }

    /// Drop the request's claims; wake a migration waiting for a block to
    /// drain and requests waiting behind the claims.
    pub(super) fn release(&self, id: ReqId, offset: u64, len: u64) {
        let drained = lock(&self.core)
            .disp
            .release(id, offset, len, self.sb.block_bytes);
        if drained {
            self.drained.notify_all();
        }
        self.unlocked.notify_waiters();
    }

    pub(super) fn count(&self, kind: Kind, parts: &[Part]) {
        let k = usize::from(kind == Kind::Write);
        for p in parts {
            let t = usize::from(p.tier != 0);
            self.counters.ops[t][k].fetch_add(1, Ordering::Relaxed);
            self.counters.bytes[t][k].fetch_add(p.len as u64, Ordering::Relaxed);
        }
    }

    /// Whether the request's I/O may run inline on the calling task: every part
    /// on the fast tier, that tier a local file or device opened buffered (see
    /// `inline_fast`), and no sync to wait for. Page-cache I/O takes
    /// microseconds, less than handing it to a request thread and back;
    /// slow-tier I/O and FUA syncs still go to the request threads, so they
    /// never hold one of the runtime's workers.
    fn inline(&self, parts: &[Part], fua: bool) -> Option<Inline> {
        let forced = self.inline_forced.load(Ordering::Relaxed);
        let fits = !fua
            && parts
                .iter()
                .all(|p| p.tier == 0 && p.len <= tiercache_io::INLINE_WRITE_MAX);
        match (fits, forced, self.inline_fast) {
            (false, _, _) => None,
            (true, true, _) => Some(Inline::Plain),
            (true, false, true) => Some(Inline::PageCache),
            (true, false, false) => None,
        }
    }

    /// Read `buf.len()` bytes at `offset`.
    pub async fn read(self: &Arc<Self>, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let held = self.acquire(offset, buf.len() as u64, Kind::Read).await?;
        self.count(Kind::Read, &held.parts);
        // Fast-tier page-cache hits are read here without blocking
        // (`RWF_NOWAIT`); anything else (a page not cached) goes to the
        // request threads, which read the whole request again.
        let dev = self.devs[0].as_ref();
        let done = match self.inline(&held.parts, false) {
            None => false,
            Some(Inline::Plain) => {
                for p in &held.parts {
                    dev.read_at(&mut buf[p.at..p.at + p.len], p.dev_offset)?;
                }
                true
            }
            Some(Inline::PageCache) => held.parts.iter().all(|p| {
                matches!(
                    tiercache_io::read_cached(dev, &mut buf[p.at..p.at + p.len], p.dev_offset),
                    Some(Ok(()))
                )
            }),
        };
        if done {
            self.counters.inline.fetch_add(1, Ordering::Relaxed);
            drop(held);
        } else {
            let n = buf.len();
            let data = self
                .blocking(move || {
                    let mut v = vec![0u8; n];
                    for p in &held.parts {
                        held.vol.devs[p.tier as usize]
                            .read_at(&mut v[p.at..p.at + p.len], p.dev_offset)?;
                    }
                    drop(held);
                    Ok(v)
                })
                .await?;
            buf.copy_from_slice(&data);
        }
        self.round_after_request().await;
        Ok(())
    }

    /// Write `data` at `offset`; with `fua`, durable when this returns.
    pub async fn write(self: &Arc<Self>, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        self.write_vec(offset, data.to_vec(), fua).await
    }

    /// [`write`](Self::write) taking the payload by value (no copy).
    pub async fn write_vec(
        self: &Arc<Self>,
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    ) -> io::Result<()> {
        let held = self.acquire(offset, data.len() as u64, Kind::Write).await?;
        self.count(Kind::Write, &held.parts);
        if let Some(how) = self.inline(&held.parts, fua) {
            // Buffered writes into the fast tier's page cache, here.
            let dev = self.devs[0].as_ref();
            for p in &held.parts {
                let part = &data[p.at..p.at + p.len];
                let buffered = match how {
                    Inline::PageCache => tiercache_io::write_buffered(dev, part, p.dev_offset),
                    Inline::Plain => None,
                };
                match buffered {
                    Some(r) => r?,
                    None => dev.write_at(part, p.dev_offset)?,
                }
            }
            self.counters.inline.fetch_add(1, Ordering::Relaxed);
            drop(held);
        } else {
            self.blocking(move || {
                let mut touched = [false; 2];
                for p in &held.parts {
                    held.vol.devs[p.tier as usize]
                        .write_at(&data[p.at..p.at + p.len], p.dev_offset)?;
                    touched[p.tier as usize] = true;
                }
                if fua {
                    for (t, _) in touched.iter().enumerate().filter(|(_, &x)| x) {
                        held.vol.devs[t].flush()?;
                    }
                }
                drop(held);
                Ok(())
            })
            .await?;
        }
        self.round_after_request().await;
        Ok(())
    }

    /// Discard `[offset, offset + len)` where its blocks live now (advisory).
    pub async fn trim(self: &Arc<Self>, offset: u64, len: u64) -> io::Result<()> {
        let held = self.acquire(offset, len, Kind::Trim).await?;
        self.blocking(move || {
            for p in &held.parts {
                held.vol.devs[p.tier as usize].trim(p.dev_offset, p.len as u64)?;
            }
            drop(held);
            Ok(())
        })
        .await
    }

    /// Make every completed write durable: flush every tier. (The mapping
    /// is always durable: each switch is logged before it takes effect.)
    pub async fn flush(self: &Arc<Self>) -> io::Result<()> {
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        let me = Arc::clone(self);
        self.blocking(move || me.flush_devices()).await
    }

    pub(super) fn flush_devices(&self) -> io::Result<()> {
        for d in &self.devs {
            d.flush()?;
        }
        Ok(())
    }
}
