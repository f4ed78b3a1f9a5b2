//! Formatting, opening (with recovery) and the live [`Store`]: group-committed
//! log appends and checkpoints.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::checkpoint::{self, CpHeader, HeaderStatus};
use crate::device::MetaDevice;
use crate::error::{Result, StoreError};
use crate::foreign::detect_foreign;
use crate::layout::{layout_reserving, Layout, BLOCK};
use crate::log::{self, LogEnd};
use crate::record::{LineMeta, Record, Slot};
use crate::superblock::{BackingIdentity, State, Superblock};
use crate::table::{SlotMap, SlotTable};

/// What `format` needs besides the device.
#[derive(Clone, Debug)]
pub struct FormatParams {
    /// Cache line size in bytes (power of two, at least 4 KiB).
    pub line_size: u32,
    /// Sub-block size in bytes (power of two, 512..=line size, at most 256 per line).
    pub sub_block_size: u32,
    /// Log region size; `None` for the default (checkpoint size clamped to 4..256 MiB).
    pub log_bytes: Option<u64>,
    /// Opaque policy configuration (JSON or TOML), at most 2 KiB.
    pub policy: String,
    /// The backing device this cache will front.
    pub backing: BackingIdentity,
}

/// Writes a new, empty store. Refuses a device holding a tiercache store,
/// a filesystem, a partition table, LUKS, LVM or swap unless `force`.
pub fn format<D: MetaDevice>(dev: &D, params: &FormatParams, force: bool) -> Result<Superblock> {
    format_reserving(dev, params, force, None)
}

/// [`format`] with the metadata regions made for a device of `max_size`
/// bytes, so that [`Store::resize`] can later grow the cache up to it
/// (`None`, or a size below the device's: the device's size).
pub fn format_reserving<D: MetaDevice>(
    dev: &D,
    params: &FormatParams,
    force: bool,
    max_size: Option<u64>,
) -> Result<Superblock> {
    let size = dev
        .len()
        .map_err(|e| StoreError::io("sizing the cache device", e))?;
    let layout = layout_reserving(
        size,
        params.line_size,
        params.sub_block_size,
        params.log_bytes,
        max_size.unwrap_or(size),
    )?;
    if !force {
        if let Some(found) = detect_foreign(dev)? {
            return Err(StoreError::Occupied { found });
        }
    }
    let sb = Superblock {
        generation: 1,
        uuid: uuid::Uuid::new_v4(),
        layout,
        policy: params.policy.clone(),
        backing: params.backing.clone(),
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        state: State::Clean,
        detached: false,
    };
    sb.encode()?; // validate sizes before touching the device
    let uuid = *sb.uuid.as_bytes();
    // Both regions get an empty checkpoint (epochs 0 and 1), so a healthy store
    // always has two valid checkpoints. The superblock goes last: a format
    // interrupted before it leaves no store that `open` would accept.
    checkpoint::write(dev, &layout, &uuid, 0, 0, 0, std::iter::empty())?;
    checkpoint::write(dev, &layout, &uuid, 1, 0, 0, std::iter::empty())?;
    dev.sync()
        .map_err(|e| StoreError::io("syncing the checkpoints", e))?;
    sb.write(dev)?;
    Ok(sb)
}

/// What recovery found and how long it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Epoch of the checkpoint recovery started from.
    pub checkpoint_epoch: u64,
    /// Log records replayed on top of it.
    pub records_replayed: u64,
    /// Metadata bytes read (checkpoint header and body, log blocks).
    pub bytes_read: u64,
    /// Wall time of loading and replaying.
    pub duration: Duration,
    /// The log ended in a damaged block or record (a commit interrupted by the crash).
    pub torn_tail: bool,
    /// Why replay stopped.
    pub log_end: LogEnd,
    /// The store had been closed cleanly.
    pub clean_shutdown: bool,
    /// The other checkpoint region was damaged or newer but unreadable; says why.
    pub fallback: Option<String>,
    /// Why the cache started cold (its cached data dropped at open): it was
    /// detached, or the backing device was modified while it was stopped.
    pub cold_start: Option<String>,
}

/// Why a detached cache starts cold (logged at open, shown by `stats`).
pub const COLD_DETACHED: &str = "the cache was detached";

/// Cached lines [`open_verified`] compares with the backing device after a
/// clean shutdown (spread evenly over the mapped slots).
pub const VERIFY_LINES: usize = 64;
/// Bytes of cached data [`open_verified`] compares at most.
pub const VERIFY_BYTES: u64 = 8 << 20;

impl std::fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "checkpoint epoch {} + {} log records, {} bytes read in {:.1?}; log end: {}",
            self.checkpoint_epoch,
            self.records_replayed,
            self.bytes_read,
            self.duration,
            match &self.log_end {
                LogEnd::Clean => "clean".to_string(),
                LogEnd::RegionEnd => "log region full".to_string(),
                LogEnd::Torn(w) => format!("torn final commit ({w})"),
                LogEnd::Invalid(w) => format!("invalid record ({w})"),
            }
        )?;
        if let Some(fb) = &self.fallback {
            write!(f, "; fell back: {fb}")?;
        }
        if let Some(why) = &self.cold_start {
            write!(f, "; started cold: {why}")?;
        }
        Ok(())
    }
}

/// A store whose recovery has run, and the slot table it reconstructed.
pub struct Opened<D: MetaDevice> {
    /// The live store, ready for appends.
    pub store: Store<D>,
    /// The recovered table, one entry per slot.
    pub table: SlotTable,
    /// What recovery did.
    pub report: RecoveryReport,
}

/// Result of a read-only recovery (shared by `open` and `check`).
pub(crate) struct Recovered {
    pub table: SlotTable,
    pub report: RecoveryReport,
    pub header: CpHeader,
    pub log_blocks_seen: u64,
    pub next_seq: u64,
}

/// Loads the newest valid checkpoint and replays its epoch's log; never writes.
pub(crate) fn recover(dev: &impl MetaDevice, sb: &Superblock) -> Result<Recovered> {
    let t0 = Instant::now();
    let layout = &sb.layout;
    let uuid = *sb.uuid.as_bytes();
    let headers = [
        checkpoint::read_header(dev, layout, &uuid, 0)?,
        checkpoint::read_header(dev, layout, &uuid, 1)?,
    ];
    let mut regions = [String::new(), String::new()];
    let mut cands: Vec<(usize, CpHeader)> = Vec::new();
    for (i, h) in headers.iter().enumerate() {
        match h {
            HeaderStatus::Absent => regions[i] = "absent".into(),
            HeaderStatus::Damaged(why) => regions[i] = format!("damaged: {why}"),
            HeaderStatus::Present(h) => {
                regions[i] = format!("epoch {}, {} entries", h.epoch, h.entries);
                cands.push((i, *h));
            }
        }
    }
    cands.sort_by_key(|c| std::cmp::Reverse(c.1.epoch));
    let mut bytes_read = 2 * 52;
    let mut chosen = None;
    let mut fallback: Option<String> = None;
    let mut table = SlotTable::new(layout.slots, layout.sub_blocks());
    for (region, h) in &cands {
        bytes_read += h.body_len;
        match checkpoint::read_body(dev, layout, *region, h, &mut table)? {
            Ok(()) => {
                chosen = Some((*region, *h));
                break;
            }
            Err(why) => {
                table.clear();
                regions[*region] = format!("epoch {} damaged: {why}", h.epoch);
                fallback = Some(format!(
                    "checkpoint region {} (epoch {}) unusable: {why}",
                    region_name(*region),
                    h.epoch
                ));
            }
        }
    }
    let Some((region, header)) = chosen else {
        return Err(StoreError::Corrupt(format!(
            "no valid checkpoint (region A: {}; region B: {}); the cache cannot be recovered, reformat it with --force (dirty data not yet on the backing device is lost)",
            regions[0], regions[1]
        )));
    };
    let other = 1 - region;
    if let HeaderStatus::Damaged(why) = &headers[other] {
        fallback = Some(format!(
            "checkpoint region {} unusable: {why}",
            region_name(other)
        ));
    }
    // A region without checkpoint magic is either never written (a young
    // store) or a newer checkpoint whose header was wiped (zeroed block,
    // overwritten): the same check as for a damaged one tells them apart.
    let other_absent = matches!(headers[other], HeaderStatus::Absent);
    if fallback.is_some() || other_absent {
        // Falling back is safe only if the lost checkpoint never became the
        // base of a log: otherwise slots may since have been reused and the
        // older table would point at other lines' data.
        if let Some(e) = log::newer_epoch_present(dev, layout, &uuid, header.epoch)? {
            return Err(StoreError::Corrupt(format!(
                "the newest checkpoint is damaged but the log holds records of its epoch {e} (recovery could only go back to epoch {}, whose table may point at reused slots); the cache contents cannot be trusted, reformat with --force (dirty data not yet on the backing device is lost)",
                header.epoch
            )));
        }
        bytes_read += layout.log_blocks * BLOCK;
    }
    let replay = log::replay(
        dev,
        layout,
        &uuid,
        header.epoch,
        header.log_start,
        header.log_first_seq,
        &mut table,
    )?;
    if let Some((line, a, b)) = checkpoint::duplicate_line(&table) {
        return Err(StoreError::Corrupt(format!(
            "after replay line {line} is mapped by both slot {a} and slot {b} (the engine must Unmap a line's old slot before mapping it elsewhere)"
        )));
    }
    let report = RecoveryReport {
        checkpoint_epoch: header.epoch,
        records_replayed: replay.records,
        bytes_read: bytes_read + replay.bytes_read,
        duration: t0.elapsed(),
        torn_tail: !matches!(replay.end, LogEnd::Clean | LogEnd::RegionEnd),
        log_end: replay.end.clone(),
        clean_shutdown: sb.state == State::Clean,
        fallback,
        cold_start: None,
    };
    Ok(Recovered {
        table,
        report,
        header,
        log_blocks_seen: replay.blocks,
        next_seq: replay.next_seq,
    })
}

fn region_name(i: usize) -> &'static str {
    if i == 0 {
        "A"
    } else {
        "B"
    }
}

/// Opens a formatted cache device: validates the superblock and the backing
/// identity, recovers the slot table, and makes the store ready for appends.
///
/// After an unclean shutdown it writes a checkpoint of the recovered table
/// (a new epoch), so that a torn tail of the old log can never be mistaken
/// for a continuation of new commits.
///
/// The cache starts cold (see [`Opened::start_cold`]) when it was detached,
/// or, after a clean shutdown, when the backing device's contents changed
/// ([`BackingIdentity::content_differences`]); with dirty data that is
/// refused. [`open_verified`] also compares a sample of cached lines.
pub fn open<D: MetaDevice>(dev: D, expected_backing: &BackingIdentity) -> Result<Opened<D>> {
    open_inner(dev, expected_backing, None)
}

/// [`open`], and after a clean shutdown also compares up to [`VERIFY_LINES`]
/// cached lines ([`VERIFY_BYTES`] at most) with `backing`: the clean
/// sub-blocks of lines spread evenly over the mapped slots. A difference
/// means the backing device was modified while the cache was stopped.
pub fn open_verified<D: MetaDevice>(
    dev: D,
    expected_backing: &BackingIdentity,
    backing: &dyn MetaDevice,
) -> Result<Opened<D>> {
    open_inner(dev, expected_backing, Some(backing))
}

fn open_inner<D: MetaDevice>(
    dev: D,
    expected_backing: &BackingIdentity,
    backing: Option<&dyn MetaDevice>,
) -> Result<Opened<D>> {
    let mut sb = Superblock::read(&dev)?.newest;
    let size = dev
        .len()
        .map_err(|e| StoreError::io("sizing the cache device", e))?;
    let end = sb.layout.data_end();
    if size < end {
        return Err(StoreError::Corrupt(format!(
            "the cache device has {size} bytes but its layout needs {end}: it shrank or is not the device that was formatted"
        )));
    }
    if let Some(diff) = sb.backing.device_differences(expected_backing) {
        return Err(StoreError::BackingMismatch(diff));
    }
    let clean = sb.state == State::Clean;
    let mut cold = match (clean, sb.detached) {
        (true, true) => Some(COLD_DETACHED.to_string()),
        (true, false) => sb.backing.content_differences(expected_backing),
        (false, _) => None,
    };
    let rec = recover(&dev, &sb)?;
    if clean && cold.is_none() {
        if let Some(b) = backing {
            cold = verify_sample(&dev, &sb.layout, &rec.table, b)?;
        }
    }
    let uuid = *sb.uuid.as_bytes();
    let layout = sb.layout;
    let store = Store {
        dev,
        layout,
        uuid,
        epoch: rec.header.epoch,
        log_start: rec.header.log_start,
        log_used: rec.log_blocks_seen,
        next_seq: rec.next_seq,
        pending: Vec::new(),
        mapped: Vec::new(),
        failed: None,
        sb: sb.clone(),
    };
    let clean_continuation = clean
        && cold.is_none()
        && rec.report.records_replayed == 0
        && rec.report.fallback.is_none()
        && rec.report.log_end == LogEnd::Clean;
    let mut opened = Opened {
        store,
        table: rec.table,
        report: rec.report,
    };
    if let Some(why) = cold {
        // Before the superblock says open: a crash in between opens cold again.
        opened.start_cold(why)?;
    } else if clean_continuation {
        opened.store.mapped = mapped_bits(&opened.table);
    } else {
        let table = table_entries(&opened.table);
        opened.store.checkpoint(table)?;
    }
    sb.state = State::Open;
    sb.detached = false;
    sb.generation += 1;
    sb.backing = expected_backing.clone();
    sb.write(&opened.store.dev)?;
    opened.store.sb = sb;
    Ok(opened)
}

impl<D: MetaDevice> Opened<D> {
    /// Drops every cached line and checkpoints the empty table, so this and
    /// every later open start cold; `why` goes into the report. Refused
    /// (`BackingModified`, saying what to do) while a line is dirty: that
    /// data is on this cache alone.
    pub fn start_cold(&mut self, why: String) -> Result<()> {
        let dirty = self
            .table
            .iter()
            .filter(|(_, m)| !m.dirty.is_empty())
            .count();
        if dirty > 0 {
            return Err(StoreError::BackingModified(format!(
                "{why}; the cache holds {dirty} lines of dirty data the backing device lacks, so it cannot start cold (serve it with its original backing device contents to write them back, or reformat the cache with --force to drop them)"
            )));
        }
        self.table.clear();
        self.store.checkpoint(std::iter::empty())?;
        self.report.cold_start = Some(why);
        Ok(())
    }
}

/// Compares the clean sub-blocks of up to [`VERIFY_LINES`] mapped lines
/// (spread evenly over the table, [`VERIFY_BYTES`] at most) with the backing
/// device; says which line differs, if one does.
fn verify_sample(
    dev: &impl MetaDevice,
    layout: &Layout,
    table: &SlotTable,
    backing: &dyn MetaDevice,
) -> Result<Option<String>> {
    let clean = |m: &LineMeta| !m.valid.minus(m.dirty).is_empty();
    let candidates = table.iter().filter(|(_, m)| clean(m)).count();
    if candidates == 0 {
        return Ok(None);
    }
    let line = layout.line_size as u64;
    let lines = VERIFY_LINES.min((VERIFY_BYTES / line).max(1) as usize);
    let stride = candidates.div_ceil(lines);
    let bsize = backing
        .len()
        .map_err(|e| StoreError::io("sizing the backing device", e))?;
    let sub = layout.sub_block_size as u64;
    let (mut a, mut b) = (vec![0u8; line as usize], vec![0u8; line as usize]);
    let picked = table
        .iter()
        .filter(|(_, m)| clean(m))
        .map(|(s, m)| (s as u64, m))
        .step_by(stride);
    for (slot, m) in picked {
        let at = m.line * line;
        let n = bsize.saturating_sub(at).min(line) as usize;
        if n == 0 {
            continue;
        }
        let off = layout
            .slot_offset(slot as Slot)
            .ok_or_else(|| StoreError::Corrupt(format!("slot {slot} is outside the layout")))?;
        dev.read_at(&mut a[..n], off)
            .map_err(|e| StoreError::io("reading cached data to verify it", e))?;
        backing
            .read_at(&mut b[..n], at)
            .map_err(|e| StoreError::io("reading the backing device to verify the cache", e))?;
        let differs = (0..layout.sub_blocks()).any(|i| {
            let (lo, hi) = (
                (i as u64 * sub) as usize,
                (((i as u64 + 1) * sub) as usize).min(n),
            );
            m.valid.get(i) && !m.dirty.get(i) && lo < hi && a[lo..hi] != b[lo..hi]
        });
        if differs {
            return Ok(Some(format!(
                "the backing device was modified while the cache was stopped: cached line {} (bytes {at}..{}) differs from it",
                m.line,
                at + n as u64
            )));
        }
    }
    Ok(None)
}

/// The mapped slots of a table as `(slot, meta)` pairs, for [`Store::checkpoint`].
pub fn table_entries<T: SlotMap + ?Sized>(
    table: &T,
) -> impl Iterator<Item = (Slot, LineMeta)> + Clone + '_ {
    (0..table.slot_count() as Slot).filter_map(move |s| table.get_slot(s).map(|m| (s, m)))
}

fn mapped_bits(table: &SlotTable) -> Vec<u64> {
    let mut bits = vec![0u64; table.len().div_ceil(64)];
    for (s, _) in table.iter() {
        bits[s as usize / 64] |= 1 << (s % 64);
    }
    bits
}

/// What a commit wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Records made durable.
    pub records: u64,
    /// 4 KiB log blocks written.
    pub blocks: u64,
    /// Device syncs issued (1 for an empty commit, else 2).
    pub syncs: u32,
}

/// Log space in 4 KiB blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogUsage {
    /// Blocks written in the current epoch.
    pub used: u64,
    /// Blocks the buffered records would take.
    pub pending: u64,
    /// Blocks in the log region.
    pub capacity: u64,
}

/// An open cache metadata store. Not thread-safe by itself: the engine
/// serialises appends, commits and checkpoints.
pub struct Store<D: MetaDevice> {
    dev: D,
    sb: Superblock,
    layout: Layout,
    uuid: [u8; 16],
    epoch: u64,
    log_start: u64,
    log_used: u64,
    next_seq: u64,
    pending: Vec<Record>,
    /// Mapped slots as the engine sees them (durable and buffered records).
    mapped: Vec<u64>,
    failed: Option<String>,
}

impl<D: MetaDevice> Store<D> {
    /// The superblock as last written.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }
    /// Region placement and geometry.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// The current checkpoint epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    /// Sequence number the next committed record gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq + self.pending.len() as u64
    }
    /// Records buffered since the last commit.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
    /// Log space used, buffered and available.
    pub fn log_usage(&self) -> LogUsage {
        LogUsage {
            used: self.log_used,
            pending: log::blocks_needed(&self.pending, self.layout.bitmap_bytes()),
            capacity: self.layout.log_blocks,
        }
    }
    /// Whether the log is two-thirds full (FlashTier's checkpoint trigger):
    /// the engine should checkpoint soon, before commits fail with `LogFull`.
    pub fn wants_checkpoint(&self) -> bool {
        let u = self.log_usage();
        3 * (u.used + u.pending) >= 2 * u.capacity
    }
    /// The underlying device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    fn guard(&self) -> Result<()> {
        match &self.failed {
            Some(why) => Err(StoreError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    fn fail<T>(&mut self, e: StoreError) -> Result<T> {
        if matches!(e, StoreError::Io { .. }) {
            self.failed = Some(e.to_string());
        }
        Err(e)
    }

    fn is_mapped(&self, slot: Slot) -> bool {
        self.mapped
            .get(slot as usize / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    /// Buffers a record (nothing is written until [`Store::commit`]). Refuses
    /// records outside the geometry and bitmap records or Unmaps of unmapped slots.
    pub fn append(&mut self, rec: Record) -> Result<()> {
        self.guard()?;
        rec.check(
            self.layout.slots,
            self.layout.sub_blocks(),
            self.is_mapped(rec.slot()),
        )
        .map_err(StoreError::InvalidRecord)?;
        let s = rec.slot();
        match rec {
            Record::Map { .. } => self.mapped[s as usize / 64] |= 1 << (s % 64),
            Record::Unmap { .. } => self.mapped[s as usize / 64] &= !(1 << (s % 64)),
            _ => {}
        }
        self.pending.push(rec);
        Ok(())
    }

    /// Makes every buffered record durable (group commit): sync the device
    /// (so cache data written before the records is durable first), write the
    /// records as whole 4 KiB blocks, sync again. The records form one atomic
    /// group: after a crash either all or none of them are recovered. An empty
    /// commit only syncs the device (the data flush an NBD FLUSH needs).
    /// On `LogFull` the records stay buffered: write a checkpoint.
    pub fn commit(&mut self) -> Result<CommitStats> {
        self.guard()?;
        if self.pending.is_empty() {
            if let Err(e) = self.dev.sync() {
                return self.fail(StoreError::io("syncing the cache device", e));
            }
            return Ok(CommitStats {
                syncs: 1,
                ..CommitStats::default()
            });
        }
        let bm = self.layout.bitmap_bytes();
        let needed = log::blocks_needed(&self.pending, bm);
        let free = self.layout.log_blocks - self.log_used;
        if needed > free {
            return Err(StoreError::LogFull {
                needed,
                free,
                capacity: self.layout.log_blocks,
            });
        }
        self.ensure_open()?;
        let blocks = log::encode_blocks(&self.uuid, self.epoch, self.next_seq, &self.pending, bm);
        let pos = (self.log_start + self.log_used) % self.layout.log_blocks;
        if let Err(e) = self.dev.sync() {
            return self.fail(StoreError::io("syncing cache data before a log commit", e));
        }
        if let Err(e) = log::write_blocks(&self.dev, &self.layout, pos, &blocks) {
            return self.fail(StoreError::io("writing log blocks", e));
        }
        if let Err(e) = self.dev.sync() {
            return self.fail(StoreError::io("syncing log blocks", e));
        }
        let records = self.pending.len() as u64;
        self.log_used += needed;
        self.next_seq += records;
        self.pending.clear();
        Ok(CommitStats {
            records,
            blocks: needed,
            syncs: 2,
        })
    }

    /// Writes the whole slot table (the engine's current state, which must
    /// include the effect of every buffered record) as a checkpoint of a new
    /// epoch, syncs, and empties the log. Buffered records are subsumed and
    /// dropped. Cost: two syncs plus 4 KiB + entries x (13 + 2 x bitmap bytes).
    pub fn checkpoint<I>(&mut self, table: I) -> Result<()>
    where
        I: IntoIterator<Item = (Slot, LineMeta)>,
        I::IntoIter: Clone,
    {
        self.checkpoint_hooked(table, &|| {})
    }

    /// [`Store::checkpoint`], calling `after_write` after each of its writes and syncs.
    fn checkpoint_hooked<I>(&mut self, table: I, after_write: &dyn Fn()) -> Result<()>
    where
        I: IntoIterator<Item = (Slot, LineMeta)>,
        I::IntoIter: Clone,
    {
        self.guard()?;
        let epoch = self.epoch + 1;
        let log_start = (self.log_start + self.log_used) % self.layout.log_blocks;
        let written = {
            let dev = Counted {
                dev: &self.dev,
                after_write,
            };
            let (layout, uuid, seq) = (&self.layout, &self.uuid, self.next_seq);
            (|| -> Result<Vec<u64>> {
                dev.sync()
                    .map_err(|e| StoreError::io("syncing cache data before a checkpoint", e))?;
                let m = checkpoint::write(&dev, layout, uuid, epoch, log_start, seq, table)?;
                dev.sync()
                    .map_err(|e| StoreError::io("syncing a checkpoint", e))?;
                Ok(m)
            })()
        };
        let mapped = match written {
            Ok(m) => m,
            Err(e) => return self.fail(e),
        };
        self.epoch = epoch;
        self.log_start = log_start;
        self.log_used = 0;
        self.pending.clear();
        self.mapped = mapped;
        Ok(())
    }

    /// Clean shutdown: checkpoints `table`, records the backing identity as it
    /// is now (probe it after the last writeback and backing flush, so the
    /// next open can tell whether the backing device was modified while the
    /// cache was detached) and marks the superblock clean. Returns the device.
    pub fn close<I>(mut self, table: I, backing_now: &BackingIdentity) -> Result<D>
    where
        I: IntoIterator<Item = (Slot, LineMeta)>,
        I::IntoIter: Clone,
    {
        self.mark_clean(table, backing_now)?;
        Ok(self.dev)
    }

    /// Clean shutdown without giving the store up: checkpoints `table` (which
    /// must describe every cache write that completed, see the crate doc's
    /// rule 3b), records the backing identity as it is now and marks the
    /// superblock clean. The next commit that carries records marks it open
    /// again first, so the superblock says clean only while the newest
    /// checkpoint is the whole truth.
    pub fn mark_clean<I>(&mut self, table: I, backing_now: &BackingIdentity) -> Result<()>
    where
        I: IntoIterator<Item = (Slot, LineMeta)>,
        I::IntoIter: Clone,
    {
        self.checkpoint(table)?;
        self.rewrite_superblock(|sb| {
            sb.state = State::Clean;
            sb.detached = false;
            sb.backing = backing_now.clone();
        })
    }

    /// Detach: the backing device holds every block (no line of `table` may
    /// be dirty). Checkpoints an empty table first (from then on every open
    /// starts cold, after a crash too), then marks the superblock clean and
    /// detached with the backing identity as it is now.
    pub fn detach(
        &mut self,
        table: impl IntoIterator<Item = (Slot, LineMeta)>,
        backing_now: &BackingIdentity,
    ) -> Result<()> {
        let dirty = table
            .into_iter()
            .filter(|(_, m)| !m.dirty.is_empty())
            .count();
        if dirty > 0 {
            return Err(StoreError::InvalidTable(format!(
                "{dirty} lines are dirty: only a cache whose lines were all written back can detach"
            )));
        }
        self.checkpoint(std::iter::empty())?;
        self.rewrite_superblock(|sb| {
            sb.state = State::Clean;
            sb.detached = true;
            sb.backing = backing_now.clone();
        })
    }

    /// Resize the data region to `layout` (from [`Layout::resized`]), with
    /// `table` the engine's current state (every buffered record's effect
    /// included). Growing: the device must already hold `layout.dev_size`
    /// bytes; the superblock with the new layout is written (both copies,
    /// synced) and the new slots are usable on return. Shrinking: no slot at
    /// or past the new end may be mapped in `table`; a checkpoint of `table`
    /// comes first (so no log record names a slot past the new end), then
    /// the superblock. A `table` that holds fewer lines than the store maps
    /// (a cache that drops lines at its new size) is checkpointed first too. The caller may cut the device after it returns.
    /// Either way a crash recovers the old layout or the new one, each with
    /// the table of every commit that returned. `after_write` runs after
    /// every metadata write and sync of the resize (the crash tests stop there).
    pub fn resize<I>(&mut self, layout: Layout, table: I, after_write: &dyn Fn()) -> Result<()>
    where
        I: IntoIterator<Item = (Slot, LineMeta)>,
        I::IntoIter: Clone,
    {
        self.guard()?;
        let old = self.layout;
        let same = Layout {
            dev_size: old.dev_size,
            slots: old.slots,
            ..layout
        };
        if same != old {
            return Err(StoreError::InvalidParams(
                "a resize changes only the device size and the slots".into(),
            ));
        }
        layout.validate()?;
        let table = table.into_iter();
        if let Some((s, _)) = table.clone().find(|(s, _)| *s >= layout.slots) {
            return Err(StoreError::InvalidTable(format!(
                "slot {s} is still mapped past the new end ({} slots)",
                layout.slots
            )));
        }
        let len = self
            .dev
            .len()
            .map_err(|e| StoreError::io("sizing the cache device", e))?;
        if len < layout.data_end() {
            return Err(StoreError::InvalidParams(format!(
                "the cache device has {len} bytes, the new size needs {}",
                layout.data_end()
            )));
        }
        // A checkpoint first when the table loses slots: past the new end,
        // or (a cache that starts again empty at its new size) all of them.
        let mapped: u64 = self.mapped.iter().map(|w| w.count_ones() as u64).sum();
        if layout.slots < old.slots || (table.clone().count() as u64) < mapped {
            self.checkpoint_hooked(table, after_write)?;
        }
        let mut sb = self.sb.clone();
        sb.layout = layout;
        sb.generation += 1;
        let written = sb.write(&Counted {
            dev: &self.dev,
            after_write,
        });
        if let Err(e) = written {
            return self.fail(e);
        }
        self.sb = sb;
        self.layout = layout;
        self.mapped.resize((layout.slots as usize).div_ceil(64), 0);
        if let Some(w) = self.mapped.last_mut() {
            if !layout.slots.is_multiple_of(64) {
                *w &= (1u64 << (layout.slots % 64)) - 1;
            }
        }
        Ok(())
    }

    /// Record a new policy blob in the superblock (`tiercache set`), durably
    /// (both copies written and synced) before returning.
    pub fn set_policy(&mut self, policy: String) -> Result<()> {
        self.rewrite_superblock(|sb| sb.policy = policy)
    }

    /// Write a changed superblock (next generation) durably; `self.sb` changes only once it is.
    fn rewrite_superblock(&mut self, change: impl FnOnce(&mut Superblock)) -> Result<()> {
        let mut sb = self.sb.clone();
        change(&mut sb);
        sb.generation += 1;
        if let Err(e) = sb.write(&self.dev) {
            return self.fail(e);
        }
        self.sb = sb;
        Ok(())
    }

    /// Why the store is fail-stop (an I/O error failed a write or sync of
    /// its metadata; every later call fails until the device is reopened),
    /// or `None` while it works.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Whether the superblock says the store was shut down cleanly (false
    /// from [`open`] until [`Store::mark_clean`]).
    pub fn is_marked_clean(&self) -> bool {
        self.sb.state == State::Clean
    }

    /// Durably marks the superblock open (unclean) before records follow a clean mark.
    fn ensure_open(&mut self) -> Result<()> {
        if self.sb.state == State::Open {
            return Ok(());
        }
        self.rewrite_superblock(|sb| {
            sb.state = State::Open;
            sb.detached = false;
        })
    }
}

/// A device that calls a hook after every write and sync (a resize's crash points).
struct Counted<'a, D: MetaDevice> {
    dev: &'a D,
    after_write: &'a dyn Fn(),
}

impl<D: MetaDevice> MetaDevice for Counted<'_, D> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.dev.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let r = self.dev.write_at(buf, offset);
        (self.after_write)();
        r
    }
    fn sync(&self) -> std::io::Result<()> {
        let r = self.dev.sync();
        (self.after_write)();
        r
    }
    fn len(&self) -> std::io::Result<u64> {
        self.dev.len()
    }
}

/// The recovery rule after an unclean shutdown of a cache that is not
/// write-back (write-through, write-around, ...): every clean copy is dropped,
/// since a write that reached the backing device may not have reached its
/// cached copy (or the other way round) before the crash, and serving the old
/// copy first and the backing device's data after its eviction would make an
/// unflushed write vanish and then come back. The backing device holds every
/// acknowledged write in these modes. Dirty sub-blocks (left by an earlier
/// write-back period) are kept. Returns the number of slots changed.
pub fn drop_clean_copies<T: SlotMap + ?Sized>(table: &mut T) -> u64 {
    let mut n = 0;
    for s in 0..table.slot_count() as Slot {
        let Some(mut m) = table.get_slot(s) else {
            continue;
        };
        if m.valid.minus(m.dirty).is_empty() {
            continue;
        }
        n += 1;
        if m.dirty.is_empty() {
            table.set_slot(s, None);
        } else {
            m.valid = m.dirty;
            table.set_slot(s, Some(m));
        }
    }
    n
}

/// The write-back recovery rule after an unclean shutdown (crate doc, rule
/// 3b): every valid sub-block becomes dirty, so that cleaning writes it back.
/// Returns the number of slots that gained dirty sub-blocks.
pub fn dirty_all_valid<T: SlotMap + ?Sized>(table: &mut T) -> u64 {
    let mut n = 0;
    for s in 0..table.slot_count() as Slot {
        let Some(mut m) = table.get_slot(s) else {
            continue;
        };
        if !m.valid.minus(m.dirty).is_empty() {
            m.dirty = m.valid;
            table.set_slot(s, Some(m));
            n += 1;
        }
    }
    n
}
