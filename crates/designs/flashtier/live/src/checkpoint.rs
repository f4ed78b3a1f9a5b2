//! Checkpoints of the unified map, and the journal of segments opened since.
//!
//! A checkpoint holds every mapped block (block, dirty flag, slot: 12 bytes),
//! each segment's sequence number (its age, for cleaning), the next sequence
//! number, and which segment was open and how many of its entries the
//! checkpoint covers. Two areas alternate (epoch parity), each with a
//! crc32c, so a torn checkpoint leaves the previous one.
//!
//! The journal records each segment opened after the checkpoint (epoch,
//! index, segment, sequence number), one 4 KiB record, written and flushed
//! before any data goes into the segment. Recovery replays the open
//! segment's summary past the checkpointed count, then the journal's
//! segments in order; a full journal forces a checkpoint, which bounds the
//! replay.

use tiercache_io::BlockDev;

use crate::layout::Superblock;
use crate::segment::BLOCK;

const MAGIC: &[u8; 4] = b"LSCK";
const JMAGIC: &[u8; 4] = b"LSJR";
/// No open segment.
pub const NONE: u32 = u32::MAX;

/// One checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Increases with each checkpoint; the journal's records name it.
    pub epoch: u64,
    pub next_seq: u64,
    /// The open segment ([`NONE`] if none), its sequence number and the
    /// number of its summary entries covered here.
    pub open_seg: u32,
    pub open_seq: u64,
    pub open_count: u32,
    /// Sequence number of every segment's current life.
    pub seg_seqs: Vec<u64>,
    /// (block, dirty, slot) of every mapped block.
    pub entries: Vec<(u64, bool, u32)>,
}

impl Checkpoint {
    /// The checkpoint of an empty cache.
    pub fn empty(epoch: u64, nsegs: u32) -> Checkpoint {
        Checkpoint {
            epoch,
            next_seq: 1,
            open_seg: NONE,
            open_seq: 0,
            open_count: 0,
            seg_seqs: vec![0; nsegs as usize],
            entries: Vec::new(),
        }
    }

    /// The on-disk bytes (header block, segment table, entries).
    pub fn encode(&self) -> Vec<u8> {
        let body_len = 8 * self.seg_seqs.len() + 12 * self.entries.len();
        let mut b =
            vec![0u8; (BLOCK as usize + body_len).div_ceil(BLOCK as usize) * BLOCK as usize];
        let mut o = BLOCK as usize;
        for s in &self.seg_seqs {
            b[o..o + 8].copy_from_slice(&s.to_le_bytes());
            o += 8;
        }
        for &(lba, dirty, slot) in &self.entries {
            b[o..o + 8].copy_from_slice(&(lba | (dirty as u64) << 63).to_le_bytes());
            b[o + 8..o + 12].copy_from_slice(&slot.to_le_bytes());
            o += 12;
        }
        let body_crc = crc32c::crc32c(&b[BLOCK as usize..BLOCK as usize + body_len]);
        let mut h = Vec::with_capacity(64);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.epoch.to_le_bytes());
        h.extend_from_slice(&self.next_seq.to_le_bytes());
        h.extend_from_slice(&self.open_seg.to_le_bytes());
        h.extend_from_slice(&self.open_seq.to_le_bytes());
        h.extend_from_slice(&self.open_count.to_le_bytes());
        h.extend_from_slice(&(self.seg_seqs.len() as u32).to_le_bytes());
        h.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        h.extend_from_slice(&body_crc.to_le_bytes());
        let crc = crc32c::crc32c(&h);
        h.extend_from_slice(&crc.to_le_bytes());
        b[..h.len()].copy_from_slice(&h);
        b
    }

    /// Parse a checkpoint area; `None` if it holds no valid checkpoint.
    pub fn decode(b: &[u8]) -> Option<Checkpoint> {
        if b.len() < 56 || &b[..4] != MAGIC {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if crc32c::crc32c(&b[..52]) != u32_at(52) {
            return None;
        }
        let nsegs = u32_at(36) as usize;
        let n = u64_at(40) as usize;
        let body_len = nsegs.checked_mul(8)?.checked_add(n.checked_mul(12)?)?;
        let start = BLOCK as usize;
        if start + body_len > b.len() || crc32c::crc32c(&b[start..start + body_len]) != u32_at(48) {
            return None;
        }
        let seg_seqs = (0..nsegs).map(|i| u64_at(start + 8 * i)).collect();
        let e0 = start + 8 * nsegs;
        let entries = (0..n)
            .map(|i| {
                let o = e0 + 12 * i;
                let v = u64_at(o);
                (v & !(1 << 63), v >> 63 != 0, u32_at(o + 8))
            })
            .collect();
        Some(Checkpoint {
            epoch: u64_at(4),
            next_seq: u64_at(12),
            open_seg: u32_at(20),
            open_seq: u64_at(24),
            open_count: u32_at(32),
            seg_seqs,
            entries,
        })
    }

    /// Write into the area of this epoch's parity and flush.
    pub fn write(&self, dev: &dyn BlockDev, sb: &Superblock) -> std::io::Result<()> {
        let b = self.encode();
        if b.len() as u64 > sb.ckpt_bytes {
            return Err(std::io::Error::other(format!(
                "checkpoint of {} bytes does not fit its area ({} bytes)",
                b.len(),
                sb.ckpt_bytes
            )));
        }
        // Body first, header last: a torn write leaves a header whose body crc fails.
        dev.write_at(
            &b[BLOCK as usize..],
            sb.ckpt_off[(self.epoch % 2) as usize] + BLOCK,
        )?;
        dev.flush()?;
        dev.write_at(&b[..BLOCK as usize], sb.ckpt_off[(self.epoch % 2) as usize])?;
        dev.flush()
    }

    /// The newest valid checkpoint of the two areas (headers first: only
    /// the newer body is read, the older one only if the newer is torn).
    pub fn read_newest(dev: &dyn BlockDev, sb: &Superblock) -> std::io::Result<Option<Checkpoint>> {
        let mut heads = Vec::new();
        for off in sb.ckpt_off {
            let mut h = vec![0u8; BLOCK as usize];
            dev.read_at(&mut h, off)?;
            if &h[..4] != MAGIC
                || crc32c::crc32c(&h[..52]) != u32::from_le_bytes(h[52..56].try_into().unwrap())
            {
                continue;
            }
            let epoch = u64::from_le_bytes(h[4..12].try_into().unwrap());
            let nsegs = u32::from_le_bytes(h[36..40].try_into().unwrap()) as u64;
            let n = u64::from_le_bytes(h[40..48].try_into().unwrap());
            let len = (BLOCK + 8 * nsegs + 12 * n).div_ceil(BLOCK) * BLOCK;
            if len <= sb.ckpt_bytes {
                heads.push((epoch, off, len));
            }
        }
        heads.sort_by_key(|h| std::cmp::Reverse(h.0));
        for (_, off, len) in heads {
            let mut b = vec![0u8; len as usize];
            dev.read_at(&mut b, off)?;
            if let Some(c) = Checkpoint::decode(&b) {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }
}

/// One journal record: segment `seg` was opened with sequence number `seq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalRecord {
    pub epoch: u64,
    pub index: u32,
    pub seg: u32,
    pub seq: u64,
}

impl JournalRecord {
    /// The record's 4 KiB block.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK as usize];
        b[..4].copy_from_slice(JMAGIC);
        b[4..12].copy_from_slice(&self.epoch.to_le_bytes());
        b[12..16].copy_from_slice(&self.index.to_le_bytes());
        b[16..20].copy_from_slice(&self.seg.to_le_bytes());
        b[20..28].copy_from_slice(&self.seq.to_le_bytes());
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }
    /// Parse a record block.
    pub fn decode(b: &[u8]) -> Option<JournalRecord> {
        if b.len() < 32
            || &b[..4] != JMAGIC
            || crc32c::crc32c(&b[..28]) != u32::from_le_bytes(b[28..32].try_into().ok()?)
        {
            return None;
        }
        Some(JournalRecord {
            epoch: u64::from_le_bytes(b[4..12].try_into().ok()?),
            index: u32::from_le_bytes(b[12..16].try_into().ok()?),
            seg: u32::from_le_bytes(b[16..20].try_into().ok()?),
            seq: u64::from_le_bytes(b[20..28].try_into().ok()?),
        })
    }
}

/// The journal's records of `epoch`, in order, up to the first missing one.
pub fn read_journal(
    dev: &dyn BlockDev,
    sb: &Superblock,
    epoch: u64,
) -> std::io::Result<Vec<JournalRecord>> {
    let mut b = vec![0u8; sb.journal_records as usize * BLOCK as usize];
    dev.read_at(&mut b, sb.journal_off)?;
    let mut out = Vec::new();
    for (i, blk) in b.chunks(BLOCK as usize).enumerate() {
        match JournalRecord::decode(blk) {
            Some(r) if r.epoch == epoch && r.index == i as u32 && r.seg < sb.nsegs => out.push(r),
            _ => break,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trip_and_corruption() {
        let c = Checkpoint {
            epoch: 9,
            next_seq: 77,
            open_seg: 2,
            open_seq: 76,
            open_count: 5,
            seg_seqs: vec![1, 0, 76, 40],
            entries: vec![(5, true, 3), (1 << 40, false, 9)],
        };
        let b = c.encode();
        assert_eq!(Checkpoint::decode(&b), Some(c.clone()));
        let mut bad = b.clone();
        bad[4096 + 20] ^= 4;
        assert_eq!(Checkpoint::decode(&bad), None);
    }

    #[test]
    fn journal_record_round_trip() {
        let r = JournalRecord {
            epoch: 3,
            index: 1,
            seg: 7,
            seq: 99,
        };
        assert_eq!(JournalRecord::decode(&r.encode()), Some(r));
        assert_eq!(JournalRecord::decode(&[0u8; 4096]), None);
    }
}
