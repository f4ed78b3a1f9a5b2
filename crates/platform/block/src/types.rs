//! Request kinds and block classes, shared by trace readers, device models,
//! simulators, live servers and every design.

use serde::{Deserialize, Serialize};

/// What a block holds, as far as the cache can tell. Metadata is favoured by
/// Azor's two-level block selection and OODT's metadata weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Ordinary file or application data (the default when unknown).
    #[default]
    Data,
    /// Filesystem metadata (inodes, directories, bitmaps, extent trees).
    Metadata,
    /// Filesystem journal: metadata that is written far more than read.
    Journal,
}

impl Class {
    /// Metadata-like classes (metadata and journal) are what 2LBS level 1 favours.
    pub fn is_metadata(self) -> bool {
        !matches!(self, Class::Data)
    }
}

/// Kind of a block request or of a device operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoKind {
    Read,
    Write,
    /// Discard: the range's contents are no longer needed.
    Trim,
    /// Make previously acknowledged writes durable.
    Flush,
}
