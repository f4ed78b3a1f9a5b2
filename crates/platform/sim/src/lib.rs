//! Trace-driven simulation of tiercache: the same policy core the live server
//! runs, driven by trace records, with device models giving op completion
//! times.
//!
//! - [`driver`]: the event loop (open-loop by trace timestamps or closed-loop
//!   at a queue depth) and the synchronous `--no-timing` loop;
//! - [`report`]: the result of one run, as printed and as JSON;
//! - [`units`]: sizes with units, line counts and footprint percentages.

pub mod driver;
pub mod report;
pub mod units;

pub use driver::{run, Replay, SimOptions};
pub use report::SimReport;
