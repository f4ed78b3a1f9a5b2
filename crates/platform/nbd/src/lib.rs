//! NBD (Network Block Device) server library for tiercache.
//!
//! We write our own protocol layer: no maintained Rust NBD server crate fits
//! (`nbd` 0.3 is synchronous and knows only `NBD_OPT_EXPORT_NAME`; `tokio-nbd`
//! is GPL and panics on structured replies; `nbdkit` binds C plugins).
//!
//! Implemented (spec: NetworkBlockDevice/nbd `doc/proto.md`):
//! - fixed-newstyle handshake with `NO_ZEROES`; options `EXPORT_NAME`, `ABORT`,
//!   `LIST`, `INFO`, `GO`, `STRUCTURED_REPLY`; `NBD_INFO_EXPORT`/`NAME`/
//!   `DESCRIPTION`/`BLOCK_SIZE`; any other option gets `NBD_REP_ERR_UNSUP`;
//! - TLS ([`Tls`], rustls): `NBD_OPT_STARTTLS` upgrades the connection and
//!   the rest of the handshake and the transmission run over TLS;
//!   [`TlsMode::Require`] refuses every other option with
//!   `NBD_REP_ERR_TLS_REQD` until then (and closes on `EXPORT_NAME`);
//!   optional client-certificate verification; without TLS, `STARTTLS`
//!   gets `ERR_POLICY`;
//! - transmission: `READ`, `WRITE`, `DISC`, `FLUSH`, `TRIM`, `CACHE`,
//!   `WRITE_ZEROES` with `FUA`, `NO_HOLE`, `FAST_ZERO` and `DF`; structured
//!   READ replies (`OFFSET_DATA`/`NONE`/`ERROR` chunks) when negotiated;
//! - metadata context `base:allocation` (`LIST_META_CONTEXT`,
//!   `SET_META_CONTEXT`, `NBD_CMD_BLOCK_STATUS` with `REQ_ONE`);
//! - requests of a connection run concurrently and are answered out of order,
//!   bounded by [`Limits`].
//!
//! Hardening ([`Limits`], defaults in parentheses):
//! - at most `max_connections` connections (100), in handshake or
//!   transmission; one more is closed right after `accept` (rate-limited
//!   warning); accept errors such as `EMFILE` are logged and retried after a
//!   50 ms back-off;
//! - the handshake must end (`NBD_OPT_GO`/`EXPORT_NAME`) within
//!   `handshake_timeout` (10 s); an option announcing more than
//!   `max_option_len` (64 KiB) closes the connection without reading it;
//! - a request header or WRITE payload with no progress for `io_timeout`
//!   (30 s), or replies the client does not read for that long, drop the
//!   connection and release its permits; `idle_timeout` (off) closes
//!   connections that send no request;
//! - READ/WRITE payload bytes held in memory are bounded per connection
//!   (`max_in_flight_bytes`, 64 MiB; `max_in_flight_requests`, 128) and
//!   server-wide (`max_total_in_flight_bytes`, 256 MiB) by back-pressure:
//!   when a budget is used up, connections stop reading requests until
//!   replies have been written;
//! - [`ServerHandle::shutdown`] / [`Server::shutdown_all`] stop accepting,
//!   stop reading requests at once (a WRITE whose payload is incomplete is
//!   never executed), let backend calls in flight finish, and give their
//!   replies `shutdown_grace` (10 s); when they return no backend call is running.
//!
//! Listening: [`Server::serve_unix`], [`Server::serve_tcp`], or inherited
//! sockets (systemd socket activation, `--listen fd:N`) with
//! [`Server::serve_unix_listener`] and [`Server::serve_tcp_listener`].
//!
//! Not implemented: TLS-PSK, extended headers, other metadata contexts.
//!
//! Usage: implement [`Backend`], then
//! `Server::new([("disk", backend)])?.serve_unix(path).await?`.

mod backend;
mod error;
mod file;
mod handshake;
mod limits;
mod mem;
pub mod protocol;
mod server;
mod tls;
mod transmission;

pub use backend::{Backend, BlockSize, Extent};
pub use error::{Errno, Error, Result};
pub use file::FileBackend;
pub use limits::{ConfigError, Limits};
pub use mem::MemBackend;
pub use server::{
    unix_export_uri, unix_uri, ListenAddr, Server, ServerHandle, DEFAULT_TCP_ADDR, MAX_NAME_LEN,
};
pub use tls::{Tls, TlsError, TlsMode, CA_CERT, SERVER_CERT, SERVER_KEY};

/// Re-exported so backends can use `#[async_trait]` without their own dependency.
pub use async_trait::async_trait;

/// Largest READ/WRITE payload accepted by default: 32 MiB (the kernel's
/// `max_hw_sectors`; the spec says lengths up to 2^25 are never abuse).
pub const MAX_PAYLOAD: u32 = 32 << 20;
