//! Cache managers (FlashTier 4.4): write-through and write-back over an SSC,
//! and the "native" baseline (FlashCache-like: a host map from disk blocks to
//! SSD slots, LRU replacement, over a plain SSD).
//!
//! Host memory follows Table VI's accounting: 22 bytes per tracked block (an
//! 8-byte disk block number, an 8-byte checksum, two 2-byte LRU indexes and a
//! 2-byte state). The native manager tracks every cached block; FlashTier's
//! write-back manager only dirty blocks; its write-through manager nothing.

use crate::device::{Device, DeviceKind};
use crate::FlashError;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use tiercache_block::lazy::Paged;

/// Host bytes per tracked block (Table VI accounting).
pub const HOST_BYTES_PER_BLOCK: u64 = 22;
/// Longest run of contiguous dirty blocks cleaned in one disk write.
pub const MAX_CLEAN_RUN: usize = 64;

/// Write policy of a manager.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ManagerKind {
    /// Writes go to disk and (as write-clean) to the cache.
    WriteThrough,
    /// Writes go to the cache only (write-dirty); dirty blocks are cleaned
    /// past a threshold, least recently written first, contiguous runs first.
    #[default]
    WriteBack,
}

impl FromStr for ManagerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "write-through" => Ok(ManagerKind::WriteThrough),
            "write-back" => Ok(ManagerKind::WriteBack),
            _ => Err(format!(
                "write policy '{s}' is not available on flash devices (allowed: write-back, write-through)"
            )),
        }
    }
}

impl fmt::Display for ManagerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ManagerKind::WriteThrough => "write-through",
            ManagerKind::WriteBack => "write-back",
        })
    }
}

/// Counters of a manager.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ManagerStats {
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    /// Blocks read from disk.
    pub disk_reads: u64,
    /// Blocks written to disk (write-through writes and cleaning).
    pub disk_writes: u64,
    /// Disk write operations issued by cleaning (a run is one operation).
    pub clean_ops: u64,
    /// Blocks cleaned (written back).
    pub cleaned_blocks: u64,
    /// Native write-back: metadata pages written to the SSD.
    pub metadata_writes: u64,
    /// Most blocks tracked in host memory at once.
    pub peak_tracked: u64,
}

/// Dirty blocks in least-recently-written order.
#[derive(Clone, Debug, Default)]
struct DirtyTable {
    by_block: FxHashMap<u64, u64>,
    by_age: BTreeMap<u64, u64>,
    clock: u64,
}

impl DirtyTable {
    fn touch(&mut self, b: u64) {
        self.clock += 1;
        if let Some(old) = self.by_block.insert(b, self.clock) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(self.clock, b);
    }
    fn remove(&mut self, b: u64) -> bool {
        match self.by_block.remove(&b) {
            Some(t) => {
                self.by_age.remove(&t);
                true
            }
            None => false,
        }
    }
    fn len(&self) -> usize {
        self.by_block.len()
    }
    /// The least recently written dirty block and its contiguous dirty
    /// neighbours (up to [`MAX_CLEAN_RUN`]), removed from the table.
    fn take_run(&mut self) -> Vec<u64> {
        let Some((_, &b)) = self.by_age.iter().next() else {
            return Vec::new();
        };
        let mut lo = b;
        while lo > 0 && b - lo + 1 < MAX_CLEAN_RUN as u64 && self.by_block.contains_key(&(lo - 1)) {
            lo -= 1;
        }
        let mut hi = b;
        while hi - lo + 1 < MAX_CLEAN_RUN as u64 && self.by_block.contains_key(&(hi + 1)) {
            hi += 1;
        }
        let run: Vec<u64> = (lo..=hi).collect();
        for &x in &run {
            self.remove(x);
        }
        run
    }
}

/// A cache manager over a flash device.
pub trait CacheManager {
    /// Read one block: true on a cache hit.
    fn read(&mut self, dev: &mut Device, block: u64) -> Result<bool, FlashError>;
    /// Write one block: true when the block was cached.
    fn write(&mut self, dev: &mut Device, block: u64) -> Result<bool, FlashError>;
    /// Discard one block from cache (and disk).
    fn trim(&mut self, dev: &mut Device, block: u64) -> Result<(), FlashError>;
    /// Counters.
    fn stats(&self) -> &ManagerStats;
    /// Host memory now, in bytes.
    fn host_memory_bytes(&self) -> u64;
    /// Peak host memory, in bytes.
    fn peak_host_memory_bytes(&self) -> u64 {
        self.stats().peak_tracked * HOST_BYTES_PER_BLOCK
    }
}

/// Build the manager for `dev`: FlashTier's over an SSC, native over an SSD.
pub fn for_device(
    dev: &Device,
    kind: ManagerKind,
    dirty_target: f64,
) -> Result<Box<dyn CacheManager>, FlashError> {
    if !(0.0..=1.0).contains(&dirty_target) || dirty_target == 0.0 {
        return Err(FlashError::Config(format!(
            "dirty threshold {dirty_target} (allowed: above 0 up to 1)"
        )));
    }
    let limit = ((dev.capacity_pages() as f64 * dirty_target) as usize).max(1);
    Ok(match dev.kind() {
        DeviceKind::Ssd => Box::new(Native::new(dev, kind, limit)?),
        _ => Box::new(FlashTier {
            kind,
            dirty: DirtyTable::default(),
            limit,
            stats: ManagerStats::default(),
        }),
    })
}

/// FlashTier's cache manager over an SSC.
pub struct FlashTier {
    kind: ManagerKind,
    dirty: DirtyTable,
    limit: usize,
    stats: ManagerStats,
}

impl FlashTier {
    fn clean_runs(&mut self, dev: &mut Device, until: usize) -> Result<(), FlashError> {
        while self.dirty.len() > until {
            let run = self.dirty.take_run();
            if run.is_empty() {
                break;
            }
            self.stats.clean_ops += 1;
            self.stats.disk_writes += run.len() as u64;
            self.stats.cleaned_blocks += run.len() as u64;
            for b in run {
                dev.read(b);
                dev.clean(b)?;
            }
        }
        Ok(())
    }

    fn fill(&mut self, dev: &mut Device, block: u64) -> Result<(), FlashError> {
        self.with_room(dev, |d| d.write_clean(block))
    }

    /// Run a device write; when the device is full of dirty data, clean a
    /// share of the dirty blocks and retry.
    fn with_room(
        &mut self,
        dev: &mut Device,
        mut op: impl FnMut(&mut Device) -> Result<(), FlashError>,
    ) -> Result<(), FlashError> {
        let mut tries = 0;
        loop {
            match op(dev) {
                Err(FlashError::Full(m)) if self.dirty.len() > 0 && tries < 8 => {
                    tries += 1;
                    let keep = self.dirty.len() / 2;
                    self.clean_runs(dev, keep)?;
                    let _ = m;
                }
                r => return r,
            }
        }
    }
}

impl CacheManager for FlashTier {
    fn read(&mut self, dev: &mut Device, block: u64) -> Result<bool, FlashError> {
        if dev.read(block) {
            self.stats.read_hits += 1;
            return Ok(true);
        }
        self.stats.read_misses += 1;
        self.stats.disk_reads += 1;
        self.fill(dev, block)?;
        Ok(false)
    }

    fn write(&mut self, dev: &mut Device, block: u64) -> Result<bool, FlashError> {
        let hit = dev.contains(block);
        if hit {
            self.stats.write_hits += 1;
        } else {
            self.stats.write_misses += 1;
        }
        match self.kind {
            ManagerKind::WriteThrough => {
                self.stats.disk_writes += 1;
                self.fill(dev, block)?;
            }
            ManagerKind::WriteBack => {
                self.with_room(dev, |d| d.write_dirty(block))?;
                self.dirty.touch(block);
                self.stats.peak_tracked = self.stats.peak_tracked.max(self.dirty.len() as u64);
                if self.dirty.len() > self.limit {
                    self.clean_runs(dev, self.limit)?;
                }
            }
        }
        Ok(hit)
    }

    fn trim(&mut self, dev: &mut Device, block: u64) -> Result<(), FlashError> {
        self.dirty.remove(block);
        dev.evict(block)?;
        Ok(())
    }

    fn stats(&self) -> &ManagerStats {
        &self.stats
    }

    fn host_memory_bytes(&self) -> u64 {
        self.dirty.len() as u64 * HOST_BYTES_PER_BLOCK
    }
}

const NIL: u32 = u32::MAX;

/// The native baseline: a host map from disk blocks to SSD slots with LRU
/// replacement (FlashCache-like, fully associative). In write-back mode it
/// persists block state by writing the metadata page of a slot whenever the
/// slot's dirty state changes (Native-D in Section 7.5).
pub struct Native {
    kind: ManagerKind,
    map: FxHashMap<u64, u32>,
    slot_block: Paged<u64>,
    slot_dirty: Paged<bool>,
    prev: Paged<u32>,
    next: Paged<u32>,
    head: u32,
    tail: u32,
    /// Slots released, reused last-released first.
    free: Vec<u32>,
    /// Slots `high..` were never used (taken in order once `free` is empty).
    high: u32,
    slots: u32,
    dirty: DirtyTable,
    limit: usize,
    meta_base: u64,
    per_meta_page: u64,
    stats: ManagerStats,
}

impl Native {
    fn new(dev: &Device, kind: ManagerKind, limit: usize) -> Result<Self, FlashError> {
        let exported = dev.exported_pages();
        let page = u64::from(dev.config().geometry.page_bytes);
        let per_meta_page = page / HOST_BYTES_PER_BLOCK;
        let meta_pages = exported.div_ceil(per_meta_page + 1);
        let slots = exported - meta_pages;
        if slots == 0 || slots >= u64::from(NIL) {
            return Err(FlashError::Config(format!(
                "{slots} cache slots (allowed: 1 to {})",
                NIL - 1
            )));
        }
        let n = slots as usize;
        Ok(Native {
            kind,
            map: FxHashMap::default(),
            slot_block: Paged::new(n, u64::MAX),
            slot_dirty: Paged::new(n, false),
            prev: Paged::new(n, NIL),
            next: Paged::new(n, NIL),
            head: NIL,
            tail: NIL,
            free: Vec::new(),
            high: 0,
            slots: slots as u32,
            dirty: DirtyTable::default(),
            limit,
            meta_base: slots,
            per_meta_page,
            stats: ManagerStats::default(),
        })
    }

    fn unlink(&mut self, s: u32) {
        let (p, n) = (self.prev[s as usize], self.next[s as usize]);
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            self.tail = p;
        }
        self.prev[s as usize] = NIL;
        self.next[s as usize] = NIL;
    }

    fn push_front(&mut self, s: u32) {
        self.next[s as usize] = self.head;
        self.prev[s as usize] = NIL;
        if self.head != NIL {
            self.prev[self.head as usize] = s;
        } else {
            self.tail = s;
        }
        self.head = s;
    }

    fn touch(&mut self, s: u32) {
        self.unlink(s);
        self.push_front(s);
    }

    fn write_meta(&mut self, dev: &mut Device, s: u32) -> Result<(), FlashError> {
        if self.kind == ManagerKind::WriteBack {
            self.stats.metadata_writes += 1;
            dev.write(self.meta_base + u64::from(s) / self.per_meta_page)?;
        }
        Ok(())
    }

    fn set_clean(&mut self, dev: &mut Device, s: u32) -> Result<(), FlashError> {
        if self.slot_dirty[s as usize] {
            self.slot_dirty[s as usize] = false;
            self.write_meta(dev, s)?;
        }
        Ok(())
    }

    /// A slot for `block`: a free one or the LRU victim (written back first
    /// when dirty).
    fn slot_for(&mut self, dev: &mut Device, block: u64) -> Result<u32, FlashError> {
        let fresh = (self.high < self.slots).then_some(self.high);
        let s = match self.free.pop().or(fresh) {
            Some(s) => {
                if Some(s) == fresh {
                    self.high += 1;
                }
                s
            }
            None => {
                let s = self.tail;
                let old = self.slot_block[s as usize];
                if self.slot_dirty[s as usize] {
                    dev.read(u64::from(s));
                    self.stats.disk_writes += 1;
                    self.stats.cleaned_blocks += 1;
                    self.stats.clean_ops += 1;
                    self.dirty.remove(old);
                    self.set_clean(dev, s)?;
                }
                self.map.remove(&old);
                self.unlink(s);
                s
            }
        };
        self.slot_block[s as usize] = block;
        self.map.insert(block, s);
        self.push_front(s);
        self.stats.peak_tracked = self.stats.peak_tracked.max(self.map.len() as u64);
        Ok(s)
    }

    fn clean_runs(&mut self, dev: &mut Device) -> Result<(), FlashError> {
        while self.dirty.len() > self.limit {
            let run = self.dirty.take_run();
            self.stats.clean_ops += 1;
            self.stats.disk_writes += run.len() as u64;
            self.stats.cleaned_blocks += run.len() as u64;
            for b in run {
                if let Some(&s) = self.map.get(&b) {
                    dev.read(u64::from(s));
                    self.set_clean(dev, s)?;
                }
            }
        }
        Ok(())
    }
}

impl CacheManager for Native {
    fn read(&mut self, dev: &mut Device, block: u64) -> Result<bool, FlashError> {
        if let Some(&s) = self.map.get(&block) {
            dev.read(u64::from(s));
            self.touch(s);
            self.stats.read_hits += 1;
            return Ok(true);
        }
        self.stats.read_misses += 1;
        self.stats.disk_reads += 1;
        let s = self.slot_for(dev, block)?;
        dev.write(u64::from(s))?;
        Ok(false)
    }

    fn write(&mut self, dev: &mut Device, block: u64) -> Result<bool, FlashError> {
        let hit = match self.map.get(&block) {
            Some(&s) => {
                self.touch(s);
                self.stats.write_hits += 1;
                true
            }
            None => {
                self.stats.write_misses += 1;
                false
            }
        };
        let s = match self.map.get(&block) {
            Some(&s) => s,
            None => self.slot_for(dev, block)?,
        };
        dev.write(u64::from(s))?;
        match self.kind {
            ManagerKind::WriteThrough => self.stats.disk_writes += 1,
            ManagerKind::WriteBack => {
                if !self.slot_dirty[s as usize] {
                    self.slot_dirty[s as usize] = true;
                    self.write_meta(dev, s)?;
                }
                self.dirty.touch(block);
                if self.dirty.len() > self.limit {
                    self.clean_runs(dev)?;
                }
            }
        }
        Ok(hit)
    }

    fn trim(&mut self, dev: &mut Device, block: u64) -> Result<(), FlashError> {
        if let Some(s) = self.map.remove(&block) {
            self.dirty.remove(block);
            self.set_clean(dev, s)?;
            self.unlink(s);
            self.slot_block[s as usize] = u64::MAX;
            self.free.push(s);
            dev.trim(u64::from(s))?;
        }
        Ok(())
    }

    fn stats(&self) -> &ManagerStats {
        &self.stats
    }

    fn host_memory_bytes(&self) -> u64 {
        self.map.len() as u64 * HOST_BYTES_PER_BLOCK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceConfig;

    #[test]
    fn dirty_table_cleans_lru_block_with_its_contiguous_run() {
        let mut t = DirtyTable::default();
        for b in [10, 50, 11, 12, 9, 51] {
            t.touch(b);
        }
        // LRU is 10; its neighbours 9, 11, 12 are dirty: one run 9..=12.
        assert_eq!(t.take_run(), vec![9, 10, 11, 12]);
        assert_eq!(t.take_run(), vec![50, 51]);
        assert!(t.take_run().is_empty());
    }

    #[test]
    fn write_back_over_ssc_keeps_only_dirty_state_and_cleans_past_threshold() {
        let mut dev = Device::new(DeviceConfig::new(DeviceKind::Ssc, 40 << 20).unwrap()).unwrap();
        let mut m = for_device(&dev, ManagerKind::WriteBack, 0.2).unwrap();
        let limit = (dev.capacity_pages() as f64 * 0.2) as u64;
        for b in 0..limit + 10 {
            m.write(&mut dev, b).unwrap();
        }
        // The table never holds more than the threshold after a write.
        assert!(m.host_memory_bytes() <= limit * HOST_BYTES_PER_BLOCK);
        assert!(m.stats().cleaned_blocks >= 10);
        // Cleaned blocks are still cached (clean), dirty ones reported by exists.
        assert!(m.read(&mut dev, 0).unwrap());
        assert_eq!(dev.exists(0, 1).unwrap(), vec![false]);
        let last = limit + 9;
        assert_eq!(dev.exists(last, 1).unwrap(), vec![true]);
        // Write-through keeps nothing on the host.
        let wt = for_device(&dev, ManagerKind::WriteThrough, 0.2).unwrap();
        assert_eq!(wt.host_memory_bytes(), 0);
    }

    #[test]
    fn native_lru_over_ssd() {
        let mut dev = Device::new(DeviceConfig::new(DeviceKind::Ssd, 40 << 20).unwrap()).unwrap();
        let mut m = for_device(&dev, ManagerKind::WriteThrough, 0.2).unwrap();
        assert!(!m.read(&mut dev, 5).unwrap());
        assert!(m.read(&mut dev, 5).unwrap());
        assert_eq!(m.host_memory_bytes(), HOST_BYTES_PER_BLOCK);
        // SSC operations are refused by an SSD.
        assert!(matches!(
            dev.write_dirty(1),
            Err(FlashError::Unsupported { .. })
        ));
    }
}
