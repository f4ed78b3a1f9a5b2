//! Compressed records: the compressed variant of the log-structured layout
//! (the Azor thesis's FlaZ direction, Chapter 5: transparent compression of
//! cached blocks for more effective SSD capacity).
//!
//! A cached 4 KiB block is stored as one record of 1 to 8 units of 512 bytes,
//! packed back to back in the segment's data area:
//!
//! ```text
//! compressed (1..=7 units): magic 0xC5, codec, compressed length (u16),
//!                           crc32c (u32) of the block number and the raw bytes,
//!                           the compressed bytes, zero padding to the unit
//! raw (8 units):            the 4096 raw bytes (data that does not compress)
//! ```
//!
//! The segment summary entry of a slot carries the record's unit count, so
//! recovery rebuilds each record's position from the summaries alone. A
//! segment has [`SLOT_RATIO`] times more slots than 4 KiB blocks of data:
//! compressible data fits up to that many more blocks in the same device.

/// The record geometry, defined with the segment layout that holds it.
pub use crate::segment::{BLOCK, RAW_UNITS, SLOT_RATIO, UNIT};

/// Bytes of a compressed record's header.
pub const HEADER: usize = 8;
const MAGIC: u8 = 0xC5;

/// How cached blocks are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Codec {
    /// Raw 4 KiB slots (the plain log-structured layout).
    #[default]
    Off,
    /// LZ4 block format (`lz4_flex`).
    Lz4,
    /// Zstandard at a level (1..=22; `zstd`).
    Zstd(i32),
}

impl Codec {
    /// Whether blocks are compressed.
    pub fn is_on(&self) -> bool {
        *self != Codec::Off
    }
    /// On-disk codec number.
    pub fn id(&self) -> u8 {
        match self {
            Codec::Off => 0,
            Codec::Lz4 => 1,
            Codec::Zstd(_) => 2,
        }
    }
    /// The level (zstd), 0 otherwise.
    pub fn level(&self) -> i32 {
        match self {
            Codec::Zstd(l) => *l,
            _ => 0,
        }
    }
    /// From the on-disk codec number and level.
    pub fn from_id(id: u8, level: i32) -> Option<Codec> {
        match id {
            0 => Some(Codec::Off),
            1 => Some(Codec::Lz4),
            2 if (1..=22).contains(&level) => Some(Codec::Zstd(level)),
            _ => None,
        }
    }
}

impl std::str::FromStr for Codec {
    type Err = String;
    fn from_str(s: &str) -> Result<Codec, String> {
        let bad = || {
            format!("--compress '{s}' is not understood (allowed: off, lz4, zstd, zstd:LEVEL with LEVEL 1..22)")
        };
        match s {
            "off" | "none" => Ok(Codec::Off),
            "lz4" => Ok(Codec::Lz4),
            "zstd" => Ok(Codec::Zstd(3)),
            _ => {
                let l = s.strip_prefix("zstd:").ok_or_else(bad)?;
                let l: i32 = l.parse().map_err(|_| bad())?;
                if !(1..=22).contains(&l) {
                    return Err(bad());
                }
                Ok(Codec::Zstd(l))
            }
        }
    }
}

impl std::fmt::Display for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Codec::Off => f.write_str("off"),
            Codec::Lz4 => f.write_str("lz4"),
            Codec::Zstd(l) => write!(f, "zstd:{l}"),
        }
    }
}

/// One encoded block: its bytes (a whole number of units) and unit count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub bytes: Vec<u8>,
    pub units: u32,
}

impl Record {
    /// Whether the block is stored raw.
    pub fn is_raw(&self) -> bool {
        self.units == RAW_UNITS
    }
}

fn crc(lba: u64, block: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&lba.to_le_bytes()), block)
}

/// Encode block `lba` (4096 bytes): compressed when that saves at least a
/// unit, raw otherwise.
pub fn encode(codec: Codec, lba: u64, block: &[u8]) -> Record {
    debug_assert_eq!(block.len(), BLOCK as usize);
    let max = (RAW_UNITS as usize - 1) * UNIT - HEADER;
    let packed = match codec {
        Codec::Off => None,
        Codec::Lz4 => Some(lz4_flex::block::compress(block)),
        Codec::Zstd(l) => zstd::bulk::compress(block, l).ok(),
    };
    match packed {
        Some(c) if c.len() <= max => {
            let units = (HEADER + c.len()).div_ceil(UNIT);
            let mut b = vec![0u8; units * UNIT];
            b[0] = MAGIC;
            b[1] = codec.id();
            b[2..4].copy_from_slice(&(c.len() as u16).to_le_bytes());
            b[4..8].copy_from_slice(&crc(lba, block).to_le_bytes());
            b[HEADER..HEADER + c.len()].copy_from_slice(&c);
            Record {
                bytes: b,
                units: units as u32,
            }
        }
        _ => Record {
            bytes: block.to_vec(),
            units: RAW_UNITS,
        },
    }
}

/// Decode the record of block `lba` (`rec`: its `units` units) into `out`
/// (4096 bytes). A compressed record whose header, length, codec or
/// checksum does not hold is an error, never wrong data.
pub fn decode(rec: &[u8], units: u32, lba: u64, out: &mut [u8]) -> Result<(), String> {
    debug_assert_eq!(out.len(), BLOCK as usize);
    let n = units as usize * UNIT;
    if units == 0 || units > RAW_UNITS || rec.len() < n {
        return Err(format!("block {lba}: record of {units} units is malformed"));
    }
    if units == RAW_UNITS {
        out.copy_from_slice(&rec[..BLOCK as usize]);
        return Ok(());
    }
    let clen = u16::from_le_bytes([rec[2], rec[3]]) as usize;
    if rec[0] != MAGIC || HEADER + clen > n {
        return Err(format!("block {lba}: compressed record header is corrupt"));
    }
    let payload = &rec[HEADER..HEADER + clen];
    let got = match rec[1] {
        1 => lz4_flex::block::decompress_into(payload, out).map_err(|e| e.to_string()),
        2 => zstd::bulk::decompress_to_buffer(payload, out).map_err(|e| e.to_string()),
        c => Err(format!("unknown codec {c}")),
    }
    .map_err(|e| format!("block {lba}: compressed record does not decompress: {e}"))?;
    let want = u32::from_le_bytes(rec[4..8].try_into().expect("4 bytes"));
    if got != BLOCK as usize || crc(lba, out) != want {
        return Err(format!("block {lba}: compressed record checksum mismatch"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_block(seed: u64) -> Vec<u8> {
        let words = [
            "cache ",
            "line ",
            "segment ",
            "flash ",
            "block ",
            "compress ",
        ];
        let mut b = Vec::new();
        let mut i = seed;
        while b.len() < 4096 {
            b.extend_from_slice(words[(i % 6) as usize].as_bytes());
            i = i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                >> 7;
        }
        b.truncate(4096);
        b
    }

    fn random_block(seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn codec_names() {
        assert_eq!("lz4".parse::<Codec>(), Ok(Codec::Lz4));
        assert_eq!("zstd".parse::<Codec>(), Ok(Codec::Zstd(3)));
        assert_eq!("zstd:19".parse::<Codec>(), Ok(Codec::Zstd(19)));
        assert_eq!("off".parse::<Codec>(), Ok(Codec::Off));
        for bad in ["zstd:0", "zstd:23", "zstd:x", "gzip", ""] {
            let e = bad.parse::<Codec>().unwrap_err();
            assert!(e.contains("allowed"), "{e}");
        }
        for c in [Codec::Off, Codec::Lz4, Codec::Zstd(7)] {
            assert_eq!(c.to_string().parse::<Codec>(), Ok(c));
            assert_eq!(Codec::from_id(c.id(), c.level()), Some(c));
        }
        assert_eq!(Codec::from_id(9, 0), None);
    }

    #[test]
    fn round_trip_compressed_raw_and_zero() {
        for codec in [Codec::Lz4, Codec::Zstd(3), Codec::Zstd(19)] {
            for (block, compressible) in [
                (text_block(5), true),
                (vec![0u8; 4096], true),
                (random_block(9), false),
            ] {
                let r = encode(codec, 77, &block);
                assert_eq!(r.bytes.len(), r.units as usize * UNIT);
                assert_eq!(!r.is_raw(), compressible, "{codec}");
                let mut out = vec![0u8; 4096];
                decode(&r.bytes, r.units, 77, &mut out).unwrap();
                assert_eq!(out, block);
            }
        }
        // Off stores everything raw.
        assert!(encode(Codec::Off, 1, &text_block(1)).is_raw());
        // Zeros compress to one unit.
        assert_eq!(encode(Codec::Lz4, 1, &[0u8; 4096]).units, 1);
    }

    #[test]
    fn corruption_is_an_error_never_wrong_data() {
        for codec in [Codec::Lz4, Codec::Zstd(3)] {
            let block = text_block(3);
            let r = encode(codec, 12, &block);
            assert!(!r.is_raw());
            let mut out = vec![0u8; 4096];
            // Another block's number: the checksum does not hold.
            assert!(decode(&r.bytes, r.units, 13, &mut out)
                .unwrap_err()
                .contains("checksum"));
            // Every single flipped bit in the header or payload is caught.
            let clen = u16::from_le_bytes([r.bytes[2], r.bytes[3]]) as usize;
            for i in 0..HEADER + clen {
                for bit in [0u8, 3, 7] {
                    let mut bad = r.bytes.clone();
                    bad[i] ^= 1 << bit;
                    let mut out = vec![0u8; 4096];
                    match decode(&bad, r.units, 12, &mut out) {
                        Err(_) => {}
                        Ok(()) => assert_eq!(out, block, "byte {i} bit {bit}: wrong data"),
                    }
                }
            }
            // Wrong unit counts are refused.
            assert!(decode(&r.bytes, 0, 12, &mut out).is_err());
            assert!(decode(&r.bytes, 9, 12, &mut out).is_err());
            // A stale (zeroed) area is not a record.
            let zeros = vec![0u8; r.bytes.len()];
            assert!(decode(&zeros, r.units, 12, &mut out).is_err());
        }
    }
}
