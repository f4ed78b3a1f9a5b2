//! The persistent mapping: two alternating checkpoint regions and the
//! migration log, on the fast tier (offsets in [`crate::superblock`]).
//!
//! - A **checkpoint** is a 64-byte header (magic, sequence number, payload
//!   length and CRC32C, header CRC32C) followed by
//!   [`MappingTable::checkpoint`]. Checkpoint `n` goes to region `n % 2`, so
//!   a torn checkpoint leaves the previous one intact.
//! - The **log** holds the records of [`tiercache_oodt_policy::migration`], one
//!   per 64-byte slot: the epoch (the sequence number of the checkpoint it
//!   follows), the 39-byte record, padding and a CRC32C of the slot. Every
//!   append is written and flushed before it returns (the migration order
//!   needs each record durable before the next step). A checkpoint starts a
//!   new epoch at slot 0, so older records never replay on a newer table.
//!
//! Checkpoints are taken only between migrations (none in flight), which is
//! what [`tiercache_oodt_policy::migration::recover`] expects.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tiercache_io::BlockDev;
use tiercache_oodt_policy::migration::{self, LogRecord, RECORD_BYTES};
use tiercache_oodt_policy::{Loc, MappingTable};

use crate::superblock::Layout;

/// Bytes of a checkpoint region's header (part of the layout).
pub use crate::superblock::CHECKPOINT_HEADER;
/// Bytes of one log slot.
pub const LOG_SLOT: usize = 64;
const CHECKPOINT_MAGIC: &[u8; 8] = b"TVCKPT01";

/// What recovery found and did when the volume was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Sequence number of the checkpoint recovery started from.
    pub checkpoint_seq: u64,
    /// Valid log records replayed after it.
    pub log_records: usize,
    /// Migrations in the log whose switch was durable (mapping on the destination).
    pub completed: usize,
    /// Of those, the ones interrupted after the switch (no `Done`): recovery
    /// finished them (trimmed the source).
    pub completed_after_switch: usize,
    /// Migrations interrupted before their switch: rolled back (mapping on the source).
    pub rolled_back: usize,
    /// Slots trimmed because no block maps to them any more.
    pub trimmed: usize,
    /// Time to read and replay the metadata.
    pub duration: Duration,
}

/// The mapping rebuilt by [`Journal::open`], with the slots to trim.
pub struct Recovered {
    /// The mapping after replay.
    pub table: MappingTable,
    /// Slots that may hold data no block maps to.
    pub trim: Vec<Loc>,
    /// What recovery found.
    pub report: RecoveryReport,
}

/// Writer of checkpoints and log records (one at a time: the migration
/// worker, or open and shutdown).
pub struct Journal {
    dev: Arc<dyn BlockDev>,
    layout: Layout,
    /// Sequence number of the newest checkpoint, and epoch of the log.
    seq: u64,
    next_slot: u64,
}

fn corrupt(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn encode_slot(epoch: u64, r: &LogRecord) -> [u8; LOG_SLOT] {
    let mut b = [0u8; LOG_SLOT];
    b[..8].copy_from_slice(&epoch.to_le_bytes());
    b[8..8 + RECORD_BYTES].copy_from_slice(&r.encode());
    let crc = crc32c::crc32c(&b[..LOG_SLOT - 4]);
    b[LOG_SLOT - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The record in a slot if it is intact and of `epoch`.
fn decode_slot(b: &[u8], epoch: u64) -> Option<&[u8]> {
    if b.len() < LOG_SLOT
        || crc32c::crc32c(&b[..LOG_SLOT - 4]).to_le_bytes() != b[LOG_SLOT - 4..LOG_SLOT]
        || b[..8] != epoch.to_le_bytes()
    {
        return None;
    }
    Some(&b[8..8 + RECORD_BYTES])
}

/// The epoch of a slot whose checksum is intact.
fn slot_epoch(b: &[u8]) -> Option<u64> {
    if b.len() < LOG_SLOT
        || crc32c::crc32c(&b[..LOG_SLOT - 4]).to_le_bytes() != b[LOG_SLOT - 4..LOG_SLOT]
    {
        return None;
    }
    Some(u64::from_le_bytes(b[..8].try_into().expect("8")))
}

impl Journal {
    /// Initialize the metadata of a new volume: checkpoint 1 of `table` in
    /// region 1, region 0 and the log zeroed (so nothing of an earlier volume
    /// on the device can ever replay).
    pub fn format(dev: Arc<dyn BlockDev>, layout: Layout, table: &MappingTable) -> io::Result<()> {
        // A region whose header is zeros holds no checkpoint.
        dev.write_at(&[0u8; CHECKPOINT_HEADER], layout.checkpoint_offsets[0])?;
        dev.write_at(&vec![0u8; layout.log_bytes as usize], layout.log_offset)?;
        let mut j = Journal {
            dev,
            layout,
            seq: 0,
            next_slot: 0,
        };
        j.checkpoint(table)
    }

    /// Recover the mapping: the newest intact checkpoint, then its epoch's
    /// log up to the first torn or damaged slot, through
    /// [`migration::recover`]. The caller trims [`Recovered::trim`], flushes
    /// the tiers and takes a checkpoint (a new epoch).
    pub fn open(dev: Arc<dyn BlockDev>, layout: Layout) -> io::Result<(Journal, Recovered)> {
        let started = Instant::now();
        // Headers first; the newer intact region is read, in chunks, and the
        // older one only if the newer is torn.
        let mut heads = Vec::new();
        let mut problems = Vec::new();
        for (i, &off) in layout.checkpoint_offsets.iter().enumerate() {
            let mut h = [0u8; CHECKPOINT_HEADER];
            dev.read_at(&mut h, off)?;
            match parse_header(&h, layout.checkpoint_bytes) {
                Ok(p) => heads.push((p, i, off)),
                Err(e) => problems.push(format!("region {i}: {e}")),
            }
        }
        heads.sort_by_key(|(p, _, _)| std::cmp::Reverse(p.seq));
        let mut best: Option<(u64, MappingTable)> = None;
        for (p, i, off) in heads {
            match read_table(dev.as_ref(), off, &p)? {
                Ok(t) => {
                    best = Some((p.seq, t));
                    break;
                }
                Err(Region::Torn(e)) => problems.push(format!("region {i}: {e}")),
                // Intact bytes the table refuses: the older region must not
                // be used instead (its slots may have been reused since).
                Err(Region::Damaged(e)) => return Err(corrupt(e)),
            }
        }
        let (seq, table) = best.ok_or_else(|| {
            corrupt(format!(
                "no intact mapping checkpoint ({})",
                problems.join("; ")
            ))
        })?;
        let mut log = vec![0u8; layout.log_bytes as usize];
        dev.read_at(&mut log, layout.log_offset)?;
        // A log slot of a later epoch proves a newer checkpoint was written
        // (records follow their checkpoint's flush): that checkpoint is
        // damaged, and the older one would map blocks to slots reused since.
        if let Some(e) = log
            .chunks(LOG_SLOT)
            .filter_map(slot_epoch)
            .filter(|&e| e > seq)
            .max()
        {
            return Err(corrupt(format!(
                "the newest mapping checkpoint is damaged: the migration log holds records of epoch {e}, after checkpoint {seq} ({})",
                problems.join("; ")
            )));
        }
        let mut records = Vec::new();
        let slots: Vec<&[u8]> = log.chunks(LOG_SLOT).collect();
        for (i, slot) in slots.iter().enumerate() {
            match decode_slot(slot, seq) {
                Some(r) => records.extend_from_slice(r),
                None => {
                    // Only the last append can be torn (each is flushed
                    // before the next): an intact record of this epoch after
                    // it means media damage, and replaying up to here would
                    // lose the migrations logged after it.
                    if let Some(j) = slots[i + 1..]
                        .iter()
                        .position(|s| decode_slot(s, seq).is_some())
                    {
                        return Err(corrupt(format!(
                            "migration log damaged at slot {i}: slot {} after it holds a record of the same epoch {seq}",
                            i + 1 + j
                        )));
                    }
                    break;
                }
            }
        }
        let (table, rec) = migration::recover_table(table, &records)
            .map_err(|e| corrupt(format!("replaying the migration log: {e}")))?;
        let (parsed, _) = migration::parse_log(&records);
        let done = |id: u64| {
            parsed
                .iter()
                .any(|r| matches!(r, LogRecord::Done { id: d } if *d == id))
        };
        let report = RecoveryReport {
            checkpoint_seq: seq,
            log_records: parsed.len(),
            completed: rec.completed.len(),
            completed_after_switch: rec.completed.iter().filter(|&&id| !done(id)).count(),
            rolled_back: rec.rolled_back.len(),
            trimmed: rec.trim.len(),
            duration: started.elapsed(),
        };
        let j = Journal {
            dev,
            layout,
            seq,
            next_slot: parsed.len() as u64,
        };
        Ok((
            j,
            Recovered {
                table,
                trim: rec.trim,
                report,
            },
        ))
    }

    /// Append one record and make it durable.
    pub fn append(&mut self, r: &LogRecord) -> io::Result<()> {
        let cap = self.layout.log_bytes / LOG_SLOT as u64;
        if self.next_slot >= cap {
            return Err(io::Error::other(
                "migration log full (a checkpoint is due first)",
            ));
        }
        let b = encode_slot(self.seq, r);
        self.dev.write_at(
            &b,
            self.layout.log_offset + self.next_slot * LOG_SLOT as u64,
        )?;
        self.dev.flush()?;
        self.next_slot += 1;
        Ok(())
    }

    /// Whether fewer than `room` records fit before the log is full.
    pub fn needs_checkpoint(&self, room: u64) -> bool {
        self.next_slot + room > self.layout.log_bytes / LOG_SLOT as u64
    }

    /// Write `table` (no migration in flight) as the next checkpoint and
    /// flush it; the log starts a new epoch.
    pub fn checkpoint(&mut self, table: &MappingTable) -> io::Result<()> {
        self.checkpoint_observed(table, &|| {})
    }

    /// [`checkpoint`](Self::checkpoint), calling `after_write` after each
    /// of its device writes and syncs (the resize's crash tests stop there).
    pub fn checkpoint_observed(
        &mut self,
        table: &MappingTable,
        after_write: &dyn Fn(),
    ) -> io::Result<()> {
        let seq = self.seq + 1;
        let len = table.checkpoint_len();
        if CHECKPOINT_HEADER as u64 + len > self.layout.checkpoint_bytes {
            return Err(io::Error::other(format!(
                "checkpoint of {} bytes does not fit its region of {}",
                CHECKPOINT_HEADER as u64 + len,
                self.layout.checkpoint_bytes
            )));
        }
        // The payload in chunks, straight from the table, then the header
        // with its length and CRC32C: a torn write leaves a header whose
        // payload does not match it (or the older header).
        let off = self.layout.checkpoint_offsets[(seq % 2) as usize];
        let mut at = off + CHECKPOINT_HEADER as u64;
        let mut crc = 0u32;
        table.write_checkpoint(|b| {
            crc = crc32c::crc32c_append(crc, b);
            self.dev.write_at(b, at)?;
            after_write();
            at += b.len() as u64;
            Ok::<(), io::Error>(())
        })?;
        self.dev.flush()?;
        after_write();
        let mut h = [0u8; CHECKPOINT_HEADER];
        h[..8].copy_from_slice(CHECKPOINT_MAGIC);
        h[8..16].copy_from_slice(&seq.to_le_bytes());
        h[16..24].copy_from_slice(&len.to_le_bytes());
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        let hcrc = crc32c::crc32c(&h[..CHECKPOINT_HEADER - 4]);
        h[CHECKPOINT_HEADER - 4..].copy_from_slice(&hcrc.to_le_bytes());
        self.dev.write_at(&h, off)?;
        after_write();
        self.dev.flush()?;
        after_write();
        self.seq = seq;
        self.next_slot = 0;
        Ok(())
    }

    /// Sequence number of the newest checkpoint.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Records in the log since the newest checkpoint.
    pub fn log_records(&self) -> u64 {
        self.next_slot
    }
}

/// An intact checkpoint region header: sequence number, payload length and CRC32C.
struct Header {
    seq: u64,
    len: u64,
    crc: [u8; 4],
}

/// The header of a checkpoint region of `region_bytes`, if intact.
fn parse_header(h: &[u8], region_bytes: u64) -> Result<Header, String> {
    if h.len() < CHECKPOINT_HEADER || &h[..8] != CHECKPOINT_MAGIC {
        return Err("no checkpoint".into());
    }
    let h = &h[..CHECKPOINT_HEADER];
    if crc32c::crc32c(&h[..CHECKPOINT_HEADER - 4]).to_le_bytes() != h[CHECKPOINT_HEADER - 4..] {
        return Err("header checksum mismatch".into());
    }
    let u = |r: std::ops::Range<usize>| u64::from_le_bytes(h[r].try_into().expect("8"));
    let len = u(16..24);
    if len > region_bytes.saturating_sub(CHECKPOINT_HEADER as u64) {
        return Err("payload longer than the region".into());
    }
    Ok(Header {
        seq: u(8..16),
        len,
        crc: h[24..28].try_into().expect("4"),
    })
}

/// Why a checkpoint region gives no table.
enum Region {
    /// Its payload does not match its header (a torn write).
    Torn(String),
    /// Its payload is what the header says, and the table refuses it.
    Damaged(String),
}

/// The table of the checkpoint region at `off` with header `h`, read in
/// chunks ([`MappingTable::read_checkpoint`]).
fn read_table(
    dev: &dyn BlockDev,
    off: u64,
    h: &Header,
) -> io::Result<Result<MappingTable, Region>> {
    let start = off + CHECKPOINT_HEADER as u64;
    let mut at = 0u64;
    let mut crc = 0u32;
    let mut io_err = None;
    let parsed = MappingTable::read_checkpoint(h.len, |buf| {
        let fail = |m: String| tiercache_oodt_policy::TierError::Corrupt(m);
        if at + buf.len() as u64 > h.len {
            return Err(fail("truncated".into()));
        }
        if let Err(e) = dev.read_at(buf, start + at) {
            let m = e.to_string();
            io_err = Some(e);
            return Err(fail(m));
        }
        crc = crc32c::crc32c_append(crc, buf);
        at += buf.len() as u64;
        Ok(())
    });
    if let Some(e) = io_err {
        return Err(e);
    }
    // The rest of the payload, for its CRC32C (the table stopped early).
    let mut buf = vec![0u8; (h.len - at).min(1 << 20) as usize];
    while at < h.len {
        let n = ((h.len - at) as usize).min(buf.len());
        dev.read_at(&mut buf[..n], start + at)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        at += n as u64;
    }
    if crc.to_le_bytes() != h.crc {
        return Ok(Err(Region::Torn(
            "payload checksum mismatch (torn checkpoint)".into(),
        )));
    }
    Ok(parsed.map_err(|e| Region::Damaged(format!("replaying the migration log: {e}"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiercache_io::MemDev;
    use tiercache_oodt_policy::migration::{Action, Migration};

    fn setup() -> (Arc<dyn BlockDev>, Layout, MappingTable) {
        let layout = Layout::compute(4 << 20, 64, 65536).unwrap();
        let dev: Arc<dyn BlockDev> = Arc::new(MemDev::new("fast", 4 << 20));
        let table = MappingTable::new(65536, 64, &[layout.fast_slots]).unwrap();
        (dev, layout, table)
    }

    /// Run one migration's log steps (no data: the journal sees only records).
    fn migrate(j: &mut Journal, t: &mut MappingTable, id: u64, block: u64, to: u8, stop: usize) {
        let mut m = Migration::start(t, id, block, to).unwrap();
        let mut logged = 0;
        while let Some(a) = m.next_action() {
            if let Action::Log(r) = a {
                if logged == stop {
                    return;
                }
                j.append(&r).unwrap();
                logged += 1;
            }
            m.advance(t).unwrap();
        }
    }

    #[test]
    fn fresh_volume_recovers_its_initial_table() {
        let (dev, layout, table) = setup();
        Journal::format(Arc::clone(&dev), layout, &table).unwrap();
        let (j, r) = Journal::open(dev, layout).unwrap();
        assert_eq!(r.table, table);
        assert_eq!(j.seq(), 1);
        assert_eq!(r.report.log_records, 0);
    }

    #[test]
    fn log_replay_completes_switched_and_rolls_back_unswitched_migrations() {
        let (dev, layout, table) = setup();
        Journal::format(Arc::clone(&dev), layout, &table).unwrap();
        let (mut j, r) = Journal::open(Arc::clone(&dev), layout).unwrap();
        let mut t = r.table;
        migrate(&mut j, &mut t, 1, 5, 0, usize::MAX); // done
        migrate(&mut j, &mut t, 2, 6, 0, 2); // switched, no Done
        let switched = t.lookup(6).unwrap();
        migrate(&mut j, &mut t, 3, 7, 0, 1); // begun only
        let (j2, r) = Journal::open(Arc::clone(&dev), layout).unwrap();
        assert_eq!(r.report.log_records, 6);
        assert_eq!(r.report.completed, 2);
        assert_eq!(r.report.completed_after_switch, 1);
        assert_eq!(r.report.rolled_back, 1);
        assert_eq!(r.table.lookup(5).unwrap().tier, 0);
        assert_eq!(r.table.lookup(6).unwrap(), switched);
        assert_eq!(r.table.lookup(7).unwrap().tier, 1, "rolled back home");
        assert_eq!(j2.log_records(), 6);
        // A checkpoint starts a new epoch: the old records never replay again.
        let mut j2 = j2;
        j2.checkpoint(&r.table).unwrap();
        let (_, again) = Journal::open(dev, layout).unwrap();
        assert_eq!(again.report.log_records, 0);
        assert_eq!(again.table, r.table);
        assert_eq!(again.report.checkpoint_seq, 2);
    }

    #[test]
    fn a_torn_checkpoint_falls_back_to_the_other_region_and_its_log() {
        let (dev, layout, table) = setup();
        Journal::format(Arc::clone(&dev), layout, &table).unwrap();
        let (mut j, r) = Journal::open(Arc::clone(&dev), layout).unwrap();
        let mut t = r.table;
        migrate(&mut j, &mut t, 1, 9, 0, usize::MAX);
        // Checkpoint 2 goes to region 0; tear it.
        j.checkpoint(&t).unwrap();
        let off = layout.checkpoint_offsets[0] + CHECKPOINT_HEADER as u64 + 20;
        let mut b = [0u8; 1];
        dev.read_at(&mut b, off).unwrap();
        dev.write_at(&[b[0] ^ 0xff], off).unwrap();
        // Region 1 (checkpoint 1) and its epoch's log still give block 9 on tier 0...
        // ...unless a record of epoch 2 overwrote the log's first slot: none did.
        let (_, r) = Journal::open(Arc::clone(&dev), layout).unwrap();
        assert_eq!(r.report.checkpoint_seq, 1);
        assert_eq!(r.table.lookup(9).unwrap().tier, 0);
        // Both regions damaged: a clear error, no panic.
        let off1 = layout.checkpoint_offsets[1] + 3;
        dev.write_at(&[0xAA], off1).unwrap();
        let e = Journal::open(dev, layout).err().unwrap();
        assert!(
            e.to_string().contains("no intact mapping checkpoint"),
            "{e}"
        );
    }

    #[test]
    fn a_torn_log_slot_ends_the_replay() {
        let (dev, layout, table) = setup();
        Journal::format(Arc::clone(&dev), layout, &table).unwrap();
        let (mut j, r) = Journal::open(Arc::clone(&dev), layout).unwrap();
        let mut t = r.table;
        migrate(&mut j, &mut t, 1, 3, 0, 2); // Begin, Switch: the power fails
                                             // The Switch append was torn (slot 1, the last): only the Begin survives.
        dev.write_at(&[0x55], layout.log_offset + LOG_SLOT as u64 + 30)
            .unwrap();
        let (_, r) = Journal::open(Arc::clone(&dev), layout).unwrap();
        assert_eq!(r.report.log_records, 1);
        assert_eq!(r.report.rolled_back, 1);
        assert_eq!(r.table.lookup(3).unwrap().tier, 1);
        assert_eq!(r.trim.len(), 1, "the reserved destination is trimmed");
        // A damaged slot with an intact record of its epoch after it is not
        // a torn append (each is flushed before the next): refused.
        dev.write_at(
            &encode_slot(1, &LogRecord::Done { id: 1 }),
            layout.log_offset + 2 * LOG_SLOT as u64,
        )
        .unwrap();
        let e = Journal::open(dev, layout).err().unwrap();
        assert!(e.to_string().contains("damaged at slot 1"), "{e}");
    }
}
