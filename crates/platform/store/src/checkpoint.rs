//! Checkpoints: the full slot table (mapped slots only) in one of two
//! alternating regions; epoch `e` lives in region `e % 2`.
//!
//! Region format: a 4 KiB header, then `entries` fixed-size entries
//! (slot u32, line u64, class u8, valid bitmap, dirty bitmap).
//! ```text
//! 0   magic "TCCP"
//! 4   crc32c of the header (seeded with the store UUID)
//! 8   epoch u64          16  log_start (ring block) u64
//! 24  log_first_seq u64  32  entries u64
//! 40  body_len u64       48  body crc32c u32
//! ```
//! The body goes out in pieces of at most [`CHUNK_BYTES`], then the header,
//! then (the caller's) sync; a torn checkpoint fails its header or body crc
//! and recovery uses the other region. Reading streams the body in pieces
//! too, computing the crc as it goes, so neither direction holds more than
//! one piece of the body in memory.

use crate::codec::{Reader, Writer};
use crate::device::MetaDevice;
use crate::error::{Result, StoreError};
use crate::layout::{Layout, BLOCK};
use crate::record::{LineMeta, Slot, SubBlocks};
use crate::table::SlotTable;

const MAGIC: &[u8; 4] = b"TCCP";
const HEADER_USED: usize = 52;

/// A checkpoint's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CpHeader {
    pub epoch: u64,
    pub log_start: u64,
    pub log_first_seq: u64,
    pub entries: u64,
    pub body_len: u64,
    pub body_crc: u32,
}

fn header_crc(uuid: &[u8; 16], h: &[u8]) -> u32 {
    let c = crc32c::crc32c_append(crc32c::crc32c(uuid), &h[0..4]);
    crc32c::crc32c_append(c, &h[8..HEADER_USED])
}

/// Checks a table entry against the geometry.
pub(crate) fn check_entry(layout: &Layout, slot: Slot, m: &LineMeta) -> Result<(), String> {
    if slot >= layout.slots {
        return Err(format!(
            "slot {slot} out of range (the cache has {} slots)",
            layout.slots
        ));
    }
    if m.line == crate::table::NO_LINE {
        return Err(format!("slot {slot}: the reserved line number {}", m.line));
    }
    let n = layout.sub_blocks();
    if !m.valid.within(n) || !m.dirty.within(n) {
        return Err(format!(
            "slot {slot}: bitmap sets sub-blocks past the line's {n}"
        ));
    }
    if !m.dirty.is_subset(&m.valid) {
        return Err(format!("slot {slot}: dirty sub-blocks that are not valid"));
    }
    Ok(())
}

/// The first line mapped by two slots, if any. Costs 8 bytes per mapped slot while it runs.
pub(crate) fn duplicate_line(table: &SlotTable) -> Option<(u64, Slot, Slot)> {
    let mut lines: Vec<u64> = table.iter().map(|(_, m)| m.line).collect();
    lines.sort_unstable();
    let line = lines.windows(2).find(|w| w[0] == w[1])?[0];
    drop(lines);
    let mut slots = table.iter().filter(|(_, m)| m.line == line).map(|(s, _)| s);
    Some((line, slots.next()?, slots.next()?))
}

/// Bytes of checkpoint body read or written at a time (a multiple of every
/// entry size is used, so entries never straddle two pieces).
pub const CHUNK_BYTES: usize = 4 << 20;

/// Entries per piece of `CHUNK_BYTES` at most (at least one).
fn chunk_entries(entry: usize, chunk: usize) -> usize {
    (chunk / entry).max(1)
}

/// Encodes and writes a checkpoint (not synced) in pieces of at most
/// [`CHUNK_BYTES`], the header last. Validates every entry and refuses
/// duplicate slots or lines before anything is written (a first pass over
/// `entries`, which is why its iterator must be `Clone`); returns the
/// mapped-slot bitset. Memory: the bitset, 8 bytes per entry while the
/// lines are checked for duplicates, and one piece.
pub(crate) fn write<I>(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    epoch: u64,
    log_start: u64,
    log_first_seq: u64,
    entries: I,
) -> Result<Vec<u64>>
where
    I: IntoIterator<Item = (Slot, LineMeta)>,
    I::IntoIter: Clone,
{
    write_chunked(
        dev,
        layout,
        uuid,
        [epoch, log_start, log_first_seq],
        entries,
        CHUNK_BYTES,
    )
}

/// [`write`] with the piece size given (tests use small pieces).
pub(crate) fn write_chunked<I>(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    [epoch, log_start, log_first_seq]: [u64; 3],
    entries: I,
    chunk: usize,
) -> Result<Vec<u64>>
where
    I: IntoIterator<Item = (Slot, LineMeta)>,
    I::IntoIter: Clone,
{
    let entries = entries.into_iter();
    let bm = layout.bitmap_bytes();
    let entry = layout.checkpoint_entry_bytes();
    let mut mapped = vec![0u64; (layout.slots as usize).div_ceil(64)];
    let mut lines = Vec::new();
    let mut n = 0u64;
    for (slot, m) in entries.clone() {
        check_entry(layout, slot, &m).map_err(StoreError::InvalidTable)?;
        let (word, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        if mapped[word] & bit != 0 {
            return Err(StoreError::InvalidTable(format!(
                "slot {slot} appears twice"
            )));
        }
        mapped[word] |= bit;
        lines.push(m.line);
        n += 1;
    }
    lines.sort_unstable();
    if let Some(d) = lines.windows(2).find(|d| d[0] == d[1]) {
        return Err(StoreError::InvalidTable(format!(
            "line {} is mapped by more than one slot",
            d[0]
        )));
    }
    drop(lines);
    let body_len = n * entry as u64;
    let total = crate::codec::align_up(body_len, BLOCK)
        .and_then(|b| b.checked_add(BLOCK))
        .unwrap_or(u64::MAX);
    if total > layout.checkpoint_size {
        return Err(StoreError::InvalidTable(format!(
            "{n} entries need {total} bytes; the checkpoint region holds {}",
            layout.checkpoint_size
        )));
    }
    let region = layout.checkpoint_offsets[(epoch % 2) as usize];
    let per_piece = chunk_entries(entry, chunk);
    let mut w = Writer::with_capacity(per_piece * entry + BLOCK as usize);
    let mut at = region + BLOCK;
    let mut body_crc = 0u32;
    let mut written = 0u64;
    let mut it = entries.peekable();
    while it.peek().is_some() {
        w.buf.clear();
        for (slot, m) in it.by_ref().take(per_piece) {
            w.u32(slot);
            w.u64(m.line);
            w.u8(m.class);
            m.valid.encode(&mut w, bm);
            m.dirty.encode(&mut w, bm);
        }
        body_crc = crc32c::crc32c_append(body_crc, &w.buf);
        written += w.buf.len() as u64;
        if written > body_len {
            return Err(StoreError::InvalidTable(
                "the table changed while it was written".into(),
            ));
        }
        if it.peek().is_none() {
            let padded = crate::codec::align_up(w.buf.len() as u64, BLOCK).unwrap_or(0);
            w.buf.resize(padded as usize, 0);
        }
        dev.write_at(&w.buf, at)
            .map_err(|e| StoreError::io("writing a checkpoint", e))?;
        at += w.buf.len() as u64;
    }
    if written != body_len {
        return Err(StoreError::InvalidTable(
            "the table changed while it was written".into(),
        ));
    }
    let mut h = Writer::with_capacity(BLOCK as usize);
    h.bytes(MAGIC);
    h.u32(0);
    h.u64(epoch);
    h.u64(log_start);
    h.u64(log_first_seq);
    h.u64(n);
    h.u64(body_len);
    h.u32(body_crc);
    let crc = header_crc(uuid, &h.buf);
    h.buf[4..8].copy_from_slice(&crc.to_le_bytes());
    h.buf.resize(BLOCK as usize, 0);
    dev.write_at(&h.buf, region)
        .map_err(|e| StoreError::io("writing a checkpoint", e))?;
    Ok(mapped)
}

/// What a region's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeaderStatus {
    /// No checkpoint magic: never written (or erased).
    Absent,
    /// Magic present but the header is damaged or belongs to another store.
    Damaged(String),
    /// A well-formed header (the body is not checked yet).
    Present(CpHeader),
}

/// Reads and checks a region's header.
pub(crate) fn read_header(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    region: usize,
) -> Result<HeaderStatus> {
    let mut h = [0u8; HEADER_USED];
    dev.read_at(&mut h, layout.checkpoint_offsets[region])
        .map_err(|e| StoreError::io("reading a checkpoint header", e))?;
    if &h[0..4] != MAGIC {
        return Ok(HeaderStatus::Absent);
    }
    let stored = u32::from_le_bytes(h[4..8].try_into().unwrap_or_default());
    if stored != header_crc(uuid, &h) {
        return Ok(HeaderStatus::Damaged(
            "header checksum mismatch (torn, corrupt, or written by another store)".into(),
        ));
    }
    let mut r = Reader::new(&h[8..]);
    let mut next = || r.u64().unwrap_or(0);
    let hdr = CpHeader {
        epoch: next(),
        log_start: next(),
        log_first_seq: next(),
        entries: next(),
        body_len: next(),
        body_crc: u32::from_le_bytes(h[48..52].try_into().unwrap_or_default()),
    };
    let entry = layout.checkpoint_entry_bytes() as u64;
    if hdr.entries > layout.slots as u64
        || hdr.body_len != hdr.entries * entry
        || hdr.body_len > layout.checkpoint_size - BLOCK
        || hdr.log_start >= layout.log_blocks
    {
        return Ok(HeaderStatus::Damaged(format!(
            "header fields out of range ({} entries, body {} bytes, log start {})",
            hdr.entries, hdr.body_len, hdr.log_start
        )));
    }
    Ok(HeaderStatus::Present(hdr))
}

/// Reads a checkpoint body into `table` (which must be empty);
/// `Err(reason)` if it is damaged, and then `table` holds an undefined
/// part of it (clear it before reuse).
pub(crate) fn read_body(
    dev: &impl MetaDevice,
    layout: &Layout,
    region: usize,
    hdr: &CpHeader,
    table: &mut SlotTable,
) -> Result<std::result::Result<(), String>> {
    scan_body(dev, layout, region, hdr, CHUNK_BYTES, |slot, m| {
        if table.is_mapped(slot) {
            return Err(format!("slot {slot} appears twice"));
        }
        table.set(slot, Some(m));
        Ok(())
    })
}

/// Checks a checkpoint body without keeping it (`tiercache check`): its
/// checksum, every entry, and that no slot appears twice (a bitset of one
/// bit per slot).
pub(crate) fn verify_body(
    dev: &impl MetaDevice,
    layout: &Layout,
    region: usize,
    hdr: &CpHeader,
) -> Result<std::result::Result<(), String>> {
    let mut seen = vec![0u64; (layout.slots as usize).div_ceil(64)];
    scan_body(dev, layout, region, hdr, CHUNK_BYTES, |slot, _| {
        let (w, b) = (slot as usize / 64, 1u64 << (slot % 64));
        if seen[w] & b != 0 {
            return Err(format!("slot {slot} appears twice"));
        }
        seen[w] |= b;
        Ok(())
    })
}

/// Streams a checkpoint body in pieces of at most `chunk` bytes, checking
/// each entry against the geometry and handing it to `f`, and the body's
/// checksum at the end. `Ok(Err(reason))` when the body is damaged (some
/// entries may have been handed to `f` by then).
pub(crate) fn scan_body(
    dev: &impl MetaDevice,
    layout: &Layout,
    region: usize,
    hdr: &CpHeader,
    chunk: usize,
    mut f: impl FnMut(Slot, LineMeta) -> std::result::Result<(), String>,
) -> Result<std::result::Result<(), String>> {
    let bm = layout.bitmap_bytes();
    let entry = layout.checkpoint_entry_bytes();
    if hdr.body_len != hdr.entries * entry as u64 {
        return Ok(Err("body length does not match the entry count".into()));
    }
    let per_piece = chunk_entries(entry, chunk) as u64;
    let mut buf = vec![0u8; (per_piece.min(hdr.entries.max(1)) as usize) * entry];
    let mut crc = 0u32;
    let mut at = layout.checkpoint_offsets[region] + BLOCK;
    let mut left = hdr.entries;
    let mut damage: Option<String> = None;
    while left > 0 {
        let k = left.min(per_piece);
        let piece = &mut buf[..k as usize * entry];
        dev.read_at(piece, at)
            .map_err(|e| StoreError::io("reading a checkpoint body", e))?;
        crc = crc32c::crc32c_append(crc, piece);
        at += piece.len() as u64;
        left -= k;
        if damage.is_some() {
            continue; // keep checksumming: a torn body is reported as such
        }
        let mut r = Reader::new(piece);
        for _ in 0..k {
            let parsed = (|| {
                let slot = r.u32()?;
                let line = r.u64()?;
                let class = r.u8()?;
                let valid = SubBlocks::decode(&mut r, bm)?;
                let dirty = SubBlocks::decode(&mut r, bm)?;
                Some((
                    slot,
                    LineMeta {
                        line,
                        valid,
                        dirty,
                        class,
                    },
                ))
            })();
            let Some((slot, m)) = parsed else {
                damage = Some("body truncated".into());
                break;
            };
            if let Err(why) = check_entry(layout, slot, &m).and_then(|()| f(slot, m)) {
                damage = Some(why);
                break;
            }
        }
    }
    if crc != hdr.body_crc {
        return Ok(Err(format!(
            "body checksum mismatch (stored {:08x}, computed {crc:08x}): the checkpoint is torn or corrupt",
            hdr.body_crc
        )));
    }
    Ok(match damage {
        Some(why) => Err(why),
        None => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash_sim::MemDevice;

    /// A table with `n` mapped slots of varied lines, classes and bits.
    fn sample(layout: &Layout, n: u32) -> SlotTable {
        let mut t = SlotTable::new(layout.slots, layout.sub_blocks());
        let subs = layout.sub_blocks();
        for i in 0..n {
            let slot = (i * 7) % layout.slots;
            let mut valid = SubBlocks::first(1 + i % subs);
            valid.set(subs - 1);
            let dirty = if i % 3 == 0 {
                SubBlocks::first(1)
            } else {
                SubBlocks::EMPTY
            };
            t.set(
                slot,
                Some(LineMeta {
                    line: 1000 + i as u64 * 3,
                    valid,
                    dirty,
                    class: (i % 4) as u8,
                }),
            );
        }
        t
    }

    fn read_chunked(
        dev: &MemDevice,
        layout: &Layout,
        uuid: &[u8; 16],
        region: usize,
        chunk: usize,
    ) -> std::result::Result<SlotTable, String> {
        let HeaderStatus::Present(h) = read_header(dev, layout, uuid, region).unwrap() else {
            return Err("no header".into());
        };
        let mut t = SlotTable::new(layout.slots, layout.sub_blocks());
        scan_body(dev, layout, region, &h, chunk, |s, m| {
            t.set(s, Some(m));
            Ok(())
        })
        .unwrap()
        .map(|()| t)
    }

    #[test]
    fn a_body_larger_than_a_piece_round_trips_in_pieces() {
        let uuid = [9u8; 16];
        for (line, sub) in [(4096u32, 4096u32), (65536, 4096), (1 << 20, 4096)] {
            let layout = crate::layout::layout(256 << 20, line, sub, None).unwrap();
            let dev = MemDevice::new(256 << 20);
            let n = layout.slots.min(3000);
            let table = sample(&layout, n);
            let entry = layout.checkpoint_entry_bytes();
            assert!(
                table.mapped() * entry > 4 * 1000,
                "the body spans many pieces"
            );
            // Pieces of ~1000 bytes for writing, of other sizes for reading.
            write_chunked(&dev, &layout, &uuid, [3, 0, 0], table.iter(), 1000).unwrap();
            for chunk in [1, entry, 999, 4096, CHUNK_BYTES] {
                let back = read_chunked(&dev, &layout, &uuid, 1, chunk).unwrap();
                assert_eq!(back, table, "line {line}, piece {chunk}");
            }
            // The store's own read (into a table) agrees.
            let HeaderStatus::Present(h) = read_header(&dev, &layout, &uuid, 1).unwrap() else {
                panic!("header");
            };
            let mut t = SlotTable::new(layout.slots, layout.sub_blocks());
            read_body(&dev, &layout, 1, &h, &mut t).unwrap().unwrap();
            assert_eq!(t, table);
            verify_body(&dev, &layout, 1, &h).unwrap().unwrap();
            // Written in one piece, the bytes are the same.
            let dev2 = MemDevice::new(256 << 20);
            write(&dev2, &layout, &uuid, 3, 0, 0, table.iter()).unwrap();
            let span = layout.checkpoint_size as usize;
            let off = layout.checkpoint_offsets[1] as usize;
            assert!(dev.image()[off..off + span] == dev2.image()[off..off + span]);
        }
    }

    #[test]
    fn damage_anywhere_in_a_chunked_body_is_detected() {
        let uuid = [9u8; 16];
        let layout = crate::layout::layout(64 << 20, 4096, 4096, None).unwrap();
        let dev = MemDevice::new(64 << 20);
        let table = sample(&layout, 2000);
        write_chunked(&dev, &layout, &uuid, [2, 0, 0], table.iter(), 1024).unwrap();
        let body = layout.checkpoint_offsets[0] + BLOCK;
        let len = 2000 * layout.checkpoint_entry_bytes() as u64;
        for at in [0, 5, len / 2, len - 1] {
            let d = MemDevice::from_image(dev.image());
            d.corrupt(body + at, 0x10);
            let why = read_chunked(&d, &layout, &uuid, 0, 1000).unwrap_err();
            assert!(
                why.contains("checksum mismatch") || why.contains("out of range"),
                "{why}"
            );
            let HeaderStatus::Present(h) = read_header(&d, &layout, &uuid, 0).unwrap() else {
                panic!("header");
            };
            let mut t = SlotTable::new(layout.slots, layout.sub_blocks());
            assert!(read_body(&d, &layout, 0, &h, &mut t).unwrap().is_err());
            assert!(verify_body(&d, &layout, 0, &h).unwrap().is_err());
        }
        // A slot repeated within the body (with a matching checksum) is refused.
        let mut bytes = vec![0u8; len as usize];
        dev.read_at(&mut bytes, body).unwrap();
        let e = layout.checkpoint_entry_bytes();
        let first_slot = bytes[..4].to_vec();
        bytes[e..e + 4].copy_from_slice(&first_slot);
        let d = MemDevice::from_image(dev.image());
        d.write_at(&bytes, body).unwrap();
        let mut h = Writer::with_capacity(HEADER_USED);
        h.bytes(MAGIC);
        h.u32(0);
        for v in [2u64, 0, 0, 2000, len] {
            h.u64(v);
        }
        h.u32(crc32c::crc32c(&bytes));
        let crc = header_crc(&uuid, &h.buf);
        h.buf[4..8].copy_from_slice(&crc.to_le_bytes());
        d.write_at(&h.buf, layout.checkpoint_offsets[0]).unwrap();
        let HeaderStatus::Present(hd) = read_header(&d, &layout, &uuid, 0).unwrap() else {
            panic!("header");
        };
        let mut t = SlotTable::new(layout.slots, layout.sub_blocks());
        let why = read_body(&d, &layout, 0, &hd, &mut t).unwrap().unwrap_err();
        assert!(why.contains("appears twice"), "{why}");
        assert!(verify_body(&d, &layout, 0, &hd)
            .unwrap()
            .unwrap_err()
            .contains("appears twice"));
    }

    #[test]
    fn an_invalid_table_is_refused_before_anything_is_written() {
        let uuid = [9u8; 16];
        let layout = crate::layout::layout(64 << 20, 4096, 4096, None).unwrap();
        let dev = MemDevice::new(64 << 20);
        let before = dev.image();
        let m = LineMeta {
            line: 5,
            valid: SubBlocks::first(1),
            dirty: SubBlocks::EMPTY,
            class: 0,
        };
        let e = write(&dev, &layout, &uuid, 1, 0, 0, vec![(0, m), (1, m)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("line 5 is mapped by more than one slot"),
            "{e}"
        );
        assert!(dev.image() == before, "nothing written");
    }
}
