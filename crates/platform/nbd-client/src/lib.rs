//! A small blocking NBD client: the fixed newstyle handshake with
//! `NBD_OPT_GO`, then pipelined READ/WRITE/FLUSH/TRIM/DISC requests with
//! cookies and simple replies, over a Unix or TCP socket named by an NBD URI
//! (`nbd+unix:///EXPORT?socket=PATH`, `nbd://HOST[:PORT]/EXPORT`).
//!
//! Why hand-written: no maintained Rust NBD client crate fits. The crates.io
//! NBD crates are servers, kernel-device wrappers (`/dev/nbdX` via ioctl, which
//! needs root and a kernel module) or unmaintained clients without `OPT_GO`
//! or pipelining; the C `libnbd` bindings need a system library. The protocol
//! subset a load generator needs is a few hundred lines (see
//! NetworkBlockDevice/nbd `doc/proto.md`).
//!
//! Pipelining: [`Client::split`] gives a [`Sender`] and a [`Receiver`] over
//! the same socket, so one thread can keep sending while another reads the
//! replies in whatever order the server sends them.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

mod tls;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const OPT_STARTTLS: u32 = 5;
const OPT_GO: u32 = 7;
const OPT_STRUCTURED_REPLY: u32 = 8;
const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
const REPLY_FLAG_DONE: u16 = 1;
const CHUNK_NONE: u16 = 0;
const CHUNK_OFFSET_DATA: u16 = 1;
const CHUNK_OFFSET_HOLE: u16 = 2;
const CHUNK_ERROR_BIT: u16 = 1 << 15;
/// Largest structured reply chunk accepted (bigger is a protocol error).
const MAX_CHUNK: u32 = 64 << 20;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_FLAG_ERROR: u32 = 1 << 31;
const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;
const REP_ERR_TLS_REQD: u32 = REP_FLAG_ERROR | 5;
const REP_ERR_UNKNOWN: u32 = REP_FLAG_ERROR | 6;
const INFO_EXPORT: u16 = 0;

/// Request types.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1;
/// Command flag of WRITE_ZEROES: allocate (do not punch a hole).
pub const CMD_FLAG_NO_HOLE: u16 = 2;
/// Transmission flags.
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// How long the server may take to answer each handshake step.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Default TCP port of `nbd://` URIs.
pub const DEFAULT_PORT: u16 = 10809;

/// What can go wrong connecting or talking to a server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URI is malformed or uses a scheme this client does not speak.
    #[error("bad NBD URI '{uri}': {msg}")]
    Uri { uri: String, msg: String },
    /// The server could not be reached.
    #[error("cannot connect to NBD server at {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    /// The server answered, but not as an NBD server we can use.
    #[error("NBD handshake with {addr} failed: {msg}")]
    Handshake { addr: String, msg: String },
    /// An I/O error during the handshake or transmission.
    #[error("NBD connection: {0}")]
    Io(#[from] io::Error),
}

/// Where the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Unix(String),
    Tcp { host: String, port: u16 },
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Unix(p) => write!(f, "unix:{p}"),
            Address::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Address::Tcp { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uri {
    pub address: Address,
    /// Export name (may be empty: the server's default export).
    pub export: String,
    /// `nbds://`: TLS is required, with these credentials.
    pub tls: Option<TlsCredentials>,
}

/// Where an `nbds://` URI's certificates are: libnbd's `tls-certificates=DIR`
/// layout (`ca-cert.pem`, and optionally `client-cert.pem` + `client-key.pem`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsCredentials {
    pub certificates: String,
}

fn pct_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at '{}'", &s[i..]))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent escapes are not UTF-8".to_string())
}

impl std::str::FromStr for Uri {
    type Err = Error;

    fn from_str(uri: &str) -> Result<Uri, Error> {
        let err = |msg: String| Error::Uri {
            uri: uri.to_string(),
            msg,
        };
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| {
            err("expected nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH".into())
        })?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let export = pct_decode(path).map_err(err)?;
        let mut socket = None;
        let mut certificates = None;
        for kv in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
            match kv.split_once('=') {
                Some(("socket", v)) => socket = Some(pct_decode(v).map_err(err)?),
                Some(("tls-certificates", v)) => certificates = Some(pct_decode(v).map_err(err)?),
                _ => return Err(err(format!("unsupported query parameter '{kv}'"))),
            }
        }
        let (scheme, tls) = match scheme {
            "nbds" | "nbds+unix" => {
                let certificates = certificates.filter(|c| !c.is_empty()).ok_or_else(|| {
                    err(format!(
                        "{scheme}:// needs ?tls-certificates=DIR (a directory holding ca-cert.pem, \
                         and client-cert.pem + client-key.pem if the server wants a client certificate)"
                    ))
                })?;
                let plain = if scheme == "nbds" { "nbd" } else { "nbd+unix" };
                (plain, Some(TlsCredentials { certificates }))
            }
            _ if certificates.is_some() => {
                return Err(err("?tls-certificates= is for nbds:// URIs".into()))
            }
            s => (s, None),
        };
        let address = match scheme {
            "nbd+unix" => {
                if !authority.is_empty() {
                    return Err(err(format!(
                        "nbd+unix URIs take no host ('{authority}'): nbd+unix:///EXPORT?socket=PATH"
                    )));
                }
                let s = socket.ok_or_else(|| {
                    err("nbd+unix needs ?socket=PATH: nbd+unix:///EXPORT?socket=PATH".into())
                })?;
                if s.is_empty() {
                    return Err(err("empty socket path".into()));
                }
                Address::Unix(s)
            }
            "nbd" => {
                if socket.is_some() {
                    return Err(err("?socket= is for nbd+unix:// URIs".into()));
                }
                let (host, port) = if let Some(h) = authority.strip_prefix('[') {
                    let (h, p) = h
                        .split_once(']')
                        .ok_or_else(|| err("unclosed '[' in the host".into()))?;
                    (h, p.strip_prefix(':'))
                } else {
                    match authority.rsplit_once(':') {
                        Some((h, p)) => (h, Some(p)),
                        None => (authority, None),
                    }
                };
                if host.is_empty() {
                    return Err(err("no host: nbd://HOST[:PORT]/EXPORT".into()));
                }
                let port = match port {
                    None => DEFAULT_PORT,
                    Some(p) => p
                        .parse::<u16>()
                        .map_err(|_| err(format!("bad port '{p}'")))?,
                };
                Address::Tcp {
                    host: host.to_string(),
                    port,
                }
            }
            s => {
                return Err(err(format!(
                    "unsupported scheme '{s}' (supported: nbd[s]://HOST[:PORT]/EXPORT, nbd[s]+unix:///EXPORT?socket=PATH)"
                )))
            }
        };
        Ok(Uri {
            address,
            export,
            tls,
        })
    }
}

impl fmt::Display for Uri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls.is_some() { "s" } else { "" };
        match &self.address {
            Address::Unix(p) => write!(f, "nbd{s}+unix:///{}?socket={p}", self.export)?,
            a => write!(f, "nbd{s}://{a}/{}", self.export)?,
        }
        if let Some(t) = &self.tls {
            let sep = if matches!(self.address, Address::Unix(_)) {
                '&'
            } else {
                '?'
            };
            write!(f, "{sep}tls-certificates={}", t.certificates)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }
    fn set_read_timeout(&self, t: Option<std::time::Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tcp(s) => s.set_read_timeout(t),
        }
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }
    fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write_vectored(bufs),
            Stream::Tcp(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn rd_u16(s: &mut impl Read) -> io::Result<u16> {
    let mut b = [0; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}
fn rd_u32(s: &mut impl Read) -> io::Result<u32> {
    let mut b = [0; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}
fn rd_u64(s: &mut impl Read) -> io::Result<u64> {
    let mut b = [0; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// One reply of the server.
#[derive(Debug)]
pub struct Reply {
    pub cookie: u64,
    /// NBD error number (0: success).
    pub error: u32,
    /// READ payload (empty for other requests and failed reads).
    pub data: Vec<u8>,
}

/// Offset and length of the READs in flight: simple replies carry neither.
type Pending = Arc<Mutex<HashMap<u64, (u64, u32)>>>;

/// The sending half of a connection.
#[derive(Debug)]
pub struct Sender {
    s: Stream,
    next: u64,
    pending: Pending,
}

/// The receiving half of a connection.
#[derive(Debug)]
pub struct Receiver {
    s: io::BufReader<Stream>,
    pending: Pending,
    /// Structured READ replies still missing their `DONE` chunk: the buffer
    /// so far, the first error reported and how many bytes the data and hole
    /// chunks covered.
    partial: HashMap<u64, (Vec<u8>, u32, u64)>,
}

/// How to negotiate a connection.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Ask for structured replies (`NBD_OPT_STRUCTURED_REPLY`); the server
    /// may refuse, and then simple replies are used.
    pub structured_replies: bool,
    /// How long the server may take to answer each handshake step.
    pub handshake_timeout: std::time::Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            structured_replies: true,
            handshake_timeout: HANDSHAKE_TIMEOUT,
        }
    }
}

/// A negotiated connection to one export.
#[derive(Debug)]
pub struct Client {
    pub sender: Sender,
    pub receiver: Receiver,
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags the server advertised (`TFLAG_*`).
    pub flags: u16,
    /// Whether the server agreed to structured replies.
    pub structured: bool,
}

fn with_text(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Send one option request.
fn send_option(s: &mut Stream, opt: u32, data: &[u8]) -> io::Result<()> {
    let mut o = Vec::with_capacity(16 + data.len());
    o.extend_from_slice(&IHAVEOPT.to_be_bytes());
    o.extend_from_slice(&opt.to_be_bytes());
    o.extend_from_slice(&(data.len() as u32).to_be_bytes());
    o.extend_from_slice(data);
    s.write_all(&o)
}

/// Read one option reply: (reply type, data).
fn read_option_reply(s: &mut Stream, opt: u32) -> Result<(u32, Vec<u8>), String> {
    let e = |e: io::Error| format!("reading the option reply: {e}");
    if rd_u64(s).map_err(e)? != OPT_REPLY_MAGIC {
        return Err("bad option reply magic".into());
    }
    let got = rd_u32(s).map_err(e)?;
    if got != opt {
        return Err(format!("reply to option {got} while waiting for {opt}"));
    }
    let typ = rd_u32(s).map_err(e)?;
    let len = rd_u32(s).map_err(e)? as usize;
    if len > 1 << 20 {
        return Err(format!("option reply of {len} bytes"));
    }
    let mut data = vec![0; len];
    s.read_exact(&mut data).map_err(e)?;
    Ok((typ, data))
}

impl Client {
    /// Connect to `uri` and negotiate its export with `NBD_OPT_GO`, asking
    /// for structured replies.
    pub fn connect(uri: &Uri) -> Result<Client, Error> {
        Self::connect_with(uri, &ConnectOptions::default())
    }

    /// Connect to `uri` with explicit options.
    pub fn connect_with(uri: &Uri, o: &ConnectOptions) -> Result<Client, Error> {
        let addr = uri.address.to_string();
        let mut s = match &uri.address {
            Address::Unix(p) => UnixStream::connect(p).map(Stream::Unix),
            Address::Tcp { host, port } => TcpStream::connect((host.as_str(), *port)).map(|t| {
                let _ = t.set_nodelay(true);
                Stream::Tcp(t)
            }),
        }
        .map_err(|source| Error::Connect {
            addr: addr.clone(),
            source,
        })?;
        // A server that accepts but never greets must not hang the caller.
        s.set_read_timeout(Some(o.handshake_timeout))?;
        let hs = |msg: String| Error::Handshake {
            addr: addr.clone(),
            msg,
        };
        let magic = rd_u64(&mut s).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => hs(format!(
                "no greeting within {} s (not an NBD server?)",
                o.handshake_timeout.as_secs()
            )),
            _ => hs(format!("no greeting ({e})")),
        })?;
        if magic != NBDMAGIC {
            return Err(hs(format!("not an NBD server (greeting {magic:#x})")));
        }
        let opt = rd_u64(&mut s)?;
        if opt != IHAVEOPT {
            return Err(hs(
                "oldstyle server: only the fixed newstyle handshake is supported".into(),
            ));
        }
        let hflags = rd_u16(&mut s)?;
        if hflags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(hs(
                "server does not offer the fixed newstyle handshake".into()
            ));
        }
        let cflags = u32::from(hflags & (FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES));
        s.write_all(&cflags.to_be_bytes())?;
        if let Some(creds) = &uri.tls {
            let cfg = tls::config(creds).map_err(|m| hs(format!("TLS: {m}")))?;
            send_option(&mut s, OPT_STARTTLS, &[])?;
            let (typ, data) = read_option_reply(&mut s, OPT_STARTTLS).map_err(hs)?;
            if typ != REP_ACK {
                return Err(hs(format!(
                    "the server refused STARTTLS (reply {typ:#x}){}",
                    with_text(&String::from_utf8_lossy(&data))
                )));
            }
            s = tls::wrap(s, &uri.address, cfg, o.handshake_timeout)
                .map_err(|m| hs(format!("TLS: {m}")))?;
            s.set_read_timeout(Some(o.handshake_timeout))?;
        }
        let mut structured = false;
        if o.structured_replies {
            send_option(&mut s, OPT_STRUCTURED_REPLY, &[])?;
            let (typ, _) = read_option_reply(&mut s, OPT_STRUCTURED_REPLY).map_err(hs)?;
            // Any error (usually ERR_UNSUP): simple replies it is.
            structured = typ == REP_ACK;
        }
        // OPT_GO: name length, name, no information requests.
        let name = uri.export.as_bytes();
        let mut o = Vec::with_capacity(6 + name.len());
        o.extend_from_slice(&(name.len() as u32).to_be_bytes());
        o.extend_from_slice(name);
        o.extend_from_slice(&0u16.to_be_bytes());
        send_option(&mut s, OPT_GO, &o)?;
        let (mut size, mut flags) = (None, 0);
        loop {
            let (typ, data) = read_option_reply(&mut s, OPT_GO).map_err(hs)?;
            let len = data.len();
            let text = String::from_utf8_lossy(&data).into_owned();
            match typ {
                REP_ACK => break,
                REP_INFO if len >= 12 && u16::from_be_bytes([data[0], data[1]]) == INFO_EXPORT => {
                    size = Some(u64::from_be_bytes(data[2..10].try_into().expect("8 bytes")));
                    flags = u16::from_be_bytes([data[10], data[11]]);
                }
                REP_INFO => {}
                REP_ERR_UNKNOWN => {
                    return Err(hs(format!(
                        "server has no export named '{}'{}",
                        uri.export,
                        if text.is_empty() {
                            String::new()
                        } else {
                            format!(" ({text})")
                        }
                    )))
                }
                REP_ERR_UNSUP => {
                    return Err(hs("server does not support NBD_OPT_GO".into()));
                }
                REP_ERR_TLS_REQD => {
                    return Err(hs(
                        "the server requires TLS: use nbds://...?tls-certificates=DIR".into(),
                    ));
                }
                t => {
                    return Err(hs(format!(
                        "NBD_OPT_GO refused (reply {t:#x}){}",
                        with_text(&text)
                    )))
                }
            }
        }
        let size = size.ok_or_else(|| hs("no NBD_INFO_EXPORT before the ACK".into()))?;
        s.set_read_timeout(None)?;
        let pending: Pending = Arc::default();
        let r = s.try_clone()?;
        Ok(Client {
            sender: Sender {
                s,
                next: 1,
                pending: pending.clone(),
            },
            receiver: Receiver {
                s: io::BufReader::with_capacity(256 << 10, r),
                pending,
                partial: HashMap::new(),
            },
            size,
            flags,
            structured,
        })
    }

    /// The two halves, for one thread sending and another receiving.
    pub fn split(self) -> (Sender, Receiver) {
        (self.sender, self.receiver)
    }

    fn wait(&mut self, cookie: u64) -> io::Result<Reply> {
        let r = self.receiver.recv()?;
        if r.cookie != cookie {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("reply for cookie {} while waiting for {cookie}", r.cookie),
            ));
        }
        Ok(r)
    }

    /// Synchronous READ: the data, or the NBD error number.
    pub fn read(&mut self, offset: u64, len: u32) -> io::Result<Result<Vec<u8>, u32>> {
        let c = self.sender.send_read(offset, len)?;
        let r = self.wait(c)?;
        Ok(if r.error == 0 {
            Ok(r.data)
        } else {
            Err(r.error)
        })
    }

    /// Synchronous WRITE: Ok or the NBD error number.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<Result<(), u32>> {
        let c = self.sender.send_write(offset, data, false)?;
        let r = self.wait(c)?;
        Ok(if r.error == 0 { Ok(()) } else { Err(r.error) })
    }

    /// Synchronous FLUSH.
    pub fn flush(&mut self) -> io::Result<Result<(), u32>> {
        let c = self.sender.send_flush()?;
        let r = self.wait(c)?;
        Ok(if r.error == 0 { Ok(()) } else { Err(r.error) })
    }

    /// NBD_CMD_DISC, then close.
    pub fn disconnect(self) {
        self.sender.disconnect();
    }
}

impl Sender {
    /// Send one request; returns its cookie.
    pub fn send(
        &mut self,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> io::Result<u64> {
        let cookie = self.next;
        self.next += 1;
        let mut h = [0u8; 28];
        h[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        h[4..6].copy_from_slice(&flags.to_be_bytes());
        h[6..8].copy_from_slice(&typ.to_be_bytes());
        h[8..16].copy_from_slice(&cookie.to_be_bytes());
        h[16..24].copy_from_slice(&offset.to_be_bytes());
        h[24..28].copy_from_slice(&len.to_be_bytes());
        if typ == CMD_READ {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(cookie, (offset, len));
        }
        if payload.is_empty() {
            self.s.write_all(&h)?;
        } else if payload.len() <= 64 << 10 {
            let mut b = Vec::with_capacity(28 + payload.len());
            b.extend_from_slice(&h);
            b.extend_from_slice(payload);
            self.s.write_all(&b)?;
        } else {
            self.s.write_all(&h)?;
            self.s.write_all(payload)?;
        }
        Ok(cookie)
    }

    /// The cookie the next [`Sender::send`] will use (register a waiter
    /// for it before sending, so no reply can arrive unannounced).
    pub fn next_cookie(&self) -> u64 {
        self.next
    }

    /// Close both directions without consuming the sender (a [`Receiver`]
    /// blocked in `recv` returns an error): for a connection found broken.
    pub fn shutdown(&self) {
        self.s.shutdown();
    }

    pub fn send_write_zeroes(&mut self, offset: u64, len: u32, flags: u16) -> io::Result<u64> {
        self.send(CMD_WRITE_ZEROES, flags, offset, len, &[])
    }
    pub fn send_read(&mut self, offset: u64, len: u32) -> io::Result<u64> {
        self.send(CMD_READ, 0, offset, len, &[])
    }
    pub fn send_write(&mut self, offset: u64, data: &[u8], fua: bool) -> io::Result<u64> {
        let f = if fua { CMD_FLAG_FUA } else { 0 };
        self.send(CMD_WRITE, f, offset, data.len() as u32, data)
    }
    pub fn send_flush(&mut self) -> io::Result<u64> {
        self.send(CMD_FLUSH, 0, 0, 0, &[])
    }
    pub fn send_trim(&mut self, offset: u64, len: u32) -> io::Result<u64> {
        self.send(CMD_TRIM, 0, offset, len, &[])
    }

    /// NBD_CMD_DISC, then close both directions (a [`Receiver`] blocked in
    /// `recv` returns an error).
    pub fn disconnect(mut self) {
        let _ = self.send(CMD_DISC, 0, 0, 0, &[]);
        self.s.shutdown();
    }
}

impl Receiver {
    /// The next complete reply, in whatever order the server answers
    /// (blocks). Structured READ replies are assembled from their chunks
    /// (holes read as zeros); the first error chunk becomes the reply's error.
    pub fn recv(&mut self) -> io::Result<Reply> {
        loop {
            let magic = rd_u32(&mut self.s)?;
            match magic {
                SIMPLE_REPLY_MAGIC => return self.simple(),
                STRUCTURED_REPLY_MAGIC => {
                    if let Some(r) = self.chunk()? {
                        return Ok(r);
                    }
                }
                m => return Err(bad(format!("unexpected reply magic {m:#x}"))),
            }
        }
    }

    fn take_pending(&mut self, cookie: u64) -> Option<(u64, u32)> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&cookie)
    }

    fn simple(&mut self) -> io::Result<Reply> {
        let error = rd_u32(&mut self.s)?;
        let cookie = rd_u64(&mut self.s)?;
        let len = self.take_pending(cookie).map_or(0, |p| p.1);
        self.partial.remove(&cookie);
        let mut data = Vec::new();
        if error == 0 && len > 0 {
            data = vec![0; len as usize];
            self.s.read_exact(&mut data)?;
        }
        Ok(Reply {
            cookie,
            error,
            data,
        })
    }

    /// One structured reply chunk; the reply once its `DONE` chunk arrived.
    fn chunk(&mut self) -> io::Result<Option<Reply>> {
        let flags = rd_u16(&mut self.s)?;
        let typ = rd_u16(&mut self.s)?;
        let cookie = rd_u64(&mut self.s)?;
        let len = rd_u32(&mut self.s)?;
        if len > MAX_CHUNK {
            return Err(bad(format!("structured reply chunk of {len} bytes")));
        }
        let (req_off, req_len) = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&cookie)
            .copied()
            .unwrap_or((0, 0));
        let entry = self
            .partial
            .entry(cookie)
            .or_insert_with(|| (vec![0; req_len as usize], 0, 0));
        match typ {
            CHUNK_NONE => {}
            CHUNK_OFFSET_DATA | CHUNK_OFFSET_HOLE => {
                let off = rd_u64(&mut self.s)?;
                let n = if typ == CHUNK_OFFSET_DATA {
                    len.checked_sub(8)
                        .ok_or_else(|| bad("short OFFSET_DATA chunk".into()))?
                } else {
                    rd_u32(&mut self.s)?
                };
                let start = off.checked_sub(req_off).map(|s| s as usize);
                let fits = start.is_some_and(|s| s + n as usize <= entry.0.len());
                if !fits {
                    return Err(bad(format!(
                        "reply chunk {off}+{n} outside the read {req_off}+{req_len}"
                    )));
                }
                let start = start.expect("checked");
                entry.2 += u64::from(n);
                let dst = &mut entry.0[start..start + n as usize];
                if typ == CHUNK_OFFSET_DATA {
                    self.s.read_exact(dst)?;
                } else {
                    dst.fill(0);
                }
            }
            t if t & CHUNK_ERROR_BIT != 0 => {
                let mut body = vec![0; len as usize];
                self.s.read_exact(&mut body)?;
                let err = body
                    .get(0..4)
                    .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
                    .unwrap_or(5);
                if entry.1 == 0 {
                    entry.1 = if err == 0 { 5 } else { err };
                }
            }
            _ => {
                // Unknown informational chunk: skip it.
                let mut skip = vec![0; len as usize];
                self.s.read_exact(&mut skip)?;
            }
        }
        if flags & REPLY_FLAG_DONE == 0 {
            return Ok(None);
        }
        self.take_pending(cookie);
        let (data, error, covered) = self.partial.remove(&cookie).unwrap_or_default();
        if error == 0 && covered != u64::from(req_len) {
            // A successful READ whose chunks left bytes out (or overlapped):
            // never hand back the zeros the buffer started with as data.
            return Err(bad(format!(
                "structured reply to a read of {req_len} bytes at {req_off} covered {covered} bytes"
            )));
        }

        Ok(Some(Reply {
            cookie,
            error,
            data: if error == 0 { data } else { Vec::new() },
        }))
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A structured chunk header (and body) as a server sends it.
    fn chunk(flags: u16, typ: u16, cookie: u64, body: &[u8]) -> Vec<u8> {
        let mut v = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
        v.extend_from_slice(&flags.to_be_bytes());
        v.extend_from_slice(&typ.to_be_bytes());
        v.extend_from_slice(&cookie.to_be_bytes());
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    /// A successful structured READ reply that leaves bytes out is a
    /// protocol error, never zeros handed back as data; a full one and an
    /// error chunk are what they say.
    #[test]
    fn structured_read_must_cover_the_read() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let pending: Pending = Arc::default();
        let mut r = Receiver {
            s: io::BufReader::new(Stream::Unix(a)),
            pending: pending.clone(),
            partial: HashMap::new(),
        };
        let mut data = 4096u64.to_be_bytes().to_vec();
        data.extend_from_slice(&[7; 8]);
        pending.lock().unwrap().insert(1, (4096, 8));
        b.write_all(&chunk(REPLY_FLAG_DONE, CHUNK_OFFSET_DATA, 1, &data))
            .unwrap();
        let rep = r.recv().unwrap();
        assert_eq!((rep.error, rep.data), (0, vec![7; 8]));
        let mut err = 5u32.to_be_bytes().to_vec();
        err.extend_from_slice(&0u16.to_be_bytes());
        pending.lock().unwrap().insert(2, (0, 8));
        b.write_all(&chunk(REPLY_FLAG_DONE, CHUNK_ERROR_BIT | 1, 2, &err))
            .unwrap();
        let rep = r.recv().unwrap();
        assert_eq!((rep.error, rep.data.len()), (5, 0));
        pending.lock().unwrap().insert(3, (0, 8));
        b.write_all(&chunk(REPLY_FLAG_DONE, CHUNK_NONE, 3, &[]))
            .unwrap();
        let e = r.recv().unwrap_err();
        assert!(e.to_string().contains("covered 0 bytes"), "{e}");
    }

    #[test]
    fn uris() {
        let u: Uri = "nbd+unix:///exp?socket=/tmp/a%20b.sock".parse().unwrap();
        assert_eq!(u.address, Address::Unix("/tmp/a b.sock".into()));
        assert_eq!(u.export, "exp");
        let u: Uri = "nbd+unix://?socket=/s".parse().unwrap();
        assert_eq!(u.export, "");
        let u: Uri = "nbd://localhost/x".parse().unwrap();
        assert_eq!(
            u.address,
            Address::Tcp {
                host: "localhost".into(),
                port: DEFAULT_PORT
            }
        );
        let u: Uri = "nbd://[::1]:1234".parse().unwrap();
        assert_eq!(
            u.address,
            Address::Tcp {
                host: "::1".into(),
                port: 1234
            }
        );
        for bad in [
            "http://x/y",
            "nbd+unix:///x",
            "nbd://",
            "nbd://h:99999/",
            "/tmp/sock",
            "nbds://h/",
            "nbd://h/x?tls-certificates=/d",
        ] {
            assert!(bad.parse::<Uri>().is_err(), "{bad}");
        }
    }

    #[test]
    fn nbds_uris_carry_their_certificate_directory() {
        let u: Uri = "nbds://h:10810/disk?tls-certificates=/etc/pki/x"
            .parse()
            .unwrap();
        assert_eq!(
            u.tls,
            Some(TlsCredentials {
                certificates: "/etc/pki/x".into()
            })
        );
        assert_eq!(
            u.to_string(),
            "nbds://h:10810/disk?tls-certificates=/etc/pki/x"
        );
        let u: Uri = "nbds+unix:///e?socket=/s&tls-certificates=/c"
            .parse()
            .unwrap();
        assert_eq!(u.address, Address::Unix("/s".into()));
        assert_eq!(
            u.to_string(),
            "nbds+unix:///e?socket=/s&tls-certificates=/c"
        );
        let e = "nbds://h/".parse::<Uri>().unwrap_err().to_string();
        assert!(e.contains("tls-certificates=DIR"), "{e}");
    }
}
