//! systemd readiness notification (`sd_notify`): `READY=1` once the server
//! accepts connections, `STOPPING=1` when it stops, `STATUS=` lines for
//! `systemctl status`. Does nothing unless `NOTIFY_SOCKET` is set. Written
//! here (a datagram to a path) rather than with a crate: the protocol is one
//! `sendto`.

use std::os::unix::net::UnixDatagram;

/// Send `state` (e.g. "READY=1\nSTATUS=serving") to systemd, if it listens.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let r = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = r {
        tracing::debug!("sd_notify to {}: {e}", path.to_string_lossy());
    }
}
