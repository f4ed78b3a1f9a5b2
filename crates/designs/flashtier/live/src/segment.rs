//! Segments and their summaries.
//!
//! The cache device's data area is a row of equal segments (1 MiB by
//! default, an erase block's size), written sequentially. A segment starts
//! with two copies of its summary, then its data blocks. The summary names
//! the segment's sequence number (its life: it grows each time the segment
//! is reused) and, for each data block written so far, the backing block it
//! holds and whether it was dirty. A FLUSH rewrites the summary of the open
//! segment into the older copy (a version number orders the two), so a torn
//! summary write leaves the previous one intact. Each copy carries a crc32c.

/// Cache block size: the unit of the map, of a slot and of the summary.
pub const BLOCK: u64 = 4096;
/// Allocation unit of records in the data area.
pub const UNIT: usize = 512;
/// Units of a raw (uncompressed) record: one block.
pub const RAW_UNITS: u32 = (BLOCK as usize / UNIT) as u32;
/// Slots per 4 KiB block of data area in a compressed layout (the most
/// effective capacity can grow).
pub const SLOT_RATIO: u32 = 4;

/// A summary entry of a slot that holds nothing (a write that failed).
pub const EMPTY: u64 = u64::MAX;

use tiercache_flashtier_policy::logstore;

const MAGIC: &[u8; 4] = b"LSSM";
const HEADER: usize = logstore::SUMMARY_HEADER as usize;

/// Where things are inside a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Blocks per segment (summaries included).
    pub seg_blocks: u32,
    /// Blocks of one summary copy.
    pub summary_blocks: u32,
    /// Slots per 4 KiB block of data area: 1, or
    /// [`SLOT_RATIO`] in a compressed layout.
    pub ratio: u32,
}

impl Geometry {
    /// The geometry of segments of `seg_bytes` (a multiple of 4 KiB, at least 64 KiB).
    pub fn new(seg_bytes: u64) -> Result<Geometry, String> {
        // The policy crate sizes segments (the simulator uses the same rule).
        logstore::data_blocks(seg_bytes)?;
        let seg_blocks = (seg_bytes / BLOCK) as u32;
        let summary_blocks = logstore::summary_blocks(seg_blocks);
        Ok(Geometry {
            seg_blocks,
            summary_blocks,
            ratio: 1,
        })
    }
    /// The geometry of a compressed layout's segments: [`SLOT_RATIO`] slots
    /// per 4 KiB of data area, summaries sized for all of them.
    pub fn compressed(seg_bytes: u64) -> Result<Geometry, String> {
        let plain = Geometry::new(seg_bytes)?;
        let mut summary_blocks = plain.summary_blocks;
        while HEADER as u64 + 8 * SLOT_RATIO as u64 * (plain.seg_blocks - 2 * summary_blocks) as u64
            > summary_blocks as u64 * BLOCK
        {
            summary_blocks += 1;
        }
        Ok(Geometry {
            seg_blocks: plain.seg_blocks,
            summary_blocks,
            ratio: SLOT_RATIO,
        })
    }
    /// Whether records are compressed (variable size).
    pub fn is_compressed(&self) -> bool {
        self.ratio > 1
    }
    /// Slots per segment (blocks it can map).
    pub fn data_blocks(&self) -> u32 {
        self.phys_blocks() * self.ratio
    }
    /// 4 KiB blocks of data area per segment.
    pub fn phys_blocks(&self) -> u32 {
        self.seg_blocks - 2 * self.summary_blocks
    }
    /// Units of 512 bytes of data area per segment (compressed layout).
    pub fn data_units(&self) -> u32 {
        self.phys_blocks() * RAW_UNITS
    }
    /// A summary entry for `lba` held in a record of `units` units (the
    /// unit count is only recorded in a compressed layout).
    pub fn entry(&self, lba: u64, dirty: bool, units: u32) -> u64 {
        if self.is_compressed() {
            debug_assert!((1..=RAW_UNITS).contains(&units));
            (lba << 4) | ((units as u64 - 1) << 1) | dirty as u64
        } else {
            entry(lba, dirty)
        }
    }
    /// Block, dirty flag and unit count of a summary entry (`None` for [`EMPTY`]).
    pub fn decode(&self, e: u64) -> Option<(u64, bool, u32)> {
        if e == EMPTY {
            None
        } else if self.is_compressed() {
            Some((e >> 4, e & 1 != 0, ((e >> 1) & 7) as u32 + 1))
        } else {
            Some((e >> 1, e & 1 != 0, RAW_UNITS))
        }
    }
    /// Bytes of a segment.
    pub fn seg_bytes(&self) -> u64 {
        self.seg_blocks as u64 * BLOCK
    }
    /// Byte offset of summary copy `copy` (0 or 1) inside the segment.
    pub fn summary_offset(&self, copy: u64) -> u64 {
        copy * self.summary_blocks as u64 * BLOCK
    }
    /// Byte offset of data block `k` inside the segment.
    pub fn data_offset(&self, k: u32) -> u64 {
        (2 * self.summary_blocks + k) as u64 * BLOCK
    }
}

/// One summary copy: the segment's life and what its data blocks hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Segment index (guards against a summary read from the wrong place).
    pub seg: u32,
    /// Sequence number of this life of the segment.
    pub seq: u64,
    /// Rewrite count within this life: the higher valid copy wins.
    pub version: u64,
    /// Per data block: `lba << 1 | dirty`, or [`EMPTY`].
    pub entries: Vec<u64>,
}

/// A summary entry for `lba`.
pub fn entry(lba: u64, dirty: bool) -> u64 {
    (lba << 1) | dirty as u64
}

/// The block and dirty flag of a summary entry (`None` for [`EMPTY`]).
pub fn decode_entry(e: u64) -> Option<(u64, bool)> {
    (e != EMPTY).then_some((e >> 1, e & 1 != 0))
}

impl Summary {
    /// Which copy (0 or 1) this version is written to.
    pub fn copy(&self) -> u64 {
        self.version % 2
    }

    /// The on-disk bytes of this summary (one copy).
    pub fn encode(&self, g: &Geometry) -> Vec<u8> {
        let mut b = vec![0u8; g.summary_blocks as usize * BLOCK as usize];
        b[0..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&self.seg.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.version.to_le_bytes());
        b[24..28].copy_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            b[HEADER + i * 8..HEADER + i * 8 + 8].copy_from_slice(&e.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse one copy; `None` when it is not a valid summary of `seg`.
    pub fn decode(b: &[u8], seg: u32, g: &Geometry) -> Option<Summary> {
        if b.len() < HEADER || &b[0..4] != MAGIC {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let count = u32_at(24) as usize;
        if u32_at(4) != seg || count > g.data_blocks() as usize || HEADER + count * 8 > b.len() {
            return None;
        }
        let mut c = b.to_vec();
        c[28..32].fill(0);
        if crc32c::crc32c(&c) != u32_at(28) {
            return None;
        }
        Some(Summary {
            seg,
            seq: u64_at(8),
            version: u64_at(16),
            entries: (0..count).map(|i| u64_at(HEADER + i * 8)).collect(),
        })
    }

    /// The newer valid copy of the two read from a segment's head (`both`
    /// holds copy 0 then copy 1; a short buffer counts as missing copies).
    pub fn pick(both: &[u8], seg: u32, g: &Geometry) -> Option<Summary> {
        let n = g.summary_blocks as usize * BLOCK as usize;
        let a = Summary::decode(both.get(..n)?, seg, g);
        let b = both.get(n..2 * n).and_then(|c| Summary::decode(c, seg, g));
        match (a, b) {
            (Some(a), Some(b)) => Some(if (b.seq, b.version) > (a.seq, a.version) {
                b
            } else {
                a
            }),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_of_common_sizes() {
        let g = Geometry::new(1 << 20).unwrap();
        assert_eq!(
            (g.seg_blocks, g.summary_blocks, g.data_blocks()),
            (256, 1, 254)
        );
        let g = Geometry::new(4 << 20).unwrap();
        assert_eq!(g.summary_blocks, 3);
        assert!(HEADER + 8 * g.data_blocks() as usize <= 3 * 4096);
        assert!(Geometry::new(1000).is_err());
        let c = Geometry::compressed(1 << 20).unwrap();
        assert_eq!((c.summary_blocks, c.data_blocks()), (2, 4 * 252));
        assert!(HEADER + 8 * c.data_blocks() as usize <= 2 * 4096);
        let c = Geometry::compressed(64 << 10).unwrap();
        assert!(HEADER + 8 * c.data_blocks() as usize <= c.summary_blocks as usize * 4096);
        assert_eq!(
            c.decode(c.entry(1 << 40, true, 3)),
            Some((1 << 40, true, 3))
        );
        assert_eq!(c.decode(c.entry(5, false, 8)), Some((5, false, 8)));
        assert_eq!(g.decode(g.entry(5, true, 8)), Some((5, true, 8)));
        assert!(Geometry::new(4096).is_err());
    }

    #[test]
    fn summary_round_trip_and_torn_copy() {
        let g = Geometry::new(1 << 20).unwrap();
        let s = Summary {
            seg: 3,
            seq: 42,
            version: 5,
            entries: vec![entry(7, true), EMPTY, entry(1 << 40, false)],
        };
        let b = s.encode(&g);
        assert_eq!(Summary::decode(&b, 3, &g), Some(s.clone()));
        assert_eq!(Summary::decode(&b, 4, &g), None, "wrong segment");
        let mut torn = b.clone();
        torn[100] ^= 1;
        assert_eq!(
            Summary::decode(&torn, 3, &g),
            None,
            "crc catches a flipped bit"
        );
        assert_eq!(decode_entry(s.entries[0]), Some((7, true)));
        assert_eq!(decode_entry(s.entries[1]), None);
        // Copy 1 holds version 5 (torn), copy 0 version 4: version 4 wins.
        let older = Summary {
            version: 4,
            entries: s.entries[..1].to_vec(),
            ..s.clone()
        };
        let mut both = older.encode(&g);
        both.extend_from_slice(&torn);
        assert_eq!(Summary::pick(&both, 3, &g), Some(older.clone()));
        // Both valid: the higher (seq, version) wins, whichever copy it is in.
        let mut both = b.clone();
        both.extend_from_slice(&older.encode(&g));
        assert_eq!(Summary::pick(&both, 3, &g).unwrap().version, 5);
    }
}
