//! Filesystem-aware block classification for tiercache.
//!
//! Azor and OODT favour filesystem metadata, but both get the "this is
//! metadata" flag from a modified kernel. A block device served over NBD
//! or FUSE sees no such flag, so this crate recovers it from the blocks
//! themselves (method and measurements: `shared/notes/fs-metadata.md`):
//!
//! 1. **Layout** ([`Layout`]): on attach, detect ext4 or XFS at offset 0 or
//!    a partition offset and parse the superblock and group descriptors
//!    (ext4) or allocation-group headers (XFS) into sets of static metadata
//!    blocks (superblock copies under sparse_super / sparse_super2 / meta_bg,
//!    GDT and reserved GDT, bitmaps, inode tables, resize inode, XFS AG
//!    headers and free lists) and journal blocks (ext4 journal inode,
//!    XFS internal log). A write that changes a layout-defining field
//!    (superblock geometry, descriptor locations, AG free list) triggers a
//!    re-parse, so online resize (resize2fs, xfs_growfs) is followed.
//! 2. **Content sniffing** ([`Sniffer`]): each filesystem block of a write or
//!    read-miss fill is checked for metadata signatures (ext4 extent, xattr,
//!    directory, htree blocks; XFS v4/v5 btree, inode, directory and
//!    attribute blocks, v5 only with this filesystem's UUID and the block's
//!    own address). All-zero blocks are never sniffed as metadata; blocks are
//!    re-sniffed on every write.
//! 3. **Classes**: [`Class::Metadata`], [`Class::Journal`] (write-mostly,
//!    read back only at mount/recovery) and [`Class::Data`].
//!
//! ## ext4 checksum mode
//!
//! An ext4 image stored as a file (a VM disk, a backup) contains blocks that
//! are structurally perfect ext4 metadata. With `metadata_csum`, checksum
//! mode ([`Sniffer::with_checksums`], [`FsClassifier::attach_verified`],
//! always used by [`classify_image`]) tells them apart: the classifier learns
//! each in-use inode's checksum seed (crc32c of fs seed, inode number,
//! generation) from inode-table blocks, and accepts a directory, htree or
//! extent block only if running its CRC32C backwards from the stored
//! checksum yields a learned seed; xattr blocks must match this filesystem's
//! seed and their own block number. A block whose inode has not been seen
//! yet is data until it is classified again. Structural mode
//! ([`FsClassifier::attach`]) skips the inode-table scan at attach.
//!
//! ## Limits
//!
//! Content alone cannot recognise ext4 slow symlinks (targets of 60 bytes or
//! more), XFS v4 remote symlinks and attribute values, indirect blocks of
//! block-mapped (ext2/3-style) files, or the second and later filesystem
//! blocks of XFS directory blocks larger than a filesystem block; they are
//! data here. Without `metadata_csum`, ext4 images stored as files are
//! classified as metadata. Partition tables are not parsed (give the
//! partition offset); bigalloc, external journals/logs and XFS realtime
//! devices are not handled; dm-crypt below the cache defeats both methods.
//!
//! # Transport hints: the [`ClassSource`] seam
//!
//! The server asks a [`ClassSource`] for the class of every request:
//! `classify(offset, len, data, hint)`. `data` is the payload when the
//! caller has it (writes and read-miss fills); `hint` is a class carried by
//! the transport. Linux ublk sets `UBLK_IO_F_META` (`1 << 11` in
//! `ublksrv_io_desc.op_flags`) from the kernel's `REQ_META`; a ublk frontend
//! passes `Some(Class::Metadata)` for flagged requests and `None` otherwise
//! (absence is not proof of data: ext4 inode-table readahead is unflagged).
//! A hint wins over layout and content, except that a `Metadata` hint on a
//! journal block is refined to `Journal`. [`FsClassifier`] is the
//! layout+sniff implementation; [`HintOnly`] is the one for unknown
//! filesystems (hint or data). NBD, virtio-blk and FUSE carry no such flag,
//! so their frontends always pass `None`.
//!
//! ```no_run
//! use tiercache_block::Class;
//! use tiercache_fsmeta::{ClassSource, FsClassifier};
//!
//! let dev = std::fs::File::open("disk.img")?;
//! let mut classifier = FsClassifier::attach(dev, 0)?;
//! let block = vec![0u8; 4096];
//! let class: Class = classifier.classify(1 << 20, 4096, Some(&block), None);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Whole images are classified by [`classify_image`] (the `tiercache
//! classify` subcommand).

pub mod classifier;
mod crc;
mod detect;
pub mod device;
pub mod error;
mod ext4;
pub mod layout;
pub mod ranges;
pub mod report;
pub mod sniff;
mod xfs;

pub use classifier::{ClassSource, FsClassifier, HintOnly};
pub use device::ReadAt;
pub use error::{FsMetaError, Result};
pub use layout::{Filesystem, Layout};
pub use ranges::BlockRanges;
pub use report::{classify_image, ClassifyReport};
pub use sniff::Sniffer;
pub use tiercache_block::Class;
