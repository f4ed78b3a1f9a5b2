//! Listening sockets, connection lifecycle and shutdown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, ToSocketAddrs, UnixListener};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::Backend;
use crate::handshake::{negotiate, Outcome};

/// Default TCP address: loopback only (NBD has no authentication without TLS).
pub const DEFAULT_TCP_ADDR: &str = "127.0.0.1:10809";

/// Longest export name accepted (the spec's limit for strings).
pub const MAX_NAME_LEN: usize = 4096;

/// Per-connection resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Requests being processed or waiting to be answered (kernel queue depth is 128).
    pub max_in_flight_requests: usize,
    /// READ/WRITE payload bytes held in memory; must be >= `max_payload`.
    pub max_in_flight_bytes: usize,
    /// Largest READ/WRITE accepted; larger ones get EINVAL (a WRITE's payload is skipped).
    pub max_payload: u32,
    /// Largest option data accepted during the handshake.
    pub max_option_len: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_in_flight_requests: 128,
            max_in_flight_bytes: 64 << 20,
            max_payload: crate::MAX_PAYLOAD,
            max_option_len: 64 * 1024,
        }
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
    pub cancel: CancellationToken,
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
}

/// An NBD server for one or more named exports.
///
/// The first export is also the default export, reached with the empty name.
/// Cloning is cheap; clones share exports and the shutdown signal.
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("exports", &self.shared.export_names())
            .field("limits", &self.shared.limits)
            .finish()
    }
}

impl Server {
    /// A server for `exports` (name, backend) with default [`Limits`].
    pub fn new<I, N>(exports: I) -> Result<Server, ConfigError>
    where
        I: IntoIterator<Item = (N, Arc<dyn Backend>)>,
        N: Into<String>,
    {
        Self::with_limits(exports, Limits::default())
    }

    /// A server with explicit per-connection limits.
    pub fn with_limits<I, N>(exports: I, limits: Limits) -> Result<Server, ConfigError>
    where
        I: IntoIterator<Item = (N, Arc<dyn Backend>)>,
        N: Into<String>,
    {
        let exports: Vec<(String, Arc<dyn Backend>)> =
            exports.into_iter().map(|(n, b)| (n.into(), b)).collect();
        if exports.is_empty() {
            return Err(ConfigError::NoExports);
        }
        for (i, (name, backend)) in exports.iter().enumerate() {
            if name.len() > MAX_NAME_LEN {
                return Err(ConfigError::NameTooLong(name.len()));
            }
            if exports[..i].iter().any(|(n, _)| n == name) {
                return Err(ConfigError::DuplicateName(name.clone()));
            }
            backend
                .block_size()
                .validate()
                .map_err(|reason| ConfigError::BlockSize {
                    name: name.clone(),
                    reason,
                })?;
        }
        if limits.max_in_flight_requests == 0 {
            return Err(ConfigError::Limits(
                "max_in_flight_requests must be at least 1".into(),
            ));
        }
        if limits.max_payload == 0
            || (limits.max_in_flight_bytes as u64) < limits.max_payload as u64
        {
            return Err(ConfigError::Limits(format!(
                "max_in_flight_bytes ({}) must be >= max_payload ({}) > 0",
                limits.max_in_flight_bytes, limits.max_payload
            )));
        }
        if limits.max_in_flight_bytes > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(ConfigError::Limits(format!(
                "max_in_flight_bytes must be at most {}",
                tokio::sync::Semaphore::MAX_PERMITS
            )));
        }
        Ok(Server {
            shared: Arc::new(Shared {
                exports,
                limits,
                cancel: CancellationToken::new(),
            }),
        })
    }

    /// Serve one already-accepted connection to completion (handshake and
    /// transmission). Useful for custom transports and in-process tests.
    pub async fn serve_connection<S>(&self, stream: S) -> std::io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let cancel = self.shared.cancel.clone();
        self.serve_connection_until(stream, &cancel).await
    }

    /// Listen on a Unix socket at `path` (a stale socket file there is replaced).
    pub async fn serve_unix(&self, path: impl AsRef<Path>) -> std::io::Result<ServerHandle> {
        let path = path.as_ref().to_path_buf();
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            use std::os::unix::fs::FileTypeExt;
            if meta.file_type().is_socket() {
                std::fs::remove_file(&path)?;
            }
        }
        let listener = UnixListener::bind(&path)?;
        Ok(self.spawn_listener(Listener::Unix(listener), ListenAddr::Unix(path)))
    }

    /// Listen on TCP (use [`DEFAULT_TCP_ADDR`] for the loopback default; port 0 picks a free port).
    pub async fn serve_tcp(&self, addr: impl ToSocketAddrs) -> std::io::Result<ServerHandle> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        Ok(self.spawn_listener(Listener::Tcp(listener), ListenAddr::Tcp(local)))
    }

    fn spawn_listener(&self, listener: Listener, addr: ListenAddr) -> ServerHandle {
        let stop = self.shared.cancel.child_token();
        let tracker = TaskTracker::new();
        let task = tokio::spawn(accept_loop(
            self.clone(),
            listener,
            stop.clone(),
            tracker.clone(),
        ));
        ServerHandle {
            addr,
            stop,
            tracker,
            task,
        }
    }

    /// Like `serve_connection`, but also ends when this listener's `stop` fires.
    async fn serve_connection_until<S>(
        &self,
        mut stream: S,
        stop: &CancellationToken,
    ) -> std::io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let outcome = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            r = negotiate(&mut stream, &self.shared) => r?,
        };
        match outcome {
            Outcome::Close => Ok(()),
            Outcome::Transmit(session) => {
                crate::transmission::serve(stream, session, self.shared.limits, stop.clone()).await;
                Ok(())
            }
        }
    }

    /// Stop every listener and connection of this server (see [`ServerHandle::shutdown`]).
    pub fn shutdown_all(&self) {
        self.shared.cancel.cancel();
    }
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

async fn accept_loop(
    server: Server,
    listener: Listener,
    stop: CancellationToken,
    conns: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            r = accept(&listener) => r,
        };
        match accepted {
            Ok(Conn::Unix(s)) => spawn_conn(&server, &stop, &conns, s),
            Ok(Conn::Tcp(s)) => {
                let _ = s.set_nodelay(true);
                spawn_conn(&server, &stop, &conns, s)
            }
            Err(e) => accept_error(e).await,
        }
    }
}

enum Conn {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

async fn accept(l: &Listener) -> std::io::Result<Conn> {
    match l {
        Listener::Unix(l) => l.accept().await.map(|(s, _)| Conn::Unix(s)),
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Conn::Tcp(s)),
    }
}

fn spawn_conn<S>(server: &Server, stop: &CancellationToken, conns: &TaskTracker, stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let server = server.clone();
    let stop = stop.clone();
    conns.spawn(async move {
        if let Err(e) = server.serve_connection_until(stream, &stop).await {
            tracing::debug!("connection ended: {e}");
        }
    });
}

async fn accept_error(e: std::io::Error) {
    // EMFILE and friends: back off instead of spinning.
    tracing::warn!("accept failed: {e}");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

/// A running listener. Dropping it does not stop the server; call [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct ServerHandle {
    addr: ListenAddr,
    stop: CancellationToken,
    tracker: TaskTracker,
    task: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    /// The bound address (the real port when port 0 was requested).
    pub fn addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// An NBD URI for the default export, e.g. `nbd+unix:///?socket=/tmp/s`.
    pub fn uri(&self) -> String {
        match &self.addr {
            ListenAddr::Unix(p) => format!("nbd+unix:///?socket={}", p.display()),
            ListenAddr::Tcp(a) => format!("nbd://{a}/"),
        }
    }

    /// Stop accepting, close connections after their in-flight requests are
    /// answered, wait for all of them, and remove the Unix socket file.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
        self.tracker.close();
        self.tracker.wait().await;
        if let ListenAddr::Unix(p) = &self.addr {
            let _ = std::fs::remove_file(p);
        }
    }
}
