//! TLS for NBD (`NBD_OPT_STARTTLS`), with rustls.
//!
//! Credentials come from one directory with nbdkit's file names
//! (nbdkit-tls(1)): `server-cert.pem` (the server certificate, optionally
//! followed by intermediates), `server-key.pem` (its private key: PKCS#8,
//! PKCS#1 or SEC1) and `ca-cert.pem` (the CA that signs client certificates;
//! needed only to verify clients).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The CA certificate file in the certificates directory.
pub const CA_CERT: &str = "ca-cert.pem";
/// The server certificate (chain) file in the certificates directory.
pub const SERVER_CERT: &str = "server-cert.pem";
/// The server private key file in the certificates directory.
pub const SERVER_KEY: &str = "server-key.pem";

/// When a client must use TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Clients may upgrade with `NBD_OPT_STARTTLS` or stay in plain text
    /// (the spec's SELECTIVETLS with no TLS-only export).
    On,
    /// Every option but `STARTTLS` and `ABORT` is refused with
    /// `NBD_REP_ERR_TLS_REQD` until TLS is up (the spec's FORCEDTLS).
    Require,
}

/// TLS settings of a server: the mode and the rustls configuration.
#[derive(Clone)]
pub struct Tls {
    mode: TlsMode,
    verify_peer: bool,
    acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("mode", &self.mode)
            .field("verify_peer", &self.verify_peer)
            .finish()
    }
}

/// Why TLS credentials could not be loaded; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificates directory is missing or not a directory.
    #[error("TLS certificates directory {}: {reason}", .dir.display())]
    Dir { dir: PathBuf, reason: String },
    /// A file could not be read or holds no usable PEM data.
    #[error("{}: {reason}", .path.display())]
    File { path: PathBuf, reason: String },
    /// rustls refused the combination (e.g. key and certificate do not match).
    #[error("{reason}")]
    Config { reason: String },
}

impl Tls {
    /// Load `server-cert.pem` and `server-key.pem` from `dir` (and
    /// `ca-cert.pem`, required with `verify_peer`: clients must then present
    /// a certificate signed by that CA). Every file is checked here, so a
    /// mistake fails at startup, not at the first client.
    pub fn from_dir(dir: &Path, mode: TlsMode, verify_peer: bool) -> Result<Tls, TlsError> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(TlsError::Dir {
                    dir: dir.into(),
                    reason: "is not a directory".into(),
                })
            }
            Err(e) => {
                return Err(TlsError::Dir {
                    dir: dir.into(),
                    reason: format!(
                        "{e} (it must hold {SERVER_CERT}, {SERVER_KEY} and, to verify clients, {CA_CERT})"
                    ),
                })
            }
        }
        let chain = load_certs(&dir.join(SERVER_CERT))?;
        let key = load_key(&dir.join(SERVER_KEY))?;
        let ca_path = dir.join(CA_CERT);
        let ca = if verify_peer || ca_path.exists() {
            Some(load_certs(&ca_path)?)
        } else {
            None
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config {
                reason: format!("TLS setup: {e}"),
            })?;
        let builder = match (verify_peer, ca) {
            (true, Some(ca)) => {
                let roots = root_store(&ca_path, ca)?;
                let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| TlsError::File {
                        path: ca_path.clone(),
                        reason: format!("cannot verify clients with this CA: {e}"),
                    })?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Config {
                reason: format!(
                    "{} and {} do not make a usable certificate and key: {e}",
                    dir.join(SERVER_CERT).display(),
                    dir.join(SERVER_KEY).display()
                ),
            })?;
        Ok(Tls::from_config(mode, verify_peer, Arc::new(config)))
    }

    /// TLS with a ready rustls configuration (`verify_peer` only labels it).
    pub fn from_config(mode: TlsMode, verify_peer: bool, config: Arc<ServerConfig>) -> Tls {
        Tls {
            mode,
            verify_peer,
            acceptor: TlsAcceptor::from(config),
        }
    }

    /// Whether plain-text clients are refused.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Whether clients must present a certificate signed by the CA.
    pub fn verifies_peer(&self) -> bool {
        self.verify_peer
    }

    pub(crate) fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }
}

fn file_err(path: &Path, reason: impl Into<String>) -> TlsError {
    TlsError::File {
        path: path.into(),
        reason: reason.into(),
    }
}

fn pem_err(path: &Path, e: rustls_pki_types::pem::Error) -> TlsError {
    use rustls_pki_types::pem::Error as E;
    match e {
        E::Io(io) => file_err(path, format!("cannot read: {io}")),
        other => file_err(path, format!("not valid PEM: {other}")),
    }
}

/// Every `CERTIFICATE` section of a PEM file (at least one).
fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(path, e))?;
    if certs.is_empty() {
        return Err(file_err(
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// The first private key of a PEM file.
fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => file_err(
            path,
            "holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)",
        ),
        e => pem_err(path, e),
    })
}

fn root_store(
    path: &Path,
    certs: Vec<CertificateDer<'static>>,
) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| file_err(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(Arc::new(roots))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, cert: &str, key: &str) {
        std::fs::write(dir.join(SERVER_CERT), cert).unwrap();
        std::fs::write(dir.join(SERVER_KEY), key).unwrap();
    }

    fn self_signed() -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        (c.cert.pem(), c.key_pair.serialize_pem())
    }

    fn err(dir: &Path, verify: bool) -> String {
        Tls::from_dir(dir, TlsMode::Require, verify)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn good_files_load_and_bad_ones_name_the_file() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope");
        assert!(
            err(&missing, false).contains("nope"),
            "{}",
            err(&missing, false)
        );

        // No files at all: the certificate is named.
        let e = err(d.path(), false);
        assert!(e.contains(SERVER_CERT) && e.contains("cannot read"), "{e}");

        let (cert, key) = self_signed();
        write_pair(d.path(), &cert, &key);
        let t = Tls::from_dir(d.path(), TlsMode::On, false).unwrap();
        assert_eq!(t.mode(), TlsMode::On);

        // verify-peer needs the CA file.
        let e = err(d.path(), true);
        assert!(e.contains(CA_CERT), "{e}");
        std::fs::write(d.path().join(CA_CERT), &cert).unwrap();
        assert!(Tls::from_dir(d.path(), TlsMode::Require, true)
            .unwrap()
            .verifies_peer());

        // Garbage PEM in the CA file is reported even without verify-peer.
        std::fs::write(d.path().join(CA_CERT), "-----BEGIN CERTIFICATE-----\n!!!\n").unwrap();
        let e = err(d.path(), false);
        assert!(e.contains(CA_CERT) && e.contains("PEM"), "{e}");
        std::fs::remove_file(d.path().join(CA_CERT)).unwrap();

        // A key where the certificate should be, and the other way round.
        write_pair(d.path(), &key, &key);
        let e = err(d.path(), false);
        assert!(
            e.contains(SERVER_CERT) && e.contains("no PEM certificate"),
            "{e}"
        );
        write_pair(d.path(), &cert, &cert);
        let e = err(d.path(), false);
        assert!(
            e.contains(SERVER_KEY) && e.contains("no PEM private key"),
            "{e}"
        );

        // A key of another certificate.
        let (_, other_key) = self_signed();
        write_pair(d.path(), &cert, &other_key);
        let e = err(d.path(), false);
        assert!(e.contains(SERVER_CERT) && e.contains(SERVER_KEY), "{e}");
    }
}
