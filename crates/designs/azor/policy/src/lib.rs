//! tiercache policy core.
//!
//! A deterministic state machine: it consumes block requests and device
//! completions and emits device operations. It performs no I/O, reads no
//! clock and spawns no threads, so that the simulator (which executes the
//! operations on device models) and the live server (which executes them on
//! real devices) run exactly the same policy.

pub mod admission;
/// Write-back cleaning pacing, shared with the log-structured layout (in the
/// design-neutral platform).
pub use tiercache_block::cleaning;
pub mod config;
pub mod engine;
pub mod error;
pub mod eviction;
/// Arrays that allocate by use (the platform's, re-exported).
pub use tiercache_block::lazy;
pub mod mapping;
pub mod ops;
pub mod stats;

pub use config::{Assoc, CacheConfig, ConfigError, Geometry, WritePolicy};
pub use engine::{Engine, RestoredSlot, SlotBits, SlotState};
pub use ops::{buffer_span, Dev, Op, OpId, Purpose, ReqId, Request, Source};
pub use stats::Stats;
pub use tiercache_block::{Class, IoKind};
