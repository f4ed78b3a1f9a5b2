//! Static filesystem layout: which blocks are metadata or journal by position.

use std::fmt;

use serde::Serialize;

use crate::device::ReadAt;
use crate::error::{FsMetaError, Result};
use crate::ranges::BlockRanges;

/// Filesystem found on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Filesystem {
    /// ext2, ext3 or ext4 (one on-disk family).
    Ext4,
    /// XFS, v4 or v5 (CRC) format.
    Xfs,
}

impl fmt::Display for Filesystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Filesystem::Ext4 => "ext4",
            Filesystem::Xfs => "xfs",
        })
    }
}

/// The static metadata map of one filesystem, in filesystem blocks counted
/// from the filesystem start (the partition offset).
#[derive(Clone, Debug)]
pub struct Layout {
    /// Which filesystem.
    pub filesystem: Filesystem,
    /// Filesystem block size in bytes.
    pub block_size: u32,
    /// Filesystem size in blocks.
    pub blocks: u64,
    /// Filesystem UUID (XFS: the metadata UUID stamped in v5 headers).
    pub uuid: [u8; 16],
    /// Static metadata: superblocks, descriptors, bitmaps, inode tables,
    /// AG headers, free lists, resize inode.
    pub metadata: BlockRanges,
    /// Journal (ext4 inode 8) or internal log (XFS).
    pub journal: BlockRanges,
    /// Blocks whose contents define the layout; a write that changes the
    /// layout-relevant bytes of one of them triggers a re-parse.
    pub(crate) critical: Vec<CriticalBlock>,
    /// Parameters the content sniffer checks blocks against.
    pub(crate) sniff: SniffParams,
    /// XFS: free-list blocks per AG (part of `metadata`); empty for ext4.
    pub(crate) freelists: Vec<Vec<u64>>,
}

/// A layout-defining block and the bytes of it the layout depends on.
#[derive(Clone, Debug)]
pub(crate) struct CriticalBlock {
    pub block: u64,
    pub fields: Vec<(usize, usize)>,
    pub fingerprint: Vec<u8>,
    /// XFS: this block holds the whole header of this AG, so a change
    /// confined to its free list can be applied without a full re-parse.
    pub ag_freelist: Option<u64>,
    /// Leading fingerprint bytes that are filesystem geometry (superblock).
    pub geometry_len: usize,
}

impl CriticalBlock {
    pub fn new(block: u64, fields: Vec<(usize, usize)>, data: &[u8]) -> Self {
        let fingerprint = fingerprint(data, &fields);
        let geometry_len = fingerprint.len();
        CriticalBlock {
            block,
            fields,
            fingerprint,
            ag_freelist: None,
            geometry_len,
        }
    }
}

/// Concatenation of the `fields` byte ranges of `data` (clipped).
pub(crate) fn fingerprint(data: &[u8], fields: &[(usize, usize)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(s, e) in fields {
        let (s, e) = (s.min(data.len()), e.min(data.len()));
        out.extend_from_slice(&data[s..e]);
    }
    out
}

/// Filesystem parameters the sniffer validates block contents against.
#[derive(Clone, Debug)]
pub(crate) enum SniffParams {
    Ext4(Ext4Params),
    Xfs(XfsParams),
}

#[derive(Clone, Debug)]
pub(crate) struct Ext4Params {
    pub bs: usize,
    pub uuid: [u8; 16],
    pub inodes_count: u64,
    pub blocks_count: u64,
    pub largedir: bool,
    /// metadata_csum: dir, extent, htree and xattr blocks carry CRC32C.
    pub csum: bool,
    /// Filesystem checksum seed (`s_checksum_seed` or CRC of the UUID).
    pub fs_seed: u32,
    pub inode_size: usize,
    /// Inode tables sorted by first block.
    pub itables: Vec<ItableRun>,
}

/// One group's inode table.
#[derive(Clone, Debug)]
pub(crate) struct ItableRun {
    pub first_block: u64,
    pub blocks: u64,
    pub first_ino: u64,
    /// Inodes possibly in use (from `bg_itable_unused`/`INODE_UNINIT`).
    pub used: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct XfsParams {
    pub bs: usize,
    pub v5: bool,
    pub sb_uuid: [u8; 16],
    pub meta_uuid: [u8; 16],
    pub agblocks: u64,
    pub agcount: u64,
    pub agblklog: u32,
    pub inopblog: u32,
    pub inodesize: usize,
    pub sectsize: usize,
}

impl Layout {
    /// Static class of `block`: journal, metadata, or `None` (decide by content).
    pub fn class_of(&self, block: u64) -> Option<tiercache_block::Class> {
        if self.journal.contains(block) {
            Some(tiercache_block::Class::Journal)
        } else if self.metadata.contains(block) {
            Some(tiercache_block::Class::Metadata)
        } else {
            None
        }
    }

    /// Index of the critical block `block`, if it is one.
    pub(crate) fn critical_index(&self, block: u64) -> Option<usize> {
        self.critical.binary_search_by_key(&block, |c| c.block).ok()
    }
}

/// Check that the last byte of a filesystem of `blocks` blocks of `bs`
/// bytes at `base` is readable (bounds all per-group work by the device size).
pub(crate) fn check_extent(
    dev: &dyn ReadAt,
    base: u64,
    blocks: u64,
    bs: u64,
    fs: &'static str,
) -> Result<()> {
    let end = blocks
        .checked_mul(bs)
        .and_then(|n| n.checked_add(base))
        .ok_or_else(|| FsMetaError::BadSuperblock {
            filesystem: fs,
            offset: base,
            reason: format!("size {blocks} blocks of {bs} bytes overflows"),
        })?;
    let mut last = [0u8; 1];
    dev.read_at(end - 1, &mut last).map_err(|_| FsMetaError::BadSuperblock {
        filesystem: fs,
        offset: base,
        reason: format!("the filesystem ({blocks} blocks of {bs} bytes) extends past the end of the device or image (truncated image or wrong partition offset?)"),
    })
}

/// Read exactly `buf.len()` bytes at absolute `offset`.
pub(crate) fn read(dev: &dyn ReadAt, offset: u64, buf: &mut [u8]) -> Result<()> {
    dev.read_at(offset, buf)
        .map_err(|cause| FsMetaError::Io { offset, cause })
}

pub(crate) fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
pub(crate) fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
pub(crate) fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
pub(crate) fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}
pub(crate) fn be64(b: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}
