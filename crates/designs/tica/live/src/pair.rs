//! The pair of cache SSDs as their superblocks describe it: each SSD's
//! superblock carries a JSON [`PairInfo`] (in the store's policy blob) naming
//! its role, both SSD paths, a pair id shared by both, and the DRAM size and
//! TICA policy the cache runs with. `format` writes both; `serve` finds the
//! pair from either SSD.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tiercache_io::{BlockDev, FileDev, FileDevOptions};
use tiercache_store::{FormatParams, MetaDevice, StoreError, Superblock};
use tiercache_tica_policy::{FlushConfig, Policy};

pub use crate::slots::PAGE;

/// Which SSD of the pair a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read-optimized SSD: asynchronous copies of dirty pages (the flusher).
    RoSsd,
    /// Write-optimized SSD: every write, before it is acknowledged.
    WoSsd,
}

impl Role {
    /// The user-facing name ("RO-SSD", "WO-SSD").
    pub fn label(self) -> &'static str {
        match self {
            Role::RoSsd => "RO-SSD",
            Role::WoSsd => "WO-SSD",
        }
    }
    /// The other SSD of the pair.
    pub fn peer(self) -> Role {
        match self {
            Role::RoSsd => Role::WoSsd,
            Role::WoSsd => Role::RoSsd,
        }
    }
}

/// The description each SSD's superblock carries (its store policy blob).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairInfo {
    /// Always "tica": how `serve` tells a three-level cache from an SSD cache.
    pub mode: String,
    /// This device's role.
    pub role: Role,
    /// Random id shared by the two SSDs formatted together.
    pub pair: String,
    /// Absolute paths of the two SSDs at format time.
    pub ro_ssd: String,
    pub wo_ssd: String,
    /// DRAM level size in bytes.
    pub dram_bytes: u64,
    /// TICA policy: adaptive, ef or wed.
    pub tica_policy: String,
    /// Set on the surviving SSD when its peer failed: the cache wrote every
    /// dirty page back and ran degraded; the pair must be formatted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_peer: Option<String>,
    /// The flusher's time-driven part (idle ticks) on; off, every flush
    /// follows the request count alone (`format --timed-flush off`).
    #[serde(default = "yes")]
    pub timed_flush: bool,
}

fn yes() -> bool {
    true
}

impl PairInfo {
    /// Path of the SSD with `role`.
    pub fn path_of(&self, role: Role) -> PathBuf {
        PathBuf::from(match role {
            Role::RoSsd => &self.ro_ssd,
            Role::WoSsd => &self.wo_ssd,
        })
    }
    /// The flusher's configuration (the scheduler shared with `sim`).
    pub fn flush_config(&self) -> FlushConfig {
        FlushConfig {
            timed: self.timed_flush,
            ..FlushConfig::default()
        }
    }
    /// The TICA policy, parsed.
    pub fn policy(&self) -> Result<Policy> {
        self.tica_policy
            .parse::<Policy>()
            .map_err(anyhow::Error::msg)
    }
}

/// A [`BlockDev`] as the metadata store's device (same bytes, same faults).
pub use tiercache_io::MetaOnDev as MetaDev;

/// The pair description of a device, or `None` when it holds no tiercache
/// superblock or one of another kind of cache.
pub fn read_info(dev: &impl MetaDevice) -> Option<(Superblock, PairInfo)> {
    let sb = Superblock::read(dev).ok()?.newest;
    let info: PairInfo = serde_json::from_str(&sb.policy).ok()?;
    (info.mode == "tica").then_some((sb, info))
}

/// Whether `path` is an SSD of a three-level cache (its pair description).
pub fn detect(path: &Path) -> Option<PairInfo> {
    let f = std::fs::File::open(path).ok()?;
    read_info(&f).map(|(_, i)| i)
}

/// The metadata log size for an SSD of `size` bytes: 1/16 of it, 256 KiB to 64 MiB.
pub fn log_bytes(size: u64) -> u64 {
    (size / 16).clamp(256 << 10, 64 << 20) / 4096 * 4096
}

/// What `tiercache format --mode tica` needs.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    pub ro_ssd: PathBuf,
    pub wo_ssd: PathBuf,
    pub backing: PathBuf,
    /// DRAM level size in bytes (at least two pages).
    pub dram_bytes: u64,
    pub policy: Policy,
    /// Create (or extend) SSD files of this size.
    pub create_size: Option<u64>,
    /// Overwrite existing caches and filesystems.
    pub force: bool,
    /// Make each SSD's metadata regions for an SSD of up to this many
    /// bytes, so that `tiercache resize` can grow it that far while the
    /// cache serves (`None`: each SSD's size at format).
    pub max_size: Option<u64>,
}

/// What `format` wrote.
#[derive(Clone, Debug)]
pub struct FormatReport {
    /// Data slots (pages) on the RO-SSD and on the WO-SSD.
    pub ro_slots: u32,
    pub wo_slots: u32,
    pub pair: String,
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.to_str().is_some_and(tiercache_io::is_nbd_uri) {
        return Ok(p.to_path_buf());
    }
    std::path::absolute(p).with_context(|| format!("resolving {}", p.display()))
}

/// Writes a new three-level cache on two SSDs (files or block devices) for
/// `backing`. Refuses a backing size that is not a multiple of 4 KiB, too
/// small a DRAM level, the same device twice, and (unless `force`) devices
/// holding a cache or a filesystem. The flusher's timed part is on.
pub fn format(o: &FormatOptions) -> Result<FormatReport> {
    format_with_flusher(o, true)
}

/// [`format`] with the flusher's timed part on or off (`timed_flush`,
/// recorded in the pair description).
pub fn format_with_flusher(o: &FormatOptions, timed_flush: bool) -> Result<FormatReport> {
    if o.dram_bytes < 2 * PAGE {
        bail!(
            "--dram-size {} bytes is too small: the DRAM level needs at least two 4 KiB pages",
            o.dram_bytes
        );
    }
    let ro = absolute(&o.ro_ssd)?;
    let wo = absolute(&o.wo_ssd)?;
    let backing = absolute(&o.backing)?;
    if ro == wo || ro == backing || wo == backing {
        bail!("the RO-SSD, the WO-SSD and the backing device must be three different devices");
    }
    let backing_id = tiercache_io::probe_identity(&backing)?;
    if backing_id.size == 0 || backing_id.size % PAGE != 0 {
        bail!(
            "backing device {} has {} bytes: a three-level cache needs a non-empty multiple of 4 KiB",
            backing.display(),
            backing_id.size
        );
    }
    // The SSDs' sizes as format will find them, and the memory check,
    // before anything is created or written.
    let mut sizes = [0u64; 2];
    for (i, path) in [&ro, &wo].into_iter().enumerate() {
        let existing = std::fs::File::open(path)
            .ok()
            .map(|f| tiercache_store::MetaDevice::len(&f))
            .transpose()
            .with_context(|| format!("sizing {}", path.display()))?;
        sizes[i] = match (existing, o.create_size) {
            (Some(len), Some(size)) if std::fs::metadata(path)?.is_file() => len.max(size),
            (Some(len), _) => len,
            (None, Some(size)) => size,
            (None, None) => bail!(
                "{} does not exist (give --size to create the SSD files)",
                path.display()
            ),
        };
    }
    crate::memory::check_fits("a", sizes[0].max(sizes[1]), o.dram_bytes)?;
    let mut created = Vec::new();
    let r = format_pair(o, timed_flush, [&ro, &wo], &backing_id, &mut created);
    if r.is_err() {
        // Leave nothing behind: the files we created hold no cache.
        for p in created {
            let _ = std::fs::remove_file(p);
        }
    }
    r
}

/// [`format_with_flusher`] once the checks passed: creates (recording them
/// in `created`) and formats the two SSDs.
fn format_pair(
    o: &FormatOptions,
    timed_flush: bool,
    [ro, wo]: [&PathBuf; 2],
    backing_id: &tiercache_store::BackingIdentity,
    created: &mut Vec<PathBuf>,
) -> Result<FormatReport> {
    let pair = uuid::Uuid::new_v4().to_string();
    let mut slots = [0u32; 2];
    for (i, (role, path)) in [(Role::RoSsd, ro), (Role::WoSsd, wo)]
        .into_iter()
        .enumerate()
    {
        if let Some(size) = o.create_size {
            if !path.exists() {
                created.push(path.to_path_buf());
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(path)
                .with_context(|| format!("creating {}", path.display()))?;
            if f.metadata()?.is_file() && f.metadata()?.len() < size {
                f.set_len(size)
                    .with_context(|| format!("sizing {}", path.display()))?;
                preallocate(&f, size);
            }
        }
        let dev: Arc<dyn BlockDev> = Arc::new(
            FileDev::open(path, FileDevOptions::default())
                .with_context(|| format!("opening the {} {}", role.label(), path.display()))?,
        );
        let info = PairInfo {
            mode: "tica".into(),
            role,
            pair: pair.clone(),
            ro_ssd: ro.display().to_string(),
            wo_ssd: wo.display().to_string(),
            dram_bytes: o.dram_bytes,
            tica_policy: o.policy.to_string(),
            failed_peer: None,
            timed_flush,
        };
        let params = FormatParams {
            line_size: PAGE as u32,
            sub_block_size: PAGE as u32,
            log_bytes: Some(log_bytes(dev.len().max(o.max_size.unwrap_or(0)))),
            policy: serde_json::to_string(&info)?,
            backing: backing_id.clone(),
        };
        let sb = tiercache_store::format_reserving(&MetaDev(dev), &params, o.force, o.max_size)
            .with_context(|| format!("formatting the {} {}", role.label(), path.display()))?;
        slots[i] = sb.layout.slots;
    }
    Ok(FormatReport {
        ro_slots: slots[0],
        wo_slots: slots[1],
        pair,
    })
}

/// Allocate a created SSD file's blocks up front (`fallocate`, best effort:
/// a file system without it keeps the sparse file). Every slot write of a
/// sparse file allocates blocks when the kernel writes it back (delayed
/// allocation, extent mapping); preallocated, the first writes only mark
/// extents written. Only when the file takes at most [`PREALLOCATE_SHARE`]
/// of the file system's free space: a larger one stays sparse (format
/// writes nothing proportional to the size, and leaves room for the rest).
fn preallocate(f: &std::fs::File, size: u64) {
    let free = rustix::fs::fstatvfs(f)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .unwrap_or(0);
    if (size as f64) <= free as f64 * PREALLOCATE_SHARE {
        let _ = rustix::fs::fallocate(f, rustix::fs::FallocateFlags::empty(), 0, size);
    }
}

/// Largest share of the free space of its file system a created SSD file is preallocated in.
const PREALLOCATE_SHARE: f64 = 0.25;

/// Records on the surviving SSD that its peer failed (`failed_peer` in its
/// pair description), so that no later `serve` trusts the failed device's
/// stale metadata. Called after every dirty page reached the backing device
/// and it was flushed.
///
/// The note is one superblock update ([`tiercache_store::Store::set_policy`]:
/// next generation, copy 0 then copy 1, each synced), so a power loss at any
/// point leaves either the pair as it was (it opens, and recovery finds every
/// flushed write) or the noted pair (refused: the backing device is
/// complete). The store is reopened for that (its recovery rewrites the
/// metadata crash-safely, as any open after a crash does); its table stays,
/// unused: the note makes `open` refuse the pair before reading it. Only a
/// survivor whose metadata no longer reads (it cannot open as a pair
/// anyway) is formatted afresh with the note.
pub fn mark_peer_failed(
    dev: &Arc<dyn BlockDev>,
    sb: &Superblock,
    mut info: PairInfo,
    why: &str,
) -> Result<()> {
    // The superblock holds at most 2 KiB of description: keep the reason short.
    info.failed_peer = Some(why.chars().take(400).collect());
    let policy = serde_json::to_string(&info)?;
    // The identity the survivor's superblock records (compared by `open`
    // only with itself: the backing device's contents changed since).
    let opened = Superblock::read(&MetaDev(Arc::clone(dev)))
        .and_then(|c| tiercache_store::open(MetaDev(Arc::clone(dev)), &c.newest.backing));
    match opened {
        Ok(mut opened) => {
            opened.store.set_policy(policy)?;
            Ok(())
        }
        // A transient error: retried at the next FLUSH.
        Err(e @ StoreError::Io { .. }) => Err(e.into()),
        Err(_) => {
            // Not a readable store any more: nothing on it to keep.
            let params = FormatParams {
                line_size: PAGE as u32,
                sub_block_size: PAGE as u32,
                log_bytes: Some(sb.layout.log_blocks * 4096),
                policy,
                backing: sb.backing.clone(),
            };
            tiercache_store::format(&MetaDev(Arc::clone(dev)), &params, true)?;
            Ok(())
        }
    }
}
