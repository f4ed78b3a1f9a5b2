//! Executing the policy's device ops: backing I/O, SSD slots and commits,
//! and resynchronizing the policy after an op failed.

use super::inline::SlowIo;
use super::State;
use super::{ssd_fault, CacheError, DramPage, Fault};
use crate::pair::{Role, PAGE};
use rustc_hash::FxHashMap;
use tiercache_tica_policy::{Dev, Op, OpKind, Page};

/// Spare DRAM page buffers kept at most (512 KiB): a flushed page's buffer
/// is usually taken again by the next write (`recycle_dram`).
const SPARE_MAX: usize = 128;

impl State {
    pub(crate) fn backing_read(&mut self, p: Page) -> Result<Vec<u8>, CacheError> {
        let _slow = SlowIo::enter(&self.slow);
        let mut buf = vec![0u8; PAGE as usize];
        self.backing.read_at(&mut buf, p * PAGE).map_err(|e| {
            CacheError(format!(
                "backing device {}: reading page {p}: {e}",
                self.backing.name()
            ))
        })?;
        self.counters.backing_reads += 1;
        Ok(buf)
    }

    pub(crate) fn backing_write(&mut self, p: Page, data: &[u8]) -> Result<(), CacheError> {
        let _slow = SlowIo::enter(&self.slow);
        self.backing.write_at(data, p * PAGE).map_err(|e| {
            CacheError(format!(
                "backing device {}: writing page {p}: {e}",
                self.backing.name()
            ))
        })?;
        self.backing_unflushed = true;
        self.counters.backing_writes += 1;
        Ok(())
    }

    pub(crate) fn backing_flush(&mut self) -> Result<(), CacheError> {
        if self.backing_unflushed {
            let _slow = SlowIo::enter(&self.slow);
            self.backing.flush().map_err(|e| {
                CacheError(format!(
                    "backing device {}: flush: {e}",
                    self.backing.name()
                ))
            })?;
            self.backing_unflushed = false;
        }
        Ok(())
    }

    /// Commit both SSDs' metadata, the backing device flushed first (a
    /// victim's unmap is durable only after its writeback is). The RO-SSD
    /// has nothing to commit while the cache runs (its metadata is volatile,
    /// `Ssd::set_volatile_meta`).
    pub(super) fn commit_all(&mut self) -> Result<(), Fault> {
        let _slow = SlowIo::enter(&self.slow);
        self.backing_flush()?;
        if self.ro.has_pending() {
            self.ro.commit().map_err(|e| ssd_fault(e, Role::RoSsd))?;
        }
        self.wo.commit().map_err(|e| ssd_fault(e, Role::WoSsd))?;
        Ok(())
    }

    pub(super) fn ensure_slot(&mut self, role: Role) -> Result<(), Fault> {
        if !self.ssd(role).has_free_slot() {
            self.commit_all()?;
        }
        Ok(())
    }

    /// Execute one access's ops. `req` is the page written by the client
    /// (with its data); the returned map holds every page an op read.
    pub(super) fn exec(
        &mut self,
        ops: &[Op],
        req: Option<(Page, &[u8])>,
    ) -> Result<FxHashMap<Page, Vec<u8>>, Fault> {
        let mut bufs: FxHashMap<Page, Vec<u8>> = FxHashMap::default();
        let req_page = req.map(|(p, _)| p);
        // A page's bytes for a write op: read by an earlier op, else the
        // client's (borrowed: no copy until a device or DRAM takes them).
        fn data_of<'a>(
            bufs: &'a FxHashMap<Page, Vec<u8>>,
            req: Option<(Page, &'a [u8])>,
            p: Page,
        ) -> Result<&'a [u8], Fault> {
            match (bufs.get(&p), req) {
                (Some(d), _) => Ok(d),
                (None, Some((q, d))) if q == p => Ok(d),
                _ => Err(Fault::Other(format!(
                    "internal: no data for page {p} in an op sequence"
                ))),
            }
        }
        let mut deferred_ro_unmap = false;
        for op in ops {
            let p = op.page;
            match (op.dev, op.kind) {
                (_, OpKind::WaitFlush) => {} // flushes complete under the lock
                (Dev::Dram, OpKind::Read) => {
                    let d = self.dram.get(&p).map(|d| d.data.clone()).ok_or_else(|| {
                        Fault::Other(format!("internal: page {p} is not in DRAM"))
                    })?;
                    bufs.insert(p, d);
                }
                (Dev::Dram, OpKind::Write) => {
                    let data = data_of(&bufs, req, p)?;
                    let dirty = req_page == Some(p);
                    match self.dram.get_mut(&p) {
                        // Reuse the old copy's buffer (gc_dram drops stale ones lazily).
                        Some(d) => {
                            d.data.clear();
                            d.data.extend_from_slice(data);
                            d.dirty = dirty;
                        }
                        None => {
                            let mut buf = self.spare.pop().unwrap_or_default();
                            buf.clear();
                            buf.extend_from_slice(data);
                            self.dram.insert(p, DramPage { data: buf, dirty });
                        }
                    }
                }
                (Dev::RoSsd | Dev::WoSsd, kind) => {
                    let role = if op.dev == Dev::RoSsd {
                        Role::RoSsd
                    } else {
                        Role::WoSsd
                    };
                    match kind {
                        OpKind::Read => {
                            let d = self.ssd(role).read(p).map_err(|e| ssd_fault(e, role))?;
                            bufs.insert(p, d);
                        }
                        OpKind::Write => {
                            let data = data_of(&bufs, req, p)?;
                            // The RO-SSD only receives flushes of dirty pages;
                            // the WO-SSD the client's writes (dirty) and WED
                            // copies of DRAM read pages (clean).
                            let dirty = role == Role::RoSsd || req_page == Some(p);
                            self.ensure_slot(role)?;
                            self.ssd(role)
                                .write(p, data, dirty)
                                .map_err(|e| ssd_fault(e, role))?;
                        }
                        // A client write's TRIMs of its page's older copies
                        // wait until the new copy is on the WO-SSD: the
                        // WO-SSD's unmap goes into the same commit as the new
                        // mapping (`Ssd::write`), the RO-SSD's after it, so
                        // no crash or failure in between finds the last
                        // flushed version gone.
                        OpKind::Trim if req_page == Some(p) => {
                            if role == Role::RoSsd {
                                deferred_ro_unmap = true;
                            }
                        }
                        OpKind::Trim => {
                            self.ssd(role).unmap(p).map_err(|e| ssd_fault(e, role))?;
                        }
                        OpKind::WaitFlush => {}
                    }
                }
                (Dev::Hdd, OpKind::Read) => {
                    let d = self.backing_read(p)?;
                    bufs.insert(p, d);
                }
                (Dev::Hdd, OpKind::Write) => {
                    let data = data_of(&bufs, req, p)?;
                    self.backing_write(p, data)?;
                    if let Some(d) = self.dram.get_mut(&p) {
                        d.dirty = false;
                    }
                }
                (Dev::Hdd | Dev::Dram, OpKind::Trim) => {}
                (Dev::WoSsdMirror, _) => {
                    return Err(Fault::Other("internal: TICA has no mirror SSD".into()))
                }
            }
        }
        if let (true, Some(p)) = (deferred_ro_unmap, req_page) {
            self.ro.unmap(p).map_err(|e| ssd_fault(e, Role::RoSsd))?;
        }
        Ok(bufs)
    }

    /// After ops stopped half way (a backing device error): dirty pages the
    /// policy already dropped (a victim whose writeback failed) but that
    /// are still on the WO-SSD go back into the policy, so they are neither
    /// lost nor shadowed by older backing data.
    pub(super) fn resync_policy(&mut self) {
        let orphans: Vec<Page> = self
            .wo
            .entries()
            .filter(|(p, e)| e.dirty && !self.tica.on_wo(*p))
            .map(|(p, _)| p)
            .collect();
        for p in orphans {
            let on_ro = self.ro.get(p).is_some();
            if !self.tica.restore_ssd_page(p, on_ro, true) {
                eprintln!("tiercache: page {p}: dirty on the WO-SSD but the policy is full");
            }
        }
    }

    /// Page `p`'s flush completed: when the policy no longer holds it in
    /// DRAM (the usual case), its DRAM copy goes now (its buffer to the
    /// spares) instead of at the next `gc_dram` round.
    pub(super) fn recycle_dram(&mut self, p: Page) {
        let d = self.tica.dram();
        if d.in_read(p) || d.write_slot(p).is_some() {
            return;
        }
        if let Some(page) = self.dram.remove(&p) {
            if self.spare.len() < SPARE_MAX {
                self.spare.push(page.data);
            }
        }
    }

    /// Drop DRAM copies the policy no longer holds; their buffers are kept
    /// (up to [`SPARE_MAX`]) for the next pages DRAM takes.
    pub(super) fn gc_dram(&mut self) {
        let cap = self.tica.dram().capacity();
        if self.dram.len() > cap + 64 {
            let d = self.tica.dram();
            let spare = &mut self.spare;
            self.dram.retain(|p, page| {
                let keep = d.in_read(*p) || d.write_slot(*p).is_some();
                if !keep && spare.len() < SPARE_MAX {
                    spare.push(std::mem::take(&mut page.data));
                }
                keep
            });
        }
    }
}
