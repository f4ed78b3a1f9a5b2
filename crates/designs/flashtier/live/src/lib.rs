//! The live log-structured cache store: FlashTier's solid-state cache
//! design applied on a commodity SSD, as a write-back or write-through
//! cache of 4 KiB blocks in front of a backing device.
//!
//! - [`layout`]: the device layout, the superblock and `format`.
//! - [`segment`]: segments (1 MiB by default, erase-block sized, written
//!   sequentially) and their summaries (blocks, dirty flags, sequence
//!   numbers, crc32c).
//! - [`map`]: the unified sparse map, block -> slot with a dirty flag, in
//!   under 8 bytes of host memory per cached block (the FlashTier policy
//!   crate's `tiercache_flashtier_policy::sparse`, which the simulator measures).
//! - [`checkpoint`]: checkpoints of the map and the journal of segments
//!   opened since.
//! - [`cleaning`]: victim choice (greedy or cost-benefit): the policy crate's
//!   one victim rule.
//! - [`cache`]: requests, appends, segment cleaning with silent eviction of
//!   clean blocks, write-back cleaning at a dirty target, FLUSH and FUA,
//!   device failures.
//! - [`compress`]: the compressed variant's records (`--compress lz4|zstd`):
//!   blocks packed as variable-size records with a checksum.
//! - [`recovery`]: open after a clean shutdown or a crash.
//! - [`design`]: the store as a design of the live runtime (`tiercache-runtime`
//!   serves it: NBD export, control socket, lifecycle).
//!
//! Guarantees (FlashTier Table II and 4.2, NBD semantics): a write
//! acknowledged before a completed FLUSH (or written with FUA) survives a
//! crash; clean data may be lost; a read never returns a block older than
//! the newest acknowledged write or older than the backing device's copy.
// The stats report is one `json!` literal deeper than the default limit allows.
#![recursion_limit = "256"]

pub mod cache;
pub mod checkpoint;
pub mod cleaning;
pub mod compress;
pub mod design;
pub mod format;
pub mod layout;
pub mod memory;
/// The unified sparse map: the FlashTier policy crate's.
pub use tiercache_flashtier_policy::sparse as map;
mod meta;
pub mod recovery;
pub mod segment;

pub use cache::{CacheError, Counters, LogCache, RecoveryInfo};
pub use cleaning::VictimPolicy;
pub use compress::Codec;
pub use design::LogStructured;
pub use format::{format, FormatOptions};
pub use layout::{detect, Superblock, WritePolicy};
pub use recovery::{check, open, open_with_devices, CheckReport, OpenOptions};
pub use segment::BLOCK;
