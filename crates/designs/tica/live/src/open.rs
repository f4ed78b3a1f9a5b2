//! Opening a three-level cache: find the pair from either SSD, recover both
//! stores, and rebuild the policy's view.
//!
//! Recovery trusts the WO-SSD's table (every acknowledged and flushed write
//! is there, durably). The RO-SSD's table is kept only when both SSDs were
//! shut down cleanly: after a crash its commits may be older or newer than
//! the WO-SSD's for the same page (the two logs commit independently), and
//! every RO-SSD page is also on the WO-SSD, so dropping it loses nothing.
//! Dirty WO-SSD pages without a second copy (DRAM was lost) are then written
//! back to the backing device before the cache serves, so dirty data is on
//! two devices again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use tiercache_io::BlockDev;
use tiercache_tica_policy::tica::{Tica, TicaConfig};

use crate::cache::{RecoveryInfo, State, ThreeLevel};
use crate::pair::{read_info, MetaDev, PairInfo, Role, PAGE};
use crate::ssd::Ssd;

/// Where the cache is.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Either SSD of the pair (the other is found from its superblock).
    pub ssd: PathBuf,
    /// Backing device [default: the one recorded at format time].
    pub backing: Option<PathBuf>,
    /// Open the devices with O_DIRECT where they allow it.
    pub direct: bool,
    /// Put the default emulated 7200 rpm disk in front of the backing device
    /// (benchmarks over a file that stands in for an HDD).
    pub emulate_hdd: bool,
}

fn open_dev(path: &Path, direct: bool, what: &str) -> Result<Arc<dyn BlockDev>> {
    Ok(tiercache_io::open_device(path, direct, what)?)
}

/// Open the cache whose SSD `o.ssd` is, on real files or block devices.
pub fn open(o: &OpenOptions) -> Result<Arc<ThreeLevel>> {
    let f = std::fs::File::open(&o.ssd).with_context(|| format!("opening {}", o.ssd.display()))?;
    let Some((sb, info)) = read_info(&f) else {
        bail!(
            "{} is not an SSD of a three-level (TICA) cache",
            o.ssd.display()
        );
    };
    let backing = o
        .backing
        .clone()
        .unwrap_or_else(|| PathBuf::from(&sb.backing.path));
    let ro_path = info.path_of(Role::RoSsd);
    let wo_path = info.path_of(Role::WoSsd);
    let ro = open_dev(&ro_path, o.direct, "RO-SSD")?;
    let wo = open_dev(&wo_path, o.direct, "WO-SSD")?;
    for dev in [&ro, &wo] {
        tiercache_io::keep_page_cache_small(dev.as_ref());
    }
    let mut bk = open_dev(&backing, o.direct, "backing device")?;
    if o.emulate_hdd {
        bk = Arc::new(tiercache_io::EmulatedHdd::default_disk(bk)?);
    }
    open_with_devices(ro, wo, bk, &backing)
}

/// Refuse a pair whose surviving SSD carries the note of its peer's failure.
fn refuse_if_degraded(info: &PairInfo) -> Result<()> {
    if let Some(why) = &info.failed_peer {
        bail!(
            "this three-level cache ran degraded after a device failure ({why}); every dirty page \
             was written back, so the backing device holds all data. Format the pair again \
             (tiercache format --mode tica ... --force) to use it"
        );
    }
    Ok(())
}

fn check_pair(ro: &PairInfo, wo: &PairInfo) -> Result<()> {
    refuse_if_degraded(ro)?;
    refuse_if_degraded(wo)?;
    if ro.role != Role::RoSsd || wo.role != Role::WoSsd {
        bail!(
            "the devices' roles are {} and {}: expected an RO-SSD and a WO-SSD",
            ro.role.label(),
            wo.role.label()
        );
    }
    if ro.pair != wo.pair {
        bail!(
            "the RO-SSD (pair {}) and the WO-SSD (pair {}) were not formatted together",
            ro.pair,
            wo.pair
        );
    }
    Ok(())
}

/// Open the cache on already-open devices (tests wrap them in fault
/// injectors). `backing_path` identifies the backing device.
pub fn open_with_devices(
    ro_dev: Arc<dyn BlockDev>,
    wo_dev: Arc<dyn BlockDev>,
    backing: Arc<dyn BlockDev>,
    backing_path: &Path,
) -> Result<Arc<ThreeLevel>> {
    let t0 = Instant::now();
    let meta = |d: &Arc<dyn BlockDev>| MetaDev(Arc::clone(d));
    let ro_info = read_info(&meta(&ro_dev));
    let wo_info = read_info(&meta(&wo_dev));
    // The survivor's failure note first: the failed SSD may not read at all.
    for (_, i) in ro_info.iter().chain(&wo_info) {
        refuse_if_degraded(i)?;
    }
    let (ro_sb, ro_info) = ro_info
        .with_context(|| format!("{} holds no three-level cache superblock", ro_dev.name()))?;
    let (wo_sb, wo_info) = wo_info
        .with_context(|| format!("{} holds no three-level cache superblock", wo_dev.name()))?;
    check_pair(&ro_info, &wo_info)?;
    let largest = ro_sb.layout.dev_size.max(wo_sb.layout.dev_size);
    crate::memory::check_fits("this", largest, wo_info.dram_bytes)?;
    let mut device_errors = tiercache_io::DeviceErrors::new();
    let ro_dev = device_errors.count("ro_ssd", ro_dev);
    let wo_dev = device_errors.count("wo_ssd", wo_dev);
    let backing = device_errors.count("backing", backing);
    let policy = wo_info.policy()?;
    let id = tiercache_io::probe_identity(backing_path)?;
    if backing.len() != id.size || id.size % PAGE != 0 {
        bail!(
            "backing device {} has {} bytes: expected a multiple of 4 KiB as at format time",
            backing_path.display(),
            backing.len()
        );
    }
    // The WO-SSD holds every cached page: its sample of clean pages is
    // compared with the backing device. If it starts cold, the RO-SSD's
    // pages are not on it any more, and `recover` drops them.
    let wo_open = tiercache_store::open_verified(meta(&wo_dev), &id, &meta(&backing))
        .with_context(|| format!("recovering the WO-SSD {}", wo_info.wo_ssd))?;
    let ro_open = tiercache_store::open(meta(&ro_dev), &id)
        .with_context(|| format!("recovering the RO-SSD {}", ro_info.ro_ssd))?;
    let clean = wo_open.report.clean_shutdown && ro_open.report.clean_shutdown;
    let cold_start = wo_open.report.cold_start.clone();
    if let Some(why) = &cold_start {
        tracing::warn!("starting cold: {why}");
    }
    let wo = Ssd::new(
        Role::WoSsd,
        wo_info.wo_ssd.clone(),
        Arc::clone(&wo_dev),
        wo_open.store,
        &wo_open.table,
        true,
    )
    .map_err(|e| anyhow::anyhow!(e.0))?;
    let ro = Ssd::new(
        Role::RoSsd,
        ro_info.ro_ssd.clone(),
        Arc::clone(&ro_dev),
        ro_open.store,
        &ro_open.table,
        clean,
    )
    .map_err(|e| anyhow::anyhow!(e.0))?;
    let slots = ro.slots().min(wo.slots());
    if slots < 2 {
        bail!("the SSDs hold {slots} pages: too small for a cache");
    }
    let dram_pages = (wo_info.dram_bytes / PAGE) as usize;
    let tica = Tica::new(TicaConfig::new(dram_pages, policy_ssd_pages(slots), policy));
    let mut s = State::new(tica, ro, wo, backing);
    s.device_errors = device_errors;
    let info = recover(&mut s, clean)?;
    // From here the RO-SSD's table is written at close only: recovery
    // drops it after any unclean shutdown (see `Ssd::set_volatile_meta`).
    s.ro.set_volatile_meta();
    let recovery = RecoveryInfo {
        duration_ms: t0.elapsed().as_secs_f64() * 1000.0,
        cold_start,
        ..info
    };
    let size = id.size;
    Ok(Arc::new(ThreeLevel::new(
        s,
        size,
        wo_info,
        backing_path.to_path_buf(),
        recovery,
    )))
}

/// Rebuild the policy from the recovered tables (see the module docs).
fn recover(s: &mut State, clean: bool) -> Result<RecoveryInfo> {
    let e = |e: crate::ssd::SsdError| anyhow::anyhow!("recovery: {}", e.0);
    // RO-SSD pages must be WO-SSD pages (the policy's invariant).
    let stray: Vec<_> =
        s.ro.entries()
            .filter(|(p, _)| s.wo.get(*p).is_none())
            .map(|(p, _)| p)
            .collect();
    for p in stray {
        s.ro.unmap(p).map_err(e)?;
    }
    let mut pages: Vec<_> = s.wo.entries().collect();
    pages.sort_unstable_by_key(|(p, _)| *p);
    let cap = s.tica.config().ssd_pages;
    // Dirty pages with a single copy, and pages beyond the policy's
    // capacity, go to the backing device.
    let mut write_back = Vec::new();
    for (i, (p, en)) in pages.iter().enumerate() {
        if en.dirty && (s.ro.get(*p).is_none() || i >= cap) {
            write_back.push(*p);
        }
    }
    for &p in &write_back {
        let data = match s.ro.get(p) {
            Some(_) => s.ro.read(p),
            None => s.wo.read(p),
        }
        .map_err(e)?;
        s.backing_write(p, &data)
            .map_err(|e| anyhow::anyhow!(e.0))?;
    }
    s.backing_flush().map_err(|e| anyhow::anyhow!(e.0))?;
    for &p in &write_back {
        s.wo.mark_clean(p).map_err(e)?;
        s.ro.mark_clean(p).map_err(e)?;
    }
    let (mut wo_pages, mut ro_pages) = (0u64, 0u64);
    for (i, (p, _)) in pages.iter().enumerate() {
        let dirty = s.wo.get(*p).is_some_and(|en| en.dirty);
        let on_ro = s.ro.get(*p).is_some();
        if i < cap && s.tica.restore_ssd_page(*p, on_ro, dirty) {
            wo_pages += 1;
            ro_pages += on_ro as u64;
        } else {
            s.wo.unmap(*p).map_err(e)?;
            s.ro.unmap(*p).map_err(e)?;
        }
    }
    s.ro.commit().map_err(e)?;
    s.wo.commit().map_err(e)?;
    Ok(RecoveryInfo {
        duration_ms: 0.0,
        clean_shutdown: clean,
        wo_pages,
        ro_pages,
        written_back: write_back.len() as u64,
        cold_start: None,
    })
}

/// The SSD pages the policy manages on a pair whose smaller SSD has `slots`
/// data slots: an eighth (1 to 256) is kept free for commits in flight
/// (`stats --json` `policy.ssd_pages`; `sim --like`).
pub fn policy_ssd_pages(slots: usize) -> usize {
    slots - (slots / 8).clamp(1, 256)
}
