//! The design-neutral vocabulary at the bottom of the platform: what a block
//! request is ([`IoKind`]), what a block holds ([`Class`]), and tables sized
//! by a device that take memory only where written ([`lazy::Paged`]), and
//! the pacing of write-back cleaning ([`cleaning`]) that the SSD cache and
//! the log-structured layout share.
//!
//! Every platform crate and every design builds on it, so none of them needs
//! a design's crate for these words; `tests/dependency_rule.rs` checks the
//! layering rule on the whole workspace.

pub mod cleaning;
pub mod lazy;
mod types;

pub use types::{Class, IoKind};
