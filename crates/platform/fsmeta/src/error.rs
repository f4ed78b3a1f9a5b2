//! Errors of layout detection and image classification.

use std::io;

/// Why a device or image could not be classified.
#[derive(Debug, thiserror::Error)]
pub enum FsMetaError {
    /// Reading the device or image failed.
    #[error("I/O error at byte {offset}: {cause}")]
    Io {
        /// Byte offset of the failed read (absolute on the device).
        offset: u64,
        /// Underlying error (in the message, not exposed as `source()`).
        cause: io::Error,
    },
    /// Opening an image file failed.
    #[error("cannot open {path}: {cause}")]
    Open {
        /// Path given by the caller.
        path: String,
        /// Underlying error (in the message, not exposed as `source()`).
        cause: io::Error,
    },
    /// Neither an ext4 (0xEF53 at byte 1080) nor an XFS (`XFSB` at byte 0)
    /// superblock was found at the partition offset.
    #[error("no ext4 or XFS superblock at byte offset {offset} (ext2/3/4 and XFS are supported; give the partition offset if the device is partitioned)")]
    UnknownFilesystem {
        /// Partition offset that was probed.
        offset: u64,
    },
    /// A superblock was found but its fields are inconsistent or use a
    /// feature this classifier does not handle.
    #[error("{filesystem} superblock at byte {offset}: {reason}")]
    BadSuperblock {
        /// "ext4" or "xfs".
        filesystem: &'static str,
        /// Partition offset.
        offset: u64,
        /// What is wrong and what is allowed.
        reason: String,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, FsMetaError>;
