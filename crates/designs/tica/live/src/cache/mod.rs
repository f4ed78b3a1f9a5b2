//! The live three-level cache: the `tiercache-tica-policy` TICA policy executed
//! on a DRAM level (process memory), an RO-SSD, a WO-SSD and the backing
//! device.
//!
//! Every request runs under one lock, page by page: the policy's access
//! returns device ops ([`tiercache_tica_policy::Op`]) that are executed in
//! emission order (their stages are already in that order), so the policy's
//! eager state and the devices never diverge under concurrency. The flusher
//! (DRAM to RO-SSD) follows the policy crate's [`FlushScheduler`], shared
//! with the simulator: after each request, before it is answered, the
//! flushes it allows are done under the same lock; a background thread
//! passes the wall clock's ticks (idle flushing, when the pair was formatted
//! with the timed part on) and commits metadata that waited a second.
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
//! - the RO-SSD's metadata is volatile while the cache runs (no records, an
//!   unmapped slot is reused at once; its table is written at the clean
//!   shutdown): recovery trusts it only after a clean shutdown of both SSDs,
//!   so no RO-SSD commit (and no `fdatasync` of its data under the lock) is
//!   needed; the background thread syncs it once a second, outside the
//!   lock, to find a failing device;
//! - any I/O error on an SSD marks it failed: every dirty page is written
//!   back from the surviving copy (DRAM, or the other SSD), the backing
//!   device is flushed, the surviving SSD's superblock gets a
//!   `failed_peer` note (atomically: a power loss leaves the pair as it was
//!   or noted, see [`crate::pair::mark_peer_failed`]), and the cache
//!   continues **degraded**: writes go through to the backing device, reads
//!   come from DRAM copies or the backing device. The request that met the error is then served that way.
//!   The switch is immediate and the write-back resumable: a step that
//!   fails is retried by the next request, and FLUSH succeeds only once it
//!   is all done (see `degrade`).
//! - Recovery (see [`crate::open`]) trusts the WO-SSD's metadata; the
//!   RO-SSD's only after a clean shutdown of both.
//!
//! This file holds the types, the state and the cache's accessors; the rest
//! is split: `exec` (running the policy's ops), `pages` (page accesses),
//! `flushing` (flusher batches, FLUSH, write-back), `degrade` (SSD failure),
//! `requests`, `background` (flusher thread), `lifecycle`, `resize` (SSD
//! sizes while serving) and `report`.

mod background;
mod degrade;
mod exec;
mod flushing;
mod inline;
mod lifecycle;
mod pages;
mod report;
mod requests;
pub mod resize;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxHashMap;
use tiercache_io::BlockDev;
use tiercache_tica_policy::tica::Tica;
use tiercache_tica_policy::{FlushScheduler, Page};

use crate::pair::{PairInfo, Role};
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
    /// Why the cache started cold (every cached page dropped at open): it
    /// was detached, or the backing device was modified while it was stopped.
    pub cold_start: Option<String>,
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
    /// Requests served on the runtime's worker (`inline`).
    inline_reads: u64,
    inline_writes: u64,
}

/// A dirty page held by fewer than two devices ([`ThreeLevel::single_copy_dirty_pages`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SingleCopyPage {
    /// The page.
    pub page: Page,
    /// The devices holding it: `dram`, `ro_ssd`, `wo_ssd`.
    pub held_by: Vec<&'static str>,
}

/// The cache state behind the lock.
pub(crate) struct State {
    pub(crate) tica: Tica,
    dram: FxHashMap<Page, DramPage>,
    /// Page buffers of DRAM copies `gc_dram` dropped, reused by the next
    /// pages DRAM takes (no 4 KiB allocation and free per write).
    spare: Vec<Vec<u8>>,
    /// The ops of the last page access or flusher batch (reused: no
    /// allocation per request).
    ops: Vec<tiercache_tica_policy::Op>,
    pub(crate) ro: Ssd,
    pub(crate) wo: Ssd,
    pub(crate) backing: Arc<dyn BlockDev>,
    backing_unflushed: bool,
    degraded: Option<Degraded>,
    /// Degrading not finished yet (`degrade`).
    work: Option<degrade::DegradeWork>,
    closed: bool,
    counters: Counters,
    /// When and what to flush (DRAM to RO-SSD).
    flusher: FlushScheduler,
    /// Non-zero while the lock's holder does slow I/O (`inline::SlowIo`).
    slow: Arc<AtomicUsize>,
    /// When the background thread last synced the RO-SSD (`background`).
    ro_synced: std::time::Instant,
    /// Failed reads and writes of each device (`stats`), counted by the
    /// wrappers `open_with_devices` puts around them.
    pub(crate) device_errors: tiercache_io::DeviceErrors,
    /// The request recorder (`serve --record`), once attached.
    recorder: Option<Arc<tiercache_runtime::Recorder>>,
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
    /// The state's slow-I/O mark, read without the lock (`inline`).
    slow: Arc<AtomicUsize>,
    /// Requests may run on the caller's thread (`inline`).
    inline: AtomicBool,
    /// Held by a resize (one at a time, `resize`).
    resizing: Mutex<()>,
}

fn ssd_fault(e: SsdError, role: Role) -> Fault {
    Fault::Ssd(role, e.0)
}

impl State {
    pub(crate) fn new(tica: Tica, ro: Ssd, wo: Ssd, backing: Arc<dyn BlockDev>) -> State {
        State {
            tica,
            dram: FxHashMap::default(),
            spare: Vec::new(),
            ops: Vec::new(),
            ro,
            wo,
            backing,
            backing_unflushed: false,
            degraded: None,
            work: None,
            closed: false,
            counters: Counters::default(),
            flusher: FlushScheduler::new(Default::default()),
            slow: Arc::new(AtomicUsize::new(0)),
            ro_synced: std::time::Instant::now(),
            device_errors: tiercache_io::DeviceErrors::new(),
            recorder: None,
        }
    }

    /// Record a request where the policy takes it (under the lock, in the
    /// order the policy takes them; no class: TICA has none).
    fn record(&self, kind: tiercache_block::IoKind, offset: u64, len: u64) {
        if let Some(r) = &self.recorder {
            r.record(kind, offset, len, None);
        }
    }

    fn ssd(&mut self, role: Role) -> &mut Ssd {
        match role {
            Role::RoSsd => &mut self.ro,
            Role::WoSsd => &mut self.wo,
        }
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
        let slow = Arc::clone(&state.slow);
        ThreeLevel {
            state: Mutex::new(State {
                flusher: FlushScheduler::new(info.flush_config()),
                ..state
            }),
            size,
            info,
            backing_path,
            recovery,
            stop: AtomicBool::new(false),
            flusher: Mutex::new(None),
            slow,
            inline: AtomicBool::new(inline::enabled_by_env()),
            resizing: Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.wo.holding() || s.ro.holding() {
            // Only after a panic in a batch (`write_batch_inline` ends its
            // batch before it unlocks): its held pages go out now.
            let _ = s.end_batches();
        }
        s
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

    /// Record every request from now on with `recorder` (`serve --record`,
    /// the `record` control command): reads, writes, trims and flushes,
    /// where the policy takes them.
    pub fn attach_recorder(&self, recorder: Arc<tiercache_runtime::Recorder>) {
        self.lock().recorder = Some(recorder);
    }

    /// Whether a device failed (and which, why).
    pub fn degraded(&self) -> Option<Degraded> {
        self.lock().degraded.clone()
    }
}

impl Drop for ThreeLevel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
