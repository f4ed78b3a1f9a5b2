//! Opening a formatted volume: its devices checked against the superblock,
//! recovery from the checkpoint and log, and the live volume built.

use super::{Core, Counters, TieredVolume, VolumeConfig};
use crate::journal::Journal;
use crate::superblock::{Capacity, Superblock};
use anyhow::{bail, Context};
use rustc_hash::FxHashSet;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tiercache_io::{BlockDev, FileDevOptions};
use tiercache_oodt_policy::dispatcher::Dispatcher;
use tiercache_oodt_policy::planner::Trigger;
use tiercache_oodt_policy::policy::{build, PolicyConfig};
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
        let found = tiercache_io::probe_identity(&path)
            .with_context(|| format!("tier {i}: probing {}", path.display()))?;
        let mut recorded = t.identity.clone();
        if i == 0 {
            // The fast tier carries the superblock: whatever device holds it
            // now (a copy, a renamed file) is the fast tier if its size fits.
            recorded.path = found.path.clone();
            recorded.file_id = found.file_id;
            recorded.serial = found.serial.clone();
            // A resize extends a file before, and cuts it after, the
            // superblock records its size: the layout check below is the one.
            recorded.size = found.size;
        }
        if let Some(d) = recorded.differences(&found, false) {
            bail!(
                "tier {i} ({}) is not the device the volume was formatted with: {d}",
                path.display()
            );
        }
        let mut dev = tiercache_io::open_device(&path, fo.direct, &format!("tier {i}"))?;
        if o.emulate_hdd && i + 1 == sb.tiers.len() {
            dev = Arc::new(
                tiercache_io::EmulatedHdd::default_disk(dev).map_err(|e| anyhow::anyhow!("{e}"))?,
            );
        }
        devs.push(dev);
    }
    TieredVolume::open(sb, devs)
}

impl TieredVolume {
    /// Recover the mapping from the devices' metadata and build the volume
    /// (tier 0 holds the superblock and metadata). The worker is not started:
    /// see [`start_background`](Self::start_background).
    pub fn open(sb: Superblock, devs: Vec<Arc<dyn BlockDev>>) -> anyhow::Result<Arc<Self>> {
        let cfg: VolumeConfig =
            serde_json::from_str(&sb.config).context("reading the recorded policy")?;
        let kind = cfg.validate()?;
        // A volume formatted on a larger machine: a clear line, not an abort.
        let m = crate::memory::metadata_memory(&sb, kind);
        crate::memory::check_fits(&m, sb.volume_bytes, sb.block_bytes, kind)
            .map_err(anyhow::Error::msg)?;
        if devs.len() != 2 {
            bail!("{} tiers given (a volume has 2)", devs.len());
        }
        let mut device_errors = tiercache_io::DeviceErrors::new();
        let devs: Vec<Arc<dyn BlockDev>> = devs
            .into_iter()
            .zip(["fast", "slow"])
            .map(|(d, role)| device_errors.count(role, d))
            .collect();
        let slow_needed = match sb.capacity {
            Capacity::Slow => sb.volume_bytes,
            Capacity::Sum => sb.layout.slow_slots * u64::from(sb.block_bytes),
        };
        if devs[1].len() < slow_needed {
            bail!(
                "slow tier {} is {} bytes, smaller than its recorded layout ({slow_needed} bytes)",
                devs[1].name(),
                devs[1].len(),
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
        if rec.table.blocks() != sb.blocks()
            || rec.table.block_bytes() != sb.block_bytes
            || rec.table.has_homes() != (sb.capacity == Capacity::Slow)
        {
            bail!("the mapping checkpoint does not match the superblock's geometry");
        }
        let mut table = rec.table;
        if sb.capacity == Capacity::Slow && table.slots(0) != Some(l.fast_slots) {
            // A resize stopped between its checkpoint and its superblock:
            // the superblock's size is the volume's (the slots it has and
            // the checkpoint lacks, or the reverse, hold no block).
            table.resize_fast(0, l.fast_slots).map_err(|e| {
                anyhow::anyhow!(
                    "the mapping checkpoint does not fit the superblock's fast tier: {e}"
                )
            })?;
        }
        let bs = u64::from(sb.block_bytes);
        for loc in &rec.trim {
            let (dev, off) = Self::locate_in(&devs, &sb, *loc);
            let len = bs.min(dev.len().saturating_sub(off));
            dev.trim(off, len)
                .with_context(|| format!("trimming {loc} after recovery"))?;
        }
        for d in &devs {
            d.flush()?;
        }
        // A new epoch: the replayed log is never needed again.
        journal.checkpoint(&table)?;
        let policy = build(kind, &PolicyConfig::default(), sb.blocks(), sb.block_bytes)?;
        let planner = cfg.planner();
        let inline_fast = devs[0]
            .raw_target()
            .is_some_and(|t| t.direct_align.is_none())
            && std::env::var("TIERCACHE_TIER_INLINE").as_deref() != Ok("0");
        let mut report = rec.report;
        report.duration = report.duration.max(Duration::from_micros(1));
        Ok(Arc::new(TieredVolume {
            core: Mutex::new(Core {
                table,
                disp: Dispatcher::new(),
                poisoned: FxHashSet::default(),
                policy,
                planner,
                trigger: Trigger::default(),
                plan_due: false,
                request_round_due: false,
                last_request: Instant::now(),
                next_migration: 1,
                failed: None,
            }),
            sb_now: Mutex::new(sb.clone()),
            resizing: Mutex::new(()),
            sb,
            cfg,
            devs,
            device_errors,
            drained: Condvar::new(),
            unlocked: tokio::sync::Notify::new(),
            journal: Mutex::new(journal),
            wake: (Mutex::new(()), Condvar::new()),
            stop: AtomicBool::new(false),
            worker: Mutex::new(None),
            request_round: Mutex::new(()),
            recorder: std::sync::OnceLock::new(),
            counters: Counters::default(),
            recovery: report,
            shut_down: AtomicBool::new(false),
            inline_fast,
            inline_forced: AtomicBool::new(false),
            copy_pause: Duration::from_millis(
                std::env::var("TIERCACHE_TIER_COPY_PAUSE_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            ),
            io: tiercache_runtime::SyncWorkers::new(
                "tier-io",
                tiercache_runtime::SyncWorkers::default_threads(),
            )?,
        }))
    }
}
