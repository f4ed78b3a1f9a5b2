//! The tiered volume's superblock and on-disk layout.
//!
//! Everything the volume persists besides block data lives at the start of
//! the **fastest tier** (tier 0), in this order:
//!
//! | offset | size | what |
//! |---|---|---|
//! | 0 | 4 KiB | superblock (copy 0) |
//! | 4 KiB | 4 KiB | superblock (copy 1, identical) |
//! | 8 KiB | `checkpoint_bytes` | mapping checkpoint region A |
//! | 8 KiB + C | `checkpoint_bytes` | mapping checkpoint region B |
//! | 8 KiB + 2C | `log_bytes` | migration log (64-byte records) |
//! | `data_offset` | `fast_slots` x block size | fast-tier data slots |
//!
//! `data_offset` is rounded up to the block size. The slow (capacity) tier
//! holds data only, in one of two layouts ([`Capacity`]):
//! - `slow` (format version 1): block `b`'s home is at byte `b x block size`
//!   of it, so the slow tier read alone is the volume wherever no block was
//!   promoted; the volume is the slow tier's size.
//! - `sum` (format version 2): the slow tier is `slow_slots` slots like the
//!   fast tier's, every block has exactly one slot on one tier, and the
//!   volume is `fast_slots + slow_slots - 2` blocks (one scratch slot per
//!   tier for exchanges).
//!
//! The superblock is written once, at format time (both copies, each with a
//! CRC32C over its first 4092 bytes); nothing in it changes while serving.

use std::path::Path;

use tiercache_store::BackingIdentity;

/// Bytes of a checkpoint region's header: the layout sizes the regions
/// with it, the journal writes it.
pub const CHECKPOINT_HEADER: usize = 64;
/// First 8 bytes of a tiered-volume superblock.
pub const MAGIC: &[u8; 8] = b"TIERVOL1";
/// Newest on-disk format version this build writes and reads: 1 for a
/// `slow` volume (as older builds wrote it), 2 for a `sum` volume.
pub const VERSION: u32 = 2;
/// Bytes of one superblock copy.
pub const SB_BYTES: u64 = 4096;
/// Bytes of the migration log region.
pub const LOG_BYTES: u64 = 256 << 10;
/// Largest path or policy string the superblock stores.
const MAX_STRING: usize = 1024;

/// What is wrong with a superblock or a requested geometry.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("not a tiered volume (no {MAGIC:?} superblock)")]
    NotTiered,
    #[error("damaged tiered-volume superblock: {0}")]
    Damaged(String),
    #[error("unsupported tiered-volume format version {0} (this build reads {VERSION})")]
    Version(u32),
    #[error("{0}")]
    Geometry(String),
}

/// What the volume's capacity is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Capacity {
    /// Both tiers minus metadata: each block lives in exactly one slot of
    /// either tier (OODT's design).
    #[default]
    Sum,
    /// The slow tier's size: every block keeps a home on the slow tier
    /// (converting an existing disk in place; the fast tier adds speed only).
    Slow,
}

impl std::str::FromStr for Capacity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sum" => Ok(Capacity::Sum),
            "slow" => Ok(Capacity::Slow),
            _ => Err(format!(
                "capacity '{s}' is not understood (allowed: sum, slow)"
            )),
        }
    }
}

impl std::fmt::Display for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Capacity::Sum => "sum",
            Capacity::Slow => "slow",
        })
    }
}

/// One tier as recorded at format time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierRecord {
    /// Identity of the device or file (path, size, inode or serial).
    pub identity: BackingIdentity,
}

/// Where each region lives on the fast tier (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Byte offsets of checkpoint regions A and B.
    pub checkpoint_offsets: [u64; 2],
    /// Bytes of each checkpoint region.
    pub checkpoint_bytes: u64,
    /// Byte offset of the migration log.
    pub log_offset: u64,
    /// Bytes of the migration log (64 bytes per record).
    pub log_bytes: u64,
    /// Byte offset of fast-tier slot 0.
    pub data_offset: u64,
    /// Data slots of the fast tier.
    pub fast_slots: u64,
    /// Data slots of the slow tier from its byte 0 (`sum`); 0 for `slow`
    /// (one home per block instead).
    pub slow_slots: u64,
}

/// Bytes of a mapping checkpoint of `blocks` blocks with two tiers: the
/// region header plus [`tiercache_oodt_policy::MappingTable::checkpoint`]'s size
/// (either version).
pub fn checkpoint_bytes(blocks: u64) -> u64 {
    let payload = 8 + 4 + 1 + 8 + 8 + 8 + 4 * blocks + 4;
    (CHECKPOINT_HEADER as u64 + payload).div_ceil(4096) * 4096
}

impl Layout {
    /// Whether this layout can be one [`Layout::compute`] or
    /// [`Layout::compute_sum`] made for `blocks` blocks of `block_bytes`:
    /// the regions in their order, back to back, sized for the mapping,
    /// the data aligned after them, slot counts in range (the regions' sizes
    /// are bounded by the fast tier's, checked when it is opened). A superblock
    /// with a valid checksum but another layout is damaged (reading or
    /// writing by it would hit the wrong regions or allocate absurd sizes).
    pub fn validate(&self, block_bytes: u32, blocks: u64) -> Result<(), String> {
        let bs = u64::from(block_bytes);
        if !(4096..=4 << 20).contains(&block_bytes) || !block_bytes.is_power_of_two() {
            return Err(format!("block size {block_bytes}"));
        }
        let max = tiercache_oodt_policy::mapping::MAX_FAST_SLOTS;
        if self.fast_slots > max || self.slow_slots > max {
            return Err(format!(
                "{} fast and {} slow slots",
                self.fast_slots, self.slow_slots
            ));
        }
        let c = self.checkpoint_bytes;
        let a = 2 * SB_BYTES;
        let ok = c.is_multiple_of(4096)
            // Older builds sized it a few bytes smaller: at least the table.
            && c >= CHECKPOINT_HEADER as u64 + 4 * blocks
            && c <= u64::MAX / 4
            && self.checkpoint_offsets == [a, a + c]
            && self.log_offset == a + 2 * c
            && self.log_bytes == LOG_BYTES
            && self.data_offset == (self.log_offset + self.log_bytes).div_ceil(bs) * bs;
        if !ok {
            return Err(format!("layout {self:?} is not one this build makes"));
        }
        Ok(())
    }

    /// The layout of a fast tier of `fast_bytes` for a volume of `blocks`
    /// blocks of `block_bytes`.
    pub fn compute(fast_bytes: u64, blocks: u64, block_bytes: u32) -> Result<Layout, FormatError> {
        let c = checkpoint_bytes(blocks);
        let a = 2 * SB_BYTES;
        let log_offset = a + 2 * c;
        let bs = u64::from(block_bytes);
        let data_offset = (log_offset + LOG_BYTES).div_ceil(bs) * bs;
        let fast_slots = fast_bytes.saturating_sub(data_offset) / bs;
        if fast_slots == 0 {
            return Err(FormatError::Geometry(format!(
                "the fast tier of {fast_bytes} bytes has no room for data: its metadata takes {data_offset} bytes and one block is {block_bytes} bytes (make it larger)"
            )));
        }
        Ok(Layout {
            checkpoint_offsets: [a, a + c],
            checkpoint_bytes: c,
            log_offset,
            log_bytes: LOG_BYTES,
            data_offset,
            fast_slots: fast_slots.min(tiercache_oodt_policy::mapping::MAX_FAST_SLOTS),
            slow_slots: 0,
        })
    }

    /// The layout of a `sum` volume over a fast tier of `fast_bytes` and a
    /// slow one of `slow_bytes`, and its number of blocks:
    /// `fast_slots + slow_slots - 2`. The checkpoint regions are sized for
    /// the blocks both tiers would hold without metadata (an upper bound).
    pub fn compute_sum(
        fast_bytes: u64,
        slow_bytes: u64,
        block_bytes: u32,
    ) -> Result<(Layout, u64), FormatError> {
        let bs = u64::from(block_bytes);
        let max = tiercache_oodt_policy::mapping::MAX_FAST_SLOTS;
        let slow_slots = slow_bytes / bs;
        if slow_slots < 2 || slow_slots > max {
            return Err(FormatError::Geometry(format!(
                "the slow tier of {slow_bytes} bytes holds {slow_slots} blocks of {block_bytes} bytes (allowed: 2 to {max})"
            )));
        }
        let mut l = Layout::compute(fast_bytes, fast_bytes / bs + slow_slots, block_bytes)?;
        if l.fast_slots < 2 {
            return Err(FormatError::Geometry(format!(
                "the fast tier of {fast_bytes} bytes has room for {} data blocks after its metadata (at least 2 needed)",
                l.fast_slots
            )));
        }
        l.slow_slots = slow_slots;
        Ok((l, l.fast_slots + slow_slots - 2))
    }
}

/// The superblock: what the volume is and where its parts are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Identity of the volume, set at format time.
    pub uuid: [u8; 16],
    /// Tiering block size in bytes.
    pub block_bytes: u32,
    /// Exported size: the slow tier's size (`slow`) or the blocks both
    /// tiers hold (`sum`).
    pub volume_bytes: u64,
    /// What the volume's capacity is (version 1 superblocks: `slow`).
    pub capacity: Capacity,
    /// The placement policy and planner settings, as JSON ([`crate::VolumeConfig`]).
    pub config: String,
    /// Tiers, fastest first.
    pub tiers: Vec<TierRecord>,
    /// Where the metadata and the fast tier's slots are.
    pub layout: Layout,
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        if self.0.len() < n {
            return Err(FormatError::Damaged("truncated".into()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn str(&mut self) -> Result<String, FormatError> {
        let n = self.u32()? as usize;
        if n > MAX_STRING {
            return Err(FormatError::Damaged(format!("string of {n} bytes")));
        }
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| FormatError::Damaged("string is not UTF-8".into()))
    }
}

impl Superblock {
    /// One 4 KiB copy: fields, zero padding, CRC32C of the first 4092 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, FormatError> {
        let mut w = Writer(Vec::with_capacity(SB_BYTES as usize));
        w.0.extend_from_slice(MAGIC);
        // A `slow` volume stays version 1, readable by older builds.
        let sum = self.capacity == Capacity::Sum;
        w.u32(if sum { 2 } else { 1 });
        w.0.extend_from_slice(&self.uuid);
        w.u32(self.block_bytes);
        w.u64(self.volume_bytes);
        let l = &self.layout;
        for v in [
            l.checkpoint_offsets[0],
            l.checkpoint_offsets[1],
            l.checkpoint_bytes,
            l.log_offset,
            l.log_bytes,
            l.data_offset,
            l.fast_slots,
        ] {
            w.u64(v);
        }
        if self.config.len() > MAX_STRING {
            return Err(FormatError::Geometry("policy settings too long".into()));
        }
        w.str(&self.config);
        w.u8(self.tiers.len() as u8);
        for t in &self.tiers {
            let id = &t.identity;
            if id.path.len() > MAX_STRING {
                return Err(FormatError::Geometry(format!(
                    "tier path longer than {MAX_STRING} bytes: {}",
                    id.path
                )));
            }
            w.str(&id.path);
            w.u64(id.size);
            w.u32(id.fingerprint);
            match id.file_id {
                Some((d, i)) => {
                    w.u8(1);
                    w.u64(d);
                    w.u64(i);
                }
                None => w.u8(0),
            }
            w.str(id.serial.as_deref().unwrap_or(""));
        }
        if sum {
            w.u8(1);
            w.u64(self.layout.slow_slots);
        }
        if w.0.len() > SB_BYTES as usize - 4 {
            return Err(FormatError::Geometry(
                "tier paths do not fit in the superblock".into(),
            ));
        }
        w.0.resize(SB_BYTES as usize - 4, 0);
        let crc = crc32c::crc32c(&w.0);
        w.u32(crc);
        Ok(w.0)
    }

    /// Decode one copy, checking magic, version and checksum.
    pub fn decode(b: &[u8]) -> Result<Superblock, FormatError> {
        if b.len() < SB_BYTES as usize || &b[..8] != MAGIC {
            return Err(FormatError::NotTiered);
        }
        let b = &b[..SB_BYTES as usize];
        let crc = u32::from_le_bytes(b[4092..].try_into().expect("4"));
        if crc32c::crc32c(&b[..4092]) != crc {
            return Err(FormatError::Damaged("checksum mismatch".into()));
        }
        let mut r = Reader(&b[8..4092]);
        let version = r.u32()?;
        if version == 0 || version > VERSION {
            return Err(FormatError::Version(version));
        }
        let uuid: [u8; 16] = r.take(16)?.try_into().expect("16");
        let block_bytes = r.u32()?;
        let volume_bytes = r.u64()?;
        let mut v = [0u64; 7];
        for x in &mut v {
            *x = r.u64()?;
        }
        let mut layout = Layout {
            checkpoint_offsets: [v[0], v[1]],
            checkpoint_bytes: v[2],
            log_offset: v[3],
            log_bytes: v[4],
            data_offset: v[5],
            fast_slots: v[6],
            slow_slots: 0,
        };
        let config = r.str()?;
        let n = r.u8()?;
        if n != 2 {
            return Err(FormatError::Damaged(format!(
                "{n} tiers (this build serves 2)"
            )));
        }
        let mut tiers = Vec::new();
        for _ in 0..n {
            let path = r.str()?;
            let size = r.u64()?;
            let fingerprint = r.u32()?;
            let file_id = match r.u8()? {
                0 => None,
                1 => Some((r.u64()?, r.u64()?)),
                x => return Err(FormatError::Damaged(format!("file id tag {x}"))),
            };
            let serial = Some(r.str()?).filter(|s| !s.is_empty());
            tiers.push(TierRecord {
                identity: BackingIdentity {
                    path,
                    size,
                    fingerprint,
                    file_id,
                    serial,
                    sampled: None,
                    times: None,
                },
            });
        }
        let mut capacity = Capacity::Slow;
        if version >= 2 {
            match r.u8()? {
                0 => {}
                1 => capacity = Capacity::Sum,
                x => return Err(FormatError::Damaged(format!("capacity tag {x}"))),
            }
            layout.slow_slots = r.u64()?;
        }
        if block_bytes == 0 || volume_bytes == 0 || layout.fast_slots == 0 {
            return Err(FormatError::Damaged("zero geometry".into()));
        }
        if capacity == Capacity::Sum
            && (layout.slow_slots < 2
                || layout
                    .fast_slots
                    .checked_add(layout.slow_slots - 2)
                    .and_then(|n| n.checked_mul(u64::from(block_bytes)))
                    != Some(volume_bytes))
        {
            return Err(FormatError::Damaged(
                "sum volume size does not match its slots".into(),
            ));
        }
        layout
            .validate(block_bytes, volume_bytes.div_ceil(u64::from(block_bytes)))
            .map_err(FormatError::Damaged)?;
        Ok(Superblock {
            uuid,
            block_bytes,
            volume_bytes,
            capacity,
            config,
            tiers,
            layout,
        })
    }

    /// Read the superblock of the fast tier at `path` (copy 0, else copy 1).
    pub fn read(path: &Path) -> Result<Superblock, anyhow::Error> {
        let f = std::fs::File::open(path)?;
        let mut b = vec![0u8; 2 * SB_BYTES as usize];
        let n = read_up_to(&f, &mut b)?;
        match Superblock::decode(&b[..n.min(SB_BYTES as usize)]) {
            Ok(sb) => Ok(sb),
            Err(e) => Superblock::decode(&b[(SB_BYTES as usize).min(n)..n]).map_err(|_| e.into()),
        }
    }

    /// Blocks of the volume (the last one may be partial).
    pub fn blocks(&self) -> u64 {
        self.volume_bytes.div_ceil(u64::from(self.block_bytes))
    }

    /// The uuid as text.
    pub fn uuid_string(&self) -> String {
        uuid::Uuid::from_bytes(self.uuid).to_string()
    }
}

fn read_up_to(f: &std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut at = 0;
    while at < buf.len() {
        match f.read_at(&mut buf[at..], at as u64)? {
            0 => break,
            n => at += n,
        }
    }
    Ok(at)
}

/// Whether `path` starts with a tiered-volume superblock magic (either copy).
pub fn is_tiered_volume(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    let mut b = vec![0u8; 2 * SB_BYTES as usize];
    let n = read_up_to(&f, &mut b).unwrap_or(0);
    (n >= 8 && &b[..8] == MAGIC) || (n >= SB_BYTES as usize + 8 && &b[4096..4104] == MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        let layout = Layout::compute(8 << 20, 256, 65536).unwrap();
        Superblock {
            uuid: [7; 16],
            block_bytes: 65536,
            volume_bytes: 16 << 20,
            capacity: Capacity::Slow,
            config: r#"{"policy":"oodt"}"#.into(),
            tiers: vec![
                TierRecord {
                    identity: BackingIdentity {
                        path: "/dev/fast".into(),
                        size: 8 << 20,
                        fingerprint: 1,
                        file_id: None,
                        serial: Some("SN1".into()),
                        sampled: None,
                        times: None,
                    },
                },
                TierRecord {
                    identity: BackingIdentity {
                        path: "/srv/slow.img".into(),
                        size: 16 << 20,
                        fingerprint: 2,
                        file_id: Some((3, 4)),
                        serial: None,
                        sampled: None,
                        times: None,
                    },
                },
            ],
            layout,
        }
    }

    #[test]
    fn layout_puts_metadata_first_and_aligns_data_to_blocks() {
        let l = Layout::compute(8 << 20, 256, 65536).unwrap();
        assert_eq!(l.checkpoint_offsets[0], 8192);
        assert_eq!(l.checkpoint_bytes, 4096);
        assert_eq!(l.checkpoint_offsets[1], 8192 + 4096);
        assert_eq!(l.log_offset, 8192 + 8192);
        assert_eq!(l.data_offset % 65536, 0);
        assert!(l.data_offset >= l.log_offset + l.log_bytes);
        assert_eq!(l.fast_slots, ((8 << 20) - l.data_offset) / 65536);
        let e = Layout::compute(300 << 10, 256, 65536).unwrap_err();
        assert!(e.to_string().contains("no room"), "{e}");
    }

    #[test]
    fn sum_layout_is_both_tiers_minus_metadata_and_two_scratch_slots() {
        let (l, blocks) = Layout::compute_sum(128 << 20, 256 << 20, 1 << 20).unwrap();
        // 1 MiB of metadata (rounded to a block) on the fast tier.
        assert_eq!(
            (l.data_offset, l.fast_slots, l.slow_slots),
            (1 << 20, 127, 256)
        );
        assert_eq!(blocks, 381);
        let e = Layout::compute_sum(128 << 20, 1 << 20, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("allowed: 2"), "{e}");
    }

    #[test]
    fn slow_volumes_stay_version_1_and_sum_volumes_round_trip_as_version_2() {
        let sb = sample();
        let b = sb.encode().unwrap();
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 1);
        let (layout, blocks) = Layout::compute_sum(8 << 20, 16 << 20, 65536).unwrap();
        let sum = Superblock {
            capacity: Capacity::Sum,
            volume_bytes: blocks * 65536,
            layout,
            ..sb
        };
        let b = sum.encode().unwrap();
        assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 2);
        assert_eq!(Superblock::decode(&b).unwrap(), sum);
    }

    #[test]
    fn superblock_round_trips_and_detects_damage() {
        let sb = sample();
        let b = sb.encode().unwrap();
        assert_eq!(b.len(), 4096);
        assert_eq!(Superblock::decode(&b).unwrap(), sb);
        for at in [9, 30, 100, 4093] {
            let mut bad = b.clone();
            bad[at] ^= 0x40;
            assert!(
                matches!(Superblock::decode(&bad), Err(FormatError::Damaged(_))),
                "flip at {at}"
            );
        }
        let mut other = b.clone();
        other[0] = b'X';
        assert!(matches!(
            Superblock::decode(&other),
            Err(FormatError::NotTiered)
        ));
        assert!(matches!(
            Superblock::decode(&b[..100]),
            Err(FormatError::NotTiered)
        ));
    }

    #[test]
    fn the_second_copy_is_used_when_the_first_is_torn() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fast");
        let sb = sample();
        let b = sb.encode().unwrap();
        let mut file = b.clone();
        file.extend_from_slice(&b);
        file[200] ^= 1;
        std::fs::write(&p, &file).unwrap();
        assert!(is_tiered_volume(&p));
        assert_eq!(Superblock::read(&p).unwrap(), sb);
        file[4096 + 200] ^= 1;
        std::fs::write(&p, &file).unwrap();
        assert!(Superblock::read(&p).is_err());
        std::fs::write(&p, b"plain data").unwrap();
        assert!(!is_tiered_volume(&p));
    }
}
