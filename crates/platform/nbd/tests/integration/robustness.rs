//! Protocol conformance and robustness, checked with a raw socket client
//! written from the spec (NetworkBlockDevice/nbd doc/proto.md): exact error
//! codes, malformed input, abrupt disconnects, and that other connections
//! keep working afterwards.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::TestServer;
use tiercache_nbd::protocol::*;
use tiercache_nbd::{async_trait, Backend, Errno, FileBackend, MemBackend};

const EPERM: u32 = 1;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
const ENOTSUP: u32 = 95;
const SIZE: u64 = 1 << 20;

/// Minimal spec-following client.
struct Client {
    s: UnixStream,
}

/// The bytes of a request header.
fn header(kind: u16, flags: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    RequestHeader {
        magic: REQUEST_MAGIC,
        flags,
        kind,
        cookie,
        offset,
        length,
    }
    .encode()
    .to_vec()
}

impl Client {
    /// Connect and consume the greeting; does not send client flags yet.
    fn connect_raw(path: &Path) -> Client {
        let s = UnixStream::connect(path).expect("connect");
        // Safety net only: a hung server makes the test fail instead of hang.
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut c = Client { s };
        let g = c.read_n(18);
        assert_eq!(u64::from_be_bytes(g[0..8].try_into().unwrap()), NBDMAGIC);
        assert_eq!(u64::from_be_bytes(g[8..16].try_into().unwrap()), IHAVEOPT);
        let flags = u16::from_be_bytes([g[16], g[17]]);
        assert_eq!(flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
        c
    }

    /// Connect and send client flags FIXED_NEWSTYLE | NO_ZEROES.
    fn connect(path: &Path) -> Client {
        let mut c = Client::connect_raw(path);
        c.send(&3u32.to_be_bytes());
        c
    }

    fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("send");
    }

    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.s.read_exact(&mut v).expect("read");
        v
    }

    /// True if the server closed the connection (EOF or reset).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }

    fn opt(&mut self, option: u32, data: &[u8]) {
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&option.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        self.send(&v);
    }

    /// (option, reply type, data)
    fn opt_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let h = self.read_n(20);
        assert_eq!(
            u64::from_be_bytes(h[0..8].try_into().unwrap()),
            OPT_REPLY_MAGIC
        );
        let option = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        (option, kind, self.read_n(len as usize))
    }

    fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
        for i in infos {
            d.extend_from_slice(&i.to_be_bytes());
        }
        d
    }

    /// Send INFO/GO and collect (info replies, final reply type).
    fn info_or_go(&mut self, option: u32, name: &str, infos: &[u16]) -> (Vec<Vec<u8>>, u32) {
        self.opt(option, &Self::info_data(name, infos));
        let mut got = Vec::new();
        loop {
            let (o, kind, data) = self.opt_reply();
            assert_eq!(o, option);
            if kind == REP_INFO {
                got.push(data);
            } else {
                return (got, kind);
            }
        }
    }

    /// Negotiate (optionally structured replies) and GO; returns (size, flags).
    fn go(path: &Path, name: &str, structured: bool) -> (Client, u64, u16) {
        let mut c = Client::connect(path);
        if structured {
            c.opt(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(c.opt_reply().1, REP_ACK);
        }
        let (infos, last) = c.info_or_go(OPT_GO, name, &[]);
        assert_eq!(last, REP_ACK);
        let export = infos
            .iter()
            .find(|i| u16::from_be_bytes([i[0], i[1]]) == INFO_EXPORT)
            .expect("NBD_INFO_EXPORT is mandatory before the ACK");
        assert_eq!(export.len(), 12);
        let size = u64::from_be_bytes(export[2..10].try_into().unwrap());
        let flags = u16::from_be_bytes([export[10], export[11]]);
        (c, size, flags)
    }

    fn request(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, length: u32) {
        self.send(&header(kind, flags, cookie, offset, length));
    }

    /// Simple reply: (error, cookie).
    fn simple_reply(&mut self) -> (u32, u64) {
        let h = self.read_n(16);
        assert_eq!(
            u32::from_be_bytes(h[0..4].try_into().unwrap()),
            SIMPLE_REPLY_MAGIC
        );
        (
            u32::from_be_bytes(h[4..8].try_into().unwrap()),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
        )
    }

    /// Structured chunk: (flags, type, cookie, payload).
    fn chunk(&mut self) -> (u16, u16, u64, Vec<u8>) {
        let h = self.read_n(20);
        assert_eq!(
            u32::from_be_bytes(h[0..4].try_into().unwrap()),
            STRUCTURED_REPLY_MAGIC
        );
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        (
            u16::from_be_bytes([h[4], h[5]]),
            u16::from_be_bytes([h[6], h[7]]),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
            self.read_n(len as usize),
        )
    }

    fn write(&mut self, cookie: u64, offset: u64, data: &[u8], flags: u16) -> u32 {
        self.request(CMD_WRITE, flags, cookie, offset, data.len() as u32);
        self.send(data);
        let (err, c) = self.simple_reply();
        assert_eq!(c, cookie);
        err
    }

    /// READ with simple replies: Ok(data) or Err(errno).
    fn read(&mut self, cookie: u64, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.request(CMD_READ, 0, cookie, offset, len);
        let (err, c) = self.simple_reply();
        assert_eq!(c, cookie);
        if err == 0 {
            Ok(self.read_n(len as usize))
        } else {
            Err(err)
        }
    }
}

fn mem_server() -> (TestServer, Arc<MemBackend>) {
    let mem = Arc::new(MemBackend::new(SIZE as usize));
    let srv = TestServer::start(vec![("disk", mem.clone() as Arc<dyn Backend>)]);
    (srv, mem)
}

/// A fresh connection still does a full write/read round trip.
fn assert_server_alive(path: &Path) {
    let (mut c, size, _) = Client::go(path, "", false);
    assert_eq!(size, SIZE);
    assert_eq!(c.write(77, 4096, b"alive", 0), 0);
    assert_eq!(c.read(78, 4096, 5).unwrap(), b"alive");
    c.request(CMD_DISC, 0, 79, 0, 0);
    assert!(c.closed());
}

#[test]
fn malformed_handshake_is_dropped_and_server_keeps_serving() {
    let (srv, _) = mem_server();
    // Bad option magic.
    let mut c = Client::connect(&srv.sock);
    // One write: the server may close as soon as it has seen the magic.
    let mut bad = 0x1122_3344_5566_7788u64.to_be_bytes().to_vec();
    bad.extend_from_slice(&[0u8; 8]);
    c.send(&bad);
    assert!(c.closed(), "bad option magic must end the session");
    // Unknown client flag bit: the spec says drop the connection.
    let mut c = Client::connect_raw(&srv.sock);
    c.send(&(3u32 | 1 << 7).to_be_bytes());
    assert!(c.closed(), "unknown client flags must end the session");
    // Garbage then close mid-header.
    let mut c = Client::connect_raw(&srv.sock);
    c.send(&[0xff, 0xff]);
    drop(c);
    assert_server_alive(&srv.sock);
}

#[test]
fn option_errors_are_exact_and_the_option_loop_continues() {
    let (srv, _) = mem_server();
    let mut c = Client::connect(&srv.sock);

    c.opt(99, b"some data the server must skip");
    let (o, kind, msg) = c.opt_reply();
    assert_eq!((o, kind), (99, REP_ERR_UNSUP));
    assert!(!msg.is_empty(), "error replies carry a message");

    c.opt(OPT_STARTTLS, &[]);
    assert_eq!(c.opt_reply().1, REP_ERR_POLICY);

    c.opt(OPT_LIST, b"x");
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);

    c.opt(OPT_STRUCTURED_REPLY, b"x");
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);

    // Unknown export name -> ERR_UNKNOWN (INFO and GO).
    assert_eq!(
        c.info_or_go(OPT_INFO, "nope", &[]),
        (vec![], REP_ERR_UNKNOWN)
    );
    assert_eq!(c.info_or_go(OPT_GO, "nope", &[]), (vec![], REP_ERR_UNKNOWN));

    // Malformed INFO: name length larger than the data.
    c.opt(OPT_INFO, &[0, 0, 1, 0, 0, 0]);
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);
    // Malformed INFO: info count does not match.
    let mut d = Client::info_data("disk", &[INFO_NAME]);
    d.pop();
    c.opt(OPT_INFO, &d);
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);

    // (Oversize option data closes the connection: see tests/limits.rs.)

    // LIST still works on the same connection.
    c.opt(OPT_LIST, &[]);
    let (_, kind, data) = c.opt_reply();
    assert_eq!(kind, REP_SERVER);
    assert_eq!(&data[..4], &4u32.to_be_bytes());
    assert_eq!(&data[4..], b"disk");
    assert_eq!(c.opt_reply().1, REP_ACK);

    // STRUCTURED_REPLY twice: second is invalid.
    c.opt(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.opt_reply().1, REP_ACK);
    c.opt(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);

    // INFO then GO on the default name return identical information.
    let wanted = [INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE, 0x4242];
    let (info, k1) = c.info_or_go(OPT_INFO, "", &wanted);
    let (go, k2) = c.info_or_go(OPT_GO, "", &wanted);
    assert_eq!((k1, k2), (REP_ACK, REP_ACK));
    assert_eq!(info, go);
    let by_type = |t: u16| info.iter().find(|i| u16::from_be_bytes([i[0], i[1]]) == t);
    let bs = by_type(INFO_BLOCK_SIZE).expect("block size info");
    assert_eq!(bs.len(), 14);
    assert_eq!(&bs[2..], &[0, 0, 0, 1, 0, 0, 0x10, 0, 0x02, 0, 0, 0]);
    assert_eq!(&by_type(INFO_NAME).unwrap()[2..], b"disk");
    assert_eq!(info.len(), 4, "unknown info type 0x4242 is ignored");
    // Transmission works after GO.
    assert_eq!(c.write(1, 0, b"xyz", 0), 0);
}

#[test]
fn abort_is_acked_then_closed() {
    let (srv, _) = mem_server();
    let mut c = Client::connect(&srv.sock);
    c.opt(OPT_ABORT, &[]);
    assert_eq!(c.opt_reply(), (OPT_ABORT, REP_ACK, vec![]));
    assert!(c.closed());
    // A client that sends ABORT and leaves without reading is fine too.
    let mut c = Client::connect(&srv.sock);
    c.opt(OPT_ABORT, &[]);
    drop(c);
    assert_server_alive(&srv.sock);
}

#[test]
fn export_name_option_pads_unless_no_zeroes_and_drops_unknown_names() {
    let (srv, _) = mem_server();
    // Without C_NO_ZEROES: 8 + 2 + 124 zero bytes, then transmission.
    let mut c = Client::connect_raw(&srv.sock);
    c.send(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes());
    c.opt(OPT_EXPORT_NAME, b"disk");
    let r = c.read_n(134);
    assert_eq!(u64::from_be_bytes(r[0..8].try_into().unwrap()), SIZE);
    let flags = u16::from_be_bytes([r[8], r[9]]);
    assert_ne!(flags & TFLAG_HAS_FLAGS, 0);
    assert_eq!(flags & TFLAG_SEND_DF, 0, "no DF without structured replies");
    assert!(r[10..].iter().all(|&b| b == 0));
    assert_eq!(c.read(5, 0, 16).unwrap(), vec![0u8; 16]);

    // With C_NO_ZEROES: exactly 10 bytes (the next thing is our READ reply).
    let mut c = Client::connect(&srv.sock);
    c.opt(OPT_EXPORT_NAME, b"");
    let r = c.read_n(10);
    assert_eq!(u64::from_be_bytes(r[0..8].try_into().unwrap()), SIZE);
    assert_eq!(c.read(6, 0, 4).unwrap(), vec![0u8; 4]);

    // Unknown export: no error can be sent, the server disconnects.
    let mut c = Client::connect(&srv.sock);
    c.opt(OPT_EXPORT_NAME, b"missing");
    assert!(c.closed());
    assert_server_alive(&srv.sock);
}

#[test]
fn transmission_errors_are_exact_and_the_stream_stays_in_sync() {
    let (srv, mem) = mem_server();
    let (mut c, size, flags) = Client::go(&srv.sock, "disk", false);
    assert_eq!(size, SIZE);
    for f in [
        TFLAG_HAS_FLAGS,
        TFLAG_SEND_FLUSH,
        TFLAG_SEND_FUA,
        TFLAG_SEND_TRIM,
        TFLAG_SEND_WRITE_ZEROES,
        TFLAG_SEND_FAST_ZERO,
        TFLAG_SEND_CACHE,
        TFLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(flags & f, 0, "flag {f:#x} should be advertised");
    }
    assert_eq!(flags & (TFLAG_READ_ONLY | TFLAG_SEND_DF), 0);

    // Unknown command (no payload assumed).
    c.request(42, 0, 1, 0, 0);
    assert_eq!(c.simple_reply(), (EINVAL, 1));
    // Unknown flag bit / flag on the wrong command.
    c.request(CMD_READ, 1 << 3, 2, 0, 512);
    assert_eq!(c.simple_reply(), (EINVAL, 2));
    c.request(CMD_FLUSH, CMD_FLAG_NO_HOLE, 3, 0, 0);
    assert_eq!(c.simple_reply(), (EINVAL, 3));
    // DF without structured replies.
    c.request(CMD_READ, CMD_FLAG_DF, 4, 0, 512);
    assert_eq!(c.simple_reply(), (EINVAL, 4));
    // WRITE with a bad flag: the payload is still consumed.
    c.request(CMD_WRITE, 1 << 3, 5, 0, 4);
    c.send(b"junk");
    assert_eq!(c.simple_reply(), (EINVAL, 5));
    // Ranges past the end: EINVAL for read/trim/cache, ENOSPC for writes.
    assert_eq!(c.read(6, SIZE - 1, 2), Err(EINVAL));
    assert_eq!(c.read(7, u64::MAX - 1, 4), Err(EINVAL));
    assert_eq!(c.write(8, SIZE - 2, b"abcd", 0), ENOSPC);
    c.request(CMD_WRITE_ZEROES, 0, 9, SIZE, 1);
    assert_eq!(c.simple_reply(), (ENOSPC, 9));
    c.request(CMD_TRIM, 0, 10, SIZE - 10, 11);
    assert_eq!(c.simple_reply(), (EINVAL, 10));
    c.request(CMD_CACHE, 0, 11, SIZE, 1);
    assert_eq!(c.simple_reply(), (EINVAL, 11));

    // Oversize write (> 32 MiB): EINVAL, payload skipped, connection usable.
    let big = (32 << 20) + 4096;
    c.request(CMD_WRITE, 0, 12, 0, big);
    c.send(&vec![0x5a; big as usize]);
    assert_eq!(c.simple_reply(), (EINVAL, 12));
    // Oversize read.
    assert_eq!(c.read(13, 0, big), Err(EINVAL));

    // Everything valid still works, and no rejected write touched the data.
    assert_eq!(mem.snapshot(), vec![0u8; SIZE as usize]);
    assert_eq!(c.write(14, 100, b"hello", CMD_FLAG_FUA), 0);
    c.request(CMD_FLUSH, 0, 15, 0, 0);
    assert_eq!(c.simple_reply(), (0, 15));
    c.request(
        CMD_WRITE_ZEROES,
        CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
        16,
        101,
        2,
    );
    assert_eq!(c.simple_reply(), (0, 16));
    // MemBackend zeroes are fast, so FAST_ZERO succeeds.
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 17, 104, 1);
    assert_eq!(c.simple_reply(), (0, 17));
    c.request(CMD_CACHE, 0, 18, 0, 4096);
    assert_eq!(c.simple_reply(), (0, 18));
    assert_eq!(c.read(19, 100, 5).unwrap(), b"h\0\0l\0");
    c.request(CMD_TRIM, CMD_FLAG_FUA, 20, 0, 4096);
    assert_eq!(c.simple_reply(), (0, 20));
    assert_eq!(c.read(21, 100, 5).unwrap(), vec![0u8; 5]);
    // Zero-length requests inside the export are harmless.
    assert_eq!(c.read(22, SIZE, 0).unwrap(), Vec::<u8>::new());
    // DISC: no reply, connection closed.
    c.request(CMD_DISC, 0, 23, 0, 0);
    assert!(c.closed());
    assert_server_alive(&srv.sock);
}

#[test]
fn bad_request_magic_drops_only_that_connection() {
    let (srv, _) = mem_server();
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    let (mut other, _, _) = Client::go(&srv.sock, "", false);
    let mut h = RequestHeader {
        magic: 0xdead_beef,
        flags: 0,
        kind: CMD_READ,
        cookie: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    c.send(&h);
    assert!(c.closed());
    h = RequestHeader {
        magic: REQUEST_MAGIC,
        ..RequestHeader::decode(&h)
    }
    .encode();
    other.send(&h);
    assert_eq!(other.simple_reply(), (0, 1));
    assert_eq!(other.read_n(512), vec![0u8; 512]);
}

#[test]
fn disconnect_mid_payload_ends_only_that_connection() {
    let (srv, mem) = mem_server();
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    c.request(CMD_WRITE, 0, 1, 0, 65536);
    c.send(&[0xee; 1000]);
    drop(c);
    // Also a connection that dies mid-header.
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    c.send(&[0x25, 0x60, 0x95]);
    drop(c);
    assert_server_alive(&srv.sock);
    let snap = mem.snapshot();
    assert!(
        snap[..4096].iter().all(|&b| b == 0) && snap[4101..65536].iter().all(|&b| b == 0),
        "an incomplete WRITE must not be applied"
    );
}

#[test]
fn structured_replies_use_offset_data_none_and_error_chunks() {
    let (srv, mem) = mem_server();
    let (mut c, _, flags) = Client::go(&srv.sock, "disk", true);
    assert_ne!(
        flags & TFLAG_SEND_DF,
        0,
        "DF is advertised with structured replies"
    );
    assert_eq!(
        c.write(1, 8192, b"structured", 0),
        0,
        "writes use simple replies"
    );

    c.request(CMD_READ, CMD_FLAG_DF, 2, 8192, 10);
    let (f, t, cookie, data) = c.chunk();
    assert_eq!((f, t, cookie), (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 2));
    assert_eq!(u64::from_be_bytes(data[..8].try_into().unwrap()), 8192);
    assert_eq!(&data[8..], b"structured");

    c.request(CMD_READ, 0, 3, SIZE, 0);
    assert_eq!(c.chunk(), (REPLY_FLAG_DONE, REPLY_TYPE_NONE, 3, vec![]));

    c.request(CMD_READ, 0, 4, SIZE - 4, 8);
    let (f, t, cookie, data) = c.chunk();
    assert_eq!((f, t, cookie), (REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 4));
    assert_eq!(u32::from_be_bytes(data[..4].try_into().unwrap()), EINVAL);
    let msg_len = u16::from_be_bytes([data[4], data[5]]) as usize;
    assert_eq!(msg_len, data.len() - 6);
    let msg = std::str::from_utf8(&data[6..]).unwrap();
    assert!(msg.contains("past the end"), "{msg}");
    assert_eq!(&mem.snapshot()[8192..8202], b"structured");
}

#[test]
fn read_only_export_refuses_writes_with_eperm() {
    let mem = Arc::new(MemBackend::from_vec(vec![7u8; SIZE as usize]).read_only());
    let srv = TestServer::start(vec![("ro", mem.clone() as Arc<dyn Backend>)]);
    let (mut c, _, flags) = Client::go(&srv.sock, "ro", false);
    assert_ne!(flags & TFLAG_READ_ONLY, 0);
    assert_eq!(flags & (TFLAG_SEND_TRIM | TFLAG_SEND_WRITE_ZEROES), 0);
    assert_eq!(c.write(1, 0, b"nope", 0), EPERM);
    c.request(CMD_TRIM, 0, 2, 0, 4096);
    assert_eq!(c.simple_reply(), (EPERM, 2));
    c.request(CMD_WRITE_ZEROES, 0, 3, 0, 4096);
    assert_eq!(c.simple_reply(), (EPERM, 3));
    c.request(CMD_FLUSH, 0, 4, 0, 0);
    assert_eq!(c.simple_reply(), (0, 4));
    assert_eq!(c.read(5, 0, 4).unwrap(), vec![7u8; 4]);
    assert_eq!(mem.snapshot(), vec![7u8; SIZE as usize]);
}

#[test]
fn fast_zero_fails_with_enotsup_when_zeroing_is_not_cheap() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("f.img");
    std::fs::write(&img, vec![9u8; SIZE as usize]).unwrap();
    let file: Arc<dyn Backend> = Arc::new(FileBackend::open(&img).unwrap());
    let srv = TestServer::start(vec![("f", file)]);
    let (mut c, _, _) = Client::go(&srv.sock, "f", false);
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 1, 0, 4096);
    assert_eq!(c.simple_reply(), (ENOTSUP, 1));
    assert_eq!(c.read(2, 0, 4).unwrap(), vec![9u8; 4], "nothing was zeroed");
    c.request(CMD_WRITE_ZEROES, 0, 3, 0, 4096);
    assert_eq!(c.simple_reply(), (0, 3));
    assert_eq!(c.read(4, 4090, 8).unwrap(), [0, 0, 0, 0, 0, 0, 9, 9]);
}

/// Reads at offset 0 wait until a write arrives; lets a test prove requests
/// are processed concurrently and answered out of order without timing.
struct GateBackend {
    inner: MemBackend,
    gate: tokio::sync::Semaphore,
}

#[async_trait]
impl Backend for GateBackend {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> tiercache_nbd::Result<()> {
        if offset == 0 {
            let _p = self
                .gate
                .acquire()
                .await
                .map_err(|_| tiercache_nbd::Error::new(Errno::Shutdown, "gate closed"))?;
        }
        self.inner.read(offset, buf).await
    }
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> tiercache_nbd::Result<()> {
        self.inner.write(offset, data, fua).await?;
        self.gate.add_permits(1);
        Ok(())
    }
    async fn flush(&self) -> tiercache_nbd::Result<()> {
        Ok(())
    }
}

#[test]
fn requests_run_concurrently_and_replies_come_out_of_order() {
    let gate = Arc::new(GateBackend {
        inner: MemBackend::new(SIZE as usize),
        gate: tokio::sync::Semaphore::new(0),
    });
    let srv = TestServer::start(vec![("", gate as Arc<dyn Backend>)]);
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    // READ 0 blocks until the WRITE behind it has been executed: a serial
    // server would deadlock here (the read timeout turns that into a failure).
    c.request(CMD_READ, 0, 100, 0, 8);
    c.request(CMD_WRITE, 0, 200, 0, 8);
    c.send(b"ordering");
    assert_eq!(c.simple_reply(), (0, 200), "write is answered first");
    assert_eq!(c.simple_reply(), (0, 100));
    // The read ran after the write it waited for.
    assert_eq!(c.read_n(8), b"ordering");

    // Pipeline many requests without waiting; every cookie is answered once.
    let n = 300u64;
    for i in 0..n {
        c.request(CMD_WRITE, 0, i, 4096 + i * 8, 8);
        c.send(&i.to_le_bytes());
    }
    let mut seen = vec![false; n as usize];
    for _ in 0..n {
        let (err, cookie) = c.simple_reply();
        assert_eq!(err, 0);
        assert!(!std::mem::replace(&mut seen[cookie as usize], true));
    }
    for i in (0..n).step_by(37) {
        assert_eq!(c.read(1000 + i, 4096 + i * 8, 8).unwrap(), i.to_le_bytes());
    }
}

#[test]
fn in_flight_limits_bound_work_without_losing_requests() {
    let gate = Arc::new(GateBackend {
        inner: MemBackend::new(SIZE as usize),
        gate: tokio::sync::Semaphore::new(0),
    });
    let limits = tiercache_nbd::Limits {
        max_in_flight_requests: 2,
        max_in_flight_bytes: 64 * 1024,
        max_payload: 64 * 1024,
        ..Default::default()
    };
    let srv = TestServer::start_with_limits(vec![("", gate as Arc<dyn Backend>)], limits);
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    // One read blocks (holding one of the two request slots) until a write
    // runs; 20 writes then squeeze through the single remaining slot, and
    // every request is answered exactly once.
    c.request(CMD_READ, 0, 1, 0, 4);
    for i in 0..20u64 {
        c.request(CMD_WRITE, 0, 10 + i, 4096 + i * 4096, 4096);
        c.send(&[i as u8; 4096]);
    }
    let mut answered = Vec::new();
    for _ in 0..21 {
        let (err, cookie) = c.simple_reply();
        assert_eq!(err, 0);
        answered.push(cookie);
        if cookie == 1 {
            assert_eq!(c.read_n(4), vec![0u8; 4]);
        }
    }
    answered.sort();
    let mut expected: Vec<u64> = (10..30).collect();
    expected.insert(0, 1);
    assert_eq!(answered, expected);
    // Payloads above the configured max are refused.
    assert_eq!(c.write(99, 0, &vec![1u8; 64 * 1024 + 1], 0), EINVAL);
}

#[test]
fn requests_completed_on_the_reader_release_their_permits_to_the_requests_behind() {
    // A RAM disk answers every call at once, so every request completes on
    // the reader; its reply (holding its permits) must reach the writer
    // before the reader waits for permits, or a pipelined burst larger than
    // the in-flight limits would wait forever for permits of its own replies.
    let mem = Arc::new(MemBackend::new(SIZE as usize));
    let limits = tiercache_nbd::Limits {
        max_in_flight_requests: 3,
        max_in_flight_bytes: 8192,
        max_payload: 8192,
        ..Default::default()
    };
    let srv = TestServer::start_with_limits(vec![("", mem as Arc<dyn Backend>)], limits);
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    // 40 WRITEs then 40 READs of 4 KiB, sent in one go so they arrive buffered.
    let n = 40u64;
    let mut burst = Vec::new();
    for i in 0..n {
        burst.extend(header(CMD_WRITE, 0, i, i * 4096, 4096));
        burst.extend(vec![i as u8 + 1; 4096]);
    }
    for i in 0..n {
        burst.extend(header(CMD_READ, 0, 100 + i, i * 4096, 4096));
    }
    // Read replies while sending, so neither side's socket buffer fills up.
    let mut reader = Client {
        s: c.s.try_clone().unwrap(),
    };
    let replies = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..2 * n {
            let (err, cookie) = reader.simple_reply();
            assert_eq!(err, 0);
            let data = (cookie >= 100).then(|| reader.read_n(4096));
            got.push((cookie, data));
        }
        got
    });
    c.send(&burst);
    let mut got = replies.join().unwrap();
    got.sort_by_key(|(cookie, _)| *cookie);
    assert_eq!(got.len(), 2 * n as usize);
    for (i, (cookie, data)) in got.into_iter().enumerate() {
        let i = i as u64;
        if i < n {
            assert_eq!((cookie, data), (i, None));
        } else {
            // Requests of one connection run in order when each completes at
            // once, so every READ sees the WRITE sent before it.
            assert_eq!(cookie, 100 + i - n);
            assert_eq!(data.unwrap(), vec![(i - n) as u8 + 1; 4096]);
        }
    }
}

#[test]
fn shutdown_closes_idle_connections_and_removes_the_socket() {
    let (mut srv, _) = mem_server();
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    let mut pending = Client::connect(&srv.sock);
    srv.stop();
    assert!(c.closed());
    assert!(pending.closed());
    assert!(!srv.sock.exists());
}

#[test]
fn multi_conn_flush_on_one_connection_covers_writes_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("mc.img");
    let file: Arc<dyn Backend> = Arc::new(FileBackend::create(&img, SIZE).unwrap());
    let srv = TestServer::start(vec![("", file)]);
    let (mut a, _, flags) = Client::go(&srv.sock, "", false);
    let (mut b, _, _) = Client::go(&srv.sock, "", false);
    assert_ne!(flags & TFLAG_CAN_MULTI_CONN, 0);
    assert_eq!(a.write(1, 12345, b"from a", 0), 0);
    b.request(CMD_FLUSH, 0, 2, 0, 0);
    assert_eq!(b.simple_reply(), (0, 2));
    assert_eq!(b.read(3, 12345, 6).unwrap(), b"from a");
    // And it reached the exported file itself (read independently of the server).
    let on_disk = std::fs::read(&img).unwrap();
    assert_eq!(&on_disk[12345..12351], b"from a");
}

#[test]
fn server_config_is_validated() {
    use tiercache_nbd::{BlockSize, ConfigError, Limits, Server};
    let mem = || Arc::new(MemBackend::new(4096)) as Arc<dyn Backend>;
    let none: Vec<(String, Arc<dyn Backend>)> = vec![];
    assert_eq!(Server::new(none).unwrap_err(), ConfigError::NoExports);
    assert_eq!(
        Server::new([("a", mem()), ("a", mem())]).unwrap_err(),
        ConfigError::DuplicateName("a".into())
    );
    let long = "x".repeat(5000);
    assert_eq!(
        Server::new([(long, mem())]).unwrap_err(),
        ConfigError::NameTooLong(5000)
    );
    let bad_bs = MemBackend::new(4096).with_block_size(BlockSize {
        minimum: 3,
        preferred: 4096,
        maximum: 1 << 20,
    });
    assert!(matches!(
        Server::new([("b", Arc::new(bad_bs) as Arc<dyn Backend>)]).unwrap_err(),
        ConfigError::BlockSize { .. }
    ));
    let limits = Limits {
        max_in_flight_bytes: 1024,
        ..Default::default()
    };
    assert!(matches!(
        Server::with_limits([("c", mem())], limits).unwrap_err(),
        ConfigError::Limits(_)
    ));
}

fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

/// Decode a BLOCK_STATUS chunk payload into (context id, [(length, flags)]).
fn extents(data: &[u8]) -> (u32, Vec<(u32, u32)>) {
    let id = u32::from_be_bytes(data[..4].try_into().unwrap());
    let ext = data[4..]
        .chunks_exact(8)
        .map(|c| {
            (
                u32::from_be_bytes(c[..4].try_into().unwrap()),
                u32::from_be_bytes(c[4..].try_into().unwrap()),
            )
        })
        .collect();
    (id, ext)
}

#[test]
fn base_allocation_block_status_reports_zero_runs() {
    let (srv, _) = mem_server();
    // Meta contexts need structured replies first.
    let mut c = Client::connect(&srv.sock);
    c.opt(OPT_SET_META_CONTEXT, &meta_data("disk", &[BASE_ALLOCATION]));
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);
    c.opt(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.opt_reply().1, REP_ACK);
    c.opt(OPT_LIST_META_CONTEXT, &meta_data("disk", &[]));
    let (_, kind, d) = c.opt_reply();
    assert_eq!(kind, REP_META_CONTEXT);
    assert_eq!(&d[4..], BASE_ALLOCATION.as_bytes());
    assert_eq!(c.opt_reply().1, REP_ACK);
    // Unknown namespaces select nothing; unknown exports are refused.
    c.opt(
        OPT_LIST_META_CONTEXT,
        &meta_data("disk", &["qemu:dirty-bitmap:x"]),
    );
    assert_eq!(c.opt_reply().1, REP_ACK);
    c.opt(OPT_SET_META_CONTEXT, &meta_data("nope", &[BASE_ALLOCATION]));
    assert_eq!(c.opt_reply().1, REP_ERR_UNKNOWN);
    c.opt(OPT_SET_META_CONTEXT, &meta_data("disk", &[BASE_ALLOCATION]));
    let (_, kind, d) = c.opt_reply();
    assert_eq!(kind, REP_META_CONTEXT);
    let id = u32::from_be_bytes(d[..4].try_into().unwrap());
    assert_eq!(c.opt_reply().1, REP_ACK);
    let (infos, last) = c.info_or_go(OPT_GO, "disk", &[]);
    assert_eq!((infos.len(), last), (1, REP_ACK));

    assert_eq!(c.write(1, 8192, b"0123456789", 0), 0);
    c.request(CMD_BLOCK_STATUS, 0, 2, 0, 65536);
    let (f, t, cookie, data) = c.chunk();
    assert_eq!(
        (f, t, cookie),
        (REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, 2)
    );
    // Hand-computed: 4 KiB grains, only [8192, 12288) holds data.
    assert_eq!(
        extents(&data),
        (id, vec![(8192, STATE_ZERO), (4096, 0), (53248, STATE_ZERO)])
    );
    c.request(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 3, 100, 65536);
    let (_, t, _, data) = c.chunk();
    assert_eq!(t, REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(extents(&data), (id, vec![(8092, STATE_ZERO)]));
    c.request(CMD_BLOCK_STATUS, 0, 4, SIZE - 1, 2);
    let (_, t, _, data) = c.chunk();
    assert_eq!(t, REPLY_TYPE_ERROR);
    assert_eq!(u32::from_be_bytes(data[..4].try_into().unwrap()), EINVAL);

    // Without a selected context BLOCK_STATUS is EINVAL.
    let (mut other, _, _) = Client::go(&srv.sock, "disk", true);
    other.request(CMD_BLOCK_STATUS, 0, 5, 0, 4096);
    let (_, t, cookie, data) = other.chunk();
    assert_eq!((t, cookie), (REPLY_TYPE_ERROR, 5));
    assert_eq!(u32::from_be_bytes(data[..4].try_into().unwrap()), EINVAL);
}

#[test]
fn minimum_block_size_is_enforced_only_when_the_client_negotiated_it() {
    let bs = tiercache_nbd::BlockSize {
        minimum: 512,
        preferred: 4096,
        maximum: 1 << 20,
    };
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::new(SIZE as usize).with_block_size(bs));
    let srv = TestServer::start(vec![("", mem)]);

    // GO with an NBD_INFO_BLOCK_SIZE request: the client must honour it.
    let mut c = Client::connect(&srv.sock);
    let (infos, last) = c.info_or_go(OPT_GO, "", &[INFO_BLOCK_SIZE]);
    assert_eq!(last, REP_ACK);
    let bsi = infos
        .iter()
        .find(|i| u16::from_be_bytes([i[0], i[1]]) == INFO_BLOCK_SIZE)
        .expect("block size info");
    assert_eq!(&bsi[2..], &[0, 0, 2, 0, 0, 0, 0x10, 0, 0, 0x10, 0, 0]);
    assert_eq!(c.write(1, 100, &[1u8; 512], 0), EINVAL);
    assert_eq!(c.write(2, 512, &[1u8; 512], 0), 0);
    assert_eq!(c.write(3, 0, &vec![1u8; (1 << 20) + 512], 0), EINVAL);

    // GO without it (like the kernel client): unaligned requests are served,
    // and the non-default constraints are still announced.
    let mut c = Client::connect(&srv.sock);
    let (infos, last) = c.info_or_go(OPT_GO, "", &[]);
    assert_eq!(last, REP_ACK);
    assert!(infos
        .iter()
        .any(|i| u16::from_be_bytes([i[0], i[1]]) == INFO_BLOCK_SIZE));
    assert_eq!(c.write(4, 100, b"odd", 0), 0);
    assert_eq!(c.read(5, 99, 5).unwrap(), b"\0odd\0");
}

/// A RAM disk that takes write batches (or declines them all), records the
/// size of each batch it ran, and fails every write that touches `bad`.
struct BatchingDisk {
    data: std::sync::Mutex<Vec<u8>>,
    decline: bool,
    bad: u64,
    batches: std::sync::Mutex<Vec<usize>>,
    singles: std::sync::atomic::AtomicUsize,
}

impl BatchingDisk {
    fn put(&self, offset: u64, data: &[u8]) -> tiercache_nbd::Result<()> {
        if (offset..offset + data.len() as u64).contains(&self.bad) {
            return Err(tiercache_nbd::Error::new(Errno::Io, "bad block"));
        }
        self.data.lock().unwrap()[offset as usize..][..data.len()].copy_from_slice(data);
        Ok(())
    }
}

#[async_trait]
impl Backend for BatchingDisk {
    fn size(&self) -> u64 {
        SIZE
    }
    fn batches_writes(&self) -> bool {
        true
    }
    fn write_batch_now(&self, writes: &[(u64, &[u8])]) -> Option<Vec<tiercache_nbd::Result<()>>> {
        if self.decline {
            return None;
        }
        self.batches.lock().unwrap().push(writes.len());
        Some(writes.iter().map(|&(o, d)| self.put(o, d)).collect())
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> tiercache_nbd::Result<()> {
        buf.copy_from_slice(&self.data.lock().unwrap()[offset as usize..][..buf.len()]);
        Ok(())
    }
    async fn write(&self, offset: u64, data: &[u8], _fua: bool) -> tiercache_nbd::Result<()> {
        self.singles
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.put(offset, data)
    }
    async fn flush(&self) -> tiercache_nbd::Result<()> {
        Ok(())
    }
}

/// Pipelined writes arrive buffered: a backend that takes batches gets them
/// as batches, one result per write (an error answers only its own write),
/// in arrival order (a later write of the same block wins, a FUA write and
/// every read run after the writes before them); one that declines gets the
/// same answers from single writes.
fn pipelined_writes_are_batched_in_order(decline: bool) {
    let disk = Arc::new(BatchingDisk {
        data: std::sync::Mutex::new(vec![0u8; SIZE as usize]),
        decline,
        bad: 7 * 4096 + 100,
        batches: Default::default(),
        singles: Default::default(),
    });
    let srv = TestServer::start(vec![("", Arc::clone(&disk) as Arc<dyn Backend>)]);
    let (mut c, _, _) = Client::go(&srv.sock, "", false);
    // 20 writes to blocks 0..20 (block 7 fails), block 3 again, a FUA write
    // of block 5, 10 more writes to 20..30, then reads of blocks 0..30.
    let mut burst = Vec::new();
    let mut expect = vec![vec![0u8; 4096]; 30];
    let mut writes = 0;
    let mut w = |burst: &mut Vec<u8>, cookie: u64, block: u64, fill: u8, flags: u16| {
        burst.extend(header(CMD_WRITE, flags, cookie, block * 4096, 4096));
        burst.extend(vec![fill; 4096]);
        if block != 7 {
            expect[block as usize] = vec![fill; 4096];
        }
        writes += 1;
    };
    for b in 0..20 {
        w(&mut burst, b, b, b as u8 + 1, 0);
    }
    w(&mut burst, 20, 3, 0xa3, 0);
    w(&mut burst, 21, 5, 0xa5, CMD_FLAG_FUA);
    for b in 20..30 {
        w(&mut burst, 100 + b, b, b as u8 + 1, 0);
    }
    for b in 0..30 {
        burst.extend(header(CMD_READ, 0, 1000 + b, b * 4096, 4096));
    }
    let mut reader = Client {
        s: c.s.try_clone().unwrap(),
    };
    let replies = std::thread::spawn(move || {
        let mut got = std::collections::BTreeMap::new();
        for _ in 0..writes + 30 {
            let (err, cookie) = reader.simple_reply();
            let data = (cookie >= 1000).then(|| reader.read_n(4096));
            got.insert(cookie, (err, data));
        }
        got
    });
    c.send(&burst);
    let got = replies.join().unwrap();
    for (cookie, (err, data)) in got {
        match cookie {
            7 => assert_eq!(err, 5, "the write of the bad block fails (EIO)"),
            1000.. => {
                assert_eq!(err, 0);
                let b = (cookie - 1000) as usize;
                assert!(
                    data.unwrap() == expect[b],
                    "block {b} does not hold its last write"
                );
            }
            _ => assert_eq!(err, 0, "write {cookie}"),
        }
    }
    let batches = disk.batches.lock().unwrap().clone();
    let singles = disk.singles.load(std::sync::atomic::Ordering::SeqCst);
    if decline {
        assert_eq!(singles, writes, "declined batches run as single writes");
    } else {
        // The FUA write is never batched; every other write ran exactly once.
        assert_eq!(batches.iter().sum::<usize>() + singles, writes);
        assert!(singles >= 1, "the FUA write runs on its own");
        assert!(
            batches.iter().any(|&n| n > 1),
            "no batch of more than one write: {batches:?}"
        );
    }
}

#[test]
fn pipelined_writes_reach_a_batching_backend_as_batches_in_order() {
    pipelined_writes_are_batched_in_order(false);
}

#[test]
fn pipelined_writes_run_singly_when_the_backend_declines_the_batch() {
    pipelined_writes_are_batched_in_order(true);
}
