//! Formatting: the volume's configuration, writing a new volume's
//! superblock, mapping and log, and refusing to overwrite foreign data.

use crate::journal::Journal;
use crate::superblock::{Capacity, Layout, Superblock, TierRecord, SB_BYTES};
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

use tiercache_io::{BlockDev, FileDev, FileDevOptions};
use tiercache_oodt_policy::planner::{PlanClock, PlannerConfig};
use tiercache_oodt_policy::policy::PolicyKind;
use tiercache_oodt_policy::MappingTable;
use tiercache_store::BackingIdentity;
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
    /// `wall` (default): rounds every `plan_every` requests and after
    /// `idle_ms` idle, run by the worker; `requests`: every `plan_every`
    /// requests only, run by the request that made one due before it is
    /// answered (deterministic: `sim --mode tier --no-timing` runs the same
    /// rounds).
    #[serde(default)]
    pub plan_clock: PlanClock,
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
            plan_clock: PlanClock::Wall,
        }
    }

    pub(super) fn validate(&self) -> anyhow::Result<PolicyKind> {
        let kind: PolicyKind = self.policy.parse().map_err(anyhow::Error::msg)?;
        self.planner().validate()?;
        if self.migrate_rate == 0 {
            bail!("migration rate 0 B/s (allowed: at least 1)");
        }
        Ok(kind)
    }

    pub(super) fn planner(&self) -> PlannerConfig {
        PlannerConfig {
            every_requests: self.plan_every,
            idle_ns: match self.plan_clock {
                PlanClock::Wall => Some(self.idle_ms.max(1) * 1_000_000),
                PlanClock::Requests => None,
            },
            max_moves_per_round: self.max_moves_per_round,
        }
    }
}

/// Write a new tiered volume: metadata on `fast`, data on both tiers. With
/// [`Capacity::Slow`] the volume is `slow`'s size and starts with `slow`'s
/// contents (every block at home). With [`Capacity::Sum`] it is both tiers'
/// data slots minus one scratch slot each; it starts with `slow`'s contents
/// up to its last block, then the fast tier's share (discarded: zeros on a
/// file). Refuses a `fast` tier holding a filesystem, a cache or another
/// volume, and a `slow` tier holding a tiered-volume superblock, unless
/// `force`, and a volume whose metadata would not fit in the machine's
/// allowance of memory ([`crate::memory::check_fits`]). Creates `fast` as a
/// file of `create_size` bytes if it is absent (and removes it again if
/// formatting fails).
pub fn format_volume(
    fast: &Path,
    slow: &Path,
    block_bytes: u32,
    cfg: &VolumeConfig,
    create_size: Option<u64>,
    force: bool,
    capacity: Capacity,
) -> anyhow::Result<Superblock> {
    let kind = cfg.validate()?;
    if !(4096..=4 << 20).contains(&block_bytes) || !block_bytes.is_power_of_two() {
        bail!("block size {block_bytes} B (allowed: a power of two from 4KiB to 4MiB)");
    }
    if !tiercache_io::device_exists(slow) {
        bail!("slow tier {} does not exist", slow.display());
    }
    let create = !fast.exists();
    let fast_size = if create {
        let Some(size) = create_size else {
            bail!(
                "fast tier {} does not exist (give --size to create a file)",
                fast.display()
            );
        };
        size
    } else {
        tiercache_io::probe_identity(fast)
            .with_context(|| format!("fast tier {}", fast.display()))?
            .size
    };
    // Before anything is created: the metadata must fit in memory.
    let slow_size = tiercache_io::probe_identity(slow)
        .with_context(|| format!("slow tier {}", slow.display()))?
        .size;
    if let Ok((layout, volume_bytes)) = plan(fast_size, slow_size, block_bytes, capacity) {
        let blocks = volume_bytes.div_ceil(u64::from(block_bytes));
        let slow_slots = layout.slow_slots;
        let m = crate::memory::metadata_memory_of(blocks, layout.fast_slots, slow_slots, kind);
        crate::memory::check_fits(&m, volume_bytes, block_bytes, kind)
            .map_err(anyhow::Error::msg)?;
    }
    if create {
        let f =
            std::fs::File::create(fast).with_context(|| format!("creating {}", fast.display()))?;
        if let Err(e) = f.set_len(fast_size) {
            let _ = std::fs::remove_file(fast);
            return Err(anyhow::Error::new(e).context(format!("sizing {}", fast.display())));
        }
    }
    let r = format_created(fast, slow, block_bytes, cfg, force, capacity);
    if r.is_err() && create {
        // A refusal or failure leaves no file behind.
        let _ = std::fs::remove_file(fast);
    }
    r
}

/// The layout and volume size of a volume over tiers of `fast_bytes` and
/// `slow_bytes` in blocks of `block_bytes`.
fn plan(
    fast_bytes: u64,
    slow_bytes: u64,
    block_bytes: u32,
    capacity: Capacity,
) -> Result<(Layout, u64), crate::superblock::FormatError> {
    Ok(match capacity {
        Capacity::Slow => {
            let blocks = slow_bytes.div_ceil(u64::from(block_bytes));
            (
                Layout::compute(fast_bytes, blocks, block_bytes)?,
                slow_bytes,
            )
        }
        Capacity::Sum => {
            let (l, blocks) = Layout::compute_sum(fast_bytes, slow_bytes, block_bytes)?;
            (l, blocks * u64::from(block_bytes))
        }
    })
}

/// [`format_volume`] once the fast tier exists.
fn format_created(
    fast: &Path,
    slow: &Path,
    block_bytes: u32,
    cfg: &VolumeConfig,
    force: bool,
    capacity: Capacity,
) -> anyhow::Result<Superblock> {
    let fast = &std::fs::canonicalize(fast)?;
    let slow = &tiercache_io::canonical_device(slow)?;
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
    let slow_id = tiercache_io::probe_identity(slow)
        .with_context(|| format!("slow tier {}", slow.display()))?;
    if slow_id.size % 512 != 0 || slow_id.size == 0 {
        bail!(
            "slow tier {} is {} bytes (must be a non-zero multiple of 512)",
            slow.display(),
            slow_id.size
        );
    }
    let (layout, volume_bytes) = plan(fast_id.size, slow_id.size, block_bytes, capacity)?;
    let sb = Superblock {
        uuid: *uuid::Uuid::new_v4().as_bytes(),
        block_bytes,
        volume_bytes,
        capacity,
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

/// The mapping of a new volume: every block at home (`slow`), or blocks on
/// the slow tier's slots at their own index, then on the fast tier's (`sum`).
pub fn initial_table(sb: &Superblock) -> anyhow::Result<MappingTable> {
    let l = &sb.layout;
    Ok(match sb.capacity {
        Capacity::Slow => MappingTable::new(sb.block_bytes, sb.blocks(), &[l.fast_slots])?,
        Capacity::Sum => {
            MappingTable::new_sum(sb.block_bytes, sb.blocks(), &[l.fast_slots, l.slow_slots])?
        }
    })
}

/// Write the metadata of a new volume described by `sb` on its fast tier
/// `dev`: the initial mapping ([`initial_table`]), an empty log, then the
/// superblock copies, so a crash in the middle leaves no volume. A `sum`
/// volume's fast data slots are discarded first (advisory).
pub fn initialize(dev: &Arc<dyn BlockDev>, sb: &Superblock) -> anyhow::Result<()> {
    let table = initial_table(sb)?;
    if sb.capacity == Capacity::Sum {
        let bs = u64::from(sb.block_bytes);
        let len = (sb.layout.fast_slots * bs).min(dev.len().saturating_sub(sb.layout.data_offset));
        if let Err(e) = dev.trim(sb.layout.data_offset, len) {
            tracing::warn!("discarding the fast tier's data slots: {e}");
        }
    }
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
