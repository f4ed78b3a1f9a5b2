//! tiercache policy core.
//!
//! A deterministic state machine: it consumes block requests and device
//! completions and emits device operations. It performs no I/O, reads no
//! clock and spawns no threads, so that the simulator (which executes the
//! operations on device models) and the live server (which executes them on
//! real devices) run exactly the same policy.

pub mod eviction;
pub mod types;

pub use types::*;
