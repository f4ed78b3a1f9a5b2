//! Client side of `NBD_OPT_STARTTLS` for `nbds://` URIs.
//!
//! The blocking client splits a connection into a sender and a receiver on
//! two threads, but one TLS session cannot be driven from two threads without
//! a lock that a blocked read would hold. So after STARTTLS the socket moves
//! to a relay thread that runs the session with tokio-rustls and exchanges
//! plaintext with the client over a Unix socket pair: the rest of the client
//! is unchanged.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{Address, Stream, TlsCredentials};

/// The client configuration from a libnbd-style certificate directory:
/// `ca-cert.pem` verifies the server; `client-cert.pem` and `client-key.pem`,
/// when both exist, are presented to servers that ask for a certificate.
pub(crate) fn config(creds: &TlsCredentials) -> Result<Arc<rustls::ClientConfig>, String> {
    let dir = Path::new(&creds.certificates);
    if !dir.is_dir() {
        return Err(format!(
            "tls-certificates={}: not a directory (it must hold ca-cert.pem)",
            dir.display()
        ));
    }
    let ca = dir.join("ca-cert.pem");
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&ca)
        .map_err(|e| format!("reading the CA certificate {}: {e}", ca.display()))?;
    for c in certs {
        let c = c.map_err(|e| format!("reading the CA certificate {}: {e}", ca.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("CA certificate {}: {e}", ca.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("no certificate in {}", ca.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let (cert, key) = (dir.join("client-cert.pem"), dir.join("client-key.pem"));
    let cfg = if cert.exists() && key.exists() {
        let chain = CertificateDer::pem_file_iter(&cert)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("reading {}: {e}", cert.display()))?;
        let k = PrivateKeyDer::from_pem_file(&key)
            .map_err(|e| format!("reading {}: {e}", key.display()))?;
        b.with_client_auth_cert(chain, k)
            .map_err(|e| format!("client certificate {}: {e}", cert.display()))?
    } else {
        b.with_no_client_auth()
    };
    Ok(Arc::new(cfg))
}

/// Run TLS over `s` (right after the server acknowledged STARTTLS) and return
/// the plaintext end. The server's certificate must be valid for the URI's
/// host (`localhost` for Unix sockets).
pub(crate) fn wrap(
    s: Stream,
    address: &Address,
    cfg: Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<Stream, String> {
    let host = match address {
        Address::Tcp { host, .. } => host.clone(),
        Address::Unix(_) => "localhost".to_string(),
    };
    let name = ServerName::try_from(host.clone())
        .map_err(|e| format!("'{host}' is not a valid TLS server name: {e}"))?;
    let (mine, theirs) = UnixStream::pair().map_err(|e| e.to_string())?;
    let set = |r: std::io::Result<()>| r.map_err(|e| e.to_string());
    set(s.set_nonblocking(true))?;
    set(theirs.set_nonblocking(true))?;
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("nbd-tls".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(format!("starting the TLS relay: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let c = tokio_rustls::TlsConnector::from(cfg);
                match s {
                    Stream::Tcp(t) => {
                        relay(
                            c,
                            name,
                            tokio::net::TcpStream::from_std(t),
                            theirs,
                            tx,
                            timeout,
                        )
                        .await
                    }
                    Stream::Unix(u) => {
                        relay(
                            c,
                            name,
                            tokio::net::UnixStream::from_std(u),
                            theirs,
                            tx,
                            timeout,
                        )
                        .await
                    }
                }
            });
        })
        .map_err(|e| format!("starting the TLS relay: {e}"))?;
    match rx.recv() {
        Ok(Ok(())) => Ok(Stream::Unix(mine)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("the TLS relay stopped during the handshake".into()),
    }
}

/// Handshake, report the outcome, then copy both ways until either side ends.
async fn relay<IO: AsyncRead + AsyncWrite + Unpin>(
    c: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    io: std::io::Result<IO>,
    plain: UnixStream,
    tx: std::sync::mpsc::Sender<Result<(), String>>,
    timeout: Duration,
) {
    let io = match io {
        Ok(io) => io,
        Err(e) => {
            let _ = tx.send(Err(e.to_string()));
            return;
        }
    };
    let mut tls = match tokio::time::timeout(timeout, c.connect(name, io)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            let _ = tx.send(Err(format!("TLS handshake: {e}")));
            return;
        }
        Err(_) => {
            let _ = tx.send(Err(format!(
                "TLS handshake: no answer within {} s",
                timeout.as_secs()
            )));
            return;
        }
    };
    let mut plain = match tokio::net::UnixStream::from_std(plain) {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(Err(e.to_string()));
            return;
        }
    };
    let _ = tx.send(Ok(()));
    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
}
