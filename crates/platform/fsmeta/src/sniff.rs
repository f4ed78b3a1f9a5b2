//! Content sniffing: recognise dynamic metadata blocks by their signatures
//! (table in `shared/notes/fs-metadata.md`).
//!
//! Checks read fixed offsets, mostly the first 64 bytes and the last 12.
//! XFS v5 blocks are accepted only if the self-describing header carries
//! this filesystem's UUID and this block's own address ("strict" mode);
//! ext4 blocks must agree with the filesystem's geometry (inode and block
//! counts, superblock UUID). An all-zero block is never metadata.

use std::collections::HashSet;

use tiercache_block::Class;

use crate::crc;
use crate::layout::{be16, be32, be64, le16, le32, Ext4Params, Layout, SniffParams, XfsParams};

/// Per-block content classifier for one filesystem.
///
/// ext4 with `metadata_csum` can additionally be run in *checksum mode*
/// ([`Sniffer::with_checksums`]): directory, htree and extent blocks are
/// then accepted only if their CRC32C was computed from the per-inode seed
/// of an inode this sniffer has learned from inode-table blocks
/// ([`Sniffer::learn`]), and xattr blocks only if their checksum matches
/// this filesystem and block number. That rejects the metadata of ext4
/// images stored as files, which otherwise looks exactly like metadata.
#[derive(Clone, Debug)]
pub struct Sniffer {
    params: SniffParams,
    /// Per-inode checksum seeds of in-use inodes (checksum mode only).
    seeds: Option<HashSet<u32>>,
}

impl Sniffer {
    /// Structural sniffer checking blocks against `layout`'s filesystem.
    pub fn new(layout: &Layout) -> Self {
        Sniffer {
            params: layout.sniff.clone(),
            seeds: None,
        }
    }

    /// Sniffer in checksum mode (see the type docs); it knows no inodes yet,
    /// so feed it the inode tables with [`Sniffer::learn`]. On filesystems
    /// without `metadata_csum` (and on XFS, whose v5 headers are already
    /// self-identifying) this is the same as [`Sniffer::new`].
    pub fn with_checksums(layout: &Layout) -> Self {
        let csum = matches!(&layout.sniff, SniffParams::Ext4(p) if p.csum);
        Sniffer {
            params: layout.sniff.clone(),
            seeds: csum.then(HashSet::new),
        }
    }

    /// Switch to a re-parsed layout of the same filesystem, keeping checksum
    /// mode and the learned seeds when the checksum seed is unchanged.
    pub(crate) fn update_layout(&mut self, layout: &Layout) {
        let keep = matches!((&self.params, &layout.sniff), (SniffParams::Ext4(a), SniffParams::Ext4(b)) if a.fs_seed == b.fs_seed && b.csum);
        let verify =
            self.seeds.is_some() && matches!(&layout.sniff, SniffParams::Ext4(p) if p.csum);
        self.params = layout.sniff.clone();
        if !keep {
            self.seeds = verify.then(HashSet::new);
        }
    }

    /// Whether checksum mode is active.
    pub fn verifies_checksums(&self) -> bool {
        self.seeds.is_some()
    }

    /// Number of inode seeds learned.
    pub fn learned_inodes(&self) -> usize {
        self.seeds.as_ref().map_or(0, HashSet::len)
    }

    /// If `block` is part of an ext4 inode table, learn the checksum seeds
    /// of the in-use inodes in `data` (its full contents). Returns whether
    /// the block was an inode-table block. A no-op outside checksum mode.
    pub fn learn(&mut self, block: u64, data: &[u8]) -> bool {
        let (SniffParams::Ext4(p), Some(seeds)) = (&self.params, self.seeds.as_mut()) else {
            return false;
        };
        let Some(first_ino) = p.inode_at(block) else {
            return false;
        };
        if data.len() != p.bs {
            return true;
        }
        for (k, inode) in data.chunks_exact(p.inode_size).enumerate() {
            let (mode, links) = (le16(inode, 0), le16(inode, 0x1A));
            if mode != 0 && links != 0 {
                seeds.insert(p.inode_seed(first_ino + k as u64, le32(inode, 0x64)));
            }
        }
        true
    }

    /// Blocks of the inode tables that may hold in-use inodes, as
    /// `(first_block, count)` runs (empty for XFS).
    pub fn used_inode_table_runs(&self) -> Vec<(u64, u64)> {
        match &self.params {
            SniffParams::Ext4(p) => p
                .itables
                .iter()
                .filter(|r| r.used > 0)
                .map(|r| {
                    (
                        r.first_block,
                        (r.used * p.inode_size as u64)
                            .div_ceil(p.bs as u64)
                            .min(r.blocks),
                    )
                })
                .collect(),
            SniffParams::Xfs(_) => Vec::new(),
        }
    }

    /// Filesystem block size the sniffer expects.
    pub fn block_size(&self) -> usize {
        match &self.params {
            SniffParams::Ext4(p) => p.bs,
            SniffParams::Xfs(p) => p.bs,
        }
    }

    /// `Some(Class::Metadata)` if `data`, the full contents of filesystem
    /// block `block`, carries a metadata signature; `None` if nothing is
    /// recognised (including all-zero blocks and blocks of the wrong size).
    pub fn sniff(&self, block: u64, data: &[u8]) -> Option<Class> {
        if data.len() != self.block_size() || data.iter().all(|&b| b == 0) {
            return None;
        }
        let hit = match &self.params {
            SniffParams::Ext4(p) => ext4(p, self.seeds.as_ref(), block, data),
            SniffParams::Xfs(p) => xfs(p, block, data),
        };
        hit.then_some(Class::Metadata)
    }
}

// ---------------------------------------------------------------- ext4

impl Ext4Params {
    /// Number of the first inode stored in inode-table block `block`.
    pub(crate) fn inode_at(&self, block: u64) -> Option<u64> {
        let i = self.itables.partition_point(|r| r.first_block <= block);
        let r = self.itables.get(i.checked_sub(1)?)?;
        let k = block - r.first_block;
        (k < r.blocks).then(|| r.first_ino + k * (self.bs / self.inode_size) as u64)
    }

    /// Per-inode checksum seed: crc32c(fs seed, inode number, generation).
    pub(crate) fn inode_seed(&self, ino: u64, generation: u32) -> u32 {
        crc::raw(
            crc::raw(self.fs_seed, &(ino as u32).to_le_bytes()),
            &generation.to_le_bytes(),
        )
    }
}

fn ext4(p: &Ext4Params, seeds: Option<&HashSet<u32>>, block: u64, d: &[u8]) -> bool {
    // In checksum mode, a checksummed block must unwind to a known seed.
    let seeded = |stored: u32, parts: &[&[u8]]| {
        seeds.map_or(true, |s| {
            s.contains(
                &parts
                    .iter()
                    .rev()
                    .fold(stored, |c, part| crc::unwind(c, part)),
            )
        })
    };
    if ext4_extent_block(p, d) {
        let tail = 12 + 12 * le16(d, 4) as usize;
        return !p.csum || seeded(le32(d, tail), &[&d[..tail]]);
    }
    if ext4_xattr_block(d) {
        return !p.csum || xattr_csum_ok(p, block, d);
    }
    if let Some(count_offset) = ext4_dx(p, d) {
        if !p.csum {
            return true;
        }
        let (limit, count) = (
            le16(d, count_offset) as usize,
            le16(d, count_offset + 2) as usize,
        );
        let t = count_offset + 8 * limit;
        if t + 8 > p.bs {
            return false;
        }
        return seeded(
            le32(d, t + 4),
            &[&d[..count_offset + 8 * count], &d[t..t + 4], &[0; 4]],
        );
    }
    if ext4_dir_block(p, d) {
        let t = p.bs - 12;
        return !p.csum || seeded(le32(d, t + 8), &[&d[..t]]);
    }
    ext4_superblock(p, d)
}

/// xattr block checksum: crc32c(fs seed, block number, block with h_checksum zeroed).
fn xattr_csum_ok(p: &Ext4Params, block: u64, d: &[u8]) -> bool {
    let c = crc::raw(p.fs_seed, &block.to_le_bytes());
    let c = crc::raw(crc::raw(crc::raw(c, &d[..0x10]), &[0; 4]), &d[0x14..]);
    c == le32(d, 0x10)
}

/// htree root or interior node; returns the offset of its count/limit.
fn ext4_dx(p: &Ext4Params, d: &[u8]) -> Option<usize> {
    if ext4_dx_root(p, d) {
        Some(32)
    } else if ext4_dx_node(p, d) {
        Some(8)
    } else {
        None
    }
}

/// Extent tree node: magic, `eh_max` filling the block, sane depth, and
/// every pointer inside the filesystem.
fn ext4_extent_block(p: &Ext4Params, d: &[u8]) -> bool {
    if le16(d, 0) != 0xF30A {
        return false;
    }
    let (entries, max, depth) = (le16(d, 2) as usize, le16(d, 4) as usize, le16(d, 6));
    if max != (p.bs - 12) / 12 || entries > max || depth > 5 {
        return false;
    }
    (0..entries).all(|k| {
        let e = &d[12 + 12 * k..24 + 12 * k];
        let ptr = if depth == 0 {
            (le16(e, 6) as u64) << 32 | le32(e, 8) as u64
        } else {
            (le16(e, 8) as u64) << 32 | le32(e, 4) as u64
        };
        ptr < p.blocks_count
    })
}

/// External xattr block: magic 0xEA020000 and `h_blocks` == 1.
fn ext4_xattr_block(d: &[u8]) -> bool {
    le32(d, 0) == 0xEA02_0000 && le32(d, 8) == 1 && le32(d, 4) >= 1
}

/// Walk a dirent chain from `start` to exactly `end`; every entry must be
/// well-formed with an inode number within the filesystem.
/// Returns the number of live entries, or `None` if malformed.
fn dirent_chain(p: &Ext4Params, d: &[u8], start: usize, end: usize) -> Option<usize> {
    let mut off = start;
    let mut live = 0;
    while off < end {
        if off + 8 > end {
            return None;
        }
        let ino = le32(d, off) as u64;
        let rec_len = le16(d, off + 4) as usize;
        let name_len = d[off + 6] as usize;
        let ftype = d[off + 7];
        if rec_len < 12 || rec_len % 4 != 0 || off + rec_len > end || 8 + name_len > rec_len {
            return None;
        }
        if ino != 0 {
            let name = &d[off + 8..off + 8 + name_len];
            if ino > p.inodes_count
                || name_len == 0
                || ftype > 7
                || name.iter().any(|&c| c == 0 || c == b'/')
            {
                return None;
            }
            live += 1;
        }
        off += rec_len;
    }
    (off == end).then_some(live)
}

/// Directory leaf block: with metadata_csum, a checksum tail
/// (`00000000 0C00 00 DE`) after a valid dirent chain; without, a valid
/// chain filling the block with at least one live entry.
fn ext4_dir_block(p: &Ext4Params, d: &[u8]) -> bool {
    let t = p.bs - 12;
    if p.csum {
        return d[t..t + 8] == [0, 0, 0, 0, 0x0C, 0, 0, 0xDE] && dirent_chain(p, d, 0, t).is_some();
    }
    matches!(dirent_chain(p, d, 0, p.bs), Some(n) if n > 0)
}

/// Valid dx entry header: `limit` one of the allowed values, 0 < count <= limit.
fn dx_counts(d: &[u8], at: usize, limits: [usize; 2]) -> bool {
    let (limit, count) = (le16(d, at) as usize, le16(d, at + 2) as usize);
    limits.contains(&limit) && count > 0 && count <= limit
}

/// htree root: `.` and `..` entries, dx_root_info, and dx counts.
fn ext4_dx_root(p: &Ext4Params, d: &[u8]) -> bool {
    let dot_ok = le16(d, 4) == 12 && d[6] == 1 && d[8] == b'.' && le32(d, 0) != 0;
    let dotdot_ok = le16(d, 16) as usize == p.bs - 12 && d[18] == 2 && &d[20..22] == b"..";
    let max_levels = if p.largedir { 3 } else { 2 };
    let info_ok = le32(d, 24) == 0 && d[29] == 8 && d[30] <= max_levels;
    let ino_ok = (le32(d, 0) as u64) <= p.inodes_count && (le32(d, 12) as u64) <= p.inodes_count;
    dot_ok && dotdot_ok && info_ok && ino_ok && dx_counts(d, 32, [(p.bs - 32) / 8, (p.bs - 40) / 8])
}

/// htree interior node: a fake empty dirent spanning the block, then dx counts.
fn ext4_dx_node(p: &Ext4Params, d: &[u8]) -> bool {
    let rec_len = le16(d, 4) as usize;
    let fake = le32(d, 0) == 0
        && (rec_len == p.bs || (p.bs == 65536 && rec_len == 0))
        && d[6] == 0
        && d[7] == 0;
    fake && dx_counts(d, 8, [(p.bs - 8) / 8, (p.bs - 16) / 8])
}

/// Superblock copy of *this* filesystem (UUID match), at block start.
fn ext4_superblock(p: &Ext4Params, d: &[u8]) -> bool {
    let at = |o: usize| le16(d, o + 0x38) == 0xEF53 && d[o + 0x68..o + 0x78] == p.uuid;
    at(0) || (p.bs > 1024 && at(1024))
}

// ---------------------------------------------------------------- XFS

/// Short-form btree magics (free space, inode, rmap, refcount).
const SHORT_BT_V5: [&[u8; 4]; 6] = [b"AB3B", b"AB3C", b"IAB3", b"FIB3", b"RMB3", b"R3FC"];
const SHORT_BT_V4: [&[u8; 4]; 4] = [b"ABTB", b"ABTC", b"IABT", b"FIBT"];
const DA_V5: [u16; 4] = [0x3df1, 0x3dff, 0x3ebe, 0x3bee];
const DA_V4: [u16; 4] = [0xd2f1, 0xd2ff, 0xfebe, 0xfbee];

fn xfs(p: &XfsParams, block: u64, d: &[u8]) -> bool {
    let magic: &[u8] = &d[0..4];
    if magic == b"XFSB" {
        return d[32..48] == p.sb_uuid;
    }
    if be16(d, 0) == 0x494e {
        return xfs_inodes(p, block, d);
    }
    if p.v5 {
        // Self-describing header: (blkno offset, uuid offset) per magic.
        let hdr = if SHORT_BT_V5.iter().any(|m| magic == *m) {
            Some((16, 32))
        } else if magic == b"BMA3" {
            Some((24, 40))
        } else if magic == b"XDB3" || magic == b"XDD3" || magic == b"XDF3" {
            Some((8, 24))
        } else if magic == b"XARM" || magic == b"XSLM" {
            Some((40, 16))
        } else if DA_V5.contains(&be16(d, 8)) {
            Some((16, 32))
        } else {
            None
        };
        return hdr.is_some_and(|(b, u)| self_describing(p, block, d, b, u));
    }
    // v4: no UUID or self address; check structure instead.
    if SHORT_BT_V4.iter().any(|m| magic == *m) {
        let sib_ok = |o| {
            let s = be32(d, o) as u64;
            s == 0xFFFF_FFFF || s < p.agblocks
        };
        return be16(d, 4) < 10
            && (be16(d, 6) as usize) <= (p.bs - 16) / 8
            && sib_ok(8)
            && sib_ok(12);
    }
    if magic == b"BMAP" {
        let sib_ok = |o| {
            let s = be64(d, o);
            s == u64::MAX
                || ((s >> p.agblklog) < p.agcount && (s & ((1 << p.agblklog) - 1)) < p.agblocks)
        };
        return be16(d, 4) < 10
            && (be16(d, 6) as usize) <= (p.bs - 24) / 16
            && sib_ok(8)
            && sib_ok(16);
    }
    if magic == b"XD2B" || magic == b"XD2D" {
        // bestfree[3]: offsets 8-aligned inside the block, zero length iff zero offset.
        return (0..3).all(|k| {
            let (off, len) = (be16(d, 4 + 4 * k) as usize, be16(d, 6 + 4 * k) as usize);
            off % 8 == 0 && off < p.bs && len % 8 == 0 && (off == 0) == (len == 0)
        });
    }
    if magic == b"XD2F" {
        let (nvalid, nused) = (be32(d, 8) as usize, be32(d, 12) as usize);
        return nvalid <= (p.bs - 16) / 2 && nused <= nvalid;
    }
    let m8 = be16(d, 8);
    if DA_V4.contains(&m8) && be16(d, 10) == 0 {
        let (a, b) = (be16(d, 12) as usize, be16(d, 14) as usize);
        return match m8 {
            0xd2f1 | 0xd2ff => a > 0 && a <= (p.bs - 16) / 8 && b <= a,
            0xfebe => a > 0 && a <= (p.bs - 16) / 8 && (1..=5).contains(&b),
            _ => a > 0 && a <= p.bs / 8 && b <= p.bs && (be16(d, 16) as usize) <= p.bs,
        };
    }
    false
}

/// v5 header check: `blkno` (in 512-byte units) is this block's address and
/// the UUID is this filesystem's metadata UUID.
fn self_describing(p: &XfsParams, block: u64, d: &[u8], blkno_at: usize, uuid_at: usize) -> bool {
    be64(d, blkno_at) == block * (p.bs as u64 / 512) && d[uuid_at..uuid_at + 16] == p.meta_uuid
}

/// Inode cluster block: every inode slot has the `IN` magic and a valid
/// version; v5 also needs the fs UUID and the slot's own inode number.
fn xfs_inodes(p: &XfsParams, block: u64, d: &[u8]) -> bool {
    let (agno, agbno) = (block / p.agblocks, block % p.agblocks);
    let first_ino = ((agno << p.agblklog) | agbno) << p.inopblog;
    d.chunks_exact(p.inodesize).enumerate().all(|(k, ino)| {
        if be16(ino, 0) != 0x494e || ino[5] > 5 {
            return false;
        }
        if p.v5 {
            ino[4] == 3 && be64(ino, 152) == first_ino + k as u64 && ino[160..176] == p.meta_uuid
        } else {
            ino[4] == 1 || ino[4] == 2
        }
    })
}
