//! Option haggling with TLS (`NBD_OPT_STARTTLS`), driven byte by byte over an
//! in-memory connection with a rustls client: FORCEDTLS (`TlsMode::Require`)
//! refuses plain options, `On` serves both, the upgrade continues the
//! handshake and the transmission over TLS, and client certificates are
//! checked when asked. (The real clients, nbdinfo/nbdcopy/qemu, are driven
//! against `tiercache serve` in the CLI's `live_tls` tests.)

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tiercache_nbd::protocol::*;
use tiercache_nbd::{Backend, Limits, MemBackend, Server, Tls, TlsMode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};

/// A CA, a server certificate for "localhost" and a client certificate, all
/// signed by the CA.
struct Pki {
    ca: CertificateDer<'static>,
    server: (CertificateDer<'static>, PrivateKeyDer<'static>),
    client: (CertificateDer<'static>, PrivateKeyDer<'static>),
}

fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        (
            cert.der().clone(),
            PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        )
    };
    Pki {
        ca: ca.der().clone(),
        server: leaf("localhost"),
        client: leaf("client.example.com"),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_tls(p: &Pki, mode: TlsMode, verify_peer: bool) -> Tls {
    let b = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let b = if verify_peer {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(p.ca.clone()).unwrap();
        let v = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .unwrap();
        b.with_client_cert_verifier(v)
    } else {
        b.with_no_client_auth()
    };
    let cfg = b
        .with_single_cert(vec![p.server.0.clone()], p.server.1.clone_key())
        .unwrap();
    Tls::from_config(mode, verify_peer, Arc::new(cfg))
}

fn connector(p: &Pki, with_client_cert: bool) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(p.ca.clone()).unwrap();
    let b = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = if with_client_cert {
        b.with_client_auth_cert(vec![p.client.0.clone()], p.client.1.clone_key())
            .unwrap()
    } else {
        b.with_no_client_auth()
    };
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
}

/// Start serving one in-memory connection on a 1 MiB memory export.
fn start(tls: Option<Tls>) -> DuplexStream {
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::new(1 << 20));
    let server = Server::with_tls([("disk", mem)], Limits::default(), tls).unwrap();
    let (client, conn) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move { server.serve_connection(conn).await });
    client
}

/// Read the greeting and send the client flags (fixed newstyle, no zeroes).
async fn greet<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    assert_eq!(s.read_u64().await.unwrap(), NBDMAGIC);
    assert_eq!(s.read_u64().await.unwrap(), IHAVEOPT);
    s.read_u16().await.unwrap();
    s.write_u32(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .await
        .unwrap();
}

async fn send_opt<S: AsyncWrite + Unpin>(s: &mut S, option: u32, data: &[u8]) {
    let mut b = IHAVEOPT.to_be_bytes().to_vec();
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).await.unwrap();
    s.flush().await.unwrap();
}

/// One option reply: (reply type, data).
async fn opt_reply<S: AsyncRead + Unpin>(s: &mut S, option: u32) -> (u32, Vec<u8>) {
    assert_eq!(s.read_u64().await.unwrap(), OPT_REPLY_MAGIC);
    assert_eq!(s.read_u32().await.unwrap(), option);
    let kind = s.read_u32().await.unwrap();
    let mut d = vec![0; s.read_u32().await.unwrap() as usize];
    s.read_exact(&mut d).await.unwrap();
    (kind, d)
}

/// Send an option and return its (single) reply type.
async fn opt<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, option: u32, data: &[u8]) -> u32 {
    send_opt(s, option, data).await;
    opt_reply(s, option).await.0
}

/// INFO/GO data for export `name` with no info requests.
fn info_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

/// NBD_OPT_GO on "disk"; returns the export size from NBD_INFO_EXPORT.
async fn go<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> u64 {
    send_opt(s, OPT_GO, &info_data("disk")).await;
    let mut size = None;
    loop {
        match opt_reply(s, OPT_GO).await {
            (REP_INFO, d) if u16::from_be_bytes([d[0], d[1]]) == INFO_EXPORT => {
                size = Some(u64::from_be_bytes(d[2..10].try_into().unwrap()))
            }
            (REP_INFO, _) => {}
            (REP_ACK, _) => return size.expect("NBD_INFO_EXPORT before the ACK"),
            (other, d) => panic!("GO failed: {other:#x} {}", String::from_utf8_lossy(&d)),
        }
    }
}

/// Write `data` at `offset`, read it back (simple replies), check it matches.
async fn write_read_back<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, offset: u64, data: &[u8]) {
    let req = |kind: u16, cookie: u64, len: u32| {
        let mut b = REQUEST_MAGIC.to_be_bytes().to_vec();
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b
    };
    let mut w = req(CMD_WRITE, 1, data.len() as u32);
    w.extend_from_slice(data);
    s.write_all(&w).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(simple_reply(s).await, (0, 1), "WRITE over TLS");
    s.write_all(&req(CMD_READ, 2, data.len() as u32))
        .await
        .unwrap();
    s.flush().await.unwrap();
    assert_eq!(simple_reply(s).await, (0, 2), "READ over TLS");
    let mut back = vec![0; data.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, data, "data read back over TLS");
}

/// A simple reply header: (error, cookie).
async fn simple_reply<S: AsyncRead + Unpin>(s: &mut S) -> (u32, u64) {
    assert_eq!(s.read_u32().await.unwrap(), SIMPLE_REPLY_MAGIC);
    let err = s.read_u32().await.unwrap();
    (err, s.read_u64().await.unwrap())
}

/// STARTTLS (acknowledged), then the TLS handshake as "localhost".
async fn upgrade(
    mut s: DuplexStream,
    c: &tokio_rustls::TlsConnector,
) -> std::io::Result<tokio_rustls::client::TlsStream<DuplexStream>> {
    assert_eq!(opt(&mut s, OPT_STARTTLS, &[]).await, REP_ACK);
    let name = ServerName::try_from("localhost").unwrap();
    let mut t = c.connect(name, s).await?;
    // With TLS 1.3 a refused client certificate shows up on the first read.
    send_opt(&mut t, OPT_LIST, &[]).await;
    let mut b = [0u8; 8];
    t.read_exact(&mut b).await?;
    assert_eq!(u64::from_be_bytes(b), OPT_REPLY_MAGIC);
    let mut rest = [0u8; 12];
    t.read_exact(&mut rest).await?;
    let mut d = vec![0; u32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize];
    t.read_exact(&mut d).await?;
    // Skip the remaining LIST replies up to the ACK.
    let mut kind = u32::from_be_bytes(rest[4..8].try_into().unwrap());
    while kind != REP_ACK {
        let (k, _) = opt_reply(&mut t, OPT_LIST).await;
        kind = k;
    }
    Ok(t)
}

#[tokio::test]
async fn require_refuses_every_plain_option_but_starttls_and_abort() {
    let p = pki();
    let mut s = start(Some(server_tls(&p, TlsMode::Require, false)));
    greet(&mut s).await;
    for (o, d) in [
        (OPT_LIST, vec![]),
        (OPT_STRUCTURED_REPLY, vec![]),
        (OPT_INFO, info_data("disk")),
        (OPT_GO, info_data("disk")),
        (99, b"unknown".to_vec()),
    ] {
        send_opt(&mut s, o, &d).await;
        let (kind, msg) = opt_reply(&mut s, o).await;
        assert_eq!(kind, REP_ERR_TLS_REQD, "option {o} before STARTTLS");
        assert!(String::from_utf8_lossy(&msg).contains("TLS"));
    }
    // STARTTLS with data is invalid, and the client may still upgrade after.
    assert_eq!(opt(&mut s, OPT_STARTTLS, b"x").await, REP_ERR_INVALID);
    assert_eq!(opt(&mut s, OPT_ABORT, &[]).await, REP_ACK);
}

#[tokio::test]
async fn require_closes_on_plain_export_name() {
    let p = pki();
    let mut s = start(Some(server_tls(&p, TlsMode::Require, false)));
    greet(&mut s).await;
    send_opt(&mut s, OPT_EXPORT_NAME, b"disk").await;
    let mut b = [0u8; 1];
    assert_eq!(
        s.read(&mut b).await.unwrap(),
        0,
        "EXPORT_NAME without TLS must close, not enter transmission"
    );
}

#[tokio::test]
async fn starttls_then_handshake_and_transmission_run_over_tls() {
    let p = pki();
    let s = start(Some(server_tls(&p, TlsMode::Require, false)));
    let mut s = s;
    greet(&mut s).await;
    let mut t = upgrade(s, &connector(&p, false)).await.unwrap();
    // TLS is up: no TLS_REQD any more; STARTTLS again is invalid.
    assert_eq!(opt(&mut t, OPT_STARTTLS, &[]).await, REP_ERR_INVALID);
    assert_eq!(opt(&mut t, OPT_INFO, &info_data("disk")).await, REP_INFO);
    // (the rest of the INFO replies)
    while opt_reply(&mut t, OPT_INFO).await.0 != REP_ACK {}
    assert_eq!(go(&mut t).await, 1 << 20);
    write_read_back(&mut t, 4096, &[0x5a; 8192]).await;
}

#[tokio::test]
async fn export_name_over_tls_enters_transmission() {
    let p = pki();
    let mut s = start(Some(server_tls(&p, TlsMode::Require, false)));
    greet(&mut s).await;
    let mut t = upgrade(s, &connector(&p, false)).await.unwrap();
    send_opt(&mut t, OPT_EXPORT_NAME, b"disk").await;
    assert_eq!(t.read_u64().await.unwrap(), 1 << 20);
    t.read_u16().await.unwrap();
    write_read_back(&mut t, 0, b"over tls").await;
}

#[tokio::test]
async fn on_serves_plain_and_tls_clients_and_tls_forgets_plain_choices() {
    let p = pki();
    let tls = server_tls(&p, TlsMode::On, false);
    // Plain client.
    let mut s = start(Some(tls.clone()));
    greet(&mut s).await;
    assert_eq!(go(&mut s).await, 1 << 20);
    write_read_back(&mut s, 512, b"plain").await;
    // TLS client that negotiated structured replies in plain text first:
    // after STARTTLS they are gone, so meta contexts are refused until it
    // negotiates them again.
    let mut s = start(Some(tls));
    greet(&mut s).await;
    assert_eq!(opt(&mut s, OPT_STRUCTURED_REPLY, &[]).await, REP_ACK);
    let mut t = upgrade(s, &connector(&p, false)).await.unwrap();
    let mut meta = info_data("disk")[..8].to_vec(); // name length + name
    meta.extend_from_slice(&0u32.to_be_bytes()); // no queries
    assert_eq!(
        opt(&mut t, OPT_LIST_META_CONTEXT, &meta).await,
        REP_ERR_INVALID
    );
    assert_eq!(opt(&mut t, OPT_STRUCTURED_REPLY, &[]).await, REP_ACK);
    assert_eq!(go(&mut t).await, 1 << 20);
}

#[tokio::test]
async fn without_tls_starttls_is_refused_by_policy() {
    let mut s = start(None);
    greet(&mut s).await;
    assert_eq!(opt(&mut s, OPT_STARTTLS, &[]).await, REP_ERR_POLICY);
    assert_eq!(go(&mut s).await, 1 << 20);
}

#[tokio::test]
async fn verify_peer_needs_a_client_certificate_from_the_ca() {
    let p = pki();
    let tls = server_tls(&p, TlsMode::Require, true);
    // No client certificate: the TLS handshake fails, nothing is served.
    let mut s = start(Some(tls.clone()));
    greet(&mut s).await;
    assert!(upgrade(s, &connector(&p, false)).await.is_err());
    // A certificate signed by another CA is refused too.
    let other = pki();
    let mut s = start(Some(tls.clone()));
    greet(&mut s).await;
    let mut mixed = pki();
    mixed.ca = p.ca.clone();
    mixed.client = other.client;
    assert!(upgrade(s, &connector(&mixed, true)).await.is_err());
    // With one: served.
    let mut s = start(Some(tls));
    greet(&mut s).await;
    let mut t = upgrade(s, &connector(&p, true)).await.unwrap();
    assert_eq!(go(&mut t).await, 1 << 20);
    write_read_back(&mut t, 0, b"verified").await;
}
