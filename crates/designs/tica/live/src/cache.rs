//! The live three-level cache: the `tiercache-levels` TICA policy executed
//! on a DRAM level (process memory), an RO-SSD, a WO-SSD and the backing
//! device.
//!
//! Every request runs under one lock, page by page: the policy's access
//! returns device ops ([`tiercache_levels::Op`]) that are executed in
//! emission order (their stages are already in that order), so the policy's
//! eager state and the devices never diverge under concurrency. The flusher
//! (DRAM to RO-SSD) runs in a background thread that takes the same lock
//! for small batches.
//!
//! Data safety:
//! - a write is acknowledged once it is in DRAM and written to the WO-SSD
//!   with its metadata record buffered; FLUSH (and FUA) commits the WO-SSD's
//!   metadata (which syncs its data first), so an acknowledged and flushed
//!   write is on the WO-SSD durably. DRAM is volatile here (the paper assumes
//!   battery-backed DRAM): the WO-SSD copy is what survives kill -9;
//! - dirty data is on two devices at all times: DRAM + WO-SSD, then, after
//!   the flusher, RO-SSD + WO-SSD; a WO-SSD victim is written to the backing
//!   device (and the backing device flushed before the victim's unmap is
//!   durable) before it is dropped;
//! - any I/O error on an SSD marks it failed: every dirty page is written
//!   back from the surviving copy (DRAM, or the other SSD), the backing
//!   device is flushed, the surviving SSD is rewritten empty with a
//!   `failed_peer` note, and the cache continues **degraded**: writes go
//!   through to the backing device, reads come from DRAM copies or the
//!   backing device. The request that met the error is then served that way.
//! - Recovery (see [`crate::open`]) trusts the WO-SSD's metadata; the
//!   RO-SSD's only after a clean shutdown of both.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{json, Value};
use tiercache_io::BlockDev;
use tiercache_levels::tica::Tica;
use tiercache_levels::{Architecture, Dev, Mode, Op, OpKind, Page};
use tiercache_store::BackingIdentity;

use crate::pair::{PairInfo, Role, PAGE};
use crate::ssd::{Ssd, SsdError};

/// A request failed: the message names the device and the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheError(pub String);

impl std::fmt::Display for CacheError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for CacheError {}

/// Why executing a page's ops stopped.
enum Fault {
    /// An SSD failed: degrade, then serve the page the degraded way.
    Ssd(Role, String),
    /// The backing device or a bug: the request fails with EIO.
    Other(String),
}

impl From<CacheError> for Fault {
    fn from(e: CacheError) -> Fault {
        Fault::Other(e.0)
    }
}

/// A page in the DRAM level.
struct DramPage {
    data: Vec<u8>,
    /// Newer than the backing device.
    dirty: bool,
}

/// How the cache runs after a device failure.
#[derive(Clone, Debug)]
pub struct Degraded {
    pub failed: Role,
    pub reason: String,
    /// Dirty pages written back when the failure was handled.
    pub written_back: u64,
    /// Dirty pages no surviving copy could be read for (a second failure).
    pub lost: u64,
    pub since: std::time::SystemTime,
}

/// What recovery found, for stats.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecoveryInfo {
    pub duration_ms: f64,
    /// Both SSDs had been shut down cleanly (RO-SSD copies kept).
    pub clean_shutdown: bool,
    /// Pages recovered on the WO-SSD and RO-SSD.
    pub wo_pages: u64,
    pub ro_pages: u64,
    /// Dirty WO-SSD pages without a second copy, written back at start.
    pub written_back: u64,
}

#[derive(Default, Clone, Copy)]
struct Counters {
    backing_reads: u64,
    backing_writes: u64,
    flushes: u64,
    flusher_pages: u64,
    degraded_dram_reads: u64,
    degraded_backing_reads: u64,
    degraded_writes: u64,
    errors: u64,
}

/// The cache state behind the lock.
pub(crate) struct State {
    pub(crate) tica: Tica,
    dram: FxHashMap<Page, DramPage>,
    pub(crate) ro: Ssd,
    pub(crate) wo: Ssd,
    backing: Arc<dyn BlockDev>,
    backing_unflushed: bool,
    degraded: Option<Degraded>,
    closed: bool,
    counters: Counters,
}

/// The live three-level cache (see the module documentation).
pub struct ThreeLevel {
    state: Mutex<State>,
    size: u64,
    pub(crate) info: PairInfo,
    backing_path: std::path::PathBuf,
    recovery: RecoveryInfo,
    stop: AtomicBool,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn ssd_fault(e: SsdError, role: Role) -> Fault {
    Fault::Ssd(role, e.0)
}

impl State {
    pub(crate) fn new(tica: Tica, ro: Ssd, wo: Ssd, backing: Arc<dyn BlockDev>) -> State {
        State {
            tica,
            dram: FxHashMap::default(),
            ro,
            wo,
            backing,
            backing_unflushed: false,
            degraded: None,
            closed: false,
            counters: Counters::default(),
        }
    }

    fn ssd(&mut self, role: Role) -> &mut Ssd {
        match role {
            Role::RoSsd => &mut self.ro,
            Role::WoSsd => &mut self.wo,
        }
    }

    pub(crate) fn backing_read(&mut self, p: Page) -> Result<Vec<u8>, CacheError> {
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
    /// victim's unmap is durable only after its writeback is).
    fn commit_all(&mut self) -> Result<(), Fault> {
        self.backing_flush()?;
        if self.ro.has_pending() {
            self.ro.commit().map_err(|e| ssd_fault(e, Role::RoSsd))?;
        }
        self.wo.commit().map_err(|e| ssd_fault(e, Role::WoSsd))?;
        Ok(())
    }

    fn ensure_slot(&mut self, role: Role) -> Result<(), Fault> {
        if !self.ssd(role).has_free_slot() {
            self.commit_all()?;
        }
        Ok(())
    }

    /// Execute one access's ops. `req` is the page written by the client
    /// (with its data); the returned map holds every page an op read.
    fn exec(
        &mut self,
        ops: &[Op],
        req: Option<(Page, &[u8])>,
    ) -> Result<FxHashMap<Page, Vec<u8>>, Fault> {
        let mut bufs: FxHashMap<Page, Vec<u8>> = FxHashMap::default();
        let req_page = req.map(|(p, _)| p);
        if let Some((p, d)) = req {
            bufs.insert(p, d.to_vec());
        }
        let data_of = |bufs: &FxHashMap<Page, Vec<u8>>, p: Page| -> Result<Vec<u8>, Fault> {
            bufs.get(&p).cloned().ok_or_else(|| {
                Fault::Other(format!("internal: no data for page {p} in an op sequence"))
            })
        };
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
                    let data = data_of(&bufs, p)?;
                    let dirty = req_page == Some(p);
                    self.dram.insert(p, DramPage { data, dirty });
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
                            let data = data_of(&bufs, p)?;
                            // The RO-SSD only receives flushes of dirty pages;
                            // the WO-SSD the client's writes (dirty) and WED
                            // copies of DRAM read pages (clean).
                            let dirty = role == Role::RoSsd || req_page == Some(p);
                            self.ensure_slot(role)?;
                            self.ssd(role)
                                .write(p, &data, dirty)
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
                    let data = data_of(&bufs, p)?;
                    self.backing_write(p, &data)?;
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
    fn resync_policy(&mut self) {
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

    /// Drop DRAM copies the policy no longer holds.
    fn gc_dram(&mut self) {
        let cap = self.tica.dram().capacity();
        if self.dram.len() > cap + 64 {
            let d = self.tica.dram();
            self.dram
                .retain(|p, _| d.in_read(*p) || d.write_slot(*p).is_some());
        }
    }

    /// Read one page (healthy or degraded).
    fn read_page(&mut self, p: Page) -> Result<Vec<u8>, CacheError> {
        loop {
            if self.degraded.is_some() {
                if let Some(d) = self.dram.get(&p) {
                    self.counters.degraded_dram_reads += 1;
                    return Ok(d.data.clone());
                }
                self.counters.degraded_backing_reads += 1;
                return self.backing_read(p);
            }
            let mut ops = Vec::new();
            self.tica.access(p, false, &mut ops);
            match self.exec(&ops, None) {
                Ok(mut bufs) => {
                    self.gc_dram();
                    return bufs
                        .remove(&p)
                        .ok_or_else(|| CacheError(format!("internal: no op read page {p}")));
                }
                Err(Fault::Ssd(role, why)) => self.degrade(role, &why)?,
                Err(Fault::Other(e)) => {
                    self.counters.errors += 1;
                    if !self.tica.on_wo(p) {
                        // A failed miss: the policy placed the page in DRAM
                        // without data; forget it there.
                        let mut trims = Vec::new();
                        self.tica.trim(p, &mut trims);
                        self.dram.remove(&p);
                    }
                    self.resync_policy();
                    return Err(CacheError(e));
                }
            }
        }
    }

    /// The current contents of a page without touching the policy's order
    /// (the old bytes of a partial write).
    fn peek_page(&mut self, p: Page) -> Result<Vec<u8>, CacheError> {
        if let Some(d) = self.dram.get(&p) {
            return Ok(d.data.clone());
        }
        if self.degraded.is_none() {
            let role = if self.ro.get(p).is_some() {
                Some(Role::RoSsd)
            } else if self.wo.get(p).is_some() {
                Some(Role::WoSsd)
            } else {
                None
            };
            if let Some(role) = role {
                match self.ssd(role).read(p) {
                    Ok(d) => return Ok(d),
                    Err(e) => {
                        self.degrade(role, &e.0)?;
                        return self.peek_page(p);
                    }
                }
            }
        }
        self.backing_read(p)
    }

    /// Write one whole page.
    fn write_page(&mut self, p: Page, data: &[u8]) -> Result<(), CacheError> {
        loop {
            if self.degraded.is_some() {
                self.backing_write(p, data)?;
                if let Some(d) = self.dram.get_mut(&p) {
                    d.data.copy_from_slice(data);
                    d.dirty = false;
                }
                self.counters.degraded_writes += 1;
                return Ok(());
            }
            let mut ops = Vec::new();
            self.tica.access(p, true, &mut ops);
            match self.exec(&ops, Some((p, data))) {
                Ok(_) => {
                    self.gc_dram();
                    return Ok(());
                }
                Err(Fault::Ssd(role, why)) => self.degrade(role, &why)?,
                Err(Fault::Other(e)) => {
                    self.counters.errors += 1;
                    // The write failed half way: its page's contents are
                    // undefined; drop it everywhere (its older copies were
                    // already unmapped by the first ops).
                    let mut trims = Vec::new();
                    self.tica.trim(p, &mut trims);
                    self.dram.remove(&p);
                    let _ = self.ro.unmap(p);
                    let _ = self.wo.unmap(p);
                    self.resync_policy();
                    return Err(CacheError(e));
                }
            }
        }
    }

    /// Copy up to `max` dirty DRAM pages to the RO-SSD (the flusher).
    fn flush_some(&mut self, max: usize) -> Result<usize, CacheError> {
        if self.degraded.is_some() || self.closed {
            return Ok(0);
        }
        let mut ops = Vec::new();
        let started = self.tica.start_flushes(max, &mut ops);
        match self.exec(&ops, None) {
            Ok(_) => {
                for &(p, gen) in &started {
                    self.tica.flush_done(p, gen);
                }
                self.counters.flusher_pages += started.len() as u64;
                self.gc_dram();
                Ok(started.len())
            }
            Err(Fault::Ssd(role, why)) => {
                self.degrade(role, &why)?;
                Ok(0)
            }
            Err(Fault::Other(e)) => Err(CacheError(e)),
        }
    }

    /// FLUSH: make every acknowledged write durable.
    fn flush(&mut self) -> Result<(), CacheError> {
        self.counters.flushes += 1;
        self.sync()
    }

    /// Commit everything (degrading on an SSD error; then the backing
    /// device is complete and flushed).
    fn sync(&mut self) -> Result<(), CacheError> {
        loop {
            if self.degraded.is_some() {
                return self.backing_flush();
            }
            match self.commit_all() {
                Ok(()) => return Ok(()),
                Err(Fault::Ssd(role, why)) => self.degrade(role, &why)?,
                Err(Fault::Other(e)) => return Err(CacheError(e)),
            }
        }
    }

    /// Pages newer than the backing device, each with where its newest copy
    /// is: DRAM first, else an SSD.
    fn dirty_pages(&self) -> Vec<Page> {
        let mut set: FxHashSet<Page> = self
            .dram
            .iter()
            .filter(|(_, d)| d.dirty)
            .map(|(p, _)| *p)
            .collect();
        for (p, e) in self.wo.entries().chain(self.ro.entries()) {
            if e.dirty {
                set.insert(p);
            }
        }
        let mut v: Vec<Page> = set.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// Write every dirty page back (control `flush`, `detach`): healthy
    /// only; marks the pages clean in the policy and on both SSDs.
    fn write_back_all(&mut self) -> Result<u64, CacheError> {
        if self.degraded.is_some() {
            self.backing_flush()?;
            return Ok(0);
        }
        let pages = self.dirty_pages();
        for &p in &pages {
            let data = match self.dram.get(&p) {
                Some(d) => d.data.clone(),
                None => {
                    let role = if self.ro.get(p).is_some() {
                        Role::RoSsd
                    } else {
                        Role::WoSsd
                    };
                    match self.ssd(role).read(p) {
                        Ok(d) => d,
                        Err(e) => {
                            // Degrading writes everything back itself.
                            self.degrade(role, &e.0)?;
                            return Ok(pages.len() as u64);
                        }
                    }
                }
            };
            self.backing_write(p, &data)?;
        }
        self.backing_flush()?;
        for &p in &pages {
            self.tica.mark_clean(p);
            if let Some(d) = self.dram.get_mut(&p) {
                d.dirty = false;
            }
            for role in [Role::RoSsd, Role::WoSsd] {
                if let Err(e) = self.ssd(role).mark_clean(p) {
                    self.degrade(role, &e.0)?;
                    return Ok(pages.len() as u64);
                }
            }
        }
        self.gc_dram();
        match self.commit_all() {
            Ok(()) => {}
            Err(Fault::Ssd(role, why)) => self.degrade(role, &why)?,
            Err(Fault::Other(e)) => return Err(CacheError(e)),
        }
        Ok(pages.len() as u64)
    }

    /// Handle the failure of SSD `failed` (see the module documentation).
    fn degrade(&mut self, failed: Role, why: &str) -> Result<(), CacheError> {
        if self.degraded.is_some() {
            return Ok(());
        }
        let dev_name = self.ssd(failed).name.clone();
        eprintln!(
            "tiercache: {} {dev_name} FAILED ({why}); writing dirty data back to the backing device \
             from the surviving copies and continuing DEGRADED (write-through, no SSD levels)",
            failed.label()
        );
        tracing::error!(device = %dev_name, "{} failed: {why}", failed.label());
        let survivor = failed.peer();
        let pages = self.dirty_pages();
        let (mut written, mut lost) = (0u64, 0u64);
        for &p in &pages {
            let in_dram = self.dram.get(&p).map(|d| d.data.clone());
            let on_survivor = self.ssd(survivor).get(p).is_some();
            let data = match in_dram {
                Some(d) => Some(d),
                None if on_survivor => match self.ssd(survivor).read(p) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        eprintln!(
                            "tiercache: page {p} LOST: its surviving copy failed too: {}",
                            e.0
                        );
                        None
                    }
                },
                None => {
                    eprintln!(
                        "tiercache: page {p} LOST: no copy outside the failed {}",
                        failed.label()
                    );
                    None
                }
            };
            match data {
                Some(d) => {
                    self.backing_write(p, &d)?;
                    written += 1;
                }
                None => lost += 1,
            }
        }
        self.backing_flush()?;
        for d in self.dram.values_mut() {
            d.dirty = false;
        }
        // The surviving SSD is rewritten empty with a note, so that no later
        // start trusts the failed device's (now stale) metadata.
        self.ssd(failed).abandon();
        let surv_dev = Arc::clone(&self.ssd(survivor).dev);
        if let Some(sb) = self.ssd(survivor).abandon() {
            if let Ok(info) = serde_json::from_str::<PairInfo>(&sb.policy) {
                let note = format!("{} failed: {why}", failed.label());
                if let Err(e) = crate::pair::mark_peer_failed(&surv_dev, &sb, info, &note) {
                    eprintln!(
                        "tiercache: could not record the failure on the surviving {}: {e:#}",
                        survivor.label()
                    );
                }
            }
        }
        eprintln!(
            "tiercache: degraded: {written} dirty pages written back{}; the backing device is complete",
            if lost > 0 {
                format!(", {lost} LOST")
            } else {
                String::new()
            }
        );
        self.degraded = Some(Degraded {
            failed,
            reason: why.to_string(),
            written_back: written,
            lost,
            since: std::time::SystemTime::now(),
        });
        Ok(())
    }
}

impl ThreeLevel {
    pub(crate) fn new(
        state: State,
        size: u64,
        info: PairInfo,
        backing_path: std::path::PathBuf,
        recovery: RecoveryInfo,
    ) -> ThreeLevel {
        ThreeLevel {
            state: Mutex::new(state),
            size,
            info,
            backing_path,
            recovery,
            stop: AtomicBool::new(false),
            flusher: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Export size in bytes (the backing device's).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The pair's description.
    pub fn info(&self) -> &PairInfo {
        &self.info
    }

    /// The backing device's path.
    pub fn backing_path(&self) -> &std::path::Path {
        &self.backing_path
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<(), CacheError> {
        if offset.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(CacheError(format!(
                "range {offset}+{len} is past the end of the device ({} bytes)",
                self.size
            )));
        }
        Ok(())
    }

    fn check_open(s: &State) -> Result<(), CacheError> {
        if s.closed {
            return Err(CacheError("the cache is shut down".into()));
        }
        Ok(())
    }

    /// Read `len` bytes at `offset`.
    pub fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>, CacheError> {
        self.check_range(offset, len as u64)?;
        let mut out = Vec::with_capacity(len);
        let mut s = self.lock();
        Self::check_open(&s)?;
        let end = offset + len as u64;
        let mut pos = offset;
        while pos < end {
            let p = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min((end - pos) as usize);
            let data = s.read_page(p)?;
            out.extend_from_slice(&data[in_page..in_page + n]);
            pos += n as u64;
        }
        Ok(out)
    }

    /// Write `data` at `offset`; with `fua`, durable when this returns.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), CacheError> {
        self.check_range(offset, data.len() as u64)?;
        let mut s = self.lock();
        Self::check_open(&s)?;
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let p = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min((end - pos) as usize);
            let src = &data[(pos - offset) as usize..(pos - offset) as usize + n];
            if n == PAGE as usize {
                s.write_page(p, src)?;
            } else {
                let mut page = s.peek_page(p)?;
                page[in_page..in_page + n].copy_from_slice(src);
                s.write_page(p, &page)?;
            }
            pos += n as u64;
        }
        if fua {
            s.flush()?;
        }
        Ok(())
    }

    /// Make every completed write durable.
    pub fn flush(&self) -> Result<(), CacheError> {
        let mut s = self.lock();
        Self::check_open(&s)?;
        s.flush()
    }

    /// Discard whole pages of `offset..offset + len` from every level (their
    /// contents afterwards are the backing device's). Partial pages are kept.
    pub fn trim(&self, offset: u64, len: u64) -> Result<(), CacheError> {
        self.check_range(offset, len)?;
        let mut s = self.lock();
        Self::check_open(&s)?;
        let first = offset.div_ceil(PAGE);
        let last = (offset + len) / PAGE;
        for p in first..last {
            if s.degraded.is_some() {
                s.dram.remove(&p);
                continue;
            }
            let mut ops = Vec::new();
            s.tica.trim(p, &mut ops);
            s.dram.remove(&p);
            match s.exec(&ops, None) {
                Ok(_) => {}
                Err(Fault::Ssd(role, why)) => s.degrade(role, &why)?,
                Err(Fault::Other(e)) => return Err(CacheError(e)),
            }
        }
        Ok(())
    }

    /// Run the flusher once: up to `max` dirty DRAM pages to the RO-SSD, and
    /// a metadata commit when records waited longer than a second.
    pub fn flusher_step(&self, max: usize) -> Result<usize, CacheError> {
        let mut s = self.lock();
        if s.closed {
            return Ok(0);
        }
        let n = s.flush_some(max)?;
        if s.degraded.is_none()
            && (s.wo.has_pending() || s.ro.has_pending())
            && s.wo.since_commit() > Duration::from_secs(1)
        {
            s.sync()?;
        }
        Ok(n)
    }

    /// Start the background flusher thread.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name("tica-flusher".into())
            .spawn(move || {
                while !me.stop.load(Ordering::Relaxed) {
                    match me.flusher_step(32) {
                        Ok(n) if n > 0 => std::thread::yield_now(),
                        Ok(_) => std::thread::sleep(Duration::from_millis(2)),
                        Err(e) => {
                            eprintln!("tiercache: flusher: {e}");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
            });
        match h {
            Ok(h) => *self.flusher.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
            Err(e) => eprintln!("tiercache: could not start the flusher thread: {e}"),
        }
    }

    /// Stop the background flusher thread (shutdown does it too).
    pub fn stop_background(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let h = self
            .flusher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Write every dirty page back to the backing device and flush it
    /// (control `flush`). Returns the pages written.
    pub fn write_back_all(&self) -> Result<u64, CacheError> {
        let mut s = self.lock();
        Self::check_open(&s)?;
        s.write_back_all()
    }

    /// Clean shutdown: finish the flusher's work, commit, and close both
    /// stores (a warm restart keeps both SSDs' contents). With `detach`,
    /// every dirty page is written back first: the backing device alone is
    /// then complete.
    pub fn shutdown(&self, detach: bool) -> Result<(), CacheError> {
        self.stop_background();
        let mut s = self.lock();
        if s.closed {
            return Ok(());
        }
        if detach {
            s.write_back_all()?;
        } else {
            while s.flush_some(256)? > 0 {}
        }
        s.flush()?;
        s.closed = true;
        if s.degraded.is_some() {
            return Ok(());
        }
        let id = BackingIdentity::probe(&self.backing_path)
            .map_err(|e| CacheError(format!("probing the backing device: {e}")))?;
        // The WO-SSD first: a crash between the two leaves the RO-SSD
        // unclean, and recovery then ignores it.
        s.wo.close(&id).map_err(|e| CacheError(e.0))?;
        s.ro.close(&id).map_err(|e| CacheError(e.0))?;
        Ok(())
    }

    /// Whether a device failed (and which, why).
    pub fn degraded(&self) -> Option<Degraded> {
        self.lock().degraded.clone()
    }

    /// Dirty pages (newer than the backing device) held by fewer than two
    /// devices, each with the devices that hold it: empty unless a device
    /// failed and the cache is degraded (then nothing is dirty either).
    pub fn single_copy_dirty_pages(&self) -> Vec<(Page, Vec<&'static str>)> {
        let s = self.lock();
        s.dirty_pages()
            .into_iter()
            .filter_map(|p| {
                let mut on = Vec::new();
                if s.dram.get(&p).is_some_and(|d| d.dirty) {
                    on.push("dram");
                }
                if s.ro.get(p).is_some() {
                    on.push("ro_ssd");
                }
                if s.wo.get(p).is_some() {
                    on.push("wo_ssd");
                }
                (on.len() < 2).then_some((p, on))
            })
            .collect()
    }

    /// Counters and state as JSON (`tiercache stats --json`).
    pub fn stats_json(&self) -> Value {
        let s = self.lock();
        let st = s.tica.stats();
        let reads = st.read_pages.max(1);
        let c = s.counters;
        let status = match &s.degraded {
            None => "ok".to_string(),
            Some(d) => format!(
                "degraded: {} failed ({}); write-through to the backing device, {} dirty pages written back{}",
                d.failed.label(),
                d.reason,
                d.written_back,
                if d.lost > 0 { format!(", {} LOST", d.lost) } else { String::new() }
            ),
        };
        let dram = s.tica.dram();
        let level = |x: &Ssd| {
            json!({
                "path": x.name, "slots": x.slots(), "used_pages": x.used(), "dirty_pages": x.dirty(),
                "page_writes": x.writes, "page_reads": x.reads, "commits": x.commits, "checkpoints": x.checkpoints,
            })
        };
        let dirty = s.dirty_pages().len();
        json!({
            "mode": "tica",
            "status": status,
            "degraded": s.degraded.is_some(),
            "failed_device": s.degraded.as_ref().map(|d| d.failed),
            "policy": {
                "tica_policy": s.tica.config().policy,
                "current_mode": match s.tica.mode() { Mode::Ef => "ef", Mode::Wed => "wed" },
                "dram_pages": s.tica.config().dram_pages,
                "ssd_pages": s.tica.config().ssd_pages,
                "page_bytes": PAGE,
            },
            "read_pages": st.read_pages,
            "write_pages": st.write_pages,
            "hits": {"dram": st.dram_hits, "ro_ssd": st.ro_ssd_hits, "wo_ssd": st.wo_ssd_hits},
            "dram_hits": st.dram_hits, "ro_ssd_hits": st.ro_ssd_hits, "wo_ssd_hits": st.wo_ssd_hits,
            "misses": st.misses,
            "hit_ratio": (st.dram_hits + st.ro_ssd_hits + st.wo_ssd_hits) as f64 / reads as f64,
            "ro_ssd_writes": s.ro.writes,
            "wo_ssd_writes": s.wo.writes,
            "ssd_writes": s.ro.writes + s.wo.writes,
            "writebacks": st.writebacks,
            "promotions": st.promotions,
            "flusher_pages": c.flusher_pages,
            "backing_reads": c.backing_reads,
            "backing_writes": c.backing_writes,
            "flushes": c.flushes,
            "errors": c.errors,
            "degraded_io": {"dram_reads": c.degraded_dram_reads, "backing_reads": c.degraded_backing_reads, "writes": c.degraded_writes},
            "dram": {"pages": s.dram.len(), "read_pages": dram.read_len(), "write_pages": dram.write_len(), "write_cap": dram.write_cap()},
            "ro_ssd": level(&s.ro),
            "wo_ssd": level(&s.wo),
            "dirty_pages": dirty,
            "occupied_lines": s.wo.used(),
            "dirty_lines": dirty,
            "slots": s.wo.slots(),
            "recovery": self.recovery,
            "live": {"recovery_ms": self.recovery.duration_ms},
        })
    }
}

impl Drop for ThreeLevel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
