//! A server's resource limits and timeouts, the configuration errors, and
//! the state every connection of a server shares (exports, limits, TLS,
//! payload and connection budgets): what the handshake, the transmission
//! phase and the listeners all read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::Backend;
use crate::tls::Tls;

/// Resource limits and timeouts of a server.
///
/// The defaults are safe for a server reachable by untrusted local clients:
/// at most 100 connections ([`max_connections`](Self::max_connections), like
/// QEMU's fix for CVE-2024-7409), 10 s to finish the handshake, oversized
/// options close the connection (CVE-2017-15119), 30 s without progress on a
/// WRITE payload or a reply closes the connection, at most 256 MiB of
/// READ/WRITE payload held across all connections, and a 10 s grace for
/// replies on shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests of one connection being processed or waiting to be answered
    /// (kernel queue depth is 128). Default 128.
    pub max_in_flight_requests: usize,
    /// READ/WRITE payload bytes one connection may hold in memory; must be
    /// >= `max_payload`. Default 64 MiB.
    pub max_in_flight_bytes: usize,
    /// READ/WRITE payload bytes held by all connections of the server
    /// together (admitted and not yet fully replied); must be >= `max_payload`.
    /// When reached, connections stop reading new READ/WRITE requests until
    /// replies have been written (back-pressure, never unbounded buffering).
    /// Not counted: each connection's reply buffer (256 KiB) and socket
    /// buffers. Default 256 MiB.
    pub max_total_in_flight_bytes: usize,
    /// Largest READ/WRITE accepted; larger ones get EINVAL (a WRITE's payload
    /// is skipped). Default 32 MiB ([`MAX_PAYLOAD`](crate::MAX_PAYLOAD)).
    pub max_payload: u32,
    /// Largest option data accepted during the handshake; an option announcing
    /// more closes the connection at once, without reading the data.
    /// Default 64 KiB.
    pub max_option_len: u32,
    /// Connections served at once (in handshake or transmission); one past
    /// the limit is closed right after `accept` with a (rate-limited) warning.
    /// Default 100.
    pub max_connections: usize,
    /// Time a client has to finish option haggling (`NBD_OPT_GO` or
    /// `NBD_OPT_EXPORT_NAME`) before it is dropped. Default 10 s.
    pub handshake_timeout: Duration,
    /// A WRITE payload (or request header) that makes no progress for this
    /// long, or a reply the client does not read for this long, drops the
    /// connection and releases its in-flight permits. Default 30 s.
    pub io_timeout: Duration,
    /// Close a transmission connection that has sent no request for this long
    /// while nothing is in flight. Default `None` (never).
    pub idle_timeout: Option<Duration>,
    /// On shutdown, how long a connection may take to write the replies of
    /// requests already handed to the backend (counted once those backend
    /// calls are done); then the connection is cut. Default 10 s.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_in_flight_requests: 128,
            max_in_flight_bytes: 64 << 20,
            max_total_in_flight_bytes: 256 << 20,
            max_payload: crate::MAX_PAYLOAD,
            max_option_len: 64 * 1024,
            max_connections: 100,
            handshake_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            idle_timeout: None,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// Check the limits for consistency; the message names the broken rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError::Limits(m));
        if self.max_in_flight_requests == 0 {
            return err("max_in_flight_requests must be at least 1".into());
        }
        if self.max_connections == 0 {
            return err("max_connections must be at least 1".into());
        }
        for (name, bytes) in [
            ("max_in_flight_bytes", self.max_in_flight_bytes),
            ("max_total_in_flight_bytes", self.max_total_in_flight_bytes),
        ] {
            if self.max_payload == 0 || (bytes as u64) < self.max_payload as u64 {
                return err(format!(
                    "{name} ({bytes}) must be >= max_payload ({}) > 0",
                    self.max_payload
                ));
            }
            if bytes > tokio::sync::Semaphore::MAX_PERMITS {
                return err(format!(
                    "{name} must be at most {}",
                    tokio::sync::Semaphore::MAX_PERMITS
                ));
            }
        }
        for (name, d) in [
            ("handshake_timeout", self.handshake_timeout),
            ("io_timeout", self.io_timeout),
            ("idle_timeout", self.idle_timeout.unwrap_or(Duration::MAX)),
        ] {
            if d.is_zero() {
                return err(format!("{name} must be greater than zero"));
            }
        }
        Ok(())
    }
}

/// Why a server configuration was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("no exports given; a server needs at least one")]
    NoExports,
    #[error("export name {0:?} is used twice; names must be unique")]
    DuplicateName(String),
    #[error("export name is {0} bytes long; at most 4096 are allowed")]
    NameTooLong(usize),
    #[error("export {name:?} has invalid block sizes: {reason}")]
    BlockSize { name: String, reason: String },
    #[error("invalid limits: {0}")]
    Limits(String),
}

/// State shared by all connections of a server.
pub(crate) struct Shared {
    pub exports: Vec<(String, Arc<dyn Backend>)>,
    pub limits: Limits,
    /// `NBD_OPT_STARTTLS` is served with this (None: TLS off).
    pub tls: Option<Tls>,
    pub cancel: CancellationToken,
    /// Server-wide READ/WRITE payload bytes ([`Limits::max_total_in_flight_bytes`]).
    pub total_bytes: Arc<Semaphore>,
    /// One permit per open connection ([`Limits::max_connections`]).
    pub(crate) conn_slots: Arc<Semaphore>,
    /// Every connection of every listener (and `serve_connection`).
    pub(crate) all: TaskTracker,
    /// Connections refused since the last warning, and when that was.
    pub(crate) refused: AtomicU64,
    pub(crate) last_refusal_warning: Mutex<Option<Instant>>,
}

impl Shared {
    /// Find an export by name; the empty name selects the first (default) export.
    pub fn lookup(&self, name: &str) -> Option<&(String, Arc<dyn Backend>)> {
        if name.is_empty() {
            return self
                .exports
                .iter()
                .find(|(n, _)| n.is_empty())
                .or_else(|| self.exports.first());
        }
        self.exports.iter().find(|(n, _)| n == name)
    }

    pub fn export_names(&self) -> String {
        self.exports
            .iter()
            .map(|(n, _)| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// A connection slot, or None (with a warning at most once a second) when
    /// `max_connections` connections are open.
    pub(crate) fn admit(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(p) = Arc::clone(&self.conn_slots).try_acquire_owned() {
            return Some(p);
        }
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut last = self
            .last_refusal_warning
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            *last = Some(now);
            let n = self.refused.swap(0, Ordering::Relaxed);
            tracing::warn!(
                "{n} connection(s) refused: the limit of {} connections is reached",
                self.limits.max_connections
            );
        }
        None
    }
}
