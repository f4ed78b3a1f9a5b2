//! ext2/3/4 layout parsing (see `shared/notes/fs-metadata.md`).
//!
//! Static metadata: every superblock copy (sparse_super, sparse_super2 or
//! all groups), the group descriptor table with its reserved GDT blocks
//! (or the meta_bg descriptor blocks), block and inode bitmaps, inode
//! tables, the resize inode's DIND block, and the journal (inode 8, mapped
//! from `s_jnl_blocks` or the inode itself) as its own class.

mod mapping;

use crate::crc;
use crate::device::ReadAt;
use crate::error::{FsMetaError, Result};
use crate::layout::{
    check_extent, le16, le32, read, CriticalBlock, Ext4Params, Filesystem, ItableRun, Layout,
    SniffParams,
};
use crate::ranges::BlockRanges;

const COMPAT_HAS_JOURNAL: u32 = 0x4;
const COMPAT_RESIZE_INODE: u32 = 0x10;
const COMPAT_SPARSE_SUPER2: u32 = 0x200;
const INCOMPAT_JOURNAL_DEV: u32 = 0x8;
const INCOMPAT_META_BG: u32 = 0x10;
const INCOMPAT_64BIT: u32 = 0x80;
const INCOMPAT_LARGEDIR: u32 = 0x4000;
const INCOMPAT_CSUM_SEED: u32 = 0x2000;
const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
const RO_COMPAT_GDT_CSUM: u32 = 0x10;
const RO_COMPAT_METADATA_CSUM: u32 = 0x400;
const BG_INODE_UNINIT: u16 = 0x1;
const RO_COMPAT_BIGALLOC: u32 = 0x200;
const EXTENT_MAGIC: u16 = 0xF30A;
const EXTENTS_FL: u32 = 0x80000;

/// Superblock byte ranges the layout depends on (offsets in the superblock).
const SB_FIELDS: [(usize, usize); 10] = [
    (0x0, 0x8),     // inodes and blocks count
    (0x14, 0x2C),   // first data block .. inodes per group
    (0x58, 0x5A),   // inode size
    (0x5C, 0x78),   // features, uuid
    (0xCE, 0xD0),   // reserved GDT blocks
    (0xE0, 0xE4),   // journal inode
    (0xFD, 0x100),  // journal backup type, desc size
    (0x104, 0x108), // first meta_bg
    (0x10C, 0x154), // s_jnl_blocks, blocks count hi
    (0x24C, 0x254), // sparse_super2 backup groups
];

struct Sb {
    bs: u64,
    inodes_count: u64,
    blocks_count: u64,
    first_data_block: u64,
    bpg: u64,
    ipg: u64,
    inode_size: u64,
    compat: u32,
    incompat: u32,
    ro_compat: u32,
    uuid: [u8; 16],
    reserved_gdt: u64,
    journal_inum: u32,
    jnl_backup_type: u8,
    desc_size: u64,
    first_meta_bg: u64,
    jnl_blocks: [u8; 60],
    backup_bgs: [u64; 2],
    checksum_seed: u32,
}

fn bad(offset: u64, reason: impl Into<String>) -> FsMetaError {
    FsMetaError::BadSuperblock {
        filesystem: "ext4",
        offset,
        reason: reason.into(),
    }
}

fn parse_sb(s: &[u8], base: u64) -> Result<Sb> {
    let log = le32(s, 0x18);
    if log > 6 {
        return Err(bad(
            base,
            format!("s_log_block_size {log} > 6 (block sizes 1 KiB to 64 KiB are allowed)"),
        ));
    }
    let bs = 1024u64 << log;
    let incompat = le32(s, 0x60);
    let ro_compat = le32(s, 0x64);
    if incompat & INCOMPAT_JOURNAL_DEV != 0 {
        return Err(bad(
            base,
            "this is an external journal device, not a filesystem",
        ));
    }
    if ro_compat & RO_COMPAT_BIGALLOC != 0 {
        return Err(bad(
            base,
            "bigalloc is not supported (only one-block clusters)",
        ));
    }
    let is64 = incompat & INCOMPAT_64BIT != 0;
    let blocks_count = le32(s, 0x4) as u64
        | if is64 {
            (le32(s, 0x150) as u64) << 32
        } else {
            0
        };
    let rev = le32(s, 0x4C);
    let inode_size = if rev == 0 { 128 } else { le16(s, 0x58) as u64 };
    let desc_size = if is64 { le16(s, 0xFE) as u64 } else { 32 };
    let sb = Sb {
        bs,
        inodes_count: le32(s, 0x0) as u64,
        blocks_count,
        first_data_block: le32(s, 0x14) as u64,
        bpg: le32(s, 0x20) as u64,
        ipg: le32(s, 0x28) as u64,
        inode_size,
        compat: le32(s, 0x5C),
        incompat,
        ro_compat,
        uuid: s[0x68..0x78].try_into().expect("16 bytes"),
        reserved_gdt: le16(s, 0xCE) as u64,
        journal_inum: le32(s, 0xE0),
        jnl_backup_type: s[0xFD],
        desc_size,
        first_meta_bg: le32(s, 0x104) as u64,
        jnl_blocks: s[0x10C..0x148].try_into().expect("60 bytes"),
        backup_bgs: [le32(s, 0x24C) as u64, le32(s, 0x250) as u64],
        checksum_seed: le32(s, 0x270),
    };
    if sb.bpg == 0 || sb.bpg > 8 * bs {
        return Err(bad(
            base,
            format!("s_blocks_per_group {} must be in 1..={}", sb.bpg, 8 * bs),
        ));
    }
    if sb.ipg == 0 || sb.ipg > 8 * bs {
        return Err(bad(
            base,
            format!("s_inodes_per_group {} must be in 1..={}", sb.ipg, 8 * bs),
        ));
    }
    if !(128..=bs).contains(&inode_size) || !inode_size.is_power_of_two() {
        return Err(bad(
            base,
            format!("inode size {inode_size} must be a power of two in 128..={bs}"),
        ));
    }
    if !(32..=1024).contains(&desc_size) || !desc_size.is_power_of_two() {
        return Err(bad(
            base,
            format!("descriptor size {desc_size} must be a power of two in 32..=1024"),
        ));
    }
    if sb.first_data_block >= blocks_count {
        return Err(bad(
            base,
            "s_first_data_block is beyond the end of the filesystem",
        ));
    }
    Ok(sb)
}

impl Sb {
    fn ngroups(&self) -> u64 {
        (self.blocks_count - self.first_data_block).div_ceil(self.bpg)
    }
    fn group_first(&self, g: u64) -> u64 {
        self.first_data_block + g * self.bpg
    }
    fn desc_per_block(&self) -> u64 {
        self.bs / self.desc_size
    }
    fn meta_bg(&self) -> bool {
        self.incompat & INCOMPAT_META_BG != 0
    }
    /// Whether group `g` holds a superblock copy.
    fn has_super(&self, g: u64) -> bool {
        if g == 0 {
            return true;
        }
        if self.compat & COMPAT_SPARSE_SUPER2 != 0 {
            return g == self.backup_bgs[0] || g == self.backup_bgs[1];
        }
        if self.ro_compat & RO_COMPAT_SPARSE_SUPER == 0 || g == 1 {
            return true;
        }
        [3u64, 5, 7].iter().any(|&p| {
            let mut x = g;
            while x % p == 0 {
                x /= p;
            }
            x == 1
        })
    }
    /// Location of descriptor block `i` (as `ext2fs_descriptor_block_loc2`).
    fn desc_block(&self, i: u64) -> u64 {
        if !self.meta_bg() || i < self.first_meta_bg {
            self.first_data_block + 1 + i
        } else {
            let g = self.desc_per_block() * i;
            self.group_first(g) + self.has_super(g) as u64
        }
    }
}

struct Parser<'a> {
    dev: &'a dyn ReadAt,
    base: u64,
    sb: Sb,
    /// Mapping blocks left to read (bounds work on corrupt trees).
    budget: std::cell::Cell<u32>,
}

impl Parser<'_> {
    fn block(&self, b: u64) -> Result<Vec<u8>> {
        if b >= self.sb.blocks_count {
            return Err(bad(
                self.base,
                format!(
                    "block pointer {b} is beyond the filesystem ({} blocks)",
                    self.sb.blocks_count
                ),
            ));
        }
        let mut buf = vec![0u8; self.sb.bs as usize];
        read(self.dev, self.base + b * self.sb.bs, &mut buf)?;
        Ok(buf)
    }

    /// Raw bytes of inode `ino`.
    fn inode(&self, ino: u64, descs: &[[u64; 3]]) -> Result<Vec<u8>> {
        if ino == 0 || ino > self.sb.inodes_count {
            return Err(bad(
                self.base,
                format!("inode {ino} out of range 1..={}", self.sb.inodes_count),
            ));
        }
        let (g, idx) = ((ino - 1) / self.sb.ipg, (ino - 1) % self.sb.ipg);
        let table = descs
            .get(g as usize)
            .ok_or_else(|| bad(self.base, "inode group beyond descriptor table"))?[2];
        let byte = idx * self.sb.inode_size;
        let mut buf = vec![0u8; self.sb.inode_size as usize];
        read(
            self.dev,
            self.base + (table + byte / self.sb.bs) * self.sb.bs + byte % self.sb.bs,
            &mut buf,
        )?;
        Ok(buf)
    }
}

/// Parse the ext4 layout of the filesystem at byte `base`.
pub(crate) fn parse(dev: &dyn ReadAt, base: u64) -> Result<Layout> {
    let mut raw = [0u8; 1024];
    read(dev, base + 1024, &mut raw)?;
    let sb = parse_sb(&raw, base)?;
    check_extent(dev, base, sb.blocks_count, sb.bs, "ext4")?;
    let ngroups = sb.ngroups();
    if ngroups > u32::MAX as u64 {
        return Err(bad(base, "more than 2^32 block groups"));
    }
    let p = Parser {
        dev,
        base,
        sb,
        budget: std::cell::Cell::new(1 << 16),
    };
    let sb = &p.sb;
    let desc_blocks = ngroups.div_ceil(sb.desc_per_block());
    let mut meta: Vec<(u64, u64)> = Vec::new();
    let mut critical = vec![p.primary_superblock()?];
    p.superblock_copies(ngroups, desc_blocks, &mut meta);
    let (descs, mut itables) =
        p.descriptor_tables(ngroups, desc_blocks, &mut meta, &mut critical)?;
    p.resize_inode(&descs, &mut meta)?;
    let journal = p.journal(&descs, &mut meta)?;

    critical.sort_by_key(|c| c.block);
    critical.dedup_by_key(|c| c.block);
    itables.sort_by_key(|r| r.first_block);
    let fs_seed = if sb.incompat & INCOMPAT_CSUM_SEED != 0 {
        sb.checksum_seed
    } else {
        crc::raw(!0, &sb.uuid)
    };
    Ok(Layout {
        filesystem: Filesystem::Ext4,
        block_size: sb.bs as u32,
        blocks: sb.blocks_count,
        uuid: sb.uuid,
        metadata: BlockRanges::from_runs(meta),
        journal: BlockRanges::from_runs(journal),
        critical,
        sniff: SniffParams::Ext4(Ext4Params {
            bs: sb.bs as usize,
            uuid: sb.uuid,
            inodes_count: sb.inodes_count,
            blocks_count: sb.blocks_count,
            largedir: sb.incompat & INCOMPAT_LARGEDIR != 0,
            csum: sb.ro_compat & RO_COMPAT_METADATA_CSUM != 0,
            fs_seed,
            inode_size: sb.inode_size as usize,
            itables,
        }),
        freelists: Vec::new(),
    })
}

impl Parser<'_> {
    /// The primary superblock's block as a critical block, with the fields
    /// whose corruption breaks mounting.
    fn primary_superblock(&self) -> Result<CriticalBlock> {
        let sb = &self.sb;
        let sb_block = if sb.bs == 1024 { 1 } else { 0 };
        let sb_off_in_block = if sb.bs == 1024 { 0 } else { 1024 };
        let sb_data = self.block(sb_block)?;
        Ok(CriticalBlock::new(
            sb_block,
            SB_FIELDS
                .iter()
                .map(|&(s, e)| (s + sb_off_in_block, e + sb_off_in_block))
                .collect(),
            &sb_data,
        ))
    }

    /// Superblock copies and descriptor table blocks of every group (old
    /// layout or meta_bg), into `meta`.
    fn superblock_copies(&self, ngroups: u64, desc_blocks: u64, meta: &mut Vec<(u64, u64)>) {
        let sb = &self.sb;
        let dpb = sb.desc_per_block();
        let old_desc_blocks = if sb.meta_bg() {
            sb.first_meta_bg.min(desc_blocks)
        } else {
            desc_blocks + sb.reserved_gdt
        };
        for g in 0..ngroups {
            let start = sb.group_first(g);
            let has_super = sb.has_super(g);
            if has_super {
                meta.push((start, 1));
            }
            if !sb.meta_bg() || g / dpb < sb.first_meta_bg {
                if has_super {
                    meta.push((start + 1, old_desc_blocks));
                }
            } else {
                let r = g % dpb;
                if r == 0 || r == 1 || r == dpb - 1 {
                    meta.push((start + has_super as u64, 1));
                }
            }
        }
    }

    /// Read the group descriptors: bitmaps and inode tables go into `meta`,
    /// descriptor blocks into `critical`; returns each group's (block bitmap,
    /// inode bitmap, inode table) and its inode table run.
    fn descriptor_tables(
        &self,
        ngroups: u64,
        desc_blocks: u64,
        meta: &mut Vec<(u64, u64)>,
        critical: &mut Vec<CriticalBlock>,
    ) -> Result<(Vec<[u64; 3]>, Vec<ItableRun>)> {
        let sb = &self.sb;
        let dpb = sb.desc_per_block();
        let is64 = sb.incompat & INCOMPAT_64BIT != 0 && sb.desc_size >= 64;
        let itable_len = (sb.ipg * sb.inode_size).div_ceil(sb.bs);
        let mut descs: Vec<[u64; 3]> = Vec::with_capacity(ngroups as usize);
        let mut itables = Vec::with_capacity(ngroups as usize);
        let counts_unused = sb.ro_compat & (RO_COMPAT_GDT_CSUM | RO_COMPAT_METADATA_CSUM) != 0;
        for i in 0..desc_blocks {
            let loc = sb.desc_block(i);
            let blk = self.block(loc)?;
            let mut fields = Vec::new();
            for k in 0..dpb {
                let g = i * dpb + k;
                if g >= ngroups {
                    break;
                }
                let o = (k * sb.desc_size) as usize;
                fields.push((o, o + 12));
                let mut loc3 = [0u64; 3];
                for (j, slot) in loc3.iter_mut().enumerate() {
                    *slot = le32(&blk, o + 4 * j) as u64;
                    if is64 {
                        *slot |= (le32(&blk, o + 0x20 + 4 * j) as u64) << 32;
                    }
                }
                if is64 {
                    fields.push((o + 0x20, o + 0x2C));
                }
                for (j, &b) in loc3.iter().enumerate() {
                    let len = if j == 2 { itable_len } else { 1 };
                    if b == 0 || b + len > sb.blocks_count {
                        return Err(bad(
                            self.base,
                            format!(
                                "group {g} descriptor points at block {b} (+{len}), outside 1..{}",
                                sb.blocks_count
                            ),
                        ));
                    }
                    meta.push((b, len));
                }
                descs.push(loc3);
                let flags = le16(&blk, o + 0x12);
                let mut unused = le16(&blk, o + 0x1C) as u64;
                if is64 {
                    unused |= (le16(&blk, o + 0x32) as u64) << 16;
                }
                let used = if flags & BG_INODE_UNINIT != 0 {
                    0
                } else if counts_unused {
                    sb.ipg.saturating_sub(unused)
                } else {
                    sb.ipg
                };
                itables.push(ItableRun {
                    first_block: loc3[2],
                    blocks: itable_len,
                    first_ino: g * sb.ipg + 1,
                    used,
                });
            }
            critical.push(CriticalBlock::new(loc, fields, &blk));
        }
        Ok((descs, itables))
    }

    /// Resize inode: its DIND block into `meta` (the IND blocks are the
    /// reserved GDT blocks, already counted).
    fn resize_inode(&self, descs: &[[u64; 3]], meta: &mut Vec<(u64, u64)>) -> Result<()> {
        let sb = &self.sb;
        if sb.compat & COMPAT_RESIZE_INODE != 0 {
            let ino = self.inode(7, descs)?;
            let dind = le32(&ino, 0x28 + 13 * 4) as u64;
            if dind != 0 && dind < sb.blocks_count {
                meta.push((dind, 1));
            }
        }
        Ok(())
    }

    /// The internal journal's data runs (its mapping blocks go into `meta`),
    /// from the superblock's backup of its `i_block` when there is one.
    fn journal(&self, descs: &[[u64; 3]], meta: &mut Vec<(u64, u64)>) -> Result<Vec<(u64, u64)>> {
        let sb = &self.sb;
        let mut journal: Vec<(u64, u64)> = Vec::new();
        if sb.compat & COMPAT_HAS_JOURNAL != 0 && sb.journal_inum != 0 {
            let (i_block, extents) = if sb.jnl_backup_type == 1 {
                (
                    sb.jnl_blocks.to_vec(),
                    le16(&sb.jnl_blocks, 0) == EXTENT_MAGIC,
                )
            } else {
                let ino = self.inode(sb.journal_inum as u64, descs)?;
                (ino[0x28..0x64].to_vec(), le32(&ino, 0x20) & EXTENTS_FL != 0)
            };
            self.map(&i_block, extents, &mut journal, meta)?;
            if let Some(&(b, n)) = journal.iter().find(|&&(b, n)| b + n > sb.blocks_count) {
                return Err(bad(
                    self.base,
                    format!("journal extent {b}+{n} is beyond the filesystem"),
                ));
            }
        }
        Ok(journal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb_with(compat: u32, ro: u32, backups: [u64; 2]) -> Sb {
        Sb {
            bs: 4096,
            inodes_count: 0,
            blocks_count: 1 << 20,
            first_data_block: 0,
            bpg: 32768,
            ipg: 8192,
            inode_size: 256,
            compat,
            incompat: 0,
            ro_compat: ro,
            uuid: [0; 16],
            reserved_gdt: 0,
            journal_inum: 0,
            jnl_backup_type: 0,
            desc_size: 32,
            first_meta_bg: 0,
            jnl_blocks: [0; 60],
            backup_bgs: backups,
            checksum_seed: 0,
        }
    }

    #[test]
    fn backup_groups_follow_sparse_super_rules() {
        // sparse_super: 0, 1 and powers of 3, 5, 7 (hand-listed below 100).
        let s = sb_with(0, RO_COMPAT_SPARSE_SUPER, [0, 0]);
        let got: Vec<u64> = (0..100).filter(|&g| s.has_super(g)).collect();
        assert_eq!(got, vec![0, 1, 3, 5, 7, 9, 25, 27, 49, 81]);
        // sparse_super2: group 0 plus the two listed groups.
        let s = sb_with(COMPAT_SPARSE_SUPER2, RO_COMPAT_SPARSE_SUPER, [1, 31]);
        let got: Vec<u64> = (0..100).filter(|&g| s.has_super(g)).collect();
        assert_eq!(got, vec![0, 1, 31]);
        // Neither: every group.
        let s = sb_with(0, 0, [0, 0]);
        assert!((0..100).all(|g| s.has_super(g)));
    }
}
