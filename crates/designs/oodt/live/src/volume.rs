//! The live tiered volume: requests routed by the mapping, and migrations
//! run by a background worker with real I/O.
//!
//! **Requests.** A request is split at block boundaries
//! ([`tiercache_tiering::dispatcher::split`]); each part goes to the tier and
//! slot the mapping names. While its I/O runs, a request holds every block it
//! touches (a user count per block). A block under migration is *locked*
//! (Algorithm 1): a request touching it waits until the mapping switched,
//! then routes to the new location.
//!
//! **Migrations.** A worker thread runs the planner (Algorithm 2) every
//! `plan_every` requests, or after `idle_ms` without requests, and executes
//! at most `max_moves_per_round` moves per round at no more than
//! `migrate_rate` bytes per second. One migration, each step complete
//! before the next ([`tiercache_tiering::migration`]): reserve the
//! destination and lock the block; wait until requests already on it finish;
//! log `Begin` (durable); copy; flush the destination tier; log `Switch`
//! (durable: the commit point); switch the mapping and unlock; trim the
//! source; release its slot; log `Done`. The mapping in memory therefore only
//! ever points at data whose location is durable in the log or checkpoint.
//!
//! **Durability.** FLUSH flushes every tier; the mapping needs nothing more,
//! since each switch is durable before anyone can write to the new location.
//! Checkpoints are taken by the worker between migrations when the log fills
//! up, at open (after recovery) and at clean shutdown.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use tiercache_io::{BlockDev, FileDev, FileDevOptions};
use tiercache_store::BackingIdentity;
use tiercache_tiering::dispatcher::split;
use tiercache_tiering::migration::{Action, LogRecord, Migration, Phase};
use tiercache_tiering::planner::{plan, Move, PlannerConfig, Trigger};
use tiercache_tiering::policy::{build, Access, PolicyConfig, PolicyKind, TierPolicy};
use tiercache_tiering::{BlockId, Loc, MappingTable, TierError, TierId};

use crate::journal::{Journal, RecoveryReport};
use crate::superblock::{Layout, Superblock, TierRecord, SB_BYTES};

/// Placement policy and migration pacing, recorded in the superblock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeConfig {
    /// `oodt`, `frequency`, `hystor` or `raf`.
    pub policy: String,
    /// Plan after this many requests.
    pub plan_every: u64,
    /// Also plan after this many milliseconds without requests.
    pub idle_ms: u64,
    /// At most this many block moves per planning round.
    pub max_moves_per_round: usize,
    /// At most this many migrated bytes per second.
    pub migrate_rate: u64,
}

impl VolumeConfig {
    /// Defaults for `policy`: plan every 1000 requests or after 200 ms idle,
    /// at most 64 moves per round, 64 MiB/s.
    pub fn new(policy: PolicyKind) -> VolumeConfig {
        VolumeConfig {
            policy: policy.to_string(),
            plan_every: 1000,
            idle_ms: 200,
            max_moves_per_round: 64,
            migrate_rate: 64 << 20,
        }
    }

    fn validate(&self) -> anyhow::Result<PolicyKind> {
        let kind: PolicyKind = self.policy.parse().map_err(anyhow::Error::msg)?;
        self.planner().validate()?;
        if self.migrate_rate == 0 {
            bail!("migration rate 0 B/s (allowed: at least 1)");
        }
        Ok(kind)
    }

    fn planner(&self) -> PlannerConfig {
        PlannerConfig {
            every_requests: self.plan_every,
            idle_ns: Some(self.idle_ms.max(1) * 1_000_000),
            max_moves_per_round: self.max_moves_per_round,
        }
    }
}

/// Write a new tiered volume: metadata on `fast`, data on both tiers. The
/// volume is `slow`'s size and starts with `slow`'s contents (every block at
/// home). Refuses a `fast` tier holding a filesystem, a cache or another
/// volume, and a `slow` tier holding a tiered-volume superblock, unless
/// `force`. Creates `fast` as a file of `create_size` bytes if it is absent.
pub fn format_volume(
    fast: &Path,
    slow: &Path,
    block_bytes: u32,
    cfg: &VolumeConfig,
    create_size: Option<u64>,
    force: bool,
) -> anyhow::Result<Superblock> {
    cfg.validate()?;
    if !(4096..=4 << 20).contains(&block_bytes) || !block_bytes.is_power_of_two() {
        bail!("block size {block_bytes} B (allowed: a power of two from 4KiB to 4MiB)");
    }
    if !slow.exists() {
        bail!("slow tier {} does not exist", slow.display());
    }
    if !fast.exists() {
        let Some(size) = create_size else {
            bail!(
                "fast tier {} does not exist (give --size to create a file)",
                fast.display()
            );
        };
        let f =
            std::fs::File::create(fast).with_context(|| format!("creating {}", fast.display()))?;
        f.set_len(size)?;
    }
    let fast = &std::fs::canonicalize(fast)?;
    let slow = &std::fs::canonicalize(slow)?;
    if fast == slow {
        bail!("the fast and the slow tier are the same file");
    }
    let fast_f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fast)
        .with_context(|| format!("opening {}", fast.display()))?;
    if !force {
        if let Some(what) = foreign(fast, &fast_f)? {
            bail!(
                "{} holds {what}; formatting would destroy it (use --force to overwrite)",
                fast.display()
            );
        }
        if crate::superblock::is_tiered_volume(slow) {
            bail!(
                "{} is the fast tier of a tiered volume, not a slow tier (use --force to use it anyway)",
                slow.display()
            );
        }
    }
    let fast_id = BackingIdentity::probe(fast)?;
    let slow_id = BackingIdentity::probe(slow)?;
    if slow_id.size % 512 != 0 || slow_id.size == 0 {
        bail!(
            "slow tier {} is {} bytes (must be a non-zero multiple of 512)",
            slow.display(),
            slow_id.size
        );
    }
    let blocks = slow_id.size.div_ceil(u64::from(block_bytes));
    let layout = Layout::compute(fast_id.size, blocks, block_bytes)?;
    let sb = Superblock {
        uuid: *uuid::Uuid::new_v4().as_bytes(),
        block_bytes,
        volume_bytes: slow_id.size,
        config: serde_json::to_string(cfg)?,
        tiers: vec![
            TierRecord { identity: fast_id },
            TierRecord { identity: slow_id },
        ],
        layout,
    };
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(fast, FileDevOptions::default())?);
    initialize(&dev, &sb)?;
    Ok(sb)
}

/// Write the metadata of a new volume described by `sb` on its fast tier
/// `dev`: the initial mapping (every block at home), an empty log, then the
/// superblock copies, so a crash in the middle leaves no volume.
pub fn initialize(dev: &Arc<dyn BlockDev>, sb: &Superblock) -> anyhow::Result<()> {
    let table = MappingTable::new(sb.block_bytes, sb.blocks(), &[sb.layout.fast_slots])?;
    Journal::format(Arc::clone(dev), sb.layout, &table)?;
    let b = sb.encode()?;
    dev.write_at(&b, SB_BYTES)?;
    dev.write_at(&b, 0)?;
    dev.flush()?;
    Ok(())
}

/// What `fast` holds that formatting would destroy.
fn foreign(path: &Path, f: &std::fs::File) -> anyhow::Result<Option<String>> {
    if crate::superblock::is_tiered_volume(path) {
        let what = match Superblock::read(path) {
            Ok(sb) => format!("an existing tiered volume (uuid {})", sb.uuid_string()),
            Err(_) => "a damaged tiered-volume superblock".to_string(),
        };
        return Ok(Some(what));
    }
    Ok(tiercache_store::detect_foreign(f)?)
}

/// How to open a volume for serving.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// The fast tier (holds the superblock).
    pub fast: PathBuf,
    /// The slow tier, if it moved [default: the path recorded at format time;
    /// either way it must be the same device: size and inode or serial].
    pub slow: Option<PathBuf>,
    /// Open the tiers with `O_DIRECT` where they allow it.
    pub direct: bool,
    /// Delay the slow tier's I/O by the HDD model (demos and benchmarks).
    pub emulate_hdd: bool,
}

/// Open (and recover) a formatted volume.
pub fn open_volume(o: &OpenOptions) -> anyhow::Result<Arc<TieredVolume>> {
    let sb = Superblock::read(&o.fast).with_context(|| {
        format!(
            "{} is not a tiered volume (run tiercache format --mode tier first)",
            o.fast.display()
        )
    })?;
    let fo = FileDevOptions {
        direct: o.direct,
        ..Default::default()
    };
    let mut devs: Vec<Arc<dyn BlockDev>> = Vec::new();
    for (i, t) in sb.tiers.iter().enumerate() {
        let path = match (i, &o.slow) {
            (0, _) => o.fast.clone(),
            (_, Some(p)) => p.clone(),
            _ => PathBuf::from(&t.identity.path),
        };
        let found = BackingIdentity::probe(&path)
            .with_context(|| format!("tier {i}: probing {}", path.display()))?;
        let mut recorded = t.identity.clone();
        if i == 0 {
            // The fast tier carries the superblock: whatever device holds it
            // now (a copy, a renamed file) is the fast tier if its size fits.
            recorded.path = found.path.clone();
            recorded.file_id = found.file_id;
            recorded.serial = found.serial.clone();
        }
        if let Some(d) = recorded.differences(&found, false) {
            bail!(
                "tier {i} ({}) is not the device the volume was formatted with: {d}",
                path.display()
            );
        }
        let mut dev: Arc<dyn BlockDev> = Arc::new(
            FileDev::open(&path, fo).with_context(|| format!("opening {}", path.display()))?,
        );
        if o.emulate_hdd && i + 1 == sb.tiers.len() {
            let model = tiercache_model::Profile::default()
                .hdd_model()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            dev = Arc::new(tiercache_io::EmulatedHdd::new(dev, model));
        }
        devs.push(dev);
    }
    TieredVolume::open(sb, devs)
}

/// One request's claim on a byte range of a block.
#[derive(Clone, Copy, Debug)]
struct Claim {
    /// Arrival order of the request.
    ticket: u64,
    start: u32,
    end: u32,
    /// A write or trim: excludes every overlapping claim.
    write: bool,
}

impl Claim {
    fn conflicts(&self, o: &Claim) -> bool {
        (self.write || o.write) && self.start < o.end && o.start < self.end
    }
}

/// Per-block state of requests and migrations.
#[derive(Clone, Debug, Default)]
struct Busy {
    /// Requests registered on the block, waiting or with I/O in flight.
    /// Overlapping claims run in arrival order when one of them writes, so
    /// a read never sees a write half done and writes land in order.
    claims: Vec<Claim>,
    /// A migration holds the block (from reservation to switch): new
    /// requests wait; the migration waits until `claims` is empty.
    migrating: bool,
}

/// State shared by requests and the worker, under one mutex.
struct Core {
    table: MappingTable,
    busy: FxHashMap<BlockId, Busy>,
    /// Blocks whose migration lost track of its durable state: they fail.
    poisoned: FxHashSet<BlockId>,
    policy: Box<dyn TierPolicy>,
    planner: PlannerConfig,
    trigger: Trigger,
    plan_due: bool,
    last_request: Instant,
    next_ticket: u64,
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
    promotions: AtomicU64,
    demotions: AtomicU64,
    migrated_bytes: AtomicU64,
    in_flight: AtomicU64,
    rolled_back_live: AtomicU64,
    planner_rounds: AtomicU64,
    migration_errors: AtomicU64,
    checkpoints: AtomicU64,
    flushes: AtomicU64,
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
    sb: Superblock,
    cfg: VolumeConfig,
    devs: Vec<Arc<dyn BlockDev>>,
    core: Mutex<Core>,
    /// Signalled when a migrating block's last request finished.
    drained: Condvar,
    /// Signalled when a block's migration switched (or was abandoned).
    unlocked: tokio::sync::Notify,
    journal: Mutex<Journal>,
    wake: (Mutex<()>, Condvar),
    stop: AtomicBool,
    worker: Mutex<Option<JoinHandle<()>>>,
    counters: Counters,
    recovery: RecoveryReport,
    shut_down: AtomicBool,
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
    ticket: u64,
    blocks: Vec<BlockId>,
    /// Filled once the request may run.
    parts: Vec<Part>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.vol.release(self.ticket, &self.blocks);
    }
}

impl TieredVolume {
    /// Recover the mapping from the devices' metadata and build the volume
    /// (tier 0 holds the superblock and metadata). The worker is not started:
    /// see [`start_background`](Self::start_background).
    pub fn open(sb: Superblock, devs: Vec<Arc<dyn BlockDev>>) -> anyhow::Result<Arc<Self>> {
        let cfg: VolumeConfig =
            serde_json::from_str(&sb.config).context("reading the recorded policy")?;
        let kind = cfg.validate()?;
        if devs.len() != 2 {
            bail!("{} tiers given (a volume has 2)", devs.len());
        }
        if devs[1].len() < sb.volume_bytes {
            bail!(
                "slow tier {} is {} bytes, smaller than the volume ({} bytes)",
                devs[1].name(),
                devs[1].len(),
                sb.volume_bytes
            );
        }
        let l = sb.layout;
        if devs[0].len() < l.data_offset + l.fast_slots * u64::from(sb.block_bytes) {
            bail!(
                "fast tier {} is smaller than its recorded layout",
                devs[0].name()
            );
        }
        let (mut journal, rec) = Journal::open(Arc::clone(&devs[0]), l)
            .with_context(|| format!("recovering the mapping on {}", devs[0].name()))?;
        if rec.table.blocks() != sb.blocks() || rec.table.block_bytes() != sb.block_bytes {
            bail!("the mapping checkpoint does not match the superblock's geometry");
        }
        let bs = u64::from(sb.block_bytes);
        for loc in &rec.trim {
            let (dev, off) = Self::locate_in(&devs, &sb, *loc);
            let len = bs.min(dev.len().saturating_sub(off));
            dev.trim(off, len)
                .with_context(|| format!("trimming {loc:?} after recovery"))?;
        }
        for d in &devs {
            d.flush()?;
        }
        // A new epoch: the replayed log is never needed again.
        journal.checkpoint(&rec.table)?;
        let policy = build(kind, &PolicyConfig::default(), sb.blocks(), sb.block_bytes)?;
        let planner = cfg.planner();
        let mut report = rec.report;
        report.duration = report.duration.max(Duration::from_micros(1));
        Ok(Arc::new(TieredVolume {
            core: Mutex::new(Core {
                table: rec.table,
                busy: FxHashMap::default(),
                poisoned: FxHashSet::default(),
                policy,
                planner,
                trigger: Trigger::default(),
                plan_due: false,
                last_request: Instant::now(),
                next_ticket: 1,
                next_migration: 1,
                failed: None,
            }),
            sb,
            cfg,
            devs,
            drained: Condvar::new(),
            unlocked: tokio::sync::Notify::new(),
            journal: Mutex::new(journal),
            wake: (Mutex::new(()), Condvar::new()),
            stop: AtomicBool::new(false),
            worker: Mutex::new(None),
            counters: Counters::default(),
            recovery: report,
            shut_down: AtomicBool::new(false),
        }))
    }

    /// Exported size in bytes (the slow tier's size).
    pub fn size(&self) -> u64 {
        self.sb.volume_bytes
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// Where `block` lives now (`None` past the end of the volume).
    pub fn location(&self, block: BlockId) -> Option<Loc> {
        lock(&self.core).table.lookup(block)
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

    /// Start the migration worker.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name("tier-migrate".into())
            .spawn(move || me.worker())
            .expect("spawn the migration worker");
        *lock(&self.worker) = Some(h);
    }

    fn wake_worker(&self) {
        let _g = lock(&self.wake.0);
        self.wake.1.notify_all();
    }

    /// Claim the blocks of `[offset, offset + len)` (waiting while any is
    /// under migration), wait until no earlier overlapping claim conflicts,
    /// and route each part.
    async fn acquire(self: &Arc<Self>, offset: u64, len: u64, kind: Kind) -> io::Result<Held> {
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

    /// Register the request's claims unless a block is under migration.
    fn register(self: &Arc<Self>, offset: u64, len: u64, kind: Kind) -> io::Result<Option<Held>> {
        let bs = self.sb.block_bytes;
        let mut c = lock(&self.core);
        for (block, _, _) in split(offset, len, bs) {
            if c.poisoned.contains(&block) {
                return Err(io::Error::other(format!(
                    "block {block}: its migration's metadata write failed; the block is unavailable until restart"
                )));
            }
            if c.busy.get(&block).is_some_and(|b| b.migrating) {
                return Ok(None);
            }
        }
        let ticket = c.next_ticket;
        c.next_ticket += 1;
        let mut blocks = Vec::new();
        for (block, at, plen) in split(offset, len, bs) {
            let start = (at % u64::from(bs)) as u32;
            c.busy.entry(block).or_default().claims.push(Claim {
                ticket,
                start,
                end: start + plen,
                write: kind != Kind::Read,
            });
            blocks.push(block);
        }
        Ok(Some(Held {
            vol: Arc::clone(self),
            ticket,
            blocks,
            parts: Vec::new(),
        }))
    }

    /// If no earlier claim conflicts with the request's, route its parts
    /// (and let the policy observe them).
    fn try_route(&self, held: &mut Held, offset: u64, len: u64, kind: Kind) -> bool {
        let bs = self.sb.block_bytes;
        let mut c = lock(&self.core);
        for &block in &held.blocks {
            let b = &c.busy[&block];
            let mine = b
                .claims
                .iter()
                .find(|x| x.ticket == held.ticket)
                .expect("registered");
            if b.claims
                .iter()
                .any(|x| x.ticket < held.ticket && x.conflicts(mine))
            {
                return false;
            }
        }
        let c = &mut *c;
        for (i, (block, at, plen)) in split(offset, len, bs).enumerate() {
            let loc = c.table.lookup(block).expect("range checked");
            let (_, base) = self.locate(loc);
            held.parts.push(Part {
                at: (at - offset) as usize,
                len: plen as usize,
                tier: loc.tier,
                dev_offset: base + at % u64::from(bs),
            });
            if kind != Kind::Trim {
                c.policy.observe(&Access {
                    block,
                    offset: at,
                    len: plen,
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
                c.plan_due = true;
                self.wake_worker();
            }
        }
        true
    }

    /// Drop request `ticket`'s claims; wake a migration waiting for the
    /// block to drain and requests waiting behind the claims.
    fn release(&self, ticket: u64, blocks: &[BlockId]) {
        let mut c = lock(&self.core);
        let mut drained = false;
        for block in blocks {
            if let Some(b) = c.busy.get_mut(block) {
                b.claims.retain(|x| x.ticket != ticket);
                if b.claims.is_empty() {
                    if b.migrating {
                        drained = true;
                    } else {
                        c.busy.remove(block);
                    }
                }
            }
        }
        drop(c);
        if drained {
            self.drained.notify_all();
        }
        self.unlocked.notify_waiters();
    }

    fn count(&self, kind: Kind, parts: &[Part]) {
        let k = usize::from(kind == Kind::Write);
        for p in parts {
            let t = usize::from(p.tier != 0);
            self.counters.ops[t][k].fetch_add(1, Ordering::Relaxed);
            self.counters.bytes[t][k].fetch_add(p.len as u64, Ordering::Relaxed);
        }
    }

    /// Read `buf.len()` bytes at `offset`.
    pub async fn read(self: &Arc<Self>, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let held = self.acquire(offset, buf.len() as u64, Kind::Read).await?;
        self.count(Kind::Read, &held.parts);
        let n = buf.len();
        let data = blocking(move || {
            let mut v = vec![0u8; n];
            for p in &held.parts {
                held.vol.devs[p.tier as usize].read_at(&mut v[p.at..p.at + p.len], p.dev_offset)?;
            }
            drop(held);
            Ok(v)
        })
        .await?;
        buf.copy_from_slice(&data);
        Ok(())
    }

    /// Write `data` at `offset`; with `fua`, durable when this returns.
    pub async fn write(self: &Arc<Self>, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let held = self.acquire(offset, data.len() as u64, Kind::Write).await?;
        self.count(Kind::Write, &held.parts);
        let data = data.to_vec();
        blocking(move || {
            let mut touched = [false; 2];
            for p in &held.parts {
                held.vol.devs[p.tier as usize].write_at(&data[p.at..p.at + p.len], p.dev_offset)?;
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
        .await
    }

    /// Discard `[offset, offset + len)` where its blocks live now (advisory).
    pub async fn trim(self: &Arc<Self>, offset: u64, len: u64) -> io::Result<()> {
        let held = self.acquire(offset, len, Kind::Trim).await?;
        blocking(move || {
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
        blocking(move || me.flush_devices()).await
    }

    fn flush_devices(&self) -> io::Result<()> {
        for d in &self.devs {
            d.flush()?;
        }
        Ok(())
    }

    /// The migration worker's loop (see the module docs).
    fn worker(self: Arc<Self>) {
        let idle = Duration::from_millis(self.cfg.idle_ms.max(1));
        let tick = idle.min(Duration::from_millis(50));
        let rate = self.cfg.migrate_rate as f64;
        let mut pace = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            {
                let g = lock(&self.wake.0);
                let _ = self.wake.1.wait_timeout(g, tick);
            }
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let moves = self.plan_round(idle);
            for mv in moves {
                if self.stop.load(Ordering::Acquire) || !self.checkpoint_if_full() {
                    break;
                }
                let now = Instant::now();
                if pace > now {
                    std::thread::sleep(pace - now);
                }
                match self.migrate(mv) {
                    Ok(bytes) => {
                        pace = pace.max(now) + Duration::from_secs_f64(bytes as f64 / rate);
                    }
                    Err(e) => {
                        self.counters
                            .migration_errors
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::error!("migration of block {}: {e}", mv.block);
                        break;
                    }
                }
            }
            self.checkpoint_if_full();
        }
    }

    /// Between migrations: checkpoint when the log lacks room for one more
    /// migration's records. `false` if that failed (migrations stop).
    fn checkpoint_if_full(&self) -> bool {
        if !lock(&self.journal).needs_checkpoint(3) {
            return true;
        }
        match self.checkpoint() {
            Ok(()) => true,
            Err(e) => {
                self.fail(format!("checkpoint: {e}"));
                false
            }
        }
    }

    /// Run the planner if a round is due; the moves to make, in order.
    fn plan_round(&self, idle: Duration) -> Vec<Move> {
        let mut c = lock(&self.core);
        if c.failed.is_some() {
            return Vec::new();
        }
        let idle_for = c.last_request.elapsed();
        let planner = c.planner;
        let due = std::mem::take(&mut c.plan_due)
            || (idle_for >= idle && c.trigger.on_idle(&planner, idle_for.as_nanos() as u64));
        if !due {
            return Vec::new();
        }
        self.counters.planner_rounds.fetch_add(1, Ordering::Relaxed);
        let c = &mut *c;
        let mut cands = Vec::new();
        let fast = c.table.slots(0).unwrap_or(0);
        c.policy.candidates(fast, &mut cands);
        let matrix = plan(&c.table, &mut cands);
        matrix.schedule(&c.table, planner.max_moves_per_round)
    }

    fn fail(&self, why: String) {
        tracing::error!("tiered volume: migrations stopped: {why}");
        lock(&self.core).failed.get_or_insert(why);
    }

    /// Write a checkpoint of the mapping (no migration in flight: called
    /// by the worker between migrations, or after it stopped).
    fn checkpoint(&self) -> io::Result<()> {
        let table = lock(&self.core).table.clone();
        lock(&self.journal).checkpoint(&table)?;
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Unlock a block after its switch or an abandoned migration.
    fn unlock(&self, c: &mut Core, block: BlockId) {
        if let Some(b) = c.busy.get_mut(&block) {
            b.migrating = false;
            if b.claims.is_empty() {
                c.busy.remove(&block);
            }
        }
        self.unlocked.notify_waiters();
    }

    /// Move one block; the bytes copied (0 when the move no longer applies).
    fn migrate(&self, mv: Move) -> io::Result<u64> {
        let bs = u64::from(self.sb.block_bytes);
        if (mv.block + 1) * bs > self.size() {
            return Ok(0); // a partial last block stays home
        }
        let mut m = {
            let mut c = lock(&self.core);
            if c.table.tier_of(mv.block) != Some(mv.from) {
                return Ok(0);
            }
            let id = c.next_migration;
            let m = match Migration::start(&mut c.table, id, mv.block, mv.to) {
                Ok(m) => m,
                Err(TierError::TierFull(_)) => return Ok(0),
                Err(e) => return Err(tier_err(e)),
            };
            c.next_migration += 1;
            c.busy.entry(mv.block).or_default().migrating = true;
            while c.busy.get(&mv.block).is_some_and(|b| !b.claims.is_empty()) {
                c = self.drained.wait(c).unwrap_or_else(|p| p.into_inner());
            }
            m
        };
        self.counters.in_flight.store(1, Ordering::Relaxed);
        let r = self.run_migration(&mut m);
        self.counters.in_flight.store(0, Ordering::Relaxed);
        r?;
        self.counters.migrations.fetch_add(1, Ordering::Relaxed);
        self.counters
            .migrated_bytes
            .fetch_add(bs, Ordering::Relaxed);
        if m.dst.tier < m.src.tier {
            self.counters.promotions.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.demotions.fetch_add(1, Ordering::Relaxed);
        }
        Ok(bs)
    }

    fn run_migration(&self, m: &mut Migration) -> io::Result<()> {
        let bs = self.sb.block_bytes as usize;
        let mut buf = vec![0u8; bs];
        let mut journal = lock(&self.journal);
        while let Some(a) = m.next_action() {
            let r = match a {
                Action::Log(rec) => journal.append(&rec),
                Action::Copy { from, to } => {
                    let (src, so) = self.locate(from);
                    let (dst, d_off) = self.locate(to);
                    src.read_at(&mut buf, so)
                        .and_then(|_| dst.write_at(&buf, d_off))
                }
                Action::Flush { tier } => self.devs[tier as usize].flush(),
                // Advisory: a failed trim leaves old bytes no block maps to.
                Action::Trim { loc } => {
                    let (d, off) = self.locate(loc);
                    if let Err(e) = d.trim(off, bs as u64) {
                        tracing::warn!("trimming the source of migration {}: {e}", m.id);
                    }
                    Ok(())
                }
            };
            if let Err(e) = r {
                drop(journal);
                return Err(self.abandon(m, a, e));
            }
            let mut c = lock(&self.core);
            let was_locked = m.locks_block();
            m.advance(&mut c.table).map_err(tier_err)?;
            if was_locked && !m.locks_block() {
                self.unlock(&mut c, m.block);
            }
        }
        Ok(())
    }

    /// A step of `m` failed with `e`: undo what can be undone.
    fn abandon(&self, m: &Migration, a: Action, e: io::Error) -> io::Error {
        let mut c = lock(&self.core);
        match (m.phase(), a) {
            // The switch may or may not be durable: the block's location is
            // unknown until recovery decides.
            (Phase::Flushed, Action::Log(LogRecord::Switch { .. })) => {
                c.poisoned.insert(m.block);
                drop(c);
                self.fail(format!("logging the switch of migration {}: {e}", m.id));
                let mut c = lock(&self.core);
                self.unlock(&mut c, m.block);
            }
            // Before the commit point: the block stays at its source.
            (p, _) if p < Phase::Switched => {
                c.table.release(m.dst);
                self.counters
                    .rolled_back_live
                    .fetch_add(1, Ordering::Relaxed);
                self.unlock(&mut c, m.block);
                if matches!(a, Action::Log(_)) {
                    drop(c);
                    self.fail(format!("migration log write: {e}"));
                }
            }
            // After it: only the log's Done is missing; recovery re-trims.
            _ => {
                drop(c);
                self.fail(format!("migration log write: {e}"));
            }
        }
        e
    }

    /// Stop the worker (finishing the migration in flight), flush every tier
    /// and write a checkpoint. Idempotent.
    pub fn shutdown(&self) -> io::Result<()> {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop.store(true, Ordering::Release);
        self.wake_worker();
        if let Some(h) = lock(&self.worker).take() {
            let _ = h.join();
        }
        self.flush_devices()?;
        self.checkpoint()
    }

    /// Statistics as JSON: tier occupancy, hits per tier, migrations, recovery.
    pub fn stats_json(&self) -> serde_json::Value {
        use serde_json::json;
        let (used, slots, blocks, failed, locked, stats_bytes, map_bytes) = {
            let c = lock(&self.core);
            (
                [c.table.used_slots(0), c.table.used_slots(1)],
                c.table.slots(0).unwrap_or(0),
                c.table.blocks(),
                c.failed.clone(),
                c.busy.values().filter(|b| b.migrating).count(),
                c.policy.stats_bytes(),
                c.table.memory_bytes(),
            )
        };
        let (seq, log_records) = {
            let j = lock(&self.journal);
            (j.seq(), j.log_records())
        };
        let n = &self.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let tiers: Vec<_> = (0..2)
            .map(|t| {
                let cap = if t == 0 { slots } else { blocks };
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
            "status": match &failed { None => "ok".to_string(), Some(w) => format!("migrations stopped: {w}") },
            "uuid": self.sb.uuid_string(),
            "policy": self.cfg,
            "block_size": self.sb.block_bytes,
            "volume_bytes": self.sb.volume_bytes,
            "blocks": blocks,
            "tiers": tiers,
            "fast_tier_block_share": used[0] as f64 / blocks.max(1) as f64,
            "migrations": ld(&n.migrations),
            "promotions": ld(&n.promotions),
            "demotions": ld(&n.demotions),
            "migrations_in_flight": ld(&n.in_flight),
            "locked_blocks": locked,
            "migrated_bytes": ld(&n.migrated_bytes),
            "migrations_abandoned": ld(&n.rolled_back_live),
            "migration_errors": ld(&n.migration_errors),
            "planner_rounds": ld(&n.planner_rounds),
            "flushes": ld(&n.flushes),
            "checkpoints": ld(&n.checkpoints),
            "checkpoint_seq": seq,
            "log_records": log_records,
            "metadata_bytes": map_bytes + stats_bytes,
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

/// Run blocking device I/O on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(e.to_string()))?
}

/// What [`check_volume`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// Blocks of the volume.
    pub blocks: u64,
    /// Fast-tier slots.
    pub fast_slots: u64,
    /// Fast-tier slots holding a block.
    pub fast_used: u64,
    /// What a restart would recover (nothing is written by the check).
    pub recovery: RecoveryReport,
    /// Problems found; empty when the metadata is sound.
    pub problems: Vec<String>,
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.recovery;
        writeln!(
            f,
            "tiered volume: {} blocks, {} of {} fast slots used; checkpoint {}, {} log records \
             ({} switched migrations to replay, {} to finish, {} to roll back)",
            self.blocks,
            self.fast_used,
            self.fast_slots,
            r.checkpoint_seq,
            r.log_records,
            r.completed,
            r.completed_after_switch,
            r.rolled_back
        )?;
        if self.problems.is_empty() {
            write!(f, "ok")
        } else {
            write!(f, "PROBLEMS:\n  {}", self.problems.join("\n  "))
        }
    }
}

/// Verify the metadata of a tiered volume that is not being served,
/// read-only: superblock, tiers' identities, checkpoints and log replay.
pub fn check_volume(fast: &Path) -> anyhow::Result<CheckReport> {
    let sb = Superblock::read(fast)
        .with_context(|| format!("{} is not a tiered volume", fast.display()))?;
    let mut problems = Vec::new();
    for (i, t) in sb.tiers.iter().enumerate().skip(1) {
        match BackingIdentity::probe(Path::new(&t.identity.path)) {
            Ok(found) => {
                if let Some(d) = t.identity.differences(&found, false) {
                    problems.push(format!("tier {i} ({}): {d}", t.identity.path));
                }
            }
            Err(e) => problems.push(format!("tier {i} ({}): {e}", t.identity.path)),
        }
    }
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(
        fast,
        FileDevOptions {
            read_only: true,
            ..Default::default()
        },
    )?);
    let (table, recovery) = match Journal::open(dev, sb.layout) {
        Ok((_, rec)) => (Some(rec.table), rec.report),
        Err(e) => {
            problems.push(format!("mapping: {e}"));
            (None, RecoveryReport::default())
        }
    };
    if let Some(t) = &table {
        if t.blocks() != sb.blocks() || t.block_bytes() != sb.block_bytes {
            problems.push("the mapping checkpoint does not match the superblock".into());
        }
    }
    Ok(CheckReport {
        blocks: sb.blocks(),
        fast_slots: sb.layout.fast_slots,
        fast_used: table.as_ref().map_or(0, |t| t.used_slots(0)),
        recovery,
        problems,
    })
}
