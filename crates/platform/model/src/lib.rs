//! Device timing models for tiercache.
//!
//! The simulator replays block traces through the policy core; the core emits
//! device operations (read/write/trim/flush of `len` bytes at `offset`) for the
//! "cache" and "backing" devices, and asks a [`DeviceModel`] when each one
//! completes. The live server uses the same models with wall-clock
//! nanoseconds to emulate a slow HDD.
//!
//! Models:
//! - [`HddModel`]: seek curve calibrated to datasheet track-to-track, average
//!   and full-stroke seeks, average rotational latency, transfer rate,
//!   per-command overhead, one actuator (FIFO).
//! - [`SsdModel`]: per-page flash array latency plus channel transfer,
//!   `channels` units serving operations concurrently, large operations
//!   striped over channels.
//! - [`DramModel`]: fixed latency plus bandwidth.
//!
//! Parameters live in a [`Profile`] that is read from TOML
//! (`profiles/default.toml` is the paper setup, equal to [`Profile::default`]).
//!
//! All models are allocation-free per [`DeviceModel::submit`] call.
//!
//! ```
//! use tiercache_model::{DeviceModel, IoKind, ModelOp, Profile};
//!
//! let profile = Profile::default();
//! let mut hdd = profile.hdd_model()?;
//! // A random 4 KiB read: overhead + seek + half a revolution + transfer.
//! let done = hdd.submit(0, &ModelOp::new(IoKind::Read, 250 << 30, 4096));
//! // The next 4 KiB continues the stream: overhead + transfer only.
//! let next = hdd.submit(done, &ModelOp::new(IoKind::Read, (250 << 30) + 4096, 4096));
//! assert_eq!(next - done, 100_000 + 40_960);
//! # Ok::<(), tiercache_model::ProfileError>(())
//! ```

mod dram;
mod hdd;
mod profile;
mod queue;
mod ssd;
mod stats;

pub use dram::{DramModel, DramParams};
pub use hdd::{HddModel, HddParams, SeekCurve};
pub use profile::{Profile, ProfileError};
pub use ssd::{SsdModel, SsdParams};
pub use stats::DeviceStats;
pub use tiercache_block::IoKind;

/// One device operation as the core emits it: `len` bytes at byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelOp {
    pub kind: IoKind,
    pub offset: u64,
    pub len: u64,
}

impl ModelOp {
    /// Shorthand constructor.
    pub fn new(kind: IoKind, offset: u64, len: u64) -> Self {
        ModelOp { kind, offset, len }
    }
}

/// A timing model of one device.
///
/// Time is in nanoseconds: the simulator's clock, or wall-clock ns when the
/// live server emulates a device. Callers submit operations in non-decreasing
/// `now_ns` order; if time goes backwards, completions stay well defined (work
/// never starts before a unit is free) but `busy_ns` may under-count.
pub trait DeviceModel: Send {
    /// Submit an op at simulated time `now_ns`; returns its completion time (ns).
    /// Ops queue at the device: a device with `parallelism` units serves that
    /// many at once, FIFO otherwise.
    fn submit(&mut self, now_ns: u64, op: &ModelOp) -> u64;
    /// Busy time so far (ns), for utilization = busy / elapsed. For a device
    /// with several units this is the time during which at least one unit was
    /// busy (the `iostat %util` definition).
    fn busy_ns(&self) -> u64;
    /// Operation, byte and busy-time counters.
    fn stats(&self) -> DeviceStats;
    /// Short model name ("hdd", "ssd", "dram").
    fn name(&self) -> &str;
}

/// Nanoseconds to transfer `len` bytes at `mb_per_s` (MB = 10^6 bytes),
/// rounded to the nearest ns. Precomputed as ns per byte by the models.
#[inline]
pub(crate) fn transfer_ns(len: u64, ns_per_byte: f64) -> u64 {
    (len as f64 * ns_per_byte).round() as u64
}
