//! Listening sockets, connection lifecycle and shutdown.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, ToSocketAddrs, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::Backend;
use crate::handshake::{negotiate, resume_after_tls, Outcome, Session};
use crate::limits::{ConfigError, Limits, Shared};
use crate::tls::Tls;

/// Default TCP address: loopback only (NBD has no authentication without TLS).
pub const DEFAULT_TCP_ADDR: &str = "127.0.0.1:10809";

/// Longest export name accepted (the spec's limit for strings).
pub const MAX_NAME_LEN: usize = 4096;

/// An NBD server for one or more named exports.
///
/// The first export is also the default export, reached with the empty name.
/// Cloning is cheap; clones share exports, limits and the shutdown signal.
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

    /// A server with explicit limits (checked with [`Limits::validate`]).
    pub fn with_limits<I, N>(exports: I, limits: Limits) -> Result<Server, ConfigError>
    where
        I: IntoIterator<Item = (N, Arc<dyn Backend>)>,
        N: Into<String>,
    {
        Self::with_tls(exports, limits, None)
    }

    /// A server with explicit limits that serves `NBD_OPT_STARTTLS` with
    /// `tls` ([`TlsMode::Require`](crate::TlsMode::Require) refuses
    /// plain-text clients); `None` refuses STARTTLS.
    pub fn with_tls<I, N>(
        exports: I,
        limits: Limits,
        tls: Option<Tls>,
    ) -> Result<Server, ConfigError>
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
        limits.validate()?;
        Ok(Server {
            shared: Arc::new(Shared {
                exports,
                limits,
                tls,
                cancel: CancellationToken::new(),
                total_bytes: Arc::new(Semaphore::new(limits.max_total_in_flight_bytes)),
                conn_slots: Arc::new(Semaphore::new(limits.max_connections)),
                all: TaskTracker::new(),
                refused: AtomicU64::new(0),
                last_refusal_warning: Mutex::new(None),
            }),
        })
    }

    /// The limits this server enforces.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }

    /// The TLS settings (None: TLS off, `STARTTLS` refused).
    pub fn tls(&self) -> Option<&Tls> {
        self.shared.tls.as_ref()
    }

    /// Serve one already-accepted connection to completion (handshake and
    /// transmission). Useful for custom transports and in-process tests.
    /// The connection counts against [`Limits::max_connections`] (past the
    /// limit it is closed at once) and ends on [`Server::shutdown_all`].
    pub async fn serve_connection<S>(&self, stream: S) -> std::io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Some(slot) = self.shared.admit() else {
            return Ok(());
        };
        let cancel = self.shared.cancel.clone();
        let r = self
            .shared
            .all
            .track_future(self.serve_connection_until(stream, &cancel))
            .await;
        drop(slot);
        r
    }

    /// Listen on a Unix socket at `path`. A stale socket file there is
    /// replaced; any other kind of file is left alone and binding fails.
    /// The socket file is removed on shutdown.
    pub async fn serve_unix(&self, path: impl AsRef<Path>) -> std::io::Result<ServerHandle> {
        let path = path.as_ref().to_path_buf();
        if let Ok(meta) = std::fs::symlink_metadata(&path) {
            use std::os::unix::fs::FileTypeExt;
            if meta.file_type().is_socket() {
                std::fs::remove_file(&path)?;
            }
        }
        let listener = UnixListener::bind(&path)?;
        Ok(self.spawn_listener(Listener::Unix(listener), ListenAddr::Unix(path), true))
    }

    /// Listen on TCP (use [`DEFAULT_TCP_ADDR`] for the loopback default; port 0 picks a free port).
    pub async fn serve_tcp(&self, addr: impl ToSocketAddrs) -> std::io::Result<ServerHandle> {
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        Ok(self.spawn_listener(Listener::Tcp(listener), ListenAddr::Tcp(local), false))
    }

    /// Serve on an already-bound, listening Unix socket, e.g. one inherited
    /// from systemd socket activation (`LISTEN_FDS`) or `--listen fd:N`.
    /// The socket is made non-blocking. Its file is *not* removed on
    /// shutdown (whoever created it owns it). Unnamed and abstract sockets
    /// are refused (no URI can describe them). Must be called inside a tokio runtime.
    pub fn serve_unix_listener(
        &self,
        listener: std::os::unix::net::UnixListener,
    ) -> std::io::Result<ServerHandle> {
        let local = listener.local_addr()?;
        let Some(path) = local.as_pathname().map(Path::to_path_buf) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "inherited Unix socket has no path (unnamed or abstract sockets are not supported)",
            ));
        };
        listener.set_nonblocking(true)?;
        let listener = UnixListener::from_std(listener)?;
        Ok(self.spawn_listener(Listener::Unix(listener), ListenAddr::Unix(path), false))
    }

    /// Serve on an already-bound, listening TCP socket (see
    /// [`serve_unix_listener`](Self::serve_unix_listener)). Must be called inside a tokio runtime.
    pub fn serve_tcp_listener(
        &self,
        listener: std::net::TcpListener,
    ) -> std::io::Result<ServerHandle> {
        let local = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        Ok(self.spawn_listener(Listener::Tcp(listener), ListenAddr::Tcp(local), false))
    }

    fn spawn_listener(
        &self,
        listener: Listener,
        addr: ListenAddr,
        owns_file: bool,
    ) -> ServerHandle {
        let stop = self.shared.cancel.child_token();
        let accept_stop = stop.child_token();
        let tracker = TaskTracker::new();
        let remove = match (&addr, owns_file) {
            (ListenAddr::Unix(p), true) => Some(p.clone()),
            _ => None,
        };
        let task = tokio::spawn(accept_loop(
            self.clone(),
            listener,
            stop.clone(),
            accept_stop.clone(),
            tracker.clone(),
            remove,
        ));
        ServerHandle {
            addr,
            stop,
            accept_stop,
            tracker,
            task: Some(task),
        }
    }

    /// Serve a connection until it ends or `stop` fires.
    async fn serve_connection_until<S>(
        &self,
        stream: S,
        stop: &CancellationToken,
    ) -> std::io::Result<()>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limit = self.shared.limits.handshake_timeout;
        let entered = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            r = tokio::time::timeout(limit, handshake(stream, &self.shared)) => match r {
                Ok(r) => r?,
                Err(_) => {
                    tracing::debug!("client did not finish the handshake within {limit:?}; closing");
                    return Ok(());
                }
            },
        };
        // Each stream type gets its own transmission loop: the plain one is
        // exactly as fast as before TLS existed.
        match entered {
            Entered::Closed => {}
            Entered::Plain(stream, session) => {
                crate::transmission::serve(stream, session, &self.shared, stop.clone()).await
            }
            Entered::Tls(stream, session) => {
                crate::transmission::serve(*stream, session, &self.shared, stop.clone()).await
            }
        }
        Ok(())
    }

    /// Shut down every listener and connection of this server, with the
    /// semantics of [`ServerHandle::shutdown`], and wait until all
    /// connections (including those of [`serve_connection`](Self::serve_connection))
    /// have ended and no backend call is running. Listening socket files
    /// created by [`serve_unix`](Self::serve_unix) are removed.
    pub async fn shutdown_all(&self) {
        self.shared.cancel.cancel();
        self.shared.all.close();
        self.shared.all.wait().await;
    }

    /// True once [`shutdown_all`](Self::shutdown_all) was called.
    pub fn is_shut_down(&self) -> bool {
        self.shared.cancel.is_cancelled()
    }
}

/// How the handshake of a connection ended.
enum Entered<S> {
    Closed,
    /// Transmission in plain text.
    Plain(S, Session),
    /// Transmission over TLS (after `NBD_OPT_STARTTLS`).
    Tls(Box<tokio_rustls::server::TlsStream<S>>, Session),
}

/// Option haggling, with the upgrade to TLS when the client asks for it
/// (the TLS handshake counts against the handshake timeout).
async fn handshake<S>(mut stream: S, shared: &Shared) -> std::io::Result<Entered<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let after = match negotiate(&mut stream, shared).await? {
        Outcome::Close => return Ok(Entered::Closed),
        Outcome::Transmit(session) => return Ok(Entered::Plain(stream, session)),
        Outcome::StartTls(after) => after,
    };
    let Some(tls) = &shared.tls else {
        return Ok(Entered::Closed);
    };
    let mut stream = match tls.acceptor().accept(stream).await {
        Ok(s) => s,
        Err(e) => {
            tracing::info!("TLS handshake with a client failed: {e}");
            return Ok(Entered::Closed);
        }
    };
    match resume_after_tls(&mut stream, shared, after).await? {
        Outcome::Transmit(session) => Ok(Entered::Tls(Box::new(stream), session)),
        Outcome::Close | Outcome::StartTls(_) => Ok(Entered::Closed),
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
    accept_stop: CancellationToken,
    conns: TaskTracker,
    remove_on_exit: Option<PathBuf>,
) {
    // The accept loop itself counts as server work, so that `shutdown_all`
    // also waits for the socket file to be removed.
    let all = server.shared.all.clone();
    all.track_future(async {
        loop {
            let accepted = tokio::select! {
                _ = accept_stop.cancelled() => break,
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
        drop(listener);
        if let Some(p) = remove_on_exit {
            let _ = std::fs::remove_file(p);
        }
    })
    .await
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
    // Past max_connections: close at once (dropping the stream), no task.
    let Some(slot) = server.shared.admit() else {
        return;
    };
    let all = server.shared.all.clone();
    let server = server.clone();
    let stop = stop.clone();
    let fut = all.track_future(async move {
        if let Err(e) = server.serve_connection_until(stream, &stop).await {
            tracing::debug!("connection ended: {e}");
        }
        drop(slot);
    });
    conns.spawn(fut);
}

/// EMFILE, ENFILE, ENOBUFS, ECONNABORTED...: log, back off, keep accepting.
async fn accept_error(e: std::io::Error) {
    tracing::warn!("accept failed: {e}; retrying in 50 ms");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A Unix socket path (bound by [`Server::serve_unix`] or inherited).
    Unix(PathBuf),
    /// A TCP address (bound by [`Server::serve_tcp`] or inherited).
    Tcp(SocketAddr),
}

/// A running listener. Dropping it does not stop the server; call [`shutdown`](Self::shutdown).
#[derive(Debug)]
pub struct ServerHandle {
    addr: ListenAddr,
    stop: CancellationToken,
    accept_stop: CancellationToken,
    tracker: TaskTracker,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ServerHandle {
    /// The bound address (the real port when port 0 was requested).
    pub fn addr(&self) -> &ListenAddr {
        &self.addr
    }

    /// An NBD URI for the default export, e.g. `nbd+unix:///?socket=/tmp/s`.
    pub fn uri(&self) -> String {
        match &self.addr {
            ListenAddr::Unix(p) => unix_uri(false, p),
            ListenAddr::Tcp(a) => format!("nbd://{a}/"),
        }
    }

    /// Stop accepting new connections and wait until the listening socket is
    /// closed (and its file removed, if [`Server::serve_unix`] created it).
    /// Open connections are not affected.
    pub async fn stop_accepting(&mut self) {
        self.accept_stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Shut this listener down:
    /// - stop accepting (the socket file made by `serve_unix` is removed);
    /// - every connection stops reading requests at once, also while it waits
    ///   for in-flight permits or in the middle of a WRITE payload (such a
    ///   request is neither executed nor acknowledged); connections still in
    ///   the handshake are closed;
    /// - requests already handed to the backend run to completion, and their
    ///   replies are written within [`Limits::shutdown_grace`], after which
    ///   the connection is cut.
    ///
    /// When this returns, no backend call started by this listener's
    /// connections is running. It takes at most (backend calls in flight) +
    /// `shutdown_grace`, whatever the clients do.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        self.stop_accepting().await;
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// The NBD URI of the default export on the Unix socket `socket`
/// (`nbd+unix:///?socket=PATH`, `nbds+unix` with `tls`), the path
/// percent-encoded as a URI query value (RFC 3986): every byte but the
/// unreserved characters and `/` is written `%XX`, so a space, `%`, `&`,
/// `#` or `+` in the path reaches the client as itself.
pub fn unix_uri(tls: bool, socket: &std::path::Path) -> String {
    unix_export_uri(tls, "", socket)
}

/// The NBD URI of the export named `export` on the Unix socket `socket`
/// (`nbd+unix:///EXPORT?socket=PATH`), both percent-encoded as in
/// [`unix_uri`].
pub fn unix_export_uri(tls: bool, export: &str, socket: &std::path::Path) -> String {
    use std::fmt::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut uri = format!("nbd{}+unix:///", if tls { "s" } else { "" });
    let encode = |uri: &mut String, bytes: &[u8]| {
        for &b in bytes {
            if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
                uri.push(b as char);
            } else {
                let _ = write!(uri, "%{b:02X}");
            }
        }
    };
    encode(&mut uri, export.as_bytes());
    uri.push_str("?socket=");
    encode(&mut uri, socket.as_os_str().as_bytes());
    uri
}

#[cfg(test)]
mod uri_tests {
    #[test]
    fn unix_socket_paths_are_percent_encoded() {
        let p = std::path::Path::new("/tmp/my dir/a%b&c#d+e.sock");
        assert_eq!(
            super::unix_uri(false, p),
            "nbd+unix:///?socket=/tmp/my%20dir/a%25b%26c%23d%2Be.sock"
        );
        assert_eq!(
            super::unix_uri(true, std::path::Path::new("/run/t-1_x~.sock")),
            "nbds+unix:///?socket=/run/t-1_x~.sock"
        );
        assert_eq!(
            super::unix_export_uri(false, "hdd", std::path::Path::new("/tmp/a b/h.sock")),
            "nbd+unix:///hdd?socket=/tmp/a%20b/h.sock"
        );
    }
}
