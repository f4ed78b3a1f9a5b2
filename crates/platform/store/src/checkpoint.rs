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
//! Header and body go out in one write followed by a sync; a torn
//! checkpoint fails its body crc and recovery uses the other region.

use crate::codec::{Reader, Writer};
use crate::device::MetaDevice;
use crate::error::{Result, StoreError};
use crate::layout::{Layout, BLOCK};
use crate::record::{LineMeta, Slot, SubBlocks};

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

/// The first line mapped by two slots, if any.
pub(crate) fn duplicate_line(table: &[Option<LineMeta>]) -> Option<(u64, Slot, Slot)> {
    let mut lines: Vec<(u64, Slot)> = table
        .iter()
        .enumerate()
        .filter_map(|(s, m)| m.map(|m| (m.line, s as Slot)))
        .collect();
    lines.sort_unstable();
    lines
        .windows(2)
        .find(|w| w[0].0 == w[1].0)
        .map(|w| (w[0].0, w[0].1, w[1].1))
}

/// Encodes and writes a checkpoint (not synced). Validates every entry and
/// refuses duplicate slots or lines; returns the mapped-slot bitset.
pub(crate) fn write(
    dev: &impl MetaDevice,
    layout: &Layout,
    uuid: &[u8; 16],
    epoch: u64,
    log_start: u64,
    log_first_seq: u64,
    entries: impl IntoIterator<Item = (Slot, LineMeta)>,
) -> Result<Vec<u64>> {
    let bm = layout.bitmap_bytes();
    let mut mapped = vec![0u64; (layout.slots as usize).div_ceil(64)];
    let mut lines = Vec::new();
    let mut w = Writer::with_capacity(BLOCK as usize);
    w.buf.resize(BLOCK as usize, 0);
    let mut n = 0u64;
    for (slot, m) in entries {
        check_entry(layout, slot, &m).map_err(StoreError::InvalidTable)?;
        let (word, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        if mapped[word] & bit != 0 {
            return Err(StoreError::InvalidTable(format!(
                "slot {slot} appears twice"
            )));
        }
        mapped[word] |= bit;
        lines.push((m.line, slot));
        w.u32(slot);
        w.u64(m.line);
        w.u8(m.class);
        m.valid.encode(&mut w, bm);
        m.dirty.encode(&mut w, bm);
        n += 1;
    }
    lines.sort_unstable();
    if let Some(d) = lines.windows(2).find(|d| d[0].0 == d[1].0) {
        return Err(StoreError::InvalidTable(format!(
            "line {} is mapped by both slot {} and slot {}",
            d[0].0, d[0].1, d[1].1
        )));
    }
    let body_len = w.buf.len() as u64 - BLOCK;
    let body_crc = crc32c::crc32c(&w.buf[BLOCK as usize..]);
    let mut h = Writer::with_capacity(HEADER_USED);
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
    w.buf[..HEADER_USED].copy_from_slice(&h.buf);
    let total = crate::codec::align_up(w.buf.len() as u64, BLOCK).unwrap_or(u64::MAX);
    if total > layout.checkpoint_size {
        return Err(StoreError::InvalidTable(format!(
            "{n} entries need {total} bytes; the checkpoint region holds {}",
            layout.checkpoint_size
        )));
    }
    w.buf.resize(total as usize, 0);
    let region = (epoch % 2) as usize;
    dev.write_at(&w.buf, layout.checkpoint_offsets[region])
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

/// Reads a checkpoint body into a fresh table; `Err(reason)` if it is damaged.
pub(crate) fn read_body(
    dev: &impl MetaDevice,
    layout: &Layout,
    region: usize,
    hdr: &CpHeader,
) -> Result<std::result::Result<Vec<Option<LineMeta>>, String>> {
    let mut body = vec![0u8; hdr.body_len as usize];
    dev.read_at(&mut body, layout.checkpoint_offsets[region] + BLOCK)
        .map_err(|e| StoreError::io("reading a checkpoint body", e))?;
    let crc = crc32c::crc32c(&body);
    if crc != hdr.body_crc {
        return Ok(Err(format!(
            "body checksum mismatch (stored {:08x}, computed {crc:08x}): the checkpoint is torn or corrupt",
            hdr.body_crc
        )));
    }
    let bm = layout.bitmap_bytes();
    let mut table = vec![None; layout.slots as usize];
    let mut r = Reader::new(&body);
    for _ in 0..hdr.entries {
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
            return Ok(Err("body truncated".into()));
        };
        if let Err(why) = check_entry(layout, slot, &m) {
            return Ok(Err(why));
        }
        let e = &mut table[slot as usize];
        if e.is_some() {
            return Ok(Err(format!("slot {slot} appears twice")));
        }
        *e = Some(m);
    }
    Ok(Ok(table))
}
