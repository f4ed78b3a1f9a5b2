//! Errors of the metadata store. Every message says what was found and what
//! is allowed or what to do about it.

use std::io;

/// Result alias of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What went wrong while formatting, opening, logging or checking a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A device read, write or sync failed.
    #[error("{context}: {source}")]
    Io {
        /// What the store was doing.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Geometry or format parameters are out of range.
    #[error("invalid parameters: {0}")]
    InvalidParams(String),
    /// `format` found data it will not overwrite without `--force`.
    #[error("refusing to format: the device holds {found}; pass --force to overwrite it")]
    Occupied {
        /// What was detected (filesystem, partition table, tiercache store, ...).
        found: String,
    },
    /// The device holds no valid tiercache superblock.
    #[error("not a tiercache cache device: {0}")]
    NotTiercache(String),
    /// The device holds a tiercache store of a version this build cannot read.
    #[error(
        "unsupported tiercache metadata version {found} (this build reads version {supported})"
    )]
    Version {
        /// Version on disk.
        found: u32,
        /// Version this build supports.
        supported: u32,
    },
    /// The backing device is not the one this cache was formatted for.
    #[error("backing device mismatch: {0}; the cache belongs to another backing device (reformat the cache with --force to reuse it)")]
    BackingMismatch(String),
    /// The backing device was modified while the cache was stopped holding
    /// dirty data for it (says what changed and what to do).
    #[error("{0}")]
    BackingModified(String),
    /// The caller appended a record that does not fit the store's geometry or state.
    #[error("invalid metadata record: {0}")]
    InvalidRecord(String),
    /// The caller passed a slot table that cannot be checkpointed.
    #[error("invalid slot table: {0}")]
    InvalidTable(String),
    /// The log region cannot hold the pending records; checkpoint first.
    #[error("metadata log full: commit needs {needed} blocks, {free} of {capacity} free; write a checkpoint to empty the log")]
    LogFull {
        /// Blocks the commit needs.
        needed: u64,
        /// Blocks still free in this epoch.
        free: u64,
        /// Blocks in the log region.
        capacity: u64,
    },
    /// On-disk metadata is damaged beyond what recovery may safely repair.
    #[error("metadata corrupt: {0}")]
    Corrupt(String),
    /// An earlier I/O error left the on-disk state uncertain.
    #[error("the store failed earlier ({0}); reopen the cache device to recover")]
    Failed(String),
}

impl StoreError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }
}
