//! Flash devices: `ssd` (a plain SSD: dense logical space, 7 %
//! overprovisioning, collection copies everything), `ssc` (a solid-state
//! cache: sparse space keyed by disk block, silent eviction of clean data
//! blocks, fixed 7 % log) and `ssc-v` (silent eviction also when recycling log
//! blocks, log space varying from 0 to 20 % of the flash).
//!
//! The SSC interface is FlashTier's Table II: write-dirty, write-clean, read
//! (a miss is "not present"), evict, clean and exists. Durability follows
//! Section 4.2: write-dirty and evict commit their log records synchronously;
//! write-clean and clean are buffered and group-committed every 10,000
//! writes (a write-clean that replaces data commits synchronously); the map
//! is checkpointed when the log exceeds two thirds of the checkpoint or after
//! a million writes. A write's own records ride in its data page's
//! out-of-band area; other commits cost log pages. Log and checkpoint pages
//! are written to a dedicated region and counted in the device's stats.

use crate::flash::{Flash, Geometry, Timing};
use crate::ftl::hybrid::{exported_blocks_for, log_blocks_for, Hybrid, HybridConfig};
use crate::ftl::page::PageFtl;
use crate::ftl::page_log::PageLogFtl;
use crate::ftl::{MapMemory, Translation};
use crate::gc::GcPolicy;
use crate::FlashError;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Bytes of one mapping log record (sequence number, logical and physical
/// address, page/block flag).
pub const LOG_RECORD_BYTES: u64 = 16;
/// Writes between group commits of buffered log records.
pub const GROUP_COMMIT_WRITES: u64 = 10_000;
/// Writes after which a checkpoint is taken regardless of log size.
pub const CHECKPOINT_WRITES: u64 = 1_000_000;
/// Cost of replaying one log record at recovery, in microseconds.
pub const REPLAY_US_PER_RECORD: f64 = 0.1;

/// Which device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Ssd,
    Ssc,
    SscV,
}

impl FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ssd" => Ok(DeviceKind::Ssd),
            "ssc" => Ok(DeviceKind::Ssc),
            "ssc-v" => Ok(DeviceKind::SscV),
            _ => Err(format!("unknown device '{s}' (allowed: ssd, ssc, ssc-v)")),
        }
    }
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl DeviceKind {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Ssd => "ssd",
            DeviceKind::Ssc => "ssc",
            DeviceKind::SscV => "ssc-v",
        }
    }
}

/// Which translation layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FtlKind {
    /// FAST-like hybrid (the paper's simulator).
    #[default]
    Hybrid,
    /// Page-mapped (the paper's OpenSSD prototype, "SSC-P").
    Page,
    /// Page-mapped with Section 4.3's log/data split for `ssc` and `ssc-v`
    /// ([`crate::ftl::page_log`]): host writes go to a log of at most 7 %
    /// (SSC) or 20 % (SSC-V) of the blocks, collected by copying its valid
    /// pages into data blocks; only data blocks are silently evicted. The
    /// `ssd` is the same as with `Page`.
    PageLog,
}

impl FromStr for FtlKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "hybrid" => Ok(FtlKind::Hybrid),
            "page" => Ok(FtlKind::Page),
            "page-log" => Ok(FtlKind::PageLog),
            _ => Err(format!(
                "unknown FTL '{s}' (allowed: hybrid, page, page-log)"
            )),
        }
    }
}

impl fmt::Display for FtlKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FtlKind::Hybrid => "hybrid",
            FtlKind::Page => "page",
            FtlKind::PageLog => "page-log",
        })
    }
}

/// Device configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceConfig {
    pub kind: DeviceKind,
    pub ftl: FtlKind,
    pub geometry: Geometry,
    pub timing: Timing,
    /// Victim selection of the page-mapped layer.
    pub gc: GcPolicy,
    /// Count log and checkpoint traffic (SSC durability, Section 4.2).
    pub persistence: bool,
    /// SSD overprovisioning and SSC log share (FlashTier: 7 %).
    pub overprovision: f64,
    /// SSC-V maximum log share (FlashTier: 20 %).
    pub max_log: f64,
}

impl DeviceConfig {
    /// Table IV device of `capacity_bytes` of flash with the paper's shares.
    pub fn new(kind: DeviceKind, capacity_bytes: u64) -> Result<Self, FlashError> {
        Ok(DeviceConfig {
            kind,
            ftl: FtlKind::Hybrid,
            geometry: Geometry::for_capacity(capacity_bytes)?,
            timing: Timing::default(),
            gc: GcPolicy::Greedy,
            persistence: true,
            overprovision: 0.07,
            max_log: 0.20,
        })
    }
}

/// Durability traffic and the recovery estimate.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PersistStats {
    pub log_records: u64,
    pub sync_commits: u64,
    pub group_commits: u64,
    pub log_pages: u64,
    pub checkpoints: u64,
    pub checkpoint_pages: u64,
    /// Log records written since the last checkpoint (replayed at recovery).
    pub records_since_checkpoint: u64,
    /// Pages of the last checkpoint.
    pub last_checkpoint_pages: u64,
    /// Estimated recovery time: read the checkpoint and the log since it
    /// (pages spread over all planes) and replay the records.
    pub recovery_ms: f64,
}

#[derive(Clone, Debug, Default)]
struct Persist {
    enabled: bool,
    buffered: u64,
    writes_since_commit: u64,
    writes_since_ckpt: u64,
    log_bytes_since_ckpt: u64,
    log_pages_since_ckpt: u64,
    stats: PersistStats,
}

/// A flash device with its translation layer.
pub struct Device {
    cfg: DeviceConfig,
    ftl: Box<dyn Translation>,
    exported_pages: u64,
    persist: Persist,
}

impl Device {
    /// Build an erased device.
    pub fn new(cfg: DeviceConfig) -> Result<Self, FlashError> {
        if !(0.0..0.5).contains(&cfg.overprovision) || !(0.0..0.5).contains(&cfg.max_log) {
            return Err(FlashError::Config(format!(
                "overprovision {} / max log {} (allowed: 0 to 0.5)",
                cfg.overprovision, cfg.max_log
            )));
        }
        let flash = Flash::new(cfg.geometry, cfg.timing)?;
        let blocks = cfg.geometry.blocks();
        let ppb = u64::from(cfg.geometry.pages_per_block);
        let (ftl, exported_pages): (Box<dyn Translation>, u64) = match cfg.ftl {
            FtlKind::Hybrid => {
                let (log_fraction, exported) = match cfg.kind {
                    DeviceKind::Ssd => (
                        cfg.overprovision,
                        Some(exported_blocks_for(blocks, cfg.overprovision)),
                    ),
                    DeviceKind::Ssc => (cfg.overprovision, None),
                    DeviceKind::SscV => (cfg.max_log, None),
                };
                let h = Hybrid::new(
                    flash,
                    HybridConfig {
                        log_fraction,
                        evict_data: cfg.kind != DeviceKind::Ssd,
                        evict_log: cfg.kind == DeviceKind::SscV,
                        exported_blocks: exported,
                    },
                )?;
                (Box::new(h), exported.map_or(0, |e| e * ppb))
            }
            FtlKind::PageLog if cfg.kind != DeviceKind::Ssd => {
                // SSC: a fixed 7 % log; SSC-V: up to 20 % (FlashTier 5.1).
                let fraction = match cfg.kind {
                    DeviceKind::Ssc => cfg.overprovision,
                    _ => cfg.max_log,
                };
                let p = PageLogFtl::new(flash, log_blocks_for(blocks, fraction))?;
                (Box::new(p), 0)
            }
            FtlKind::Page | FtlKind::PageLog => {
                let reserve = match cfg.kind {
                    DeviceKind::Ssc => (f64::from(blocks) * cfg.overprovision).ceil() as usize,
                    _ => 2,
                };
                // The SSD keeps at least the collection's reserve, the host
                // and collection write blocks and one block of slack
                // unexported, however small the device (an 8-MiB SSD's 7 %
                // is under 3 blocks).
                let exported = match cfg.kind {
                    DeviceKind::Ssd => ((cfg.geometry.pages() as f64 * (1.0 - cfg.overprovision))
                        as u64)
                        .min(u64::from(blocks).saturating_sub(reserve as u64 + 3) * ppb),
                    _ => 0,
                };
                let p = PageFtl::new(flash, cfg.gc, reserve, cfg.kind != DeviceKind::Ssd);
                (Box::new(p), exported)
            }
        };
        Ok(Device {
            persist: Persist {
                enabled: cfg.persistence && cfg.kind != DeviceKind::Ssd,
                ..Persist::default()
            },
            cfg,
            ftl,
            exported_pages,
        })
    }

    /// Configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// Kind.
    pub fn kind(&self) -> DeviceKind {
        self.cfg.kind
    }

    /// The translation layer (for inspection).
    pub fn ftl(&self) -> &dyn Translation {
        self.ftl.as_ref()
    }

    /// The flash array.
    pub fn flash(&self) -> &Flash {
        self.ftl.flash()
    }

    /// Logical pages an SSD exports (0 for an SSC).
    pub fn exported_pages(&self) -> u64 {
        self.exported_pages
    }

    /// Pages of cached data the device can hold at most: the SSD's exported
    /// space, the SSC's flash minus its log (ssc) or minus nothing (ssc-v).
    pub fn capacity_pages(&self) -> u64 {
        match self.cfg.kind {
            DeviceKind::Ssd => self.exported_pages,
            DeviceKind::Ssc => {
                (self.cfg.geometry.pages() as f64 * (1.0 - self.cfg.overprovision)) as u64
            }
            DeviceKind::SscV => self.cfg.geometry.pages(),
        }
    }

    /// Device memory for translations.
    pub fn memory(&self) -> MapMemory {
        self.ftl.memory()
    }

    /// Durability stats with the current recovery estimate.
    pub fn persist_stats(&self) -> Option<PersistStats> {
        if !self.persist.enabled {
            return None;
        }
        let mut s = self.persist.stats.clone();
        let t = &self.cfg.timing;
        let pages = s.last_checkpoint_pages.max(self.checkpoint_pages())
            + self.persist.log_pages_since_ckpt;
        let planes = f64::from(self.cfg.geometry.planes());
        s.recovery_ms = (pages as f64 * (t.page_read_us + t.bus_us) / planes
            + s.records_since_checkpoint as f64 * REPLAY_US_PER_RECORD)
            / 1000.0;
        Some(s)
    }

    fn unsupported(&self, op: &'static str) -> FlashError {
        let allowed = match self.cfg.kind {
            DeviceKind::Ssd => "write, read, trim",
            _ => "write-dirty, write-clean, read, evict, clean, exists",
        };
        FlashError::Unsupported {
            op,
            kind: self.cfg.kind.name(),
            allowed,
        }
    }

    fn check_ssd(&self, lba: u64, op: &'static str) -> Result<(), FlashError> {
        if self.cfg.kind != DeviceKind::Ssd {
            return Err(self.unsupported(op));
        }
        if lba >= self.exported_pages {
            return Err(FlashError::Config(format!(
                "address {lba} beyond the SSD's {} exported pages",
                self.exported_pages
            )));
        }
        Ok(())
    }

    fn check_ssc(&self, op: &'static str) -> Result<(), FlashError> {
        if self.cfg.kind == DeviceKind::Ssd {
            return Err(self.unsupported(op));
        }
        Ok(())
    }

    /// SSD: write a logical page.
    pub fn write(&mut self, lba: u64) -> Result<(), FlashError> {
        self.check_ssd(lba, "write")?;
        self.ftl.write(lba, false)
    }

    /// SSD: trim a logical page.
    pub fn trim(&mut self, lba: u64) -> Result<(), FlashError> {
        self.check_ssd(lba, "trim")?;
        self.ftl.remove(lba);
        Ok(())
    }

    /// Read a page: true when present (an SSC returns "not present" for a
    /// block it does not hold; an SSD page never written reads as absent).
    pub fn read(&mut self, addr: u64) -> bool {
        self.ftl.read(addr)
    }

    /// Whether a block is cached, without a device operation (for stats).
    pub fn contains(&self, addr: u64) -> bool {
        self.ftl.contains(addr)
    }

    /// SSC: insert or update a block with dirty data; durable on return.
    pub fn write_dirty(&mut self, block: u64) -> Result<(), FlashError> {
        self.check_ssc("write-dirty")?;
        let replaced = self.ftl.contains(block);
        self.ftl.write(block, true)?;
        self.log(1 + u64::from(replaced), true, true);
        Ok(())
    }

    /// SSC: insert or update a block with clean data; may be lost in a crash
    /// (as if evicted) unless it replaced data.
    pub fn write_clean(&mut self, block: u64) -> Result<(), FlashError> {
        self.check_ssc("write-clean")?;
        let replaced = self.ftl.contains(block);
        self.ftl.write(block, false)?;
        self.log(1 + u64::from(replaced), replaced, true);
        Ok(())
    }

    /// SSC: evict a block; durable on return.
    pub fn evict(&mut self, block: u64) -> Result<bool, FlashError> {
        self.check_ssc("evict")?;
        let was = self.ftl.remove(block);
        if was {
            self.log(1, true, false);
        }
        Ok(was)
    }

    /// SSC: allow future eviction of a block (asynchronous).
    pub fn clean(&mut self, block: u64) -> Result<bool, FlashError> {
        self.check_ssc("clean")?;
        let was = self.ftl.set_clean(block);
        if was {
            self.log(1, false, false);
        }
        Ok(was)
    }

    /// SSC: dirty bitmap of `len` blocks from `start` (set = present and dirty).
    pub fn exists(&self, start: u64, len: u64) -> Result<Vec<bool>, FlashError> {
        self.check_ssc("exists")?;
        Ok((start..start.saturating_add(len))
            .map(|b| self.ftl.is_dirty(b) == Some(true))
            .collect())
    }

    fn checkpoint_pages(&self) -> u64 {
        let m = self.ftl.memory();
        (m.forward_bytes + m.dirty_bitmap_bytes).div_ceil(u64::from(self.cfg.geometry.page_bytes))
    }

    /// Account log records of one operation. `sync` commits now; `with_data`
    /// means the op's own records ride in its data page's out-of-band area.
    fn log(&mut self, records: u64, sync: bool, with_data: bool) {
        if !self.persist.enabled {
            return;
        }
        let page = u64::from(self.cfg.geometry.page_bytes);
        let p = &mut self.persist;
        p.stats.log_records += records;
        p.stats.records_since_checkpoint += records;
        p.log_bytes_since_ckpt += records * LOG_RECORD_BYTES;
        if with_data {
            p.writes_since_commit += 1;
            p.writes_since_ckpt += 1;
        }
        let mut pages = 0;
        if sync {
            p.stats.sync_commits += 1;
            let own = if with_data { 0 } else { records };
            pages += (p.buffered + own) * LOG_RECORD_BYTES;
            p.buffered = 0;
            p.writes_since_commit = 0;
        } else {
            p.buffered += records;
            if p.writes_since_commit >= GROUP_COMMIT_WRITES {
                p.stats.group_commits += 1;
                pages += p.buffered * LOG_RECORD_BYTES;
                p.buffered = 0;
                p.writes_since_commit = 0;
            }
        }
        let pages = pages.div_ceil(page);
        p.stats.log_pages += pages;
        p.log_pages_since_ckpt += pages;
        let mut total = pages;
        let ckpt_bytes = {
            let m = self.ftl.memory();
            m.forward_bytes + m.dirty_bitmap_bytes
        };
        let p = &mut self.persist;
        if p.log_bytes_since_ckpt * 3 > ckpt_bytes * 2 || p.writes_since_ckpt >= CHECKPOINT_WRITES {
            let c = ckpt_bytes.div_ceil(page);
            p.stats.checkpoints += 1;
            p.stats.checkpoint_pages += c;
            p.stats.last_checkpoint_pages = c;
            p.stats.records_since_checkpoint = 0;
            p.log_bytes_since_ckpt = 0;
            p.log_pages_since_ckpt = 0;
            p.writes_since_ckpt = 0;
            total += c;
        }
        if total > 0 {
            self.ftl.flash_mut().metadata_writes(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_log_is_selectable_and_leaves_the_ssd_as_page() {
        for name in ["hybrid", "page", "page-log"] {
            let k: FtlKind = name.parse().unwrap();
            assert_eq!(k.to_string(), name);
        }
        let e = "bogus".parse::<FtlKind>().unwrap_err();
        assert!(e.contains("page-log"), "{e}");
        let dev = |kind, ftl| {
            let mut d = DeviceConfig::new(kind, 64 << 20).unwrap();
            d.ftl = ftl;
            Device::new(d).unwrap()
        };
        // The SSD baseline is the page-mapped one whichever page layer is asked.
        let (a, b) = (
            dev(DeviceKind::Ssd, FtlKind::Page),
            dev(DeviceKind::Ssd, FtlKind::PageLog),
        );
        assert_eq!(a.exported_pages(), b.exported_pages());
        assert_eq!(b.ftl().log_blocks(), 0);
        // An SSC on page-log writes new data to its log.
        let mut c = dev(DeviceKind::Ssc, FtlKind::PageLog);
        c.write_clean(123_456_789).unwrap();
        assert!(c.contains(123_456_789));
        assert_eq!(c.ftl().log_blocks(), 1);
    }

    #[test]
    fn small_page_mapped_ssd_overwrites_its_whole_exported_space() {
        // 8 MiB over 10 planes rounds up to 40 blocks of 64 pages: 7 % is 2.8
        // blocks, less than the collection needs (2 reserve, the host and
        // collection write blocks, 1 slack), so the SSD exports 35 blocks.
        let mut d = DeviceConfig::new(DeviceKind::Ssd, 8 << 20).unwrap();
        d.ftl = FtlKind::Page;
        assert_eq!(d.geometry.blocks(), 40);
        let mut dev = Device::new(d).unwrap();
        assert_eq!(dev.exported_pages(), 35 * 64);
        for round in 0..4u64 {
            for lba in 0..dev.exported_pages() {
                dev.write((lba * 7 + round) % dev.exported_pages()).unwrap();
            }
        }
        assert!(dev.flash().stats.erases > 0);
    }
}
