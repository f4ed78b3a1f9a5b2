//! Which filesystem a device holds: the superblock magic picks the parser.

use crate::device::ReadAt;
use crate::error::{FsMetaError, Result};
use crate::layout::Layout;
use crate::{ext4, xfs};

impl Layout {
    /// Detect ext4 or XFS at byte `partition_offset` of `dev` and parse its
    /// static layout.
    pub fn detect(dev: &dyn ReadAt, partition_offset: u64) -> Result<Layout> {
        let mut head = [0u8; 2048];
        match dev.read_at(partition_offset, &mut head) {
            Ok(()) => {}
            // Too short to hold either superblock.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(FsMetaError::UnknownFilesystem {
                    offset: partition_offset,
                })
            }
            Err(cause) => {
                return Err(FsMetaError::Io {
                    offset: partition_offset,
                    cause,
                })
            }
        }
        if &head[0..4] == b"XFSB" {
            return xfs::parse(dev, partition_offset);
        }
        if head[1024 + 0x38..1024 + 0x3A] == [0x53, 0xEF] {
            return ext4::parse(dev, partition_offset);
        }
        Err(FsMetaError::UnknownFilesystem {
            offset: partition_offset,
        })
    }
}
