//! NBD (Network Block Device) server library for tiercache.
//!
//! We write our own protocol layer: no maintained Rust NBD server crate fits
//! (`nbd` 0.3 is synchronous and knows only `NBD_OPT_EXPORT_NAME`; `tokio-nbd`
//! is GPL and panics on structured replies; `nbdkit` binds C plugins).
//!
//! Implemented (spec: NetworkBlockDevice/nbd `doc/proto.md`):
//! - fixed-newstyle handshake with `NO_ZEROES`; options `EXPORT_NAME`, `ABORT`,
//!   `LIST`, `INFO`, `GO`, `STRUCTURED_REPLY`; `NBD_INFO_EXPORT`/`NAME`/
//!   `DESCRIPTION`/`BLOCK_SIZE`; any other option gets `NBD_REP_ERR_UNSUP`
//!   (`STARTTLS` gets `ERR_POLICY`);
//! - transmission: `READ`, `WRITE`, `DISC`, `FLUSH`, `TRIM`, `CACHE`,
//!   `WRITE_ZEROES` with `FUA`, `NO_HOLE`, `FAST_ZERO` and `DF`; structured
//!   READ replies (`OFFSET_DATA`/`NONE`/`ERROR` chunks) when negotiated;
//! - metadata context `base:allocation` (`LIST_META_CONTEXT`,
//!   `SET_META_CONTEXT`, `NBD_CMD_BLOCK_STATUS` with `REQ_ONE`);
//! - requests of a connection run concurrently and are answered out of order,
//!   bounded by [`Limits`].
//!
//! Not implemented: TLS (`STARTTLS` is refused), extended headers, other metadata contexts.
//!
//! Usage: implement [`Backend`], then
//! `Server::new([("disk", backend)])?.serve_unix(path).await?`.

mod backend;
mod error;
mod file;
mod handshake;
mod mem;
pub mod protocol;
mod server;
mod transmission;

pub use backend::{Backend, BlockSize, Extent};
pub use error::{Errno, Error, Result};
pub use file::FileBackend;
pub use mem::MemBackend;
pub use server::{
    ConfigError, Limits, ListenAddr, Server, ServerHandle, DEFAULT_TCP_ADDR, MAX_NAME_LEN,
};

/// Re-exported so backends can use `#[async_trait]` without their own dependency.
pub use async_trait::async_trait;

/// Largest READ/WRITE payload accepted by default: 32 MiB (the kernel's
/// `max_hw_sectors`; the spec says lengths up to 2^25 are never abuse).
pub const MAX_PAYLOAD: u32 = 32 << 20;
