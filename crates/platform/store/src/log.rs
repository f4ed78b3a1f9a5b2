//! The metadata log: a ring of 4 KiB blocks in the log region.
//!
//! Block format (little endian):
//! ```text
//! 0   magic "TCLG"
//! 4   crc32c of the header (seeded with the store UUID)
//! 8   epoch           u64   checkpoint epoch this block belongs to
//! 16  first_seq       u64   sequence number of the first record
//! 24  nrec            u16
//! 26  payload bytes   u16
//! 28  flags           u32   bit 0: last block of its commit
//! 32  commit_seq      u64   sequence number of the first record of its commit
//! 40  records: encoded record, then crc32c(uuid, epoch, seq, record) u32
//! ```
//! Each commit starts on a fresh block and pads its last block, so a block
//! holding committed records is never rewritten within its epoch: a torn
//! commit can damage only its own blocks. Commits are atomic: replay applies
//! a commit's records only once it has read its flagged last block intact,
//! and rolls back a partly read commit.
//!
//! Only the last commit can be torn by a crash (a commit returns after its
//! sync, and the next starts after that). So when replay stops, the rest of
//! the region is scanned: a valid block of the same epoch from a *later*
//! commit means the log was damaged in the middle (media corruption), and
//! recovery refuses rather than roll back past commits that may have
//! reused slots. A record's crc covers the store
//! UUID, the epoch and its sequence number, so stale blocks of older epochs
//! or of a previous store on the same device are never replayed.

use crate::codec::{Reader, Writer};
use crate::device::MetaDevice;
use crate::error::{Result, StoreError};
use crate::layout::{Layout, BLOCK};
use crate::record::{LineMeta, Record, Slot};
use crate::table::SlotMap;

const MAGIC: &[u8; 4] = b"TCLG";
const HEADER: usize = 40;
const FLAG_COMMIT_END: u32 = 1;
/// Bytes of record payload a block can hold.
pub(crate) const PAYLOAD: usize = BLOCK as usize - HEADER;
/// Blocks read per I/O during replay.
const READ_CHUNK: u64 = 256;

fn epoch_seed(uuid: &[u8; 16], epoch: u64) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(uuid), &epoch.to_le_bytes())
}

fn record_crc(seed: u32, seq: u64, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c_append(seed, &seq.to_le_bytes()), bytes)
}

fn header_crc(uuid: &[u8; 16], block: &[u8]) -> u32 {
    let c = crc32c::crc32c_append(crc32c::crc32c(uuid), &block[0..4]);
    crc32c::crc32c_append(c, &block[8..HEADER])
}

/// Number of blocks `records` occupy.
pub(crate) fn blocks_needed(records: &[Record], bm: usize) -> u64 {
    let mut blocks = 0u64;
    let mut used = PAYLOAD; // forces a first block
    for r in records {
        let n = r.encoded_len(bm) + 4;
        if used + n > PAYLOAD {
            blocks += 1;
            used = 0;
        }
        used += n;
    }
    blocks
}

/// Encodes records into whole blocks, starting at sequence number `first_seq`.
pub(crate) fn encode_blocks(
    uuid: &[u8; 16],
    epoch: u64,
    first_seq: u64,
    records: &[Record],
    bm: usize,
) -> Vec<u8> {
    let seed = epoch_seed(uuid, epoch);
    let mut out: Vec<u8> = Vec::new();
    let mut seq = first_seq;
    let mut i = 0;
    while i < records.len() {
        let block_seq = seq;
        let mut payload = Writer::with_capacity(PAYLOAD);
        let mut n = 0u16;
        while i < records.len() {
            let r = &records[i];
            if payload.buf.len() + r.encoded_len(bm) + 4 > PAYLOAD {
                break;
            }
            let start = payload.buf.len();
            r.encode(&mut payload, bm);
            let crc = record_crc(seed, seq, &payload.buf[start..]);
            payload.u32(crc);
            seq += 1;
            n += 1;
            i += 1;
        }
        let mut block = Writer::with_capacity(BLOCK as usize);
        block.bytes(MAGIC);
        block.u32(0);
        block.u64(epoch);
        block.u64(block_seq);
        block.u16(n);
        block.u16(payload.buf.len() as u16);
        block.u32(if i == records.len() {
            FLAG_COMMIT_END
        } else {
            0
        });
        block.u64(first_seq);
        block.bytes(&payload.buf);
        block.buf.resize(BLOCK as usize, 0);
        let crc = header_crc(uuid, &block.buf);
        block.buf[4..8].copy_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&block.buf);
    }
    out
}

/// Writes encoded blocks at ring position `start` (wrapping at the region end).
pub(crate) fn write_blocks(
    dev: &impl MetaDevice,
    layout: &Layout,
    start: u64,
    blocks: &[u8],
) -> std::io::Result<()> {
    let n = blocks.len() as u64 / BLOCK;
    let first = n.min(layout.log_blocks - start);
    let split = (first * BLOCK) as usize;
    dev.write_at(&blocks[..split], layout.log_offset + start * BLOCK)?;
    if split < blocks.len() {
        dev.write_at(&blocks[split..], layout.log_offset)?;
    }
    Ok(())
}

/// Why replay stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogEnd {
    /// The next block belongs to another epoch or was never written: a clean end.
    Clean,
    /// A block or record of this epoch is damaged (a torn final commit); says where.
    Torn(String),
    /// A record passed its checksum but does not apply to the table (an engine bug); says which.
    Invalid(String),
    /// Every block of the region was replayed.
    RegionEnd,
}

/// What a replay found.
#[derive(Clone, Debug)]
pub(crate) struct Replay {
    /// Records of complete commits applied.
    pub records: u64,
    /// Blocks of complete commits.
    pub blocks: u64,
    pub next_seq: u64,
    pub bytes_read: u64,
    pub end: LogEnd,
}

/// Replays the log of `epoch` from ring block `start` into `table`, stopping
/// at the first block or record that is not a valid continuation. Records of
/// an incomplete final commit are rolled back.
pub(crate) fn replay(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    epoch: u64,
    start: u64,
    first_seq: u64,
    table: &mut (impl SlotMap + ?Sized),
) -> Result<Replay> {
    let cx = BlockCheck {
        layout,
        uuid,
        epoch,
        seed: epoch_seed(uuid, epoch),
        bm: layout.bitmap_bytes(),
        subs: layout.sub_blocks(),
    };
    let mut out = Replay {
        records: 0,
        blocks: 0,
        next_seq: first_seq,
        bytes_read: 0,
        end: LogEnd::RegionEnd,
    };
    let mut buf = Vec::new();
    let mut i = 0u64;
    // Open commit: its records are applied tentatively with an undo log.
    let mut undo: Vec<(usize, Option<LineMeta>)> = Vec::new();
    let mut seq = first_seq;
    let mut open_blocks = 0u64;
    'scan: while i < layout.log_blocks {
        // Read a contiguous run of ring blocks.
        let pos = (start + i) % layout.log_blocks;
        let run = READ_CHUNK
            .min(layout.log_blocks - i)
            .min(layout.log_blocks - pos);
        buf.resize((run * BLOCK) as usize, 0);
        dev.read_at(&mut buf, layout.log_offset + pos * BLOCK)
            .map_err(|e| StoreError::io("reading the metadata log", e))?;
        out.bytes_read += run * BLOCK;
        for block in buf.chunks(BLOCK as usize) {
            let at = (start + i) % layout.log_blocks;
            let flags = match cx.apply_block(block, at, &mut seq, table, &mut undo) {
                Ok(flags) => flags,
                Err(end) => {
                    out.end = end;
                    break 'scan;
                }
            };
            open_blocks += 1;
            i += 1;
            if flags & FLAG_COMMIT_END != 0 {
                out.records += undo.len() as u64;
                out.blocks += open_blocks;
                out.next_seq = seq;
                undo.clear();
                open_blocks = 0;
            }
        }
    }
    if out.end != LogEnd::RegionEnd {
        // `i` is the block where replay stopped; no later commit may follow.
        out.bytes_read += refuse_later_commit(dev, layout, uuid, epoch, start, i, &out)?;
    }
    if open_blocks > 0 || !undo.is_empty() {
        if out.end == LogEnd::Clean || out.end == LogEnd::RegionEnd {
            out.end = LogEnd::Torn(format!(
                "commit starting at seq {} (epoch {epoch}) is incomplete",
                out.next_seq
            ));
        }
        for (slot, old) in undo.into_iter().rev() {
            table.set_slot(slot as Slot, old);
        }
    }
    Ok(out)
}

/// What replay checks each log block against.
struct BlockCheck<'a> {
    layout: &'a Layout,
    uuid: &'a [u8; 16],
    epoch: u64,
    seed: u32,
    bm: usize,
    subs: u32,
}

impl BlockCheck<'_> {
    /// Check log block `block` (at ring position `pos`) and apply its records
    /// to `table`, recording what they replaced in `undo` and advancing
    /// `seq`. Returns the block's flags, or where the log ends (records of
    /// the block applied before a damaged one stay in `undo`).
    fn apply_block(
        &self,
        block: &[u8],
        pos: u64,
        seq: &mut u64,
        table: &mut (impl SlotMap + ?Sized),
        undo: &mut Vec<(usize, Option<LineMeta>)>,
    ) -> std::result::Result<u32, LogEnd> {
        let epoch = self.epoch;
        let at = || format!("log block {pos} (epoch {epoch})");
        if &block[0..4] != MAGIC {
            return Err(LogEnd::Clean);
        }
        let stored = u32::from_le_bytes(block[4..8].try_into().unwrap_or_default());
        if stored != header_crc(self.uuid, block) {
            return Err(LogEnd::Torn(format!("{}: header checksum mismatch", at())));
        }
        let mut h = Reader::new(&block[8..HEADER]);
        let (b_epoch, b_seq, nrec, used, flags) = (
            h.u64().unwrap_or(0),
            h.u64().unwrap_or(0),
            h.u16().unwrap_or(0),
            h.u16().unwrap_or(0) as usize,
            h.u32().unwrap_or(0),
        );
        if b_epoch != epoch {
            return Err(LogEnd::Clean);
        }
        if b_seq != *seq {
            return Err(LogEnd::Torn(format!(
                "{}: sequence gap (expected {}, block starts at {b_seq})",
                at(),
                *seq
            )));
        }
        let payload = &block[HEADER..HEADER + used.min(PAYLOAD)];
        let mut r = Reader::new(payload);
        for k in 0..nrec {
            let begin = r.pos();
            let rec = Record::decode(&mut r, self.bm);
            let end = r.pos();
            let crc = r.u32();
            let ok = match (rec, crc) {
                (Some(rec), Some(crc)) => {
                    (crc == record_crc(self.seed, *seq, &payload[begin..end])).then_some(rec)
                }
                _ => None,
            };
            let Some(rec) = ok else {
                return Err(LogEnd::Torn(format!(
                    "{}: record {k} (seq {}) is damaged",
                    at(),
                    *seq
                )));
            };
            let slot = rec.slot() as usize;
            let mapped = table.get_slot(slot as Slot).is_some();
            if let Err(why) = rec.check(self.layout.slots, self.subs, mapped) {
                return Err(LogEnd::Invalid(format!(
                    "{}: record seq {}: {why}",
                    at(),
                    *seq
                )));
            }
            undo.push((slot, table.get_slot(slot as Slot)));
            rec.apply(table);
            *seq += 1;
        }
        Ok(flags)
    }
}

/// After replay stopped at ring block `i` (relative to `start`): refuse a log
/// with a later commit past the damage (recovering only the part before it
/// could serve reused slots' data). Returns the bytes scanned.
fn refuse_later_commit(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    epoch: u64,
    start: u64,
    i: u64,
    out: &Replay,
) -> Result<u64> {
    let (later, scanned) = later_commit(dev, layout, uuid, epoch, start, i, out.next_seq)?;
    if let Some((pos, cseq)) = later {
        return Err(StoreError::Corrupt(format!(
            "metadata log damaged in the middle: replay of epoch {epoch} stopped at ring block {} ({}), yet block {pos} holds a later commit (seq {cseq}); recovering only the part before the damage could serve reused slots' data, so the cache cannot be trusted: reformat it with --force (dirty data not yet on the backing device is lost)",
            (start + i) % layout.log_blocks,
            match &out.end {
                LogEnd::Torn(w) | LogEnd::Invalid(w) => w.as_str(),
                _ => "no valid block",
            },
        )));
    }
    Ok(scanned)
}

/// Scans ring blocks `from..log_blocks` (relative to `start`) for a valid block
/// of `epoch` belonging to a commit that starts after `next_seq`; returns its
/// ring position and commit sequence, and the bytes read.
fn later_commit(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    epoch: u64,
    start: u64,
    from: u64,
    next_seq: u64,
) -> Result<(Option<(u64, u64)>, u64)> {
    let mut buf = Vec::new();
    let mut read = 0;
    let mut i = from;
    while i < layout.log_blocks {
        let pos = (start + i) % layout.log_blocks;
        let run = READ_CHUNK
            .min(layout.log_blocks - i)
            .min(layout.log_blocks - pos);
        buf.resize((run * BLOCK) as usize, 0);
        dev.read_at(&mut buf, layout.log_offset + pos * BLOCK)
            .map_err(|e| StoreError::io("scanning the metadata log", e))?;
        read += run * BLOCK;
        for (j, block) in buf.chunks(BLOCK as usize).enumerate() {
            if &block[0..4] == MAGIC
                && u32::from_le_bytes(block[4..8].try_into().unwrap_or_default())
                    == header_crc(uuid, block)
            {
                let word =
                    |o: usize| u64::from_le_bytes(block[o..o + 8].try_into().unwrap_or_default());
                if word(8) == epoch && word(32) > next_seq {
                    return Ok((Some((pos + j as u64, word(32))), read));
                }
            }
        }
        i += run;
    }
    Ok((None, read))
}

/// Whether any log block carries a valid header of an epoch newer than `epoch`
/// (evidence that a newer checkpoint completed and was then lost).
pub(crate) fn newer_epoch_present(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    epoch: u64,
) -> Result<Option<u64>> {
    let mut buf = Vec::new();
    let mut pos = 0;
    while pos < layout.log_blocks {
        let run = READ_CHUNK.min(layout.log_blocks - pos);
        buf.resize((run * BLOCK) as usize, 0);
        dev.read_at(&mut buf, layout.log_offset + pos * BLOCK)
            .map_err(|e| StoreError::io("scanning the metadata log", e))?;
        for block in buf.chunks(BLOCK as usize) {
            if &block[0..4] == MAGIC
                && u32::from_le_bytes(block[4..8].try_into().unwrap_or_default())
                    == header_crc(uuid, block)
            {
                let e = u64::from_le_bytes(block[8..16].try_into().unwrap_or_default());
                if e > epoch {
                    return Ok(Some(e));
                }
            }
        }
        pos += run;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash_sim::MemDevice;
    use crate::record::SubBlocks;

    #[test]
    fn blocks_needed_matches_encoding_and_records_never_straddle() {
        let bm = 2;
        let recs: Vec<Record> = (0..1000)
            .map(|i| match i % 3 {
                0 => Record::Map {
                    slot: i,
                    line: i as u64,
                    class: 0,
                },
                1 => Record::Dirty {
                    slot: i - 1,
                    bitmap: SubBlocks::first(3),
                },
                _ => Record::Unmap { slot: i - 2 },
            })
            .collect();
        let enc = encode_blocks(&[7; 16], 3, 100, &recs, bm);
        assert_eq!(enc.len() as u64, blocks_needed(&recs, bm) * BLOCK);
        // Average record is (14 + 7 + 5) / 3 + 4 bytes; 4056-byte payloads hold ~ 4056/12.67.
        assert_eq!(blocks_needed(&recs, bm), 4);
    }

    #[test]
    fn replay_applies_records_in_order_and_stops_at_other_epochs() {
        let layout = crate::layout::layout(16 << 20, 65536, 4096, Some(64 << 10)).unwrap();
        let dev = MemDevice::new(16 << 20);
        let uuid = [1u8; 16];
        let recs = [
            Record::Map {
                slot: 3,
                line: 42,
                class: 1,
            },
            Record::Dirty {
                slot: 3,
                bitmap: SubBlocks::first(2),
            },
        ];
        // Ring wrap: start at the last block.
        let start = layout.log_blocks - 1;
        let enc = encode_blocks(&uuid, 5, 10, &recs[..1], 2);
        write_blocks(&dev, &layout, start, &enc).unwrap();
        let enc = encode_blocks(&uuid, 5, 11, &recs[1..], 2);
        write_blocks(&dev, &layout, 0, &enc).unwrap();
        // A stale block of an older epoch follows.
        let enc = encode_blocks(&uuid, 4, 12, &[Record::Unmap { slot: 3 }], 2);
        write_blocks(&dev, &layout, 1, &enc).unwrap();
        let mut table = vec![None; layout.slots as usize];
        let r = replay(&dev, &layout, &uuid, 5, start, 10, &mut table).unwrap();
        assert_eq!(
            (r.records, r.blocks, r.next_seq, r.end),
            (2, 2, 12, LogEnd::Clean)
        );
        let m = table[3].unwrap();
        assert_eq!((m.line, m.class, m.dirty), (42, 1, SubBlocks::first(2)));
        // Another store's UUID never replays these blocks.
        let mut t2 = vec![None; layout.slots as usize];
        let r = replay(&dev, &layout, &[2; 16], 5, start, 10, &mut t2).unwrap();
        assert_eq!(r.records, 0);
        assert!(matches!(r.end, LogEnd::Torn(_)));
    }
}
