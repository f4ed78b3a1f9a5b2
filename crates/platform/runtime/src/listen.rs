//! Where the NBD server listens: `unix:PATH`, `tcp:HOST:PORT` or `fd:N` (a
//! listening socket inherited from the parent, e.g. systemd). Parsed before
//! any device is opened, bound before the design is opened, so a typo or a
//! busy port never leaves a cache marked "open".

use std::net::ToSocketAddrs;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// The listening socket systemd passed (socket activation: `LISTEN_PID` is
/// this process and `LISTEN_FDS` is at least 1; the socket is fd 3). The
/// variables are removed so that child processes do not inherit them.
pub fn from_systemd() -> Option<ListenSpec> {
    let pid: u32 = std::env::var("LISTEN_PID").ok()?.trim().parse().ok()?;
    let fds: u32 = std::env::var("LISTEN_FDS").ok()?.trim().parse().ok()?;
    if pid != std::process::id() || fds == 0 {
        return None;
    }
    if fds > 1 {
        tracing::warn!("systemd passed {fds} sockets; serving the first (fd 3) only");
    }
    // Safe here: called at start-up, before any other thread reads the environment.
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    Some(ListenSpec::Fd(3))
}

/// A parsed `--listen` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenSpec {
    Unix(PathBuf),
    Tcp(String),
    Fd(i32),
}

impl ListenSpec {
    /// Parse `unix:PATH`, `tcp:HOST:PORT` or `fd:N`.
    pub fn parse(s: &str) -> Result<ListenSpec> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                bail!(
                    "--listen '{s}': the socket path is empty (example: unix:/run/tiercache.sock)"
                );
            }
            return Ok(ListenSpec::Unix(p.into()));
        }
        if let Some(a) = s.strip_prefix("tcp:") {
            let ok = a
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                bail!("--listen '{s}': expected tcp:HOST:PORT (example: tcp:127.0.0.1:10809)");
            }
            return Ok(ListenSpec::Tcp(a.into()));
        }
        if let Some(n) = s.strip_prefix("fd:") {
            let n: i32 = n.parse().ok().filter(|n| *n >= 0).with_context(|| {
                format!("--listen '{s}': expected fd:N with N a file descriptor number")
            })?;
            return Ok(ListenSpec::Fd(n));
        }
        bail!("--listen '{s}' is not understood (allowed: unix:PATH, tcp:HOST:PORT, fd:N)")
    }

    /// Refuse a TCP address that is not loopback unless every client must
    /// use TLS (`tls_required`) or `allow` (the user named the risk): plain
    /// NBD has no authentication, and anyone who reaches the address could
    /// read and write the device.
    pub fn check_exposure(&self, allow: bool, tls_required: bool) -> Result<()> {
        let ListenSpec::Tcp(a) = self else {
            return Ok(());
        };
        let exposed = a
            .to_socket_addrs()
            .with_context(|| format!("--listen tcp:{a}: resolving the address"))?
            .any(|x| !x.ip().is_loopback());
        if !exposed || tls_required {
            return Ok(());
        }
        if !allow {
            bail!(
                "--listen tcp:{a} is reachable from other machines, and plain NBD has no \
                 authentication: anyone who reaches it can read and write the device. \
                 Require TLS with --tls=require --tls-certificates DIR (add --tls-verify-peer \
                 to admit only clients with a certificate from your CA), listen on a loopback \
                 address or a Unix socket, or accept the risk with --insecure-listen"
            );
        }
        tracing::warn!(
            "listening on {a}, which is not a loopback address, without --tls=require: \
             anyone who reaches this address can read and write the device"
        );
        Ok(())
    }

    /// Bind (or adopt) the listening socket.
    pub fn bind(&self) -> Result<Bound> {
        match self {
            ListenSpec::Unix(p) => {
                if let Ok(meta) = std::fs::symlink_metadata(p) {
                    if !meta.file_type().is_socket() {
                        bail!(
                            "--listen unix:{}: a file that is not a socket is there; refusing to replace it",
                            p.display()
                        );
                    }
                    // A socket file: in use by a live server, or stale.
                    if std::os::unix::net::UnixStream::connect(p).is_ok() {
                        bail!(
                            "--listen unix:{}: another server is listening there",
                            p.display()
                        );
                    }
                    std::fs::remove_file(p)
                        .with_context(|| format!("removing stale socket {}", p.display()))?;
                }
                let l = std::os::unix::net::UnixListener::bind(p)
                    .with_context(|| format!("listening on unix:{}", p.display()))?;
                Ok(Bound::Unix(l, p.clone()))
            }
            ListenSpec::Tcp(a) => {
                let addrs: Vec<_> = a
                    .to_socket_addrs()
                    .with_context(|| format!("--listen tcp:{a}: resolving the address"))?
                    .collect();
                let l = std::net::TcpListener::bind(&addrs[..])
                    .with_context(|| format!("listening on tcp:{a}"))?;
                Ok(Bound::Tcp(l))
            }
            ListenSpec::Fd(n) => {
                // SAFETY: the user names an inherited descriptor; we take ownership of it.
                let fd = unsafe { OwnedFd::from_raw_fd(*n) };
                let addr = rustix::net::getsockname(&fd)
                    .with_context(|| format!("--listen fd:{n} is not a socket"))?;
                if addr.address_family() == rustix::net::AddressFamily::UNIX {
                    Ok(Bound::InheritedUnix(
                        std::os::unix::net::UnixListener::from(fd),
                    ))
                } else {
                    Ok(Bound::Tcp(std::net::TcpListener::from(fd)))
                }
            }
        }
    }
}

/// A bound listening socket, not yet accepting.
#[derive(Debug)]
pub enum Bound {
    /// A Unix socket we created at this path (removed on shutdown).
    Unix(std::os::unix::net::UnixListener, PathBuf),
    /// An inherited Unix socket (left in place on shutdown).
    InheritedUnix(std::os::unix::net::UnixListener),
    Tcp(std::net::TcpListener),
}

impl Bound {
    /// Start the NBD server on this socket. The URI says `nbds` when the
    /// server requires TLS.
    pub fn serve(self, server: &tiercache_nbd::Server) -> Result<Listening> {
        let tls = matches!(
            server.tls().map(|t| t.mode()),
            Some(tiercache_nbd::TlsMode::Require)
        );
        let s = if tls { "s" } else { "" };
        Ok(match self {
            Bound::Unix(l, p) => {
                let uri = tiercache_nbd::unix_uri(tls, &p);
                Listening {
                    handle: server.serve_unix_listener(l)?,
                    uri,
                    remove: Some(p),
                }
            }
            Bound::InheritedUnix(l) => {
                let uri = match l
                    .local_addr()
                    .ok()
                    .and_then(|a| a.as_pathname().map(|p| p.to_owned()))
                {
                    Some(p) => tiercache_nbd::unix_uri(tls, &p),
                    None => format!("nbd{s}+unix (inherited socket)"),
                };
                Listening {
                    handle: server.serve_unix_listener(l)?,
                    uri,
                    remove: None,
                }
            }
            Bound::Tcp(l) => {
                let uri = format!("nbd{s}://{}/", l.local_addr()?);
                Listening {
                    handle: server.serve_tcp_listener(l)?,
                    uri,
                    remove: None,
                }
            }
        })
    }

    /// Give up the socket (the design failed to open): remove a socket file we made.
    pub fn abandon(self) {
        if let Bound::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A listening NBD server.
pub struct Listening {
    pub handle: tiercache_nbd::ServerHandle,
    pub uri: String,
    remove: Option<PathBuf>,
}

impl Listening {
    /// Stop accepting, end every connection (bounded by the shutdown grace)
    /// and wait until no request is running; remove the socket file.
    pub async fn shutdown(self) {
        self.handle.shutdown().await;
        if let Some(p) = self.remove {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_values_are_checked_before_anything_opens() {
        assert_eq!(
            ListenSpec::parse("unix:/tmp/x.sock").unwrap(),
            ListenSpec::Unix("/tmp/x.sock".into())
        );
        assert_eq!(
            ListenSpec::parse("tcp:127.0.0.1:10809").unwrap(),
            ListenSpec::Tcp("127.0.0.1:10809".into())
        );
        assert_eq!(ListenSpec::parse("fd:3").unwrap(), ListenSpec::Fd(3));
        for bad in [
            "tcp:127.0.0.1",
            "tcp:host:99999",
            "udp:1",
            "unix:",
            "fd:-1",
            "fd:x",
            "127.0.0.1:1",
        ] {
            let e = ListenSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn a_reachable_tcp_address_needs_tls_or_an_explicit_risk() {
        let open = ListenSpec::Tcp("0.0.0.0:10809".into());
        let e = open.check_exposure(false, false).unwrap_err().to_string();
        assert!(
            e.contains("--tls=require") && e.contains("--insecure-listen"),
            "{e}"
        );
        open.check_exposure(false, true).unwrap();
        open.check_exposure(true, false).unwrap();
        ListenSpec::Tcp("127.0.0.1:10809".into())
            .check_exposure(false, false)
            .unwrap();
    }

    #[test]
    fn a_regular_file_is_never_replaced_by_the_socket() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("data");
        std::fs::write(&p, b"precious").unwrap();
        let e = ListenSpec::Unix(p.clone()).bind().unwrap_err().to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"precious");
    }
}
