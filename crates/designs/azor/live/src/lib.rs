//! The live tiercache block device.
//!
//! - [`format_cache`] writes a self-describing cache (superblock, metadata
//!   regions, data region) on a file or block device for one backing device;
//! - [`open_cache`] recovers it (newest checkpoint plus log) and builds the
//!   [`live::LiveCache`] that runs the policy core on the real devices;
//! - [`design::SsdCache`] plugs it into the live runtime (`tiercache-runtime`:
//!   NBD export, control socket behind `tiercache stats`, `flush` and
//!   `detach`, lifecycle).

pub mod classify;
pub mod design;
pub mod live;
pub mod memory;
pub mod metrics;
pub mod passthrough;
pub mod stats;
pub mod whatif;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tiercache_azor_policy::{CacheConfig, Engine};
use tiercache_io::{BlockDev, EmulatedHdd, FileDev, FileDevOptions};
use tiercache_store::FormatParams;

/// What `tiercache format` records besides the geometry: the policy, as JSON in the superblock.
pub fn policy_json(cfg: &CacheConfig) -> String {
    serde_json::to_string(cfg).expect("config serializes")
}

/// Write a new cache on `cache` for `backing`. Creates `cache` with `create_size` bytes when it does not exist.
pub fn format_cache(
    cache: &Path,
    backing: &Path,
    cfg: &CacheConfig,
    create_size: Option<u64>,
    force: bool,
) -> Result<tiercache_store::Layout> {
    format_cache_reserving(cache, backing, cfg, create_size, force, None)
}

/// [`format_cache`] with the metadata made for a cache of up to `max_size`
/// bytes, so that `resize` can grow it that far while it serves (`None`:
/// the device's size).
pub fn format_cache_reserving(
    cache: &Path,
    backing: &Path,
    cfg: &CacheConfig,
    create_size: Option<u64>,
    force: bool,
    max_size: Option<u64>,
) -> Result<tiercache_store::Layout> {
    if cfg.line_bytes < tiercache_azor_policy::config::MIN_LIVE_LINE {
        bail!("line size {} B is too small for a live cache (allowed: 4KiB to 1MiB; the simulator also takes 512B to 2KiB)", cfg.line_bytes);
    }
    if !tiercache_io::device_exists(backing) {
        bail!("backing device {} does not exist", backing.display());
    }
    // Record an absolute path: `serve` defaults to it from any working directory.
    let backing = &if backing.to_str().is_some_and(tiercache_io::is_nbd_uri) {
        backing.to_path_buf()
    } else {
        std::fs::canonicalize(backing)
            .with_context(|| format!("resolving backing device {}", backing.display()))?
    };
    let created = !cache.exists();
    let size = if created {
        let Some(size) = create_size else {
            bail!(
                "cache device {} does not exist (give --size to create a cache file)",
                cache.display()
            );
        };
        size
    } else {
        let f =
            std::fs::File::open(cache).with_context(|| format!("opening {}", cache.display()))?;
        tiercache_store::MetaDevice::len(&f)
            .with_context(|| format!("sizing {}", cache.display()))?
    };
    // Before anything is created or written.
    memory::check_fits(cfg, size)?;
    memory::check_addressable(cfg, size)?;
    if created {
        let f = std::fs::File::create(cache)
            .with_context(|| format!("creating {}", cache.display()))?;
        let sized = f
            .set_len(size)
            .with_context(|| format!("sizing {}", cache.display()));
        if let Err(e) = sized {
            let _ = std::fs::remove_file(cache);
            return Err(e);
        }
    }
    if let Some(m) = max_size.filter(|m| *m > size) {
        memory::check_fits(cfg, m).context("--max-size")?;
        memory::check_addressable(cfg, m).context("--max-size")?;
    }
    let r = format_existing(cache, backing, cfg, force, max_size);
    if r.is_err() && created {
        // Leave nothing behind: the file is ours and holds no cache.
        let _ = std::fs::remove_file(cache);
    }
    r
}

/// [`format_cache`] once the cache device exists with its final size.
fn format_existing(
    cache: &Path,
    backing: &Path,
    cfg: &CacheConfig,
    force: bool,
    max_size: Option<u64>,
) -> Result<tiercache_store::Layout> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(cache)
        .with_context(|| format!("opening {}", cache.display()))?;
    let identity = tiercache_io::probe_identity(backing)
        .with_context(|| format!("probing backing device {}", backing.display()))?;
    let params = FormatParams {
        line_size: cfg.line_bytes,
        sub_block_size: cfg.sub_block_bytes,
        log_bytes: None,
        policy: policy_json(cfg),
        backing: identity,
    };
    tiercache_store::format_reserving(&dev, &params, force, max_size)?;
    let mut opened = tiercache_store::open(&dev, &params.backing)?;
    // `open` marks the store in use: mark it clean again, so the first
    // `serve` starts as after a clean shutdown (not as after a crash).
    opened
        .store
        .mark_clean(opened.table.iter(), &params.backing)
        .context("marking the new cache clean")?;
    let layout = *opened.store.layout();
    let mut c = cfg.clone();
    c.cache_bytes = layout.slots as u64 * cfg.line_bytes as u64;
    c.geometry().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(layout)
}

/// Rule 3b of `tiercache-store`: a write-back cache overwrites clean valid
/// sub-blocks of a line in place without committing their invalidation
/// first, so after an unclean shutdown clean bits are not trusted: every
/// valid sub-block becomes dirty (a checkpoint records it) and cleaning
/// writes it back. Returns the lines made dirty.
fn dirty_after_unclean_shutdown(
    opened: &mut tiercache_store::Opened<MetaStore>,
    cfg: &CacheConfig,
) -> Result<u64> {
    if opened.report.clean_shutdown {
        return Ok(0);
    }
    let write_back = cfg.write_policy == tiercache_azor_policy::WritePolicy::WriteBack;
    let n = if write_back {
        tiercache_store::dirty_all_valid(&mut opened.table)
    } else {
        tiercache_store::drop_clean_copies(&mut opened.table)
    };
    if n > 0 {
        opened
            .store
            .checkpoint(tiercache_store::table_entries(&opened.table))
            .context("checkpointing the recovered table")?;
        if write_back {
            tracing::warn!(
                "unclean shutdown of a write-back cache: {n} lines with clean sub-blocks made dirty (written back by the cleaner)"
            );
        } else {
            tracing::warn!(
                "unclean shutdown of a {} cache: {n} lines' clean copies dropped (the backing device holds every acknowledged write; they are read from it again)",
                cfg.write_policy
            );
        }
    }
    Ok(n)
}

/// How to open a cache for serving.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub cache: PathBuf,
    /// Defaults to the backing device recorded at format time.
    pub backing: Option<PathBuf>,
    /// Put the HDD model in front of the backing device as delay (an emulation, for demos and benchmarks).
    pub emulate_hdd: bool,
    /// Open the data devices with O_DIRECT where possible.
    pub direct: bool,
}

/// A cache opened for serving, with what recovery found.
pub struct Opened {
    pub cache: Arc<live::LiveCache>,
    pub recovery: tiercache_store::store::RecoveryReport,
    pub backing_path: PathBuf,
    pub config: CacheConfig,
}

/// Open (and recover) a formatted cache.
pub fn open_cache(o: &OpenOptions) -> Result<Opened> {
    let file = std::fs::File::open(&o.cache)
        .with_context(|| format!("opening cache {}", o.cache.display()))?;
    let sb = tiercache_store::Superblock::read(&file)
        .with_context(|| {
            format!(
                "{} is not a tiercache cache (run tiercache format first)",
                o.cache.display()
            )
        })?
        .newest;
    let backing_path = o
        .backing
        .clone()
        .unwrap_or_else(|| PathBuf::from(&sb.backing.path));
    let fo = FileDevOptions {
        direct: o.direct,
        ..Default::default()
    };
    let cache_dev: Arc<dyn BlockDev> = Arc::new(
        FileDev::open(&o.cache, fo).with_context(|| format!("opening {}", o.cache.display()))?,
    );
    let mut backing = tiercache_io::open_device(&backing_path, o.direct, "backing device")?;
    if o.emulate_hdd {
        backing = Arc::new(EmulatedHdd::default_disk(backing).map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    let opened = open_with_devices(&o.cache, cache_dev, backing, &backing_path)?;
    tracing::info!(
        "recovered {} in {:.1} ms: {}",
        o.cache.display(),
        opened.recovery.duration.as_secs_f64() * 1000.0,
        opened.recovery
    );
    Ok(opened)
}

/// The device the cache's metadata store writes to: the cache file itself
/// when serving, the simulated data device in deterministic simulations.
pub type MetaStore = Arc<dyn tiercache_store::MetaDevice + Send + Sync>;

/// Open a cache around already-open devices (tests inject faulty or
/// crashing data devices this way); the metadata is read and written
/// through the file at `cache_path`.
pub fn open_with_devices(
    cache_path: &Path,
    cache_dev: Arc<dyn BlockDev>,
    backing: Arc<dyn BlockDev>,
    backing_path: &Path,
) -> Result<Opened> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(cache_path)
        .with_context(|| format!("opening cache {}", cache_path.display()))?;
    open_with_meta(Arc::new(file), cache_dev, backing, backing_path)
}

/// Open a cache whose metadata lives on its data device `cache_dev` (same
/// volatile cache, same faults): the deterministic simulations' devices.
pub fn open_on_devices(
    cache_dev: Arc<dyn BlockDev>,
    backing: Arc<dyn BlockDev>,
    backing_path: &Path,
) -> Result<Opened> {
    let meta = Arc::new(tiercache_io::MetaOnDev(Arc::clone(&cache_dev)));
    open_with_meta(meta, cache_dev, backing, backing_path)
}

fn open_with_meta(
    meta: MetaStore,
    cache_dev: Arc<dyn BlockDev>,
    backing: Arc<dyn BlockDev>,
    backing_path: &Path,
) -> Result<Opened> {
    let identity = tiercache_io::probe_identity(backing_path)
        .with_context(|| format!("probing backing device {}", backing_path.display()))?;
    let started = std::time::Instant::now();
    // Refuse a cache whose metadata would not fit before any of it is read.
    let sb = tiercache_store::Superblock::read(&meta)?.newest;
    let recorded: CacheConfig = serde_json::from_str(&sb.policy)
        .context("reading the policy recorded in the superblock")?;
    memory::check_open(&recorded, sb.layout.slots as u64, sb.layout.dev_size)?;
    let mut opened = tiercache_store::open_verified(
        meta,
        &identity,
        &tiercache_io::MetaOnDev(Arc::clone(&backing)),
    )?;
    if let Some(why) = &opened.report.cold_start {
        tracing::warn!("starting cold: {why}");
    }
    let layout = *opened.store.layout();
    let mut cfg = recorded;
    cfg.cache_bytes = layout.slots as u64 * layout.line_size as u64;
    let dirtied = dirty_after_unclean_shutdown(&mut opened, &cfg)?;
    let recovery = started.elapsed();
    let engine = Engine::new(cfg.clone()).map_err(|e| anyhow::anyhow!("recorded policy: {e}"))?;
    let report = opened.report.clone();
    let live = live::LiveCache::new(
        engine,
        opened.store,
        opened.table,
        cache_dev,
        backing,
        layout.data_offset,
        recovery,
    )?;
    live.set_backing_path(backing_path);
    if let Some(why) = &report.cold_start {
        live.set_cold_start(why);
    }
    live.stats
        .recovery_dirtied_lines
        .store(dirtied, std::sync::atomic::Ordering::Relaxed);
    Ok(Opened {
        cache: live,
        recovery: report,
        backing_path: backing_path.to_path_buf(),
        config: cfg,
    })
}
