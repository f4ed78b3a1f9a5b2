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
/// Bytes of a checkpoint body read or written at a time: writing and
/// recovery hold this much of it, never the whole body.
pub const CHUNK: usize = 1 << 20;
/// Bytes of one map entry in a checkpoint body.
pub const ENTRY_BYTES: usize = 12;
/// Bytes of the header block's fields (its crc32c follows them).
const HEAD_FIELDS: usize = 52;

/// A checkpoint's header and segment table: everything but the entries,
/// which are streamed ([`write_streamed`], [`read_newest_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointHead {
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
}

impl CheckpointHead {
    /// The checkpoint of an empty cache.
    pub fn empty(epoch: u64, nsegs: u32) -> CheckpointHead {
        CheckpointHead {
            epoch,
            next_seq: 1,
            open_seg: NONE,
            open_seq: 0,
            open_count: 0,
            seg_seqs: vec![0; nsegs as usize],
        }
    }

    /// The header block of this checkpoint with `entries` entries whose
    /// body (segment table and entries) has crc32c `body_crc`.
    fn header_block(&self, entries: u64, body_crc: u32) -> Vec<u8> {
        let mut h = Vec::with_capacity(BLOCK as usize);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&self.epoch.to_le_bytes());
        h.extend_from_slice(&self.next_seq.to_le_bytes());
        h.extend_from_slice(&self.open_seg.to_le_bytes());
        h.extend_from_slice(&self.open_seq.to_le_bytes());
        h.extend_from_slice(&self.open_count.to_le_bytes());
        h.extend_from_slice(&(self.seg_seqs.len() as u32).to_le_bytes());
        h.extend_from_slice(&entries.to_le_bytes());
        h.extend_from_slice(&body_crc.to_le_bytes());
        debug_assert_eq!(h.len(), HEAD_FIELDS);
        let crc = crc32c::crc32c(&h);
        h.extend_from_slice(&crc.to_le_bytes());
        h.resize(BLOCK as usize, 0);
        h
    }
}

/// A parsed, checksummed header block: the head without its segment table
/// yet, the entry count and the body's crc32c.
struct ParsedHeader {
    head: CheckpointHead,
    nsegs: u64,
    entries: u64,
    body_crc: u32,
}

fn parse_header(h: &[u8]) -> Option<ParsedHeader> {
    if h.len() < HEAD_FIELDS + 4 || &h[..4] != MAGIC {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap());
    if crc32c::crc32c(&h[..HEAD_FIELDS]) != u32_at(HEAD_FIELDS) {
        return None;
    }
    Some(ParsedHeader {
        head: CheckpointHead {
            epoch: u64_at(4),
            next_seq: u64_at(12),
            open_seg: u32_at(20),
            open_seq: u64_at(24),
            open_count: u32_at(32),
            seg_seqs: Vec::new(),
        },
        nsegs: u32_at(36) as u64,
        entries: u64_at(40),
        body_crc: u32_at(48),
    })
}

/// Bytes of a checkpoint of `nsegs` segments and `entries` entries, header
/// block included, rounded up to whole blocks.
pub fn checkpoint_bytes(nsegs: u64, entries: u64) -> Option<u64> {
    let body = nsegs
        .checked_mul(8)?
        .checked_add(entries.checked_mul(ENTRY_BYTES as u64)?)?;
    Some(BLOCK.checked_add(body)?.div_ceil(BLOCK) * BLOCK)
}

/// Encode a checkpoint's body (the segment table, then the entries) in
/// pieces of [`CHUNK`] bytes (the last one shorter, padded to a whole block)
/// handed to `out` with their byte offset in the area (the body starts at
/// [`BLOCK`], so every piece is block-aligned); returns the header block, to
/// be written after the body. At most `max_bytes` of area are used (the
/// header block included).
pub fn encode_streamed(
    head: &CheckpointHead,
    entries: impl Iterator<Item = (u64, bool, u32)>,
    max_bytes: u64,
    mut out: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> std::io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + ENTRY_BYTES);
    let mut at = BLOCK;
    let mut crc = 0u32;
    let mut count = 0u64;
    // Hand over the first `n` bytes of `buf` (padded to a block when last).
    let mut emit = |buf: &mut Vec<u8>, n: usize, last: bool| -> std::io::Result<()> {
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        let padded = if last {
            buf.resize(n.div_ceil(BLOCK as usize) * BLOCK as usize, 0);
            buf.len()
        } else {
            n
        };
        if at + padded as u64 > max_bytes {
            return Err(std::io::Error::other(format!(
                "checkpoint of more than {} bytes does not fit its area ({max_bytes} bytes)",
                at + padded as u64
            )));
        }
        out(at, &buf[..padded])?;
        at += padded as u64;
        buf.drain(..padded);
        Ok(())
    };
    for s in &head.seg_seqs {
        buf.extend_from_slice(&s.to_le_bytes());
        if buf.len() >= CHUNK {
            emit(&mut buf, CHUNK, false)?;
        }
    }
    for (lba, dirty, slot) in entries {
        buf.extend_from_slice(&(lba | (dirty as u64) << 63).to_le_bytes());
        buf.extend_from_slice(&slot.to_le_bytes());
        count += 1;
        if buf.len() >= CHUNK {
            emit(&mut buf, CHUNK, false)?;
        }
    }
    if !buf.is_empty() {
        let n = buf.len();
        emit(&mut buf, n, true)?;
    }
    Ok(head.header_block(count, crc))
}

/// Write a checkpoint of `head` and `entries` into the area of its epoch's
/// parity and flush: the body in [`CHUNK`]s, then the header (a torn write
/// leaves a header whose body crc fails, or the previous header).
pub fn write_streamed(
    dev: &dyn BlockDev,
    sb: &Superblock,
    head: &CheckpointHead,
    entries: impl Iterator<Item = (u64, bool, u32)>,
) -> std::io::Result<()> {
    let area = sb.ckpt_off[(head.epoch % 2) as usize];
    let header = encode_streamed(head, entries, sb.ckpt_bytes, |off, b| {
        dev.write_at(b, area + off)
    })?;
    dev.flush()?;
    dev.write_at(&header, area)?;
    dev.flush()
}

/// What went wrong reading a checkpoint whose bytes are intact.
#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    /// The newest intact checkpoint holds something impossible (`load`
    /// refused an entry): corrupt metadata, not a torn write.
    Corrupt(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Corrupt(m) => write!(f, "corrupt metadata: {m}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Decode the checkpoint of one area, streaming: `read(off, buf)` reads the
/// area's bytes at `off`. The body's crc32c covers the segment table and the
/// entries together, so the receiver (`start`, then `add` per entry) takes
/// every entry before the crc is known; it is dropped when the crc fails.
/// `Ok(None)`: no intact checkpoint in this area.
fn decode_area<T>(
    mut read: impl FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    area_bytes: u64,
    start: &mut impl FnMut(&CheckpointHead, u64) -> Result<T, String>,
    add: &mut impl FnMut(&mut T, u64, bool, u32) -> Result<(), String>,
) -> Result<Option<(CheckpointHead, T)>, ReadError> {
    let mut h = vec![0u8; BLOCK as usize];
    read(0, &mut h).map_err(ReadError::Io)?;
    let Some(p) = parse_header(&h) else {
        return Ok(None);
    };
    match checkpoint_bytes(p.nsegs, p.entries) {
        Some(len) if len <= area_bytes => {}
        _ => return Ok(None),
    }
    let body_len = p.nsegs * 8 + p.entries * ENTRY_BYTES as u64;
    let mut head = p.head;
    head.seg_seqs.reserve_exact(p.nsegs as usize);
    let mut crc = 0u32;
    let mut buf =
        vec![0u8; CHUNK.min((body_len as usize).div_ceil(BLOCK as usize) * BLOCK as usize)];
    // Bytes carried over from the previous chunk (an entry split by it).
    let mut carry: Vec<u8> = Vec::with_capacity(ENTRY_BYTES);
    let mut done = 0u64;
    let mut sink: Option<T> = None;
    let mut refused: Option<String> = None;
    let mut left_entries = p.entries;
    while done < body_len {
        let n = (body_len - done).min(buf.len() as u64) as usize;
        // Whole blocks (the body's padding is inside the area).
        let whole = n.div_ceil(BLOCK as usize) * BLOCK as usize;
        read(BLOCK + done, &mut buf[..whole]).map_err(ReadError::Io)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        let mut b = &buf[..n];
        // The segment table first.
        while (head.seg_seqs.len() as u64) < p.nsegs && !b.is_empty() {
            let take = (8 - carry.len()).min(b.len());
            carry.extend_from_slice(&b[..take]);
            b = &b[take..];
            if carry.len() == 8 {
                head.seg_seqs
                    .push(u64::from_le_bytes(carry[..8].try_into().unwrap()));
                carry.clear();
            }
        }
        if (head.seg_seqs.len() as u64) == p.nsegs && sink.is_none() && refused.is_none() {
            match start(&head, p.entries) {
                Ok(t) => sink = Some(t),
                Err(e) => refused = Some(e),
            }
        }
        while !b.is_empty() && left_entries > 0 {
            let take = (ENTRY_BYTES - carry.len()).min(b.len());
            carry.extend_from_slice(&b[..take]);
            b = &b[take..];
            if carry.len() < ENTRY_BYTES {
                break;
            }
            left_entries -= 1;
            let v = u64::from_le_bytes(carry[..8].try_into().unwrap());
            let slot = u32::from_le_bytes(carry[8..12].try_into().unwrap());
            carry.clear();
            if let Some(t) = sink.as_mut() {
                if let Err(e) = add(t, v & !(1 << 63), v >> 63 != 0, slot) {
                    // Keep reading: only an intact body makes it corruption.
                    refused = Some(e);
                    sink = None;
                }
            }
        }
        done += n as u64;
    }
    if sink.is_none() && refused.is_none() {
        // No body at all (no segment, no entry).
        match start(&head, p.entries) {
            Ok(t) => sink = Some(t),
            Err(e) => refused = Some(e),
        }
    }
    if crc != p.body_crc {
        return Ok(None);
    }
    if let Some(e) = refused {
        return Err(ReadError::Corrupt(e));
    }
    Ok(sink.map(|t| (head, t)))
}

/// The newest intact checkpoint of the two areas, streamed into a receiver:
/// `start(head, entries)` makes it once the segment table is read, `add`
/// takes each entry (block, dirty, slot). The newer area is tried first; if
/// its body turns out torn (crc), its receiver is dropped and the older area
/// is read. Memory: one [`CHUNK`] and the segment table, besides the receiver.
pub fn read_newest_with<T>(
    dev: &dyn BlockDev,
    sb: &Superblock,
    mut start: impl FnMut(&CheckpointHead, u64) -> Result<T, String>,
    mut add: impl FnMut(&mut T, u64, bool, u32) -> Result<(), String>,
) -> Result<Option<(CheckpointHead, T)>, ReadError> {
    let mut heads = Vec::new();
    for off in sb.ckpt_off {
        let mut h = vec![0u8; BLOCK as usize];
        dev.read_at(&mut h, off).map_err(ReadError::Io)?;
        if let Some(p) = parse_header(&h) {
            heads.push((p.head.epoch, off));
        }
    }
    heads.sort_by_key(|h| std::cmp::Reverse(h.0));
    for (_, off) in heads {
        let r = decode_area(
            |o, b| dev.read_at(b, off + o),
            sb.ckpt_bytes,
            &mut start,
            &mut add,
        )?;
        if r.is_some() {
            return Ok(r);
        }
    }
    Ok(None)
}

/// One checkpoint in memory, entries included (tests and tools; the store
/// streams them: [`write_streamed`], [`read_newest_with`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub head: CheckpointHead,
    /// (block, dirty, slot) of every mapped block.
    pub entries: Vec<(u64, bool, u32)>,
}

impl Checkpoint {
    /// The on-disk bytes (header block, segment table, entries).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK as usize];
        let h = encode_streamed(
            &self.head,
            self.entries.iter().copied(),
            u64::MAX,
            |off, c| {
                debug_assert_eq!(off as usize, b.len());
                b.extend_from_slice(c);
                Ok(())
            },
        )
        .expect("in memory");
        b[..BLOCK as usize].copy_from_slice(&h);
        b
    }

    /// Parse a checkpoint area; `None` if it holds no valid checkpoint.
    pub fn decode(b: &[u8]) -> Option<Checkpoint> {
        let read = |off: u64, buf: &mut [u8]| {
            let s = b
                .get(off as usize..off as usize + buf.len())
                .ok_or_else(|| std::io::Error::other("past the end"))?;
            buf.copy_from_slice(s);
            Ok(())
        };
        let r = decode_area(
            read,
            b.len() as u64,
            &mut |_, n| Ok(Vec::with_capacity(n.min(1 << 16) as usize)),
            &mut |v: &mut Vec<(u64, bool, u32)>, l, d, s| {
                v.push((l, d, s));
                Ok(())
            },
        );
        match r {
            Ok(Some((head, entries))) => Some(Checkpoint { head, entries }),
            _ => None,
        }
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
            head: CheckpointHead {
                epoch: 9,
                next_seq: 77,
                open_seg: 2,
                open_seq: 76,
                open_count: 5,
                seg_seqs: vec![1, 0, 76, 40],
            },
            entries: vec![(5, true, 3), (1 << 40, false, 9)],
        };
        let b = c.encode();
        assert_eq!(Checkpoint::decode(&b), Some(c.clone()));
        let mut bad = b.clone();
        bad[4096 + 20] ^= 4;
        assert_eq!(Checkpoint::decode(&bad), None);
    }

    /// A checkpoint of several chunks (entries split across chunk
    /// boundaries, a segment table longer than one chunk) round-trips
    /// through a device area; any flipped byte of its body, even in the last
    /// chunk after every entry was handed over, makes the area not intact.
    #[test]
    fn streamed_checkpoint_bigger_than_a_chunk() {
        let nsegs = (CHUNK / 8 + 5) as u32;
        let n = 3 * CHUNK / ENTRY_BYTES + 7;
        let head = CheckpointHead {
            epoch: 3,
            next_seq: 1000,
            open_seg: 4,
            open_seq: 999,
            open_count: 17,
            seg_seqs: (0..nsegs as u64).map(|i| i * 7).collect(),
        };
        let entries =
            || (0..n as u64).map(|i| (i * 13 + (1 << 35), i % 3 == 0, (i * 5 % (1 << 30)) as u32));
        let len = checkpoint_bytes(nsegs as u64, n as u64).unwrap();
        let dev = tiercache_io::MemDev::new("ck", 4 * len as usize);
        let mut sb = crate::layout::plan(64 << 20, 1 << 20).unwrap();
        // Epoch 3 goes to area 1, here at offset 0.
        sb.ckpt_off = [2 * len, 0];
        sb.ckpt_bytes = len;
        write_streamed(&dev, &sb, &head, entries()).unwrap();
        let load = |dev: &dyn BlockDev| {
            read_newest_with(
                dev,
                &sb,
                |h, _| {
                    assert_eq!(h.seg_seqs.len(), nsegs as usize);
                    Ok(Vec::new())
                },
                |v: &mut Vec<(u64, bool, u32)>, l, d, s| {
                    v.push((l, d, s));
                    Ok(())
                },
            )
        };
        let (h, got) = load(&dev).unwrap().unwrap();
        assert_eq!(h, head);
        assert!(got.iter().copied().eq(entries()));
        for at in [
            BLOCK + 3,
            BLOCK + CHUNK as u64 + 11,
            BLOCK + 8 * nsegs as u64 + 12 * n as u64 - 1,
        ] {
            let mut byte = [0u8];
            dev.read_at(&mut byte, at).unwrap();
            dev.write_at(&[byte[0] ^ 0x20], at).unwrap();
            assert!(load(&dev).unwrap().is_none(), "damage at {at} not detected");
            dev.write_at(&byte, at).unwrap();
        }
        // An older intact checkpoint in the other area is taken instead.
        let older = CheckpointHead {
            epoch: 2,
            ..head.clone()
        };
        write_streamed(&dev, &sb, &older, entries().take(10)).unwrap();
        let at = BLOCK + CHUNK as u64 + 11;
        let mut byte = [0u8];
        dev.read_at(&mut byte, at).unwrap();
        dev.write_at(&[byte[0] ^ 1], at).unwrap();
        let (h, got) = load(&dev).unwrap().unwrap();
        assert_eq!((h.epoch, got.len()), (2, 10));
    }

    /// An entry the receiver refuses is corruption when the body is intact,
    /// and a torn write (older area taken) when it is not.
    #[test]
    fn a_refused_entry_is_corruption_only_in_an_intact_body() {
        let dev = tiercache_io::MemDev::new("ck", 1 << 20);
        let mut sb = crate::layout::plan(64 << 20, 1 << 20).unwrap();
        sb.ckpt_off = [0, 1 << 19];
        sb.ckpt_bytes = 1 << 19;
        let head = CheckpointHead::empty(5, 3);
        write_streamed(&dev, &sb, &head, [(1, true, 9)].into_iter()).unwrap();
        let refuse = |dev: &dyn BlockDev| {
            read_newest_with(
                dev,
                &sb,
                |_, _| Ok(()),
                |_, _, _, s| {
                    if s == 9 {
                        Err("slot 9 is out of range".to_string())
                    } else {
                        Ok(())
                    }
                },
            )
        };
        let e = refuse(&dev).unwrap_err();
        assert!(matches!(e, ReadError::Corrupt(_)), "{e}");
        write_streamed(&dev, &sb, &CheckpointHead::empty(4, 3), std::iter::empty()).unwrap();
        dev.write_at(&[0xff], (1 << 19) + BLOCK + 24).unwrap();
        assert_eq!(refuse(&dev).unwrap().unwrap().0.epoch, 4);
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
