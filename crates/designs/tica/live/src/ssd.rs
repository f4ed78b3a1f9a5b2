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
//!
//! Two refinements, both within those rules:
//! - a page rewritten while its slot's `Map` is still buffered (not
//!   committed) is overwritten in that slot: no durable record names the slot
//!   yet (it was free durably when taken), so a crash finds it unmapped
//!   whatever its bytes, and a commit syncs the newest bytes before the
//!   `Map` (fewer slots taken, fewer pages written back per commit);
//! - an SSD with *volatile metadata* ([`Ssd::set_volatile_meta`], the
//!   RO-SSD) appends no records while the cache runs and frees an unmapped
//!   slot at once: recovery keeps its table only after a clean shutdown
//!   (the store marked itself open, durably, when it was opened), and
//!   [`Ssd::close`] checkpoints the whole table after syncing the data.
//!
//! Which free slot a write takes is [`crate::slots`]' business (log order:
//! adjacent slots, written back as long runs, and a batch's pages go out
//! as one write per run, [`Ssd::begin_batch`]). The order never decides
//! *whether* a slot may be taken, so the rules above hold.

use std::sync::Arc;
use std::time::Instant;

use rustc_hash::FxHashMap;
use tiercache_io::BlockDev;
use tiercache_store::{
    BackingIdentity, Layout, LineMeta, Record, Slot, SlotTable, Store, StoreError, SubBlocks,
};
use tiercache_tica_policy::Page;

use crate::pair::{MetaDev, Role, PAGE};
use crate::slots::FreeSlots;

/// Where a page lives on the SSD and whether it is newer than the backing device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotEntry {
    pub slot: Slot,
    pub dirty: bool,
}

/// A page's entry in the table: its slot and dirty state, and the commit
/// epoch its slot was mapped in (beside them, so the rewrite check costs no
/// second cache miss).
#[derive(Clone, Copy, Debug)]
struct MapEntry {
    slot: Slot,
    dirty: bool,
    /// `== Ssd::epoch`: the slot's `Map` is not committed yet (0: committed
    /// at open, or never recorded: volatile metadata).
    mapped_in: u64,
}

impl MapEntry {
    fn public(&self) -> SlotEntry {
        SlotEntry {
            slot: self.slot,
            dirty: self.dirty,
        }
    }
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
    map: FxHashMap<Page, MapEntry>,
    free: FreeSlots,
    pending_free: Vec<Slot>,
    /// Slots a write may take: the layout's, or fewer while a shrink moves
    /// the pages past its new end below it ([`Ssd::set_usable`]). A slot at
    /// or past it never becomes free again.
    usable: usize,
    /// Commits and checkpoints so far (starts at 1: no slot is fresh at open).
    epoch: u64,
    /// No records while running; the table is written at close only.
    volatile_meta: bool,
    /// Pages written / read (data, not metadata).
    pub writes: u64,
    pub reads: u64,
    /// Page writes that overwrote the page's uncommitted slot in place.
    pub rewrites_in_place: u64,
    /// Page writes into a new slot right after the slot taken before it
    /// (sequential on the device: log order at work).
    pub sequential_slot_writes: u64,
    last_slot: Option<Slot>,
    /// While a batch runs ([`Ssd::begin_batch`]): its page writes, held
    /// back (slot, page, bytes) to go out as runs of adjacent slots.
    held: Vec<(Slot, Page, Vec<u8>)>,
    holding: bool,
    /// Buffers of held writes already written, for the next batch.
    held_spare: Vec<Vec<u8>>,
    /// Page writes that went out in a batch, and the device writes that
    /// carried them (one per run of adjacent slots).
    pub batched_page_writes: u64,
    pub batch_device_writes: u64,
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
        table: &SlotTable,
        keep: bool,
    ) -> Result<Ssd, SsdError> {
        let layout = *store.layout();
        let mut map = FxHashMap::default();
        let mut free = FreeSlots::new(table.len().max(layout.slots as usize));
        for s in 0..table.len() {
            match table.get(s as Slot) {
                Some(m) if keep && m.valid.get(0) => {
                    map.insert(
                        m.line,
                        MapEntry {
                            slot: s as Slot,
                            dirty: m.dirty.get(0),
                            mapped_in: 0,
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
        Ok(Ssd {
            role,
            name,
            dev,
            store: Some(store),
            epoch: 1,
            volatile_meta: false,
            layout,
            map,
            free,
            pending_free: Vec::new(),
            usable: layout.slots as usize,
            writes: 0,
            reads: 0,
            rewrites_in_place: 0,
            sequential_slot_writes: 0,
            last_slot: None,
            held: Vec::new(),
            holding: false,
            held_spare: Vec::new(),
            batched_page_writes: 0,
            batch_device_writes: 0,
            commits: 0,
            checkpoints: 0,
            last_commit: Instant::now(),
        })
    }

    /// Run with volatile metadata (see the module documentation): no
    /// records until [`Ssd::close`], unmapped slots free at once. Only for
    /// an SSD whose table recovery drops after an unclean shutdown.
    pub fn set_volatile_meta(&mut self) {
        self.volatile_meta = true;
        for s in std::mem::take(&mut self.pending_free) {
            self.release(s);
        }
    }

    /// Slot `s` is free again (unless it is past the usable end).
    fn release(&mut self, s: Slot) {
        if (s as usize) < self.usable {
            self.free.push(s);
        }
    }

    fn err(&self, what: &str, e: impl std::fmt::Display) -> SsdError {
        SsdError(format!("{} {}: {what}: {e}", self.role.label(), self.name))
    }

    fn store(&mut self) -> Result<&mut Store<MetaDev>, SsdError> {
        // The message only on the error path (no name cloned per record).
        let (role, name) = (self.role, &self.name);
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
        self.map.get(&p).map(MapEntry::public)
    }
    /// Every page held, with its entry.
    pub fn entries(&self) -> impl Iterator<Item = (Page, SlotEntry)> + '_ {
        self.map.iter().map(|(p, e)| (*p, e.public()))
    }
    /// Slots a write can take without a commit first.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }
    /// Unmapped slots waiting for a commit to become free.
    pub fn pending_free_slots(&self) -> usize {
        self.pending_free.len()
    }
    /// Where slot `slot`'s bytes are on the device.
    pub fn slot_offset(&self, slot: Slot) -> Option<u64> {
        self.layout.slot_offset(slot)
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
        self.write_held()?;
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
    /// older copy of `p` is unmapped first, or overwritten in place when its
    /// slot's `Map` is not committed yet (same dirty state). The caller makes
    /// sure a slot is free ([`Ssd::has_free_slot`], else commit).
    pub fn write(&mut self, p: Page, data: &[u8], dirty: bool) -> Result<(), SsdError> {
        if let Some(e) = self.map.get(&p).copied() {
            if e.dirty == dirty && e.mapped_in == self.epoch && (e.slot as usize) < self.usable {
                let off = self.offset(e.slot)?;
                if self.holding {
                    self.hold(e.slot, p, data);
                    self.writes += 1;
                    self.rewrites_in_place += 1;
                    return Ok(());
                }
                if let Err(err) = self.dev.write_at(data, off) {
                    // The slot's bytes are undefined now: drop the page.
                    let _ = self.unmap(p);
                    return Err(self.err(&format!("writing page {p}"), err));
                }
                self.writes += 1;
                self.rewrites_in_place += 1;
                return Ok(());
            }
            self.unmap(p)?;
        }
        let slot = self.free.pop().ok_or_else(|| {
            SsdError(format!(
                "internal: no free slot on the {}",
                self.role.label()
            ))
        })?;
        if self.last_slot.is_some_and(|l| l + 1 == slot) {
            self.sequential_slot_writes += 1;
        }
        self.last_slot = Some(slot);
        let off = self.offset(slot)?;
        if self.holding {
            self.hold(slot, p, data);
        } else if let Err(e) = self.dev.write_at(data, off) {
            self.release(slot);
            return Err(self.err(&format!("writing page {p}"), e));
        }
        self.writes += 1;
        if !self.volatile_meta {
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
        }
        let mapped_in = if self.volatile_meta { 0 } else { self.epoch };
        self.map.insert(
            p,
            MapEntry {
                slot,
                dirty,
                mapped_in,
            },
        );
        Ok(())
    }

    /// Drop page `p` (TRIM); its slot is reused after the unmap is durable.
    pub fn unmap(&mut self, p: Page) -> Result<(), SsdError> {
        let Some(e) = self.map.remove(&p) else {
            return Ok(());
        };
        if self.volatile_meta {
            self.release(e.slot);
            return Ok(());
        }
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
        if self.volatile_meta {
            return Ok(());
        }
        let r = self.store()?.append(Record::Clean {
            slot,
            bitmap: one(),
        });
        r.map_err(|e| self.err("recording a clean page", e))
    }

    /// Hold page writes back until [`Ssd::end_batch`]: a batch of writes
    /// then goes to the device as one write per run of adjacent slots (log
    /// order makes runs). Nothing else changes: records are appended as
    /// before, and every operation that needs the bytes on the device (a
    /// read, a commit, a close) writes the held pages first. The caller
    /// ends the batch before it answers any of its requests.
    pub fn begin_batch(&mut self) {
        self.holding = true;
    }

    /// Whether a batch is running (its writes are held back).
    pub fn holding(&self) -> bool {
        self.holding
    }

    /// Write the batch's held pages and stop holding. An error means the
    /// device failed: the held pages are dropped from the table (their
    /// slots' bytes are undefined, as after a failed single write) and the
    /// caller must fail the SSD, so the records naming them are never
    /// committed.
    pub fn end_batch(&mut self) -> Result<(), SsdError> {
        self.holding = false;
        self.write_held()
    }

    /// Keep a copy of page `p`'s bytes for `slot` (replacing a held copy
    /// for the same slot: a rewrite in place within the batch).
    fn hold(&mut self, slot: Slot, p: Page, data: &[u8]) {
        if let Some(h) = self.held.iter_mut().find(|h| h.0 == slot) {
            h.1 = p;
            h.2.copy_from_slice(data);
            return;
        }
        let mut buf = self.held_spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(data);
        self.held.push((slot, p, buf));
    }

    /// Write the held pages, one device write per run of adjacent slots.
    fn write_held(&mut self) -> Result<(), SsdError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let mut held = std::mem::take(&mut self.held);
        held.sort_unstable_by_key(|h| h.0);
        let mut result = Ok(());
        let mut i = 0;
        while i < held.len() && result.is_ok() {
            let mut j = i + 1;
            while j < held.len() && held[j].0 == held[j - 1].0 + 1 {
                j += 1;
            }
            let bufs: Vec<&[u8]> = held[i..j].iter().map(|h| &h.2[..]).collect();
            result = match self.offset(held[i].0) {
                Ok(off) => tiercache_io::write_vectored(&*self.dev, &bufs, off)
                    .map_err(|e| self.err(&format!("writing {} held pages", j - i), e)),
                Err(e) => Err(e),
            };
            self.batch_device_writes += 1;
            self.batched_page_writes += (j - i) as u64;
            i = j;
        }
        if result.is_err() {
            // Any held page may be half written: none of them is on this
            // SSD any more (their slots wait for a commit that never comes:
            // the caller fails the SSD).
            for (slot, p, _) in &held {
                if self.map.get(p).is_some_and(|e| e.slot == *slot) {
                    self.map.remove(p);
                    self.pending_free.push(*slot);
                }
            }
        }
        for (_, _, buf) in held.drain(..) {
            if self.held_spare.len() < 64 {
                self.held_spare.push(buf);
            }
        }
        self.held = held;
        result
    }

    /// The table for a checkpoint, streamed from the map (no copy of it).
    fn table(
        map: &FxHashMap<Page, MapEntry>,
    ) -> impl Iterator<Item = (Slot, LineMeta)> + Clone + '_ {
        map.iter().map(|(&p, e)| {
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
    }

    /// Checkpoint the whole table (`Ok(true)`, as a commit that checkpointed).
    fn checkpoint_all(&mut self) -> Result<bool, StoreError> {
        let store = self
            .store
            .as_mut()
            .ok_or_else(|| StoreError::Failed("closed".into()))?;
        store.checkpoint(Self::table(&self.map)).map(|_| true)
    }

    /// Make every record durable (a checkpoint instead when the log is two
    /// thirds full); slots unmapped before become free.
    pub fn commit(&mut self) -> Result<(), SsdError> {
        self.write_held()?;
        // The table (every mapping) only when a checkpoint needs it.
        let r = if self.store()?.wants_checkpoint() {
            self.checkpoint_all()
        } else {
            match self.store()?.commit() {
                Ok(_) => Ok(false),
                Err(StoreError::LogFull { .. }) => self.checkpoint_all(),
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
        self.epoch += 1;
        for s in std::mem::take(&mut self.pending_free) {
            self.release(s);
        }
        Ok(())
    }

    /// The device's layout (its size and data slots) as the store records it.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Let writes take only slots below `slots` (a shrink to that many is
    /// under way; the layout's slot count to end it): the free slots at or
    /// past it are no longer taken, and slots freed there stay unused.
    pub fn set_usable(&mut self, slots: usize) {
        self.usable = slots.min(self.layout.slots as usize);
        let mut taken = vec![false; self.usable];
        for s in self
            .map
            .values()
            .map(|e| e.slot)
            .chain(self.pending_free.iter().copied())
        {
            if let Some(t) = taken.get_mut(s as usize) {
                *t = true;
            }
        }
        self.free = FreeSlots::new(self.usable);
        for (s, _) in taken.iter().enumerate().filter(|(_, t)| !**t) {
            self.free.push(s as Slot);
        }
    }

    /// Pages held in slots at or past `end`.
    pub fn pages_past(&self, end: usize) -> Vec<Page> {
        self.map
            .iter()
            .filter(|(_, e)| e.slot as usize >= end)
            .map(|(p, _)| *p)
            .collect()
    }

    /// Move page `p` into a free slot below the usable end when it lies
    /// past it (a shrink): its bytes are read and written again with the
    /// same dirty state ([`Ssd::write`]: the old slot is unmapped, and
    /// recovery finds the page in the old slot until the new mapping is
    /// committed). Returns whether it moved. The caller makes sure a slot
    /// is free.
    pub fn move_below_usable(&mut self, p: Page) -> Result<bool, SsdError> {
        let Some(e) = self.map.get(&p).copied() else {
            return Ok(false);
        };
        if (e.slot as usize) < self.usable {
            return Ok(false);
        }
        let data = self.read(p)?;
        self.write(p, &data, e.dirty)?;
        Ok(true)
    }

    /// Record the new layout `new` (from [`Layout::resized`]) in the store
    /// and use its slots ([`Store::resize`]: a crash recovers the old
    /// layout or the new one). For a shrink no page may lie past the new
    /// end, and every record must be committed first (the store's
    /// checkpoint of this table comes before the superblock). `after_write`
    /// runs after each metadata write and sync.
    pub fn resize(&mut self, new: Layout, after_write: &dyn Fn()) -> Result<(), SsdError> {
        self.write_held()?;
        if let Some(p) = self.pages_past(new.slots as usize).first() {
            return Err(SsdError(format!(
                "internal: page {p} is still past the new end of the {}",
                self.role.label()
            )));
        }
        let store = self
            .store
            .as_mut()
            .ok_or_else(|| SsdError("closed".into()))?;
        store
            .resize(new, Self::table(&self.map), after_write)
            .map_err(|e| self.err("recording the new size", e))?;
        self.layout = new;
        self.set_usable(new.slots as usize);
        Ok(())
    }

    /// Clean shutdown: checkpoint, record the backing identity, mark the store clean.
    pub fn close(&mut self, backing: &BackingIdentity) -> Result<(), SsdError> {
        self.holding = false;
        self.write_held()?;
        let store = self
            .store
            .take()
            .ok_or_else(|| SsdError("already closed".into()))?;
        store
            .close(Self::table(&self.map), backing)
            .map(|_| ())
            .map_err(|e| self.err("closing the metadata store", e))
    }

    /// Close after a detach (no page dirty): an empty checkpoint, then the
    /// superblock marked clean and detached with the backing identity, so
    /// the next open starts cold.
    pub fn detach(&mut self, backing: &BackingIdentity) -> Result<(), SsdError> {
        self.holding = false;
        self.write_held()?;
        let mut store = self
            .store
            .take()
            .ok_or_else(|| SsdError("already closed".into()))?;
        store
            .detach(Self::table(&self.map), backing)
            .map_err(|e| self.err("detaching the metadata store", e))
    }

    /// Forget the store without writing (a failed device, or before the
    /// surviving device gets its `failed_peer` note).
    pub fn abandon(&mut self) -> Option<tiercache_store::Superblock> {
        self.holding = false;
        self.held.clear();
        self.store.take().map(|s| s.superblock().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiercache_io::MemDev;
    use tiercache_store::FormatParams;

    fn backing() -> BackingIdentity {
        BackingIdentity {
            path: "/backing".into(),
            size: 1 << 30,
            fingerprint: 0,
            file_id: Some((1, 2)),
            serial: None,
            sampled: None,
            times: None,
        }
    }

    /// A formatted in-memory SSD (1 MiB of slots and its metadata).
    fn formatted_mem() -> Arc<MemDev> {
        let dev = Arc::new(MemDev::new("wo", (1 << 20) + 16 * PAGE as usize));
        let params = FormatParams {
            line_size: PAGE as u32,
            sub_block_size: PAGE as u32,
            log_bytes: Some(256 << 10),
            policy: "{}".into(),
            backing: backing(),
        };
        let d: Arc<dyn BlockDev> = dev.clone();
        tiercache_store::format(&MetaDev(d), &params, false).unwrap();
        dev
    }

    fn formatted() -> Arc<dyn BlockDev> {
        formatted_mem()
    }

    /// Open the store on `dev` as recovery does (no close before: a crash).
    fn open(dev: &Arc<dyn BlockDev>, keep: bool) -> Ssd {
        let o = tiercache_store::open(MetaDev(Arc::clone(dev)), &backing()).unwrap();
        Ssd::new(
            Role::WoSsd,
            "wo".into(),
            Arc::clone(dev),
            o.store,
            &o.table,
            keep,
        )
        .unwrap()
    }

    fn page(v: u8) -> Vec<u8> {
        vec![v; PAGE as usize]
    }

    #[test]
    fn an_unmapped_slot_is_reused_only_after_a_commit() {
        let dev = formatted();
        let mut s = open(&dev, true);
        assert_eq!(s.slots(), 16);
        s.write(5, &page(5), true).unwrap();
        let first = s.get(5).unwrap().slot;
        s.unmap(5).unwrap();
        // Every other slot taken: none is the unmapped one, whose unmap is
        // not durable yet, and then no slot is free.
        for p in 6..21 {
            s.write(p, &page(p as u8), true).unwrap();
            assert_ne!(s.get(p).unwrap().slot, first, "page {p}");
        }
        assert!(!s.has_free_slot());
        assert!(s.write(30, &page(30), true).is_err());
        s.commit().unwrap();
        s.write(7, &page(7), false).unwrap();
        assert_eq!(s.get(7).unwrap().slot, first, "free after the commit");
        assert_eq!((s.used(), s.dirty()), (15, 14));
    }

    /// The WO-SSD takes slots in log order: a run of writes lands in
    /// adjacent slots, carrying on past the slots freed behind it.
    #[test]
    fn writes_take_adjacent_slots_in_log_order() {
        let dev = formatted();
        let mut s = open(&dev, true);
        for p in 0..6u64 {
            s.write(p, &page(p as u8), true).unwrap();
        }
        s.commit().unwrap();
        // Rewrites of committed pages move them to new slots, in order,
        // after the last one; the old slots wait behind the cursor.
        for p in 0..4u64 {
            s.write(p, &page(10 + p as u8), true).unwrap();
        }
        let slots: Vec<Slot> = (0..6).map(|p| s.get(p).unwrap().slot).collect();
        assert_eq!(slots, vec![6, 7, 8, 9, 4, 5]);
        assert_eq!(s.sequential_slot_writes, 9);
        s.commit().unwrap();
        for p in 10..16u64 {
            s.write(p, &page(p as u8), true).unwrap();
        }
        // 10..16 fill the device's last slots and then wrap to the freed ones.
        let slots: Vec<Slot> = (10..16).map(|p| s.get(p).unwrap().slot).collect();
        assert_eq!(slots, vec![10, 11, 12, 13, 14, 15]);
        s.write(16, &page(16), true).unwrap();
        assert_eq!(
            s.get(16).unwrap().slot,
            0,
            "wrapped to the first freed slot"
        );
    }

    #[test]
    fn only_committed_records_survive_a_crash() {
        let dev = formatted();
        let mut s = open(&dev, true);
        s.write(1, &page(1), true).unwrap();
        s.write(2, &page(2), false).unwrap();
        s.commit().unwrap();
        s.write(3, &page(3), true).unwrap(); // never committed
        s.mark_clean(1).unwrap(); // never committed
        drop(s);
        let mut s = open(&dev, true);
        assert_eq!(s.get(1).map(|e| e.dirty), Some(true));
        assert_eq!(s.get(2).map(|e| e.dirty), Some(false));
        assert_eq!(s.get(3), None);
        assert_eq!(s.read(1).unwrap(), page(1));
        assert_eq!(s.read(2).unwrap(), page(2));
        // A rewrite moves the page: old slot unmapped and new one mapped in one commit.
        s.write(1, &page(9), true).unwrap();
        s.mark_clean(2).unwrap();
        s.commit().unwrap();
        drop(s);
        let mut s = open(&dev, true);
        assert_eq!(s.read(1).unwrap(), page(9));
        assert_eq!(s.get(2).map(|e| e.dirty), Some(false));
        assert_eq!(s.used(), 2);
        // keep = false: the table is discarded durably.
        drop(s);
        let s = open(&dev, false);
        assert_eq!(s.used(), 0);
        drop(s);
        assert_eq!(open(&dev, true).used(), 0);
    }

    #[test]
    fn a_full_log_becomes_a_checkpoint() {
        let dev = formatted();
        let mut s = open(&dev, true);
        // 64 log blocks of 4 KiB: thousands of records force checkpoints
        // (a commit every few writes, so rewrites take new slots).
        for i in 0..6000u64 {
            let p = i % 12;
            s.write(p, &page(p as u8), true).unwrap();
            if !s.has_free_slot() || i % 5 == 4 {
                s.commit().unwrap();
            }
        }
        s.commit().unwrap();
        assert!(
            s.checkpoints > 0,
            "commits {} checkpoints {}",
            s.commits,
            s.checkpoints
        );
        drop(s);
        let mut s = open(&dev, true);
        assert_eq!(s.used(), 12);
        for p in 0..12u64 {
            assert_eq!(s.read(p).unwrap(), page(p as u8));
        }
    }

    /// A formatted device behind a volatile write cache (`CrashDev`): the
    /// media (what survives a power loss) and the cache the SSD writes to.
    fn formatted_crash() -> (Arc<MemDev>, Arc<tiercache_io::CrashDev>) {
        let media = formatted_mem();
        let cache = Arc::new(tiercache_io::CrashDev::new(media.clone()));
        (media, cache)
    }

    #[test]
    fn a_rewrite_overwrites_only_a_slot_whose_map_is_not_committed() {
        use tiercache_io::CrashMode;
        let modes = [
            CrashMode::DropAll,
            CrashMode::KeepFirst(1),
            CrashMode::Torn { seed: 1 },
            CrashMode::Torn { seed: 2 },
            CrashMode::Torn { seed: 3 },
        ];
        for mode in modes {
            let (media, cache) = formatted_crash();
            let dev: Arc<dyn BlockDev> = cache.clone();
            let mut s = open(&dev, true);
            s.write(1, &page(1), true).unwrap();
            let first = s.get(1).unwrap().slot;
            let free = s.free_slots();
            // Not committed yet: the same slot, no slot taken.
            s.write(1, &page(2), true).unwrap();
            assert_eq!(s.get(1).unwrap().slot, first);
            assert_eq!((s.free_slots(), s.rewrites_in_place), (free, 1));
            // A clean copy is not overwritten by a dirty one in place.
            s.write(3, &page(3), false).unwrap();
            s.write(3, &page(4), true).unwrap();
            assert_eq!(s.rewrites_in_place, 1);
            s.commit().unwrap();
            // Committed: a rewrite must not touch the durable copy.
            s.write(1, &page(5), true).unwrap();
            assert_ne!(s.get(1).unwrap().slot, first, "{mode:?}");
            cache.crash(mode).unwrap();
            drop(s);
            let d: Arc<dyn BlockDev> = media.clone();
            let mut s = open(&d, true);
            assert_eq!(s.read(1).unwrap(), page(2), "{mode:?}");
            assert_eq!(s.read(3).unwrap(), page(4), "{mode:?}");
            assert_eq!(s.get(3).map(|e| e.dirty), Some(true));
        }
    }

    #[test]
    fn volatile_metadata_frees_slots_at_once_and_is_written_at_close() {
        let (media, cache) = formatted_crash();
        let dev: Arc<dyn BlockDev> = cache.clone();
        let mut s = open(&dev, true);
        s.write(7, &page(7), true).unwrap();
        s.commit().unwrap();
        s.set_volatile_meta();
        let free = s.free_slots();
        for v in 1..=20u8 {
            s.write(1, &page(v), true).unwrap();
            s.write(2, &page(v), true).unwrap();
            s.unmap(2).unwrap();
        }
        s.mark_clean(7).unwrap();
        assert!(!s.has_pending(), "no records, no slot waits for a commit");
        assert_eq!(s.free_slots(), free - 1);
        // A crash now: the store was open, so recovery must not trust its
        // table (the three-level cache drops it, `open`).
        let mut image = vec![0u8; dev.len() as usize];
        dev.read_at(&mut image, 0).unwrap();
        let snap: Arc<dyn BlockDev> = Arc::new(MemDev::from_vec("snap", image));
        let o = tiercache_store::open(MetaDev(snap), &backing()).unwrap();
        assert!(!o.report.clean_shutdown);
        // A clean close writes the whole table after the data.
        s.close(&backing()).unwrap();
        cache.crash(tiercache_io::CrashMode::DropAll).unwrap();
        let d: Arc<dyn BlockDev> = media.clone();
        let o = tiercache_store::open(MetaDev(Arc::clone(&d)), &backing()).unwrap();
        assert!(o.report.clean_shutdown);
        let mut s = Ssd::new(Role::RoSsd, "ro".into(), d, o.store, &o.table, true).unwrap();
        assert_eq!(s.used(), 2);
        assert_eq!(s.read(1).unwrap(), page(20));
        assert_eq!(s.read(7).unwrap(), page(7));
        assert_eq!(s.get(7).map(|e| e.dirty), Some(false));
    }

    #[test]
    fn a_missing_page_or_slot_is_an_error_not_a_panic() {
        let dev = formatted();
        let mut s = open(&dev, true);
        assert!(s.read(42).is_err());
        for p in 0..16 {
            s.write(p, &page(1), true).unwrap();
        }
        let e = s.write(99, &page(1), true).unwrap_err();
        assert!(e.0.contains("no free slot"), "{}", e.0);
    }

    /// A batch's page writes reach the device as one write per run of
    /// adjacent slots, a rewrite within the batch replaces the held copy,
    /// and a read or commit in the middle of the batch sees every held page
    /// (written first). After a power loss only committed pages come back,
    /// with their last committed bytes.
    #[test]
    fn a_batch_goes_out_as_runs_and_commits_only_written_bytes() {
        use tiercache_io::CrashMode;
        for mode in [CrashMode::DropAll, CrashMode::Torn { seed: 7 }] {
            let (media, cache) = formatted_crash();
            let dev: Arc<dyn BlockDev> = cache.clone();
            let mut s = open(&dev, true);
            for p in 0..4u64 {
                s.write(p, &page(p as u8), true).unwrap();
            }
            s.commit().unwrap();
            s.begin_batch();
            for p in 10..13u64 {
                s.write(p, &page(p as u8), true).unwrap(); // slots 4, 5, 6
            }
            s.write(10, &page(20), true).unwrap(); // held copy replaced
            s.write(1, &page(21), true).unwrap(); // slot 7: the same run
            assert_eq!(s.batch_device_writes, 0, "held");
            assert_eq!(
                s.read(11).unwrap(),
                page(11),
                "a read writes the held pages first"
            );
            assert_eq!((s.batch_device_writes, s.batched_page_writes), (1, 4));
            s.write(12, &page(22), true).unwrap(); // in place, held again
            s.write(13, &page(23), true).unwrap(); // slot 8: not adjacent to 6
            s.commit().unwrap(); // writes them before the records
            assert_eq!((s.batch_device_writes, s.batched_page_writes), (3, 6));
            s.write(2, &page(24), true).unwrap(); // slot 9, never committed
            s.end_batch().unwrap();
            assert!(!s.holding());
            assert_eq!(s.batch_device_writes, 4);
            s.write(3, &page(25), true).unwrap(); // not held: written at once
            assert_eq!(s.batch_device_writes, 4);
            cache.crash(mode).unwrap();
            drop(s);
            let d: Arc<dyn BlockDev> = media.clone();
            let mut s = open(&d, true);
            let want = [
                (0, 0u8),
                (1, 21),
                (2, 2),
                (3, 3),
                (10, 20),
                (11, 11),
                (12, 22),
                (13, 23),
            ];
            for (p, v) in want {
                assert_eq!(s.read(p).unwrap(), page(v), "{mode:?}: page {p}");
            }
            assert_eq!(s.used(), want.len());
        }
    }

    /// A failed batch write fails the batch: the held pages leave the
    /// table (their slots' bytes are undefined) and their slots are not
    /// reused before a commit.
    #[test]
    fn a_failed_batch_write_drops_the_held_pages() {
        use tiercache_io::{FaultRule, FaultyDev, OpKinds};
        let mem: Arc<dyn BlockDev> = formatted_mem();
        let faulty = Arc::new(FaultyDev::new(Arc::clone(&mem), 1));
        let dev: Arc<dyn BlockDev> = faulty.clone();
        let mut s = open(&dev, true);
        s.write(1, &page(1), true).unwrap();
        s.commit().unwrap();
        s.begin_batch();
        s.write(2, &page(2), true).unwrap();
        s.write(3, &page(3), true).unwrap();
        let free = s.free_slots();
        faulty.add_rule(FaultRule::always(OpKinds::WRITE)).unwrap();
        let e = s.end_batch().unwrap_err();
        assert!(e.0.contains("held pages"), "{}", e.0);
        assert_eq!((s.get(2), s.get(3)), (None, None));
        assert_eq!(s.read(1).unwrap(), page(1), "the committed page stays");
        assert_eq!(s.free_slots(), free, "their slots wait for a commit");
        assert_eq!(s.pending_free_slots(), 2);
    }
}
