//! `format`: write a new, empty log-structured cache on a device, after
//! the checks that refuse a wrong device (sector size, another cache or a
//! filesystem, metadata beyond the machine's memory allowance).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use tiercache_io::{BlockDev, FileDev, FileDevOptions};

use crate::compress::Codec;
use crate::layout::{plan_reserving, Superblock, WritePolicy, MAX_BACKING_PATH};
use crate::segment::BLOCK;

/// What `format` needs.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    pub cache: PathBuf,
    pub backing: PathBuf,
    /// Create (or extend) a cache file of this size.
    pub create_size: Option<u64>,
    pub write_policy: WritePolicy,
    pub dirty_target: f64,
    /// Segment size (default 1 MiB).
    pub seg_bytes: u64,
    /// Overwrite an existing cache or filesystem.
    pub force: bool,
    /// Compress cached blocks (the compressed variant, superblock version 2).
    pub compress: Codec,
    /// Make the checkpoint areas large enough for a cache device of up to
    /// this many bytes, so that `tiercache resize` can grow it that far
    /// (default: the device's size at format).
    pub max_size: Option<u64>,
}

fn open_rw(path: &Path, what: &str) -> Result<Arc<dyn BlockDev>> {
    Ok(Arc::new(
        FileDev::open(path, FileDevOptions::default())
            .with_context(|| format!("opening the {what} {}", path.display()))?,
    ))
}

/// The compressed layout packs records of 512-byte units back to back. A
/// cache device whose logical sector is larger (a 4Kn disk) takes such
/// writes only as read-modify-writes of whole sectors (the page cache's or
/// the `O_DIRECT` bounce buffer's) that also hold earlier, acknowledged
/// records, which a power loss could tear: refused, with the way out.
pub fn check_sector_size(path: &Path, codec: Codec) -> Result<()> {
    if !codec.is_on() {
        return Ok(());
    }
    let Ok(md) = std::fs::metadata(path) else {
        return Ok(()); // an NBD URI or a file about to be created
    };
    if !std::os::unix::fs::FileTypeExt::is_block_device(&md.file_type()) {
        return Ok(());
    }
    let Some(sector) = logical_sector_size(std::os::unix::fs::MetadataExt::rdev(&md)) else {
        tracing::warn!(
            "{}: logical sector size unknown (no /sys/dev/block entry); assuming 512 bytes",
            path.display()
        );
        return Ok(());
    };
    if sector > crate::compress::UNIT as u64 {
        bail!(
            "{} has {sector}-byte logical sectors: --compress {codec} packs records in {}-byte units, \
             which such a device can only take by read-modify-write of sectors holding other \
             records (not safe against power loss); use --compress off on this device",
            path.display(),
            crate::compress::UNIT
        );
    }
    Ok(())
}

/// The logical sector size of block device `rdev` from sysfs (a
/// partition's is its disk's).
fn logical_sector_size(rdev: u64) -> Option<u64> {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    let dir = format!("/sys/dev/block/{major}:{minor}");
    ["queue", "../queue"].iter().find_map(|q| {
        std::fs::read_to_string(format!("{dir}/{q}/logical_block_size"))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

/// Write a new, empty log-structured cache on `o.cache` for `o.backing`.
/// Refuses a backing size that is not a non-empty multiple of 4 KiB, the
/// same device twice, a cache whose metadata would not fit in the
/// machine's allowance of memory ([`crate::memory::check_fits`]), and
/// (unless `force`) a device holding a cache or a filesystem. A refusal or
/// failure leaves no file behind: a file it created is removed, one it
/// extended gets its old size back.
pub fn format(o: &FormatOptions) -> Result<Superblock> {
    if !(0.0..=1.0).contains(&o.dirty_target) {
        bail!("dirty target {} must lie between 0 and 1", o.dirty_target);
    }
    let cache = std::path::absolute(&o.cache)
        .with_context(|| format!("resolving {}", o.cache.display()))?;
    let backing = if o.backing.to_str().is_some_and(tiercache_io::is_nbd_uri) {
        o.backing.clone()
    } else {
        std::path::absolute(&o.backing)
            .with_context(|| format!("resolving {}", o.backing.display()))?
    };
    if cache == backing {
        bail!("the cache and the backing device must be different devices");
    }
    let bdev = tiercache_io::open_device(&backing, false, "backing device")?;
    let backing_size = bdev.len();
    let identity = tiercache_io::probe_identity(&backing)
        .with_context(|| format!("probing backing device {}", backing.display()))?;
    if backing_size == 0 || backing_size % BLOCK != 0 {
        bail!(
            "backing device {} has {backing_size} bytes: the log-structured cache needs a non-empty multiple of 4 KiB",
            backing.display()
        );
    }
    check_sector_size(&cache, o.compress)?;
    // The device as it is now: absent, or a file or device of some length.
    let existing = match std::fs::metadata(&cache) {
        Ok(md) => {
            let dev = open_rw(&cache, "cache device")?;
            if !o.force {
                refuse_foreign(&dev, &cache)?;
            }
            Some((md.is_file(), dev.len()))
        }
        Err(_) if o.create_size.is_some() => None,
        Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {}", cache.display()))),
    };
    let len = match (existing, o.create_size) {
        (Some((true, old)), Some(size)) => old.max(size),
        (Some((_, old)), _) => old,
        (None, size) => size.unwrap_or(0),
    };
    if let Some(m) = o.max_size.filter(|&m| m < len) {
        bail!("--max-size {m} is smaller than the cache device ({len} bytes)");
    }
    let mut sb = plan_reserving(len, o.seg_bytes, o.compress, o.max_size.unwrap_or(len))?;
    sb.write_policy = o.write_policy;
    sb.dirty_target = o.dirty_target;
    sb.backing_size = backing_size;
    sb.backing_path = backing.display().to_string();
    sb.identity = Some(identity);
    if sb.backing_path.len() > MAX_BACKING_PATH {
        bail!("backing path is too long ({} bytes)", sb.backing_path.len());
    }
    crate::memory::check_fits(&sb).map_err(anyhow::Error::msg)?;
    // Only now is anything created or written.
    if len > existing.map_or(0, |e| e.1) {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&cache)
            .with_context(|| format!("creating {}", cache.display()))?;
        if let Err(e) = f.set_len(len) {
            undo_create(&cache, existing);
            return Err(anyhow::Error::new(e).context(format!("sizing {}", cache.display())));
        }
    }
    let written = write_empty(&cache, &mut sb, existing.map_or(0, |e| e.1));
    if written.is_err() {
        undo_create(&cache, existing);
    }
    written?;
    Ok(sb)
}

/// Refuse a device holding a cache or a filesystem.
fn refuse_foreign(dev: &Arc<dyn BlockDev>, cache: &Path) -> Result<()> {
    if dev.len() >= 8192 && Superblock::read(dev.as_ref()).is_some() {
        bail!(
            "{} already holds a log-structured cache (use --force to overwrite it)",
            cache.display()
        );
    }
    let mut head = [0u8; 8];
    if dev.len() >= 8
        && dev.read_at(&mut head, 0).is_ok()
        && &head == tiercache_store::superblock::MAGIC
    {
        bail!(
            "{} already holds a tiercache cache (use --force to overwrite it)",
            cache.display()
        );
    }
    if let Ok(Some(fs)) = tiercache_store::detect_foreign(&crate::meta::Meta(Arc::clone(dev))) {
        bail!(
            "{} holds {fs} (use --force to overwrite it)",
            cache.display()
        );
    }
    Ok(())
}

/// Take back what `format` did to `cache` before it failed: remove the file
/// it created, or give an existing file its old size.
fn undo_create(cache: &Path, existing: Option<(bool, u64)>) {
    match existing {
        None => {
            let _ = std::fs::remove_file(cache);
        }
        Some((true, old)) => {
            if let Ok(f) = std::fs::OpenOptions::new().write(true).open(cache) {
                let _ = f.set_len(old);
            }
        }
        Some((false, _)) => {}
    }
}

/// Write the metadata of an empty cache described by `sb` (its placement
/// from [`plan_reserving`]) on `cache`. Bytes at or past `zero_from` read as
/// zeros already (a file just created or extended): they are not written.
fn write_empty(cache: &Path, sb: &mut Superblock, zero_from: u64) -> Result<()> {
    let dev = open_rw(cache, "cache device")?;
    crate::map::SparseMap::new(0, sb.backing_blocks(), sb.slots()).map_err(anyhow::Error::msg)?;
    // An empty checkpoint (epoch 1) in area 1, and no journal records, make an empty cache.
    let journal_end = sb.journal_off + sb.journal_records as u64 * BLOCK;
    for off in (sb.journal_off..journal_end.min(zero_from.max(sb.journal_off))).step_by(1 << 20) {
        let n = (1u64 << 20).min(journal_end - off);
        dev.write_at(&vec![0u8; n as usize], off)?;
    }
    dev.write_at(&[0u8; 4096], sb.ckpt_off[0])?;
    let head = crate::checkpoint::CheckpointHead::empty(1, sb.nsegs);
    crate::checkpoint::write_streamed(dev.as_ref(), sb, &head, std::iter::empty())?;
    // Invalidate every segment's summaries, so no older life is believed.
    let g = sb.geometry();
    let zero = vec![0u8; 2 * g.summary_blocks as usize * BLOCK as usize];
    for s in 0..sb.nsegs {
        let off = sb.seg_off + s as u64 * sb.seg_bytes;
        if off >= zero_from {
            break;
        }
        dev.write_at(&zero, off)?;
    }
    dev.flush()?;
    sb.write(dev.as_ref())?;
    Ok(())
}
