//! The live TICA three-level cache: a DRAM level (process memory), a
//! read-optimized SSD and a write-optimized SSD (files or block devices) in
//! front of a backing device, driven by the deterministic
//! [`tiercache_tica_policy::tica::Tica`] policy (TICA-A by default, EF or WED
//! selectable) and exported over NBD.
//!
//! - [`pair`]: the two SSDs' superblocks (role, pair id, configuration) and `format`.
//! - [`ssd`]: one SSD: page-to-slot allocation and its crash-consistent
//!   metadata store (`tiercache-store`).
//! - [`slots`]: which free slot a write takes (log order).
//! - [`cache`]: the cache: the policy's ops executed on the devices, the
//!   flusher, FLUSH, failure handling and the degraded mode, stats.
//! - [`open`]: recovery after a clean shutdown or a crash.
//! - [`memory`]: the bound on metadata memory per SSD page, checked by `format` and `open`.
//! - [`design`]: the cache as a design of the live runtime (`tiercache-runtime`
//!   serves it: NBD export, control socket, lifecycle).
//!
//! Safety in one line: a write is acknowledged when it is in DRAM and on the
//! WO-SSD (durable at the next FLUSH), dirty data is always on two devices,
//! and losing either SSD (errors or removal) or DRAM (kill -9) loses no
//! acknowledged and flushed write.

pub mod cache;
pub mod design;
pub mod memory;
pub mod open;
pub mod pair;
pub mod slots;
pub mod ssd;

pub use cache::{CacheError, Degraded, ThreeLevel};
pub use design::Tica;
pub use open::{open, open_with_devices, policy_ssd_pages, OpenOptions};
pub use pair::{
    detect, format, format_with_flusher, FormatOptions, FormatReport, PairInfo, Role, PAGE,
};
