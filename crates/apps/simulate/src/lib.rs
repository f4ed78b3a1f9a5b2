//! `tiercache sim` as a library: its options ([`SimArgs`]) and the
//! simulations of the designs beyond the SSD cache ([`modes`]: FlashTier,
//! OODT tiering, TICA and its baselines). The CLI prints what a mode returns;
//! the Python module (`tiercache._native`) returns the same JSON, so
//! `tiercache.simulate(mode=M, ...)` is exactly `tiercache sim --mode M --json`.

pub mod args;
pub mod compress;
pub mod design;
pub mod error;
pub mod modes;
pub mod mrc;
pub mod policy;

pub use args::{replay_choice, SimArgs, DEFAULT_QUEUE_DEPTH, DEFAULT_TRACE_BLOCK};
pub use modes::{BadOption, ModeOutput};
pub use policy::{parse_2lbs_levels, PolicyError, PolicySpec};
