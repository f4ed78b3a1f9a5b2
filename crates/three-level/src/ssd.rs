//! One cache SSD of the pair: a slot allocator (page to slot) over the
//! device's data region and its own crash-consistent metadata
//! (`tiercache-store`: one 4 KiB line per slot, one sub-block).
//!
//! Metadata rules (the store's crash rule, specialised):
//! - a page's `Map` and `Dirty`/`Valid` records are appended only after its
//!   data write completed, so a committed record never claims bytes that are
//!   not on the device;
//! - an unmapped slot is reused only after its `Unmap` is durable (it waits
//!   in `pending_free` until the next commit or checkpoint), so recovery never
//!   maps a slot to a page whose bytes were overwritten by another page;
//! - `Clean` is appended only after the page reached the backing device and
//!   the backing device was flushed (the caller flushes before committing).

use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashMap;
use tiercache_io::BlockDev;
use tiercache_levels::Page;
use tiercache_store::{
    BackingIdentity, Layout, LineMeta, Record, Slot, Store, StoreError, SubBlocks,
};

use crate::pair::{MetaDev, Role, PAGE};

/// Where a page lives on the SSD and whether it is newer than the backing device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotEntry {
    pub slot: Slot,
    pub dirty: bool,
}

/// An SSD error: the device is treated as failed.
#[derive(Debug)]
pub struct SsdError(pub String);

/// One cache SSD (see the module documentation).
pub struct Ssd {
    pub role: Role,
    /// Path or description, for messages.
    pub name: String,
    pub dev: Arc<dyn BlockDev>,
    store: Option<Store<MetaDev>>,
    layout: Layout,
    map: FxHashMap<Page, SlotEntry>,
    free: Vec<Slot>,
    pending_free: Vec<Slot>,
    /// Pages written / read (data, not metadata).
    pub writes: u64,
    pub reads: u64,
    /// Metadata commits and checkpoints.
    pub commits: u64,
    pub checkpoints: u64,
    last_commit: Instant,
}

fn one() -> SubBlocks {
    SubBlocks::first(1)
}

impl Ssd {
    /// An SSD whose store was opened, with the recovered table; `keep`
    /// false discards the table (an empty checkpoint is written).
    pub fn new(
        role: Role,
        name: String,
        dev: Arc<dyn BlockDev>,
        mut store: Store<MetaDev>,
        table: &[Option<LineMeta>],
        keep: bool,
    ) -> Result<Ssd, SsdError> {
        let layout = *store.layout();
        let mut map = FxHashMap::default();
        let mut free = Vec::new();
        for (s, m) in table.iter().enumerate() {
            match m {
                Some(m) if keep && m.valid.get(0) => {
                    map.insert(
                        m.line,
                        SlotEntry {
                            slot: s as Slot,
                            dirty: m.dirty.get(0),
                        },
                    );
                }
                _ => free.push(s as Slot),
            }
        }
        if !keep {
            store
                .checkpoint(std::iter::empty())
                .map_err(|e| SsdError(format!("{} {name}: {e}", role.label())))?;
        }
        free.reverse(); // allocate low slots first
        Ok(Ssd {
            role,
            name,
            dev,
            store: Some(store),
            layout,
            map,
            free,
            pending_free: Vec::new(),
            writes: 0,
            reads: 0,
            commits: 0,
            checkpoints: 0,
            last_commit: Instant::now(),
        })
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> SsdError {
        SsdError(format!("{} {}: {what}: {e}", self.role.label(), self.name))
    }

    fn store(&mut self) -> Result<&mut Store<MetaDev>, SsdError> {
        let (role, name) = (self.role, self.name.clone());
        self.store
            .as_mut()
            .ok_or_else(|| SsdError(format!("{} {name}: closed", role.label())))
    }

    /// Data slots of the device.
    pub fn slots(&self) -> usize {
        self.layout.slots as usize
    }
    /// Pages held.
    pub fn used(&self) -> usize {
        self.map.len()
    }
    /// Dirty pages held.
    pub fn dirty(&self) -> usize {
        self.map.values().filter(|e| e.dirty).count()
    }
    /// The page's slot, if held.
    pub fn get(&self, p: Page) -> Option<SlotEntry> {
        self.map.get(&p).copied()
    }
    /// Every page held, with its entry.
    pub fn entries(&self) -> impl Iterator<Item = (Page, SlotEntry)> + '_ {
        self.map.iter().map(|(p, e)| (*p, *e))
    }
    /// Whether a write can get a slot without a commit first.
    pub fn has_free_slot(&self) -> bool {
        !self.free.is_empty()
    }
    /// Records buffered or slots waiting for a durable unmap.
    pub fn has_pending(&self) -> bool {
        !self.pending_free.is_empty() || self.store.as_ref().is_some_and(|s| s.pending() > 0)
    }
    /// Time since the last commit or checkpoint.
    pub fn since_commit(&self) -> std::time::Duration {
        self.last_commit.elapsed()
    }

    fn offset(&self, slot: Slot) -> Result<u64, SsdError> {
        self.layout
            .slot_offset(slot)
            .ok_or_else(|| SsdError(format!("slot {slot} is outside the layout")))
    }

    /// Read page `p` (which must be held).
    pub fn read(&mut self, p: Page) -> Result<Vec<u8>, SsdError> {
        let e = self.get(p).ok_or_else(|| {
            SsdError(format!(
                "internal: page {p} is not on the {}",
                self.role.label()
            ))
        })?;
        let off = self.offset(e.slot)?;
        let mut buf = vec![0u8; PAGE as usize];
        self.dev
            .read_at(&mut buf, off)
            .map_err(|e| self.err(&format!("reading page {p}"), e))?;
        self.reads += 1;
        Ok(buf)
    }

    /// Write page `p` into a free slot, then record it (dirty or clean). An
    /// older copy of `p` must have been unmapped first. The caller makes sure
    /// a slot is free ([`Ssd::has_free_slot`], else commit).
    pub fn write(&mut self, p: Page, data: &[u8], dirty: bool) -> Result<(), SsdError> {
        if self.map.contains_key(&p) {
            self.unmap(p)?;
        }
        let slot = self.free.pop().ok_or_else(|| {
            SsdError(format!(
                "internal: no free slot on the {}",
                self.role.label()
            ))
        })?;
        let off = self.offset(slot)?;
        if let Err(e) = self.dev.write_at(data, off) {
            self.free.push(slot);
            return Err(self.err(&format!("writing page {p}"), e));
        }
        self.writes += 1;
        let store = self.store()?;
        let mut append = |r| store.append(r);
        let r = append(Record::Map {
            slot,
            line: p,
            class: 0,
        })
        .and_then(|_| {
            append(if dirty {
                Record::Dirty {
                    slot,
                    bitmap: one(),
                }
            } else {
                Record::Valid {
                    slot,
                    bitmap: one(),
                }
            })
        });
        r.map_err(|e| self.err("recording a page", e))?;
        self.map.insert(p, SlotEntry { slot, dirty });
        Ok(())
    }

    /// Drop page `p` (TRIM); its slot is reused after the unmap is durable.
    pub fn unmap(&mut self, p: Page) -> Result<(), SsdError> {
        let Some(e) = self.map.remove(&p) else {
            return Ok(());
        };
        self.pending_free.push(e.slot);
        let r = self.store()?.append(Record::Unmap { slot: e.slot });
        r.map_err(|e| self.err("recording an unmap", e))
    }

    /// Page `p` reached the backing device, which was flushed: it is clean.
    pub fn mark_clean(&mut self, p: Page) -> Result<(), SsdError> {
        let Some(e) = self.map.get_mut(&p) else {
            return Ok(());
        };
        if !e.dirty {
            return Ok(());
        }
        e.dirty = false;
        let slot = e.slot;
        let r = self.store()?.append(Record::Clean {
            slot,
            bitmap: one(),
        });
        r.map_err(|e| self.err("recording a clean page", e))
    }

    fn table(&self) -> Vec<(Slot, LineMeta)> {
        self.map
            .iter()
            .map(|(&p, e)| {
                (
                    e.slot,
                    LineMeta {
                        line: p,
                        valid: one(),
                        dirty: if e.dirty { one() } else { SubBlocks::default() },
                        class: 0,
                    },
                )
            })
            .collect()
    }

    /// Make every record durable (a checkpoint instead when the log is two
    /// thirds full); slots unmapped before become free.
    pub fn commit(&mut self) -> Result<(), SsdError> {
        let table = self.table();
        let store = self.store()?;
        let r = if store.wants_checkpoint() {
            store.checkpoint(table).map(|_| true)
        } else {
            match store.commit() {
                Ok(_) => Ok(false),
                Err(StoreError::LogFull { .. }) => store.checkpoint(table).map(|_| true),
                Err(e) => Err(e),
            }
        };
        match r {
            Ok(cp) => {
                if cp {
                    self.checkpoints += 1;
                } else {
                    self.commits += 1;
                }
            }
            Err(e) => return Err(self.err("committing metadata", e)),
        }
        self.last_commit = Instant::now();
        self.free.append(&mut self.pending_free);
        Ok(())
    }

    /// Clean shutdown: checkpoint, record the backing identity, mark the store clean.
    pub fn close(&mut self, backing: &BackingIdentity) -> Result<(), SsdError> {
        let table = self.table();
        let store = self
            .store
            .take()
            .ok_or_else(|| SsdError("already closed".into()))?;
        store
            .close(table, backing)
            .map(|_| ())
            .map_err(|e| self.err("closing the metadata store", e))
    }

    /// Forget the store without writing (a failed device, or before the
    /// surviving device is rewritten).
    pub fn abandon(&mut self) -> Option<tiercache_store::Superblock> {
        self.store.take().map(|s| s.superblock().clone())
    }
}
