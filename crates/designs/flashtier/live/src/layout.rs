//! The cache device's layout and its superblock (`format` is in [`crate::format`]).
//!
//! ```text
//! 0       superblock copy 0 (4 KiB)     two copies, generation + crc32c
//! 4 KiB   superblock copy 1
//! 8 KiB   segment-open journal          one 4 KiB record per segment opened
//!         checkpoint area 0             the map, alternating with area 1
//!         checkpoint area 1
//!         segments (aligned)            summaries + data, written sequentially
//! ```

use std::path::Path;

use anyhow::{bail, Result};
use tiercache_io::{BlockDev, FileDev, FileDevOptions};

use crate::compress::Codec;
use crate::segment::{Geometry, BLOCK};

/// First 8 bytes of a log-structured cache's superblock.
pub const MAGIC: &[u8; 8] = b"TCLOGSEG";
const VERSION: u32 = 1;
/// The version of a compressed layout (`--compress`): it records the codec;
/// a binary that predates it refuses the device (no valid superblock).
const VERSION_COMPRESSED: u32 = 2;
/// Where a compressed layout's superblock keeps its codec and level.
const CODEC_AT: usize = 4080;
/// Where the superblock keeps the backing identity and the detached flag
/// (after the longest backing path `format` accepts; a superblock written by
/// an older build has zeros here and no identity).
const IDENTITY_AT: usize = 2304;
/// Marks the identity area in use.
const IDENTITY_MAGIC: &[u8; 4] = b"TCID";
/// Longest backing path `format` accepts.
pub(crate) const MAX_BACKING_PATH: usize = 2048;

/// How client writes reach the backing device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritePolicy {
    /// Writes go to the cache log (dirty); cleaning writes them back.
    WriteBack,
    /// Writes go to the backing device, and a clean copy to the cache.
    WriteThrough,
}

impl std::str::FromStr for WritePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "write-back" => Ok(WritePolicy::WriteBack),
            "write-through" => Ok(WritePolicy::WriteThrough),
            x => Err(format!(
                "write policy '{x}' is not supported by the log-structured layout (allowed: write-back, write-through)"
            )),
        }
    }
}

impl std::fmt::Display for WritePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WritePolicy::WriteBack => "write-back",
            WritePolicy::WriteThrough => "write-through",
        })
    }
}

/// What the superblock says.
#[derive(Clone, Debug, PartialEq)]
pub struct Superblock {
    /// Bumped at every superblock write; the higher valid copy wins.
    pub generation: u64,
    /// Closed cleanly (checkpoint complete, journal empty).
    pub clean: bool,
    pub write_policy: WritePolicy,
    /// Share of data slots that may be dirty before write-back cleaning starts.
    pub dirty_target: f64,
    pub seg_bytes: u64,
    pub nsegs: u32,
    pub journal_off: u64,
    pub journal_records: u32,
    pub ckpt_off: [u64; 2],
    pub ckpt_bytes: u64,
    pub seg_off: u64,
    pub backing_size: u64,
    pub backing_path: String,
    /// How blocks are stored: raw slots, or compressed records.
    pub compress: Codec,
    /// The backing device's identity as recorded at format, open and clean
    /// shutdown (`None` in a superblock an older build wrote).
    pub identity: Option<tiercache_store::BackingIdentity>,
    /// Closed by a detach (with `clean`): the newest checkpoint is empty and
    /// the next open starts cold, whatever the backing device holds.
    pub detached: bool,
}

impl Superblock {
    /// Segment geometry.
    pub fn geometry(&self) -> Geometry {
        geometry(self.seg_bytes, self.compress).expect("validated at decode")
    }
    /// Data slots of the whole cache.
    pub fn slots(&self) -> u64 {
        self.nsegs as u64 * self.geometry().data_blocks() as u64
    }
    /// Backing device size in blocks.
    pub fn backing_blocks(&self) -> u64 {
        self.backing_size / BLOCK
    }
    /// The most segments its checkpoint areas have room for: how far
    /// `tiercache resize` can grow the cache (`format --max-size`).
    pub fn max_nsegs(&self) -> u32 {
        let d = self.geometry().data_blocks() as u64;
        let fits = |n: u64| {
            crate::checkpoint::checkpoint_bytes(n, n * d).is_some_and(|b| b <= self.ckpt_bytes)
        };
        // The checkpoint grows with the segments: the largest count that fits.
        let (mut lo, mut hi) = (self.nsegs as u64, u32::MAX as u64);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo as u32
    }
    /// Bytes of a cache device whose data region ends after `nsegs` segments.
    pub fn device_bytes(&self, nsegs: u32) -> u64 {
        self.seg_off + nsegs as u64 * self.seg_bytes
    }

    /// One 4 KiB copy.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4096);
        b.extend_from_slice(MAGIC);
        let version = if self.compress.is_on() {
            VERSION_COMPRESSED
        } else {
            VERSION
        };
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.push(self.clean as u8);
        b.push(match self.write_policy {
            WritePolicy::WriteBack => 0,
            WritePolicy::WriteThrough => 1,
        });
        for v in [
            self.dirty_target.to_bits(),
            self.seg_bytes,
            self.nsegs as u64,
            self.journal_off,
            self.journal_records as u64,
            self.ckpt_off[0],
            self.ckpt_off[1],
            self.ckpt_bytes,
            self.seg_off,
            self.backing_size,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let p = self.backing_path.as_bytes();
        b.extend_from_slice(&(p.len() as u16).to_le_bytes());
        b.extend_from_slice(p);
        b.resize(4096, 0);
        if let Some(id) = &self.identity {
            // The path is the superblock's own (not repeated).
            let mut id = id.clone();
            id.path.clear();
            let bytes = id.to_bytes();
            let at = IDENTITY_AT;
            b[at..at + 4].copy_from_slice(IDENTITY_MAGIC);
            b[at + 4] = self.detached as u8;
            b[at + 5..at + 9].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
            if at + 9 + bytes.len() <= CODEC_AT {
                b[at + 9..at + 9 + bytes.len()].copy_from_slice(&bytes);
            } else {
                // Cannot happen (serial at most 1 KiB): recorded as absent.
                b[at..at + 9].fill(0);
            }
        }
        if self.compress.is_on() {
            b[CODEC_AT] = self.compress.id();
            b[CODEC_AT + 1..CODEC_AT + 5].copy_from_slice(&self.compress.level().to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..4092]);
        b[4092..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parse one copy; `None` when it is not a valid superblock.
    pub fn decode(b: &[u8]) -> Option<Superblock> {
        if b.len() < 4096
            || &b[..8] != MAGIC
            || crc32c::crc32c(&b[..4092]) != u32::from_le_bytes(b[4092..4096].try_into().ok()?)
        {
            return None;
        }
        let compress = match u32::from_le_bytes(b[8..12].try_into().ok()?) {
            VERSION => Codec::Off,
            VERSION_COMPRESSED => Codec::from_id(
                b[CODEC_AT],
                i32::from_le_bytes(b[CODEC_AT + 1..CODEC_AT + 5].try_into().ok()?),
            )
            .filter(Codec::is_on)?,
            _ => return None,
        };
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        let generation = u64_at(12);
        let clean = b[20] != 0;
        let write_policy = match b[21] {
            0 => WritePolicy::WriteBack,
            1 => WritePolicy::WriteThrough,
            _ => return None,
        };
        let v: Vec<u64> = (0..10).map(|i| u64_at(22 + 8 * i)).collect();
        let plen = u16::from_le_bytes(b[102..104].try_into().ok()?) as usize;
        if 104 + plen > CODEC_AT {
            return None;
        }
        let backing_path = String::from_utf8(b[104..104 + plen].to_vec()).ok()?;
        let at = IDENTITY_AT;
        let (identity, detached) = if 104 + plen <= at && &b[at..at + 4] == IDENTITY_MAGIC {
            let n = u32::from_le_bytes(b[at + 5..at + 9].try_into().ok()?) as usize;
            let bytes = b.get(at + 9..(at + 9).checked_add(n)?.min(CODEC_AT))?;
            let mut id = tiercache_store::BackingIdentity::from_bytes(bytes)?;
            id.path = backing_path.clone();
            (Some(id), b[at + 4] != 0 && clean)
        } else {
            (None, false)
        };
        let sb = Superblock {
            generation,
            clean,
            write_policy,
            dirty_target: f64::from_bits(v[0]),
            seg_bytes: v[1],
            nsegs: v[2] as u32,
            journal_off: v[3],
            journal_records: v[4] as u32,
            ckpt_off: [v[5], v[6]],
            ckpt_bytes: v[7],
            seg_off: v[8],
            backing_size: v[9],
            backing_path,
            compress,
            identity,
            detached,
        };
        geometry(sb.seg_bytes, compress).ok()?;
        Some(sb)
    }

    /// Why this superblock cannot describe a device of `dev_len` bytes
    /// (regions out of order, overlapping, past the end, or sizes that
    /// overflow), if it cannot. A CRC only proves the bytes were written
    /// as they are, not that a bug or a tool wrote sensible ones.
    pub fn validate(&self, dev_len: u64) -> Result<(), String> {
        let g = self.geometry();
        let entries = self.nsegs as u64 * g.data_blocks() as u64;
        let need_ckpt = (BLOCK + 8 * self.nsegs as u64 + 12 * entries).div_ceil(BLOCK) * BLOCK;
        let end = |off: u64, len: Option<u64>| len.and_then(|l| off.checked_add(l));
        let journal_end = end(self.journal_off, Some(self.journal_records as u64 * BLOCK));
        let c0_end = end(self.ckpt_off[0], Some(self.ckpt_bytes));
        let c1_end = end(self.ckpt_off[1], Some(self.ckpt_bytes));
        let segs_end = end(self.seg_off, self.seg_bytes.checked_mul(self.nsegs as u64));
        let ordered = [
            Some(8192),
            Some(self.journal_off),
            journal_end,
            Some(self.ckpt_off[0]),
            c0_end,
            Some(self.ckpt_off[1]),
            c1_end,
            Some(self.seg_off),
            segs_end,
            Some(dev_len),
        ];
        let in_order = ordered
            .windows(2)
            .all(|w| matches!(w, [Some(a), Some(b)] if a <= b));
        if self.nsegs == 0 || self.journal_records == 0 || !in_order {
            return Err(format!(
                "regions out of order or past the end of the {dev_len}-byte device"
            ));
        }
        if self.ckpt_bytes < need_ckpt {
            return Err(format!(
                "checkpoint area of {} bytes, {need_ckpt} needed for {} segments",
                self.ckpt_bytes, self.nsegs
            ));
        }
        if !(0.0..=1.0).contains(&self.dirty_target)
            || self.backing_size == 0
            || !self.backing_size.is_multiple_of(BLOCK)
        {
            return Err("dirty target or backing size out of range".into());
        }
        Ok(())
    }

    /// Read the newer valid copy from `dev`; a copy whose geometry does
    /// not fit the device (see [`Superblock::validate`]) is not valid.
    pub fn read(dev: &dyn BlockDev) -> Option<Superblock> {
        let mut b = vec![0u8; 8192];
        dev.read_at(&mut b, 0).ok()?;
        let fits = |s: &Superblock| s.validate(dev.len()).is_ok();
        let a = Superblock::decode(&b[..4096]).filter(fits);
        let c = Superblock::decode(&b[4096..]).filter(fits);
        match (a, c) {
            (Some(a), Some(c)) => Some(if c.generation > a.generation { c } else { a }),
            (a, c) => a.or(c),
        }
    }

    /// Write both copies (one, sync, the other, sync) with the next generation.
    pub fn write(&mut self, dev: &dyn BlockDev) -> std::io::Result<()> {
        self.write_then(dev, &|| ())
    }

    /// [`Superblock::write`], calling `after_copy` after each copy is synced
    /// (the resize crash tests stop there).
    pub fn write_then(&mut self, dev: &dyn BlockDev, after_copy: &dyn Fn()) -> std::io::Result<()> {
        // A (corrupted) superblock at the last generation is not wrapped
        // around to 0, which would make the older copy win.
        self.generation = self.generation.checked_add(1).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the superblock generation is at its maximum (corrupt superblock?)",
            )
        })?;
        let b = self.encode();
        for copy in [0u64, 4096] {
            dev.write_at(&b, copy)?;
            dev.flush()?;
            after_copy();
        }
        Ok(())
    }
}

/// The segment geometry of a layout with segments of `seg_bytes` and codec `c`.
pub fn geometry(seg_bytes: u64, c: Codec) -> Result<Geometry, String> {
    if c.is_on() {
        Geometry::compressed(seg_bytes)
    } else {
        Geometry::new(seg_bytes)
    }
}

/// Whether `path` holds a log-structured cache.
pub fn detect(path: &Path) -> bool {
    let Ok(f) = FileDev::open(path, FileDevOptions::default()) else {
        return false;
    };
    f.len() >= 8192 && Superblock::read(&f).is_some()
}

/// Place journal, checkpoints and segments on a device of `len` bytes.
pub fn plan(len: u64, seg_bytes: u64) -> Result<Superblock> {
    plan_with(len, seg_bytes, Codec::Off)
}

/// [`plan`] for a layout storing blocks with codec `compress`.
pub fn plan_with(len: u64, seg_bytes: u64, compress: Codec) -> Result<Superblock> {
    plan_reserving(len, seg_bytes, compress, len)
}

/// [`plan_with`], with checkpoint areas large enough for the segments of a
/// device of `max_len` bytes (at least `len`): `tiercache resize` can grow
/// the cache that far.
pub fn plan_reserving(
    len: u64,
    seg_bytes: u64,
    compress: Codec,
    max_len: u64,
) -> Result<Superblock> {
    let g = geometry(seg_bytes, compress).map_err(anyhow::Error::msg)?;
    let journal_off = 8192u64;
    let max_len = max_len.max(len);
    let guess = (len / seg_bytes) as u32;
    let max_guess = (max_len / seg_bytes) as u32;
    let journal_records = (guess / 4).clamp(16, 512);
    let ckpt_for = |nsegs: u32| {
        let entries = nsegs as u64 * g.data_blocks() as u64;
        (BLOCK + 8 * nsegs as u64 + 12 * entries).div_ceil(BLOCK) * BLOCK
    };
    // Room for the segments of the largest device the cache may grow to.
    let reserve = if max_len > len {
        ckpt_for(max_guess)
    } else {
        0
    };
    let place = |nsegs: u32| -> (u64, u64, u64) {
        let ckpt_bytes = ckpt_for(nsegs).max(reserve);
        let c0 = journal_off + journal_records as u64 * BLOCK;
        let end = c0 + 2 * ckpt_bytes;
        let seg_off = end.div_ceil(seg_bytes) * seg_bytes;
        (ckpt_bytes, c0, seg_off)
    };
    let mut nsegs = guess;
    while nsegs > 0 && place(nsegs).2 + nsegs as u64 * seg_bytes > len {
        nsegs -= 1;
    }
    if nsegs < 4 {
        bail!(
            "the cache device ({len} bytes) is too small: it needs room for at least 4 segments of {seg_bytes} bytes plus metadata"
        );
    }
    let (ckpt_bytes, c0, seg_off) = place(nsegs);
    Ok(Superblock {
        generation: 0,
        clean: true,
        write_policy: WritePolicy::WriteBack,
        dirty_target: 0.25,
        seg_bytes,
        nsegs,
        journal_off,
        journal_records,
        ckpt_off: [c0, c0 + ckpt_bytes],
        ckpt_bytes,
        seg_off,
        backing_size: 0,
        backing_path: String::new(),
        compress,
        identity: None,
        detached: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_fits_and_aligns() {
        let sb = plan(64 << 20, 1 << 20).unwrap();
        assert!(sb.seg_off.is_multiple_of(1 << 20));
        assert!(sb.seg_off + sb.nsegs as u64 * sb.seg_bytes <= 64 << 20);
        assert!(sb.ckpt_bytes >= 12 * sb.slots());
        assert!(sb.nsegs >= 50, "{}", sb.nsegs);
        assert!(plan(2 << 20, 1 << 20).is_err());
    }

    #[test]
    fn superblock_round_trip() {
        let mut sb = plan(64 << 20, 1 << 20).unwrap();
        sb.backing_path = "/tmp/x".into();
        sb.backing_size = 1 << 30;
        sb.write_policy = WritePolicy::WriteThrough;
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b), Some(sb.clone()));
        let mut bad = b.clone();
        bad[200] = 1;
        assert_eq!(Superblock::decode(&bad), None);
    }

    #[test]
    fn identity_and_detached_round_trip_and_older_superblocks_read() {
        let mut sb = plan(64 << 20, 1 << 20).unwrap();
        sb.backing_path = "/tmp/x".into();
        sb.backing_size = 1 << 30;
        // As an older build wrote it: no identity.
        assert_eq!(Superblock::decode(&sb.encode()), Some(sb.clone()));
        sb.identity = Some(tiercache_store::BackingIdentity {
            path: "/tmp/x".into(),
            size: 1 << 30,
            fingerprint: 7,
            file_id: Some((1, 2)),
            serial: None,
            sampled: Some(9),
            times: Some((10, 11)),
        });
        sb.detached = true;
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b), Some(sb.clone()));
        // The version is unchanged: an older build reads it (and ignores the identity).
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 1);
        // Detached only with a clean shutdown.
        sb.clean = false;
        assert!(!Superblock::decode(&sb.encode()).unwrap().detached);
        // The longest path format accepts leaves the identity room.
        sb.backing_path = "p".repeat(MAX_BACKING_PATH);
        sb.identity.as_mut().unwrap().path = sb.backing_path.clone();
        sb.clean = true;
        assert_eq!(Superblock::decode(&sb.encode()), Some(sb.clone()));
    }

    #[test]
    fn compressed_superblock_round_trip_and_versions() {
        let plain = plan(64 << 20, 1 << 20).unwrap();
        let mut sb = plan_with(64 << 20, 1 << 20, Codec::Zstd(5)).unwrap();
        sb.backing_path = "/tmp/x".into();
        sb.backing_size = 1 << 30;
        assert_eq!(sb.slots(), 4 * sb.nsegs as u64 * 252);
        assert!(sb.slots() > 3 * plain.slots());
        let b = sb.encode();
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 2);
        assert_eq!(Superblock::decode(&b), Some(sb.clone()));
        // A plain layout keeps version 1 (older binaries still open it).
        let mut p = plain.clone();
        p.backing_size = 1 << 30;
        assert_eq!(u32::from_le_bytes(p.encode()[8..12].try_into().unwrap()), 1);
        // An unknown codec or version is no superblock.
        for (at, v) in [(CODEC_AT, 7u8), (8, 3u8)] {
            let mut bad = b.clone();
            bad[at] = v;
            let crc = crc32c::crc32c(&bad[..4092]);
            bad[4092..].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(Superblock::decode(&bad), None);
        }
    }
}
