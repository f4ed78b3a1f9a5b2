//! Test certificates made with `openssl` in nbdkit's and libnbd's layout: a
//! CA, a server certificate for localhost/127.0.0.1 and a client certificate.
//! Shared by the TLS tests of the server (live_tls) and of the NBD backing
//! client (live_remote).

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run openssl");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and the certificate directories its users need.
pub struct Pki {
    /// The server's: ca-cert.pem, server-cert.pem, server-key.pem.
    pub server: PathBuf,
    /// A client with a certificate: ca-cert.pem, client-cert.pem, client-key.pem.
    pub client: PathBuf,
    /// A client without one: ca-cert.pem only.
    pub anon: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    run(Command::new("openssl").current_dir(dir).args(args));
}

/// Sign `name`-key.pem's request with the CA into `name`-cert.pem.
fn issue(dir: &Path, name: &str, subject: &str, ext: &str) {
    let key = format!("{name}-key.pem");
    let csr = format!("{name}.csr");
    let cert = format!("{name}-cert.pem");
    let extfile = format!("{name}.ext");
    fs::write(dir.join(&extfile), ext).unwrap();
    #[rustfmt::skip]
    openssl(dir, &["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", &key, "-out", &csr, "-subj", subject]);
    #[rustfmt::skip]
    openssl(dir, &["x509", "-req", "-in", &csr, "-CA", "ca-cert.pem", "-CAkey", "ca-key.pem",
        "-CAcreateserial", "-days", "30", "-extfile", &extfile, "-out", &cert]);
}

/// A fresh CA, a server certificate for localhost/127.0.0.1 and a client certificate.
pub fn pki(root: &Path) -> Pki {
    let work = root.join("ca");
    fs::create_dir_all(&work).unwrap();
    #[rustfmt::skip]
    openssl(&work, &["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-nodes", "-keyout", "ca-key.pem", "-out", "ca-cert.pem", "-days", "30",
        "-subj", "/CN=tiercache test CA"]);
    let server_ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
    issue(&work, "server", "/CN=localhost", server_ext);
    issue(
        &work,
        "client",
        "/CN=client",
        "extendedKeyUsage=clientAuth\n",
    );
    let dir = |name: &str, files: &[&str]| {
        let d = root.join(name);
        fs::create_dir_all(&d).unwrap();
        for f in files {
            fs::copy(work.join(f), d.join(f)).unwrap();
        }
        d
    };
    Pki {
        server: dir(
            "server",
            &["ca-cert.pem", "server-cert.pem", "server-key.pem"],
        ),
        client: dir(
            "client",
            &["ca-cert.pem", "client-cert.pem", "client-key.pem"],
        ),
        anon: dir("anon", &["ca-cert.pem"]),
    }
}
