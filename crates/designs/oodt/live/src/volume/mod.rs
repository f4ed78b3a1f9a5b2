//! The live tiered volume: requests routed by the mapping, and migrations
//! run by a background worker with real I/O.
//!
//! **Requests.** The tiering crate's [`Dispatcher`] routes them (the same
//! one the simulator uses): a request registers byte-range claims on the
//! blocks it touches, runs once no earlier overlapping claim where one side
//! writes is left, and is split at block boundaries, each part going to the
//! tier and slot the mapping names. A block under migration is *locked*
//! (Algorithm 1): a request touching it waits until the mapping switched,
//! then routes to the new location; the migration waits until the claims
//! on the block are released.
//!
//! **Migrations.** A worker thread runs the planner (Algorithm 2) every
//! `plan_every` requests, or after `idle_ms` without requests, and executes
//! at most `max_moves_per_round` moves per round at no more than
//! `migrate_rate` bytes per second. One migration, each step complete
//! before the next ([`tiercache_oodt_policy::migration`]): reserve the
//! destination and lock the block; wait until requests already on it finish;
//! log `Begin` (durable); copy; flush the destination tier; log `Switch`
//! (durable: the commit point); switch the mapping and unlock; trim the
//! source; release its slot; log `Done`. The mapping in memory therefore only
//! ever points at data whose location is durable in the log or checkpoint.
//!
//! **Exchanges.** In a `--capacity sum` volume every block has exactly one
//! slot and both tiers are full but for one scratch slot each, so the worker
//! runs the planner's moves in pairs, each one
//! [`tiercache_oodt_policy::migration::Exchange`]: both blocks locked and
//! drained, a `Begin` for each under one id, both copied into the scratch
//! slots, both tiers flushed, one `Switch` (the commit point for both), both
//! sources trimmed and freed (the new scratch slots), `Done`.
//!
//! **Durability.** FLUSH flushes every tier; the mapping needs nothing more,
//! since each switch is durable before anyone can write to the new location.
//! Checkpoints are taken by the worker between migrations when the log fills
//! up, at open (after recovery) and at clean shutdown.
//!
//! This file holds the live volume's state and accessors; the rest is split:
//! `format` (configuration, formatting), `open` (opening and recovery),
//! `check` (offline check), `requests` (claims, routing, I/O) and `worker`
//! (migrations, checkpoints, shutdown).

mod check;
mod format;
mod open;
mod requests;
mod resize;
mod worker;

pub use check::{check_volume, CheckReport};
pub use format::{format_volume, initial_table, initialize, VolumeConfig};
pub use open::{open_volume, OpenOptions};

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use rustc_hash::FxHashSet;
use tiercache_io::BlockDev;
use tiercache_oodt_policy::dispatcher::{Dispatcher, ReqId};
use tiercache_oodt_policy::planner::{PlannerConfig, Trigger};
use tiercache_oodt_policy::policy::TierPolicy;
use tiercache_oodt_policy::{BlockId, Loc, MappingTable, TierError, TierId};

use crate::journal::{Journal, RecoveryReport};
use crate::superblock::Superblock;

/// State shared by requests and the worker, under one mutex.
struct Core {
    table: MappingTable,
    /// Request routing, claims and migration locks: the tiering crate's
    /// dispatcher, the same one the simulator routes with.
    disp: Dispatcher,
    /// Blocks whose migration lost track of its durable state: they fail.
    poisoned: FxHashSet<BlockId>,
    policy: Box<dyn TierPolicy>,
    planner: PlannerConfig,
    trigger: Trigger,
    plan_due: bool,
    /// `--plan-clock requests`: a request made a round due; the request
    /// runs it before it is answered.
    request_round_due: bool,
    last_request: Instant,
    next_migration: u64,
    /// Why migrations stopped (a metadata write failed).
    failed: Option<String>,
}

/// Counters of the live volume.
#[derive(Default)]
struct Counters {
    ops: [[AtomicU64; 2]; 2],
    bytes: [[AtomicU64; 2]; 2],
    migrations: AtomicU64,
    exchanges: AtomicU64,
    promotions: AtomicU64,
    demotions: AtomicU64,
    migrated_bytes: AtomicU64,
    in_flight: AtomicU64,
    rolled_back_live: AtomicU64,
    planner_rounds: AtomicU64,
    migration_errors: AtomicU64,
    checkpoints: AtomicU64,
    flushes: AtomicU64,
    /// Requests whose I/O ran inline on the runtime's worker.
    inline: AtomicU64,
}

/// What a request part does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Trim,
}

/// One part of a request, inside one block.
#[derive(Clone, Copy, Debug)]
struct Part {
    /// Offset of the part in the request.
    at: usize,
    len: usize,
    tier: TierId,
    /// Byte offset on the tier's device.
    dev_offset: u64,
}

/// A live tiered volume (see the module docs).
pub struct TieredVolume {
    /// The superblock as opened (what never changes: the block size, the
    /// exported size, the regions' offsets, the tiers).
    sb: Superblock,
    /// The superblock as recorded now (a resize changes the fast tier's slots).
    sb_now: Mutex<Superblock>,
    /// Held by a resize from start to end, and by the migration worker
    /// around each job: migrations do not race a resize.
    resizing: Mutex<()>,
    cfg: VolumeConfig,
    devs: Vec<Arc<dyn BlockDev>>,
    /// Failed reads and writes of each tier's device (`stats`).
    device_errors: tiercache_io::DeviceErrors,
    core: Mutex<Core>,
    /// Signalled when a migrating block's last request finished.
    drained: Condvar,
    /// Signalled when a block's migration switched (or was abandoned).
    unlocked: tokio::sync::Notify,
    journal: Mutex<Journal>,
    wake: (Mutex<()>, Condvar),
    stop: AtomicBool,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Held while a round runs on the request path (one at a time).
    request_round: Mutex<()>,
    /// The request recorder (`serve --record`): every request as the policy
    /// takes it, under the core's lock.
    recorder: std::sync::OnceLock<Arc<tiercache_runtime::Recorder>>,
    counters: Counters,
    recovery: RecoveryReport,
    shut_down: AtomicBool,
    /// The threads that do the request I/O (instead of tokio's blocking pool).
    io: tiercache_runtime::SyncWorkers,
    /// Run fast-tier-only requests' I/O inline on the runtime's workers: the
    /// fast tier is a local file or device opened buffered, and
    /// `TIERCACHE_TIER_INLINE` is not `0` (a benchmark knob).
    inline_fast: bool,
    /// Run fast-tier-only requests inline whatever the device (tests: the
    /// crash wrappers have no raw descriptor); see [`TieredVolume::force_inline_fast`].
    inline_forced: AtomicBool,
    /// A pause before each migration copy, after its `Begin` is durable
    /// (`TIERCACHE_TIER_COPY_PAUSE_MS`, a test knob: it widens the window in
    /// which a kill -9 leaves a migration to roll back; 0 by default).
    copy_pause: std::time::Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn tier_err(e: TierError) -> io::Error {
    io::Error::other(e.to_string())
}

/// A request's claims on its blocks, from registration until dropped
/// (after its I/O, or when the request is abandoned while waiting).
struct Held {
    vol: Arc<TieredVolume>,
    /// The request's id in the dispatcher.
    id: ReqId,
    offset: u64,
    len: u64,
    /// Filled once the request may run.
    parts: Vec<Part>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.vol.release(self.id, self.offset, self.len);
    }
}

impl TieredVolume {
    /// Exported size in bytes (the slow tier's size, or both tiers' with
    /// `--capacity sum`).
    pub fn size(&self) -> u64 {
        self.sb.volume_bytes
    }

    /// The superblock as opened.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The superblock as recorded now (after any resize).
    pub fn superblock_now(&self) -> Superblock {
        lock(&self.sb_now).clone()
    }

    /// Where `block` lives now (`None` past the end of the volume).
    pub fn location(&self, block: BlockId) -> Option<Loc> {
        lock(&self.core).table.lookup(block)
    }

    /// Run the I/O of requests that touch only the fast tier (reads, and
    /// writes without FUA) on the calling task whatever the fast device is,
    /// with its ordinary `read_at`/`write_at` (`on`), or only where it is a
    /// local file or device opened buffered, through the page cache without
    /// blocking on reads (`!on`, the default). For tests that put wrappers
    /// (crash or fault injection) under the volume.
    pub fn force_inline_fast(&self, on: bool) {
        self.inline_forced.store(on, Ordering::Relaxed);
    }

    /// What recovery found at open.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Where the tier-`loc.tier` slot lives: device and byte offset.
    fn locate_in<'a>(
        devs: &'a [Arc<dyn BlockDev>],
        sb: &Superblock,
        loc: Loc,
    ) -> (&'a Arc<dyn BlockDev>, u64) {
        let base = if loc.tier == 0 {
            sb.layout.data_offset
        } else {
            0
        };
        (
            &devs[loc.tier as usize],
            base + loc.byte_offset(sb.block_bytes),
        )
    }

    fn locate(&self, loc: Loc) -> (&Arc<dyn BlockDev>, u64) {
        Self::locate_in(&self.devs, &self.sb, loc)
    }

    /// Statistics as JSON: tier occupancy, hits per tier, migrations, recovery.
    pub fn stats_json(&self) -> serde_json::Value {
        use serde_json::json;
        // In one section with the table: a migration's slot and its
        // in-flight mark are set and cleared under this lock.
        let (used, slots, blocks, failed, locked, stats_bytes, map_bytes, in_flight) = {
            let c = lock(&self.core);
            let blocks = c.table.blocks();
            (
                [c.table.used_slots(0), c.table.used_slots(1)],
                [
                    c.table.slots(0).unwrap_or(0),
                    c.table.slots(1).unwrap_or(blocks),
                ],
                c.table.blocks(),
                c.failed.clone(),
                c.disp.locked_blocks(),
                c.policy.stats_bytes(),
                c.table.memory_bytes(),
                self.counters.in_flight.load(Ordering::Relaxed),
            )
        };
        let (seq, log_records) = {
            let j = lock(&self.journal);
            (j.seq(), j.log_records())
        };
        // The recorded policy was validated when the volume was opened.
        let kind = self
            .cfg
            .policy
            .parse()
            .unwrap_or(tiercache_oodt_policy::policy::PolicyKind::Oodt);
        let bound = crate::memory::metadata_memory(&lock(&self.sb_now), kind);
        let n = &self.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let tiers: Vec<_> = (0..2)
            .map(|t| {
                let cap = slots[t];
                json!({
                    "tier": t,
                    "path": self.sb.tiers[t].identity.path,
                    "slots": cap,
                    "used_slots": used[t],
                    "occupancy": used[t] as f64 / cap.max(1) as f64,
                    "read_hits": ld(&n.ops[t][0]),
                    "write_hits": ld(&n.ops[t][1]),
                    "read_bytes": ld(&n.bytes[t][0]),
                    "write_bytes": ld(&n.bytes[t][1]),
                })
            })
            .collect();
        let r = &self.recovery;
        json!({
            "mode": "tier",
            "status": match &failed { None => self.device_errors.status("ok"), Some(w) => format!("degraded: migrations stopped: {w}") },
            "device_errors": self.device_errors.json(),
            "uuid": self.sb.uuid_string(),
            "capacity": self.sb.capacity,
            "policy": self.cfg,
            "block_size": self.sb.block_bytes,
            "volume_bytes": self.sb.volume_bytes,
            "fast_tier_bytes": lock(&self.sb_now).tiers[0].identity.size,
            "blocks": blocks,
            "tiers": tiers,
            "backing": tiercache_runtime::remote::backing_json(self.devs[1].as_ref()),
            "fast_tier_block_share": used[0] as f64 / blocks.max(1) as f64,
            "migrations": ld(&n.migrations),
            "exchanges": ld(&n.exchanges),
            "promotions": ld(&n.promotions),
            "demotions": ld(&n.demotions),
            "migrations_in_flight": in_flight,
            "locked_blocks": locked,
            "migrated_bytes": ld(&n.migrated_bytes),
            "migrations_abandoned": ld(&n.rolled_back_live),
            "migration_errors": ld(&n.migration_errors),
            "planner_rounds": ld(&n.planner_rounds),
            "flushes": ld(&n.flushes),
            "inline_requests": ld(&n.inline),
            "checkpoints": ld(&n.checkpoints),
            "checkpoint_seq": seq,
            "log_records": log_records,
            "metadata_bytes": map_bytes + stats_bytes,
            "metadata_memory": {
                "bound_bytes": bound.total(),
                "bound_per_block": bound.per_block(),
            },
            "recovery": {
                "ms": r.duration.as_secs_f64() * 1000.0,
                "checkpoint_seq": r.checkpoint_seq,
                "log_records": r.log_records,
                "completed": r.completed,
                "completed_after_switch": r.completed_after_switch,
                "rolled_back": r.rolled_back,
                "trimmed": r.trimmed,
            },
            "live": { "recovery_ms": r.duration.as_secs_f64() * 1000.0 },
        })
    }
}

impl TieredVolume {
    /// Run blocking device I/O on the volume's request threads.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        self.io
            .call(f)
            .await
            .map_err(|e| io::Error::other(e.message))?
    }
}
