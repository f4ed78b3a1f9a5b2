//! The live tiered volume of OODT tiering.
//!
//! The exported address space is split into fixed blocks; each block lives
//! in one slot of the fast tier (an SSD, a file) or of the slow tier: the
//! volume is both tiers' size (`--capacity sum`, OODT's design), or each
//! block keeps a home on the slow tier, whose size is the volume's
//! (`--capacity slow`). The policy core of `tiercache-oodt-policy` decides
//! everything: the mapping table, the migration state machine and its
//! recovery, request splitting, workload characterization, the planner and
//! the placement policies. This crate adds the real I/O and persistence:
//! - [`superblock`]: the on-disk layout (superblock, checkpoints and log on
//!   the fast tier);
//! - [`journal`]: mapping checkpoints and the durable migration log, recovery;
//! - [`volume`]: format, open, the request path and the migration worker;
//! - [`design`]: the volume as a design of the live runtime (`tiercache-runtime`
//!   serves it: NBD export, control socket, lifecycle).

pub mod design;
pub mod journal;
pub mod memory;
pub mod superblock;
pub mod volume;

pub use design::Tiered;

/// `format --mode tier --tier-block` without a value: large enough that the
/// fast device sees erase-block-sized writes and the tables stay small.
pub const DEFAULT_TIER_BLOCK: &str = "1MiB";
pub use journal::RecoveryReport;
pub use superblock::{is_tiered_volume, Capacity, Superblock};
pub use volume::{
    check_volume, format_volume, initial_table, initialize, open_volume, CheckReport, OpenOptions,
    TieredVolume, VolumeConfig,
};
