//! FlashTier (Saxena and Swift, ACM TOS 2014) in the simulator: a flash device
//! model, solid-state cache (SSC) devices and their cache managers.
//!
//! - [`flash`]: packages, planes, erase blocks and pages with the Table IV
//!   parameters; per-block erase counts, page states and the op counters.
//! - [`ftl`]: translation layers: [`ftl::page::PageFtl`] (page-mapped, the
//!   prototype's), [`ftl::page_log::PageLogFtl`] (page-mapped with Section
//!   4.3's log/data split: log blocks garbage-collected, data blocks silently
//!   evicted) and [`ftl::hybrid::Hybrid`] (FAST-like: block-mapped data
//!   blocks, page-mapped log blocks, switch/partial/full merges).
//! - [`gc`]: the one victim rule (greedy and cost-benefit) and the one rule of
//!   silent eviction ([`gc::reclaim`]), for the flash model's collections and
//!   the log-structured store's segment cleaning.
//! - [`sparse`]: the unified sparse map (disk block -> cache slot with a dirty
//!   bit, under 8 bytes per cached block), the map the live log-structured
//!   store keeps and the simulator measures.
//! - [`logstore`]: the log-structured store's policy (map, segments, victim
//!   choice, segment cleaning with silent eviction, write-back), shared by the
//!   live store and [`logsim`], its trace replay without devices.
//! - [`sizes`]: compressibility models (stored sizes of 1 to 8 units of 512
//!   bytes per block) for simulating the compressed log-structured layout.
//! - [`device`]: the `ssd`, `ssc` and `ssc-v` devices with the SSC interface of
//!   Table II and its consistency costs (Section 4.2).
//! - [`manager`]: write-through and write-back FlashTier cache managers and
//!   the native baseline (host map over a plain SSD).
//! - [`sim`]: trace replay and the report; [`workload`]: a synthetic zipfian
//!   overwrite generator.

pub mod device;
pub mod flash;
pub mod ftl;
pub mod gc;
pub mod logsim;
pub mod logstore;
pub mod manager;
pub mod reproduce;
pub mod sim;
pub mod sizes;
pub mod sparse;
pub mod workload;

pub use device::{Device, DeviceConfig, DeviceKind, FtlKind};
pub use flash::{Flash, FlashStats, Geometry, Timing};
pub use gc::GcPolicy;
pub use manager::ManagerKind;
pub use sim::{run, FlashReport, FlashSimConfig};

/// Errors of the flash model, devices and simulator.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The device has no erased block left and nothing it may evict or merge.
    #[error("flash device full: {0}")]
    Full(String),
    /// An operation the device kind does not offer (e.g. write-dirty on an SSD).
    #[error("operation '{op}' is not supported by a {kind} device (allowed: {allowed})")]
    Unsupported {
        op: &'static str,
        kind: &'static str,
        allowed: &'static str,
    },
    /// Reading the trace failed.
    #[error("trace: {0}")]
    Trace(String),
}
