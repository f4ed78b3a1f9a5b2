//! The one live runtime every tiercache design plugs into.
//!
//! A design (the SSD cache, the log-structured cache, the tiered volume,
//! the three-level cache) implements [`Design`]: block operations plus
//! write-back, detach and shutdown. The runtime owns everything around it,
//! once for all designs:
//! - [`listen`]: `unix:PATH`, `tcp:HOST:PORT` or an inherited `fd:N`,
//!   parsed and bound before any device is opened;
//! - [`export`]: the NBD export adapter;
//! - [`control`]: the control socket (mode 0600, bounded requests, the same
//!   commands and JSON for every design);
//! - [`lifecycle`]: signals, drain and shutdown in an order that never loses
//!   an acknowledged write;
//! - [`claim`]: exclusive claims on every device, so one cache is never
//!   opened by two processes;
//! - [`error`]: the one error type, mapped to NBD errors.
//!
//! Panic policy: the release build aborts on a panic (`panic = "abort"`):
//! a broken invariant in a storage system must not keep serving, and the
//! crash recovery every design has (tested by kill -9 and power-loss tests)
//! restores the acknowledged state.

pub mod claim;
pub mod control;
pub mod design;
pub mod error;
pub mod export;
pub mod lifecycle;
pub mod listen;

pub use claim::{Access, Claim, ClaimError, Claims};
pub use design::{Design, WriteBack};
pub use error::{blocking, Error, ErrorKind, Result};
pub use lifecycle::{serve, Ended, Prepared, ServeConfig};
pub use listen::ListenSpec;
pub use async_trait::async_trait;
