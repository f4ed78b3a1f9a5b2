//! Hardening limits with real sockets: connection limit, handshake, I/O and
//! idle timeouts, oversized options, the server-wide in-flight byte cap,
//! bounded shutdown, and inherited listening sockets.
//!
//! Limits are short (1-2 s) so the tests are fast; every wait is bounded
//! (socket read timeouts, polling deadlines). Time bounds asserted here are
//! liveness bounds with generous margins, never performance numbers.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestServer;
use tiercache_nbd::protocol::*;
use tiercache_nbd::{async_trait, Backend, Limits, ListenAddr, MemBackend, Server};

const MIB: usize = 1 << 20;
const SIZE: usize = 4 * MIB;

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// Minimal raw NBD client over any stream.
struct Client {
    s: Box<dyn Stream>,
}

impl Client {
    fn unix(path: &Path) -> UnixStream {
        let s = UnixStream::connect(path).expect("connect");
        // Safety net: a hung server fails the test instead of hanging it.
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s
    }

    /// Connect and read the greeting; None if the server closed the
    /// connection without one (refused).
    fn try_connect(path: &Path) -> Option<Client> {
        let mut c = Client {
            s: Box::new(Self::unix(path)),
        };
        let mut g = [0u8; 18];
        c.s.read_exact(&mut g).ok()?;
        assert_eq!(u64::from_be_bytes(g[0..8].try_into().unwrap()), NBDMAGIC);
        Some(c)
    }

    /// Read the greeting of any stream, send client flags and GO on the
    /// default export; returns the export size.
    fn go_on(s: Box<dyn Stream>) -> (Client, u64) {
        let mut c = Client { s };
        let mut g = [0u8; 18];
        c.s.read_exact(&mut g).expect("greeting");
        assert_eq!(u64::from_be_bytes(g[8..16].try_into().unwrap()), IHAVEOPT);
        let size = c.send_go();
        (c, size)
    }

    fn send_go(&mut self) -> u64 {
        self.send(&3u32.to_be_bytes());
        let mut d = 0u32.to_be_bytes().to_vec(); // empty name: default export
        d.extend_from_slice(&0u16.to_be_bytes());
        self.opt(OPT_GO, &d);
        let mut size = None;
        loop {
            let h = self.read_n(20);
            let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
            let data = self.read_n(len as usize);
            match kind {
                REP_INFO if u16::from_be_bytes([data[0], data[1]]) == INFO_EXPORT => {
                    size = Some(u64::from_be_bytes(data[2..10].try_into().unwrap()));
                }
                REP_INFO => {}
                REP_ACK => return size.expect("NBD_INFO_EXPORT before ACK"),
                other => panic!("GO failed with reply type {other:#x}"),
            }
        }
    }

    fn go(path: &Path) -> Client {
        Self::go_on(Box::new(Self::unix(path))).0
    }

    /// GO, retrying while the server refuses connections (limit reached),
    /// for at most `within`.
    fn go_eventually(path: &Path, within: Duration) -> Client {
        let deadline = Instant::now() + within;
        loop {
            if let Some(mut c) = Client::try_connect(path) {
                c.send_go();
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "server refused new clients for {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("send");
    }

    fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        self.s.read_exact(&mut v).expect("read");
        v
    }

    fn opt(&mut self, option: u32, data: &[u8]) {
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&option.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        self.send(&v);
    }

    fn request(&mut self, kind: u16, cookie: u64, offset: u64, length: u32) {
        let h = RequestHeader {
            magic: REQUEST_MAGIC,
            flags: 0,
            kind,
            cookie,
            offset,
            length,
        };
        self.send(&h.encode());
    }

    /// Simple reply (error, cookie).
    fn reply(&mut self) -> (u32, u64) {
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

    fn read(&mut self, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
        self.request(CMD_READ, cookie, offset, len);
        assert_eq!(self.reply(), (0, cookie));
        self.read_n(len as usize)
    }

    fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) {
        self.request(CMD_WRITE, cookie, offset, data.len() as u32);
        self.send(data);
        assert_eq!(self.reply(), (0, cookie));
    }

    /// Read (and discard) everything until the server closes the
    /// connection; false if it was still open when the read timeout hit.
    fn reaches_eof(&mut self) -> bool {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

/// Wait until `cond` holds, for at most `within` (panics with `what`).
fn wait_for(within: Duration, what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Memory backend that counts calls, optionally delays reads at offset 0,
/// and can hold reads at a gate while counting the bytes they hold.
#[derive(Default)]
struct Probe {
    writes: AtomicUsize,
    reads: AtomicUsize,
    /// Bytes of READs currently inside the backend, and the maximum seen.
    held: AtomicUsize,
    max_held: AtomicUsize,
    /// Slow read at offset 0: started / finished.
    slow_started: AtomicBool,
    slow_done: AtomicBool,
}

struct ProbeBackend {
    mem: MemBackend,
    probe: Arc<Probe>,
    slow_read: Option<Duration>,
    gate: Option<tokio::sync::Semaphore>,
}

impl ProbeBackend {
    fn new(probe: &Arc<Probe>) -> ProbeBackend {
        ProbeBackend {
            mem: MemBackend::new(SIZE),
            probe: Arc::clone(probe),
            slow_read: None,
            gate: None,
        }
    }
}

#[async_trait]
impl Backend for ProbeBackend {
    fn size(&self) -> u64 {
        SIZE as u64
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> tiercache_nbd::Result<()> {
        let p = &self.probe;
        let now = p.held.fetch_add(buf.len(), Ordering::SeqCst) + buf.len();
        p.max_held.fetch_max(now, Ordering::SeqCst);
        if let Some(gate) = &self.gate {
            drop(gate.acquire().await);
        }
        if let (Some(d), 0) = (self.slow_read, offset) {
            p.slow_started.store(true, Ordering::SeqCst);
            tokio::time::sleep(d).await;
            p.slow_done.store(true, Ordering::SeqCst);
        }
        let r = self.mem.read(offset, buf).await;
        p.held.fetch_sub(buf.len(), Ordering::SeqCst);
        p.reads.fetch_add(1, Ordering::SeqCst);
        r
    }
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> tiercache_nbd::Result<()> {
        self.probe.writes.fetch_add(1, Ordering::SeqCst);
        self.mem.write(offset, data, fua).await
    }
    async fn flush(&self) -> tiercache_nbd::Result<()> {
        Ok(())
    }
}

fn probe_server(limits: Limits) -> (TestServer, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let b: Arc<dyn Backend> = Arc::new(ProbeBackend::new(&probe));
    (TestServer::start_with_limits(vec![("", b)], limits), probe)
}

/// Start a WRITE of `len` bytes but send only part of the payload.
fn stall_mid_write(c: &mut Client, len: u32) {
    c.request(CMD_WRITE, 1, 0, len);
    c.send(&vec![0xee; 1000]);
}

/// Queue `n` READs of `len` bytes without reading any reply.
fn queue_reads(c: &mut Client, n: u64, len: u32) {
    for i in 0..n {
        c.request(CMD_READ, 100 + i, 0, len);
    }
}

#[test]
fn shutdown_is_bounded_by_grace_with_stalled_clients_and_drops_incomplete_writes() {
    let grace = Duration::from_secs(1);
    let limits = Limits {
        shutdown_grace: grace,
        io_timeout: Duration::from_secs(600), // only shutdown may end these clients
        ..Limits::default()
    };
    let (mut srv, probe) = probe_server(limits);
    let mut writer = Client::go(&srv.sock);
    stall_mid_write(&mut writer, 65536);
    let mut reader = Client::go(&srv.sock);
    queue_reads(&mut reader, 32, MIB as u32);
    // All 32 reads executed: the rest of the replies are stuck in a full socket.
    wait_for(Duration::from_secs(20), "32 reads", || {
        probe.reads.load(Ordering::SeqCst) == 32
    });

    let t0 = Instant::now();
    srv.stop();
    let took = t0.elapsed();
    assert!(
        took < grace + Duration::from_secs(5),
        "shutdown took {took:?} with a grace of {grace:?}"
    );
    assert_eq!(
        probe.writes.load(Ordering::SeqCst),
        0,
        "a WRITE whose payload was incomplete must never reach the backend"
    );
    assert!(writer.reaches_eof(), "stalled writer was not disconnected");
    assert!(reader.reaches_eof(), "non-reading client was not cut off");
    assert!(!srv.sock.exists(), "socket file removed");
}

#[test]
fn shutdown_waits_for_backend_calls_in_flight_and_delivers_their_replies() {
    let probe = Arc::new(Probe::default());
    let mut b = ProbeBackend::new(&probe);
    b.slow_read = Some(Duration::from_millis(1500));
    let limits = Limits {
        shutdown_grace: Duration::from_secs(5),
        ..Limits::default()
    };
    let mut srv =
        TestServer::start_with_limits(vec![("", Arc::new(b) as Arc<dyn Backend>)], limits);
    let mut c = Client::go(&srv.sock);
    c.write(1, 0, b"slow data");
    c.request(CMD_READ, 2, 0, 9);
    wait_for(Duration::from_secs(10), "the slow read to start", || {
        probe.slow_started.load(Ordering::SeqCst)
    });
    let client = std::thread::spawn(move || {
        let (err, cookie) = c.reply();
        let data = c.read_n(9);
        let eof = c.reaches_eof();
        (err, cookie, data, eof)
    });
    srv.stop();
    assert!(
        probe.slow_done.load(Ordering::SeqCst),
        "shutdown returned while a backend call was still running"
    );
    let (err, cookie, data, eof) = client.join().unwrap();
    assert_eq!((err, cookie), (0, 2));
    assert_eq!(data, b"slow data", "the in-flight request was answered");
    assert!(eof, "the connection is closed after the reply");
}

#[test]
fn connections_past_max_connections_are_closed_at_once() {
    let limits = Limits {
        max_connections: 2,
        handshake_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let (srv, _) = probe_server(limits);
    let c1 = Client::try_connect(&srv.sock).expect("first connection served");
    let c2 = Client::try_connect(&srv.sock).expect("second connection served");
    // The third gets no greeting: closed right after accept, not after the
    // handshake timeout (an admitted connection gets the greeting at once).
    assert!(Client::try_connect(&srv.sock).is_none());
    drop(c1);
    let mut c3 = Client::go_eventually(&srv.sock, Duration::from_secs(10));
    assert_eq!(c3.read(1, 0, 4), vec![0; 4]);
    // c2 (in handshake) and c3 (in transmission) fill the limit.
    assert!(Client::try_connect(&srv.sock).is_none());
    // c2 times out in the handshake, which frees its slot.
    let mut c4 = Client::go_eventually(&srv.sock, Duration::from_secs(10));
    c4.write(2, 0, b"four");
    assert_eq!(c3.read(3, 0, 4), b"four");
    drop(c2);
}

#[test]
fn handshake_timeout_drops_silent_clients_even_by_the_hundreds() {
    let limits = Limits {
        handshake_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let (srv, _) = probe_server(limits);
    // One silent client: closed after the timeout (well within the read timeout).
    let mut c = Client::try_connect(&srv.sock).expect("greeting");
    let t0 = Instant::now();
    assert!(c.reaches_eof());
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());

    // 300 clients that never handshake: 100 fill the default connection
    // limit until they time out, the rest are refused at once.
    let mut idle: Vec<UnixStream> = (0..300).map(|_| Client::unix(&srv.sock)).collect();
    let mut real = Client::go_eventually(&srv.sock, Duration::from_secs(20));
    real.write(1, 4096, b"served");
    assert_eq!(real.read(2, 4096, 6), b"served");
    for s in &mut idle {
        let mut c = Client {
            s: Box::new(s.try_clone().unwrap()),
        };
        assert!(c.reaches_eof(), "an idle handshake was not dropped");
    }
}

#[test]
fn oversized_option_closes_the_connection_without_reading_it() {
    let (srv, _) = probe_server(Limits::default());
    for option in [OPT_LIST, 99, OPT_EXPORT_NAME, OPT_GO] {
        let mut c = Client::try_connect(&srv.sock).expect("greeting");
        c.send(&3u32.to_be_bytes());
        // Announce 1 GiB of option data and send none of it: a server that
        // drains the data would wait here until the read timeout.
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&option.to_be_bytes());
        v.extend_from_slice(&(1u32 << 30).to_be_bytes());
        c.send(&v);
        let t0 = Instant::now();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match c.s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("option {option}: connection not closed: {e}"),
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // Optionally an ERR_TOO_BIG reply explains why.
        if !got.is_empty() {
            assert_ne!(option, OPT_EXPORT_NAME);
            let kind = u32::from_be_bytes(got[12..16].try_into().unwrap());
            assert_eq!(kind, REP_ERR_TOO_BIG);
        }
    }
    // Normal-size unknown options still get ERR_UNSUP and the loop goes on.
    let mut c = Client::try_connect(&srv.sock).expect("greeting");
    c.send(&3u32.to_be_bytes());
    c.opt(99, &[0u8; 100]);
    let h = c.read_n(20);
    assert_eq!(
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
        REP_ERR_UNSUP
    );
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
    c.read_n(len as usize);
    c.opt(OPT_ABORT, &[]);
}

#[test]
fn io_timeout_drops_a_client_stalled_mid_payload() {
    let limits = Limits {
        io_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let (srv, probe) = probe_server(limits);
    let mut c = Client::go(&srv.sock);
    stall_mid_write(&mut c, 65536);
    let t0 = Instant::now();
    assert!(c.reaches_eof(), "stalled client was not dropped");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(probe.writes.load(Ordering::SeqCst), 0);
    // Others are unaffected.
    let mut ok = Client::go(&srv.sock);
    ok.write(1, 0, b"fine");
}

#[test]
fn io_timeout_drops_a_client_that_does_not_read_and_releases_its_permits() {
    let limits = Limits {
        io_timeout: Duration::from_secs(1),
        max_payload: MIB as u32,
        max_in_flight_bytes: 4 * MIB,
        max_total_in_flight_bytes: 4 * MIB,
        ..Limits::default()
    };
    let (srv, probe) = probe_server(limits);
    let mut hog = Client::go(&srv.sock);
    queue_reads(&mut hog, 16, MIB as u32);
    // Once its first four reads ran, the hog holds the whole server-wide
    // byte budget until it is dropped (a client that started before that
    // could take part of the budget, finish, and let the hog's replies flow
    // once the hog reads below); then these large reads go through.
    wait_for(Duration::from_secs(10), "the hog's reads", || {
        probe.reads.load(Ordering::SeqCst) >= 4
    });
    let mut other = Client::go(&srv.sock);
    for i in 0..4 {
        assert_eq!(other.read(i, 0, MIB as u32).len(), MIB);
    }
    assert!(hog.reaches_eof(), "non-reading client was not dropped");
}

#[test]
fn server_wide_byte_cap_bounds_memory_held_for_clients_that_do_not_read() {
    let cap = 8 * MIB;
    let limits = Limits {
        io_timeout: Duration::from_secs(2),
        max_payload: MIB as u32,
        max_in_flight_bytes: 4 * MIB, // 16 clients x 4 MiB would be 64 MiB
        max_total_in_flight_bytes: cap,
        ..Limits::default()
    };
    let probe = Arc::new(Probe::default());
    let mut b = ProbeBackend::new(&probe);
    b.gate = Some(tokio::sync::Semaphore::new(0));
    let b = Arc::new(b);
    let srv = TestServer::start_with_limits(vec![("", b.clone() as Arc<dyn Backend>)], limits);
    let mut hogs: Vec<Client> = (0..16).map(|_| Client::go(&srv.sock)).collect();
    for h in &mut hogs {
        queue_reads(h, 16, MIB as u32);
    }
    // While the gate is closed, bytes inside the backend are exactly the
    // bytes admitted and not replied: they stop at the cap.
    wait_for(Duration::from_secs(10), "the cap to fill", || {
        probe.held.load(Ordering::SeqCst) == cap
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(probe.max_held.load(Ordering::SeqCst), cap);

    // A well-behaved client is served once the hogs are dropped for not
    // reading their replies.
    let mut good = Client::go(&srv.sock);
    good.request(CMD_READ, 1, 4096, 4096);
    b.gate.as_ref().unwrap().add_permits(1);
    assert_eq!(good.reply(), (0, 1));
    assert_eq!(good.read_n(4096), vec![0; 4096]);
    assert_eq!(good.read(2, 0, MIB as u32).len(), MIB);
    assert!(
        probe.max_held.load(Ordering::SeqCst) <= cap,
        "held {} bytes with a cap of {cap}",
        probe.max_held.load(Ordering::SeqCst)
    );
    // Every hog was either dropped for not reading (io_timeout) or, if it
    // got its permits only after the others were dropped, is answered in
    // full now that it reads: nothing hangs, no request is lost silently.
    for h in &mut hogs {
        let full = 16 * (16 + MIB);
        let mut got = 0;
        let mut buf = vec![0u8; 1 << 16];
        while got < full {
            match h.s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got += n,
                // Dropped with replies still unread: the close is a reset.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!("hog neither dropped nor answered: {e}"),
            }
        }
    }
}

#[test]
fn idle_timeout_closes_an_idle_transmission_connection() {
    let limits = Limits {
        idle_timeout: Some(Duration::from_secs(1)),
        ..Limits::default()
    };
    let (srv, _) = probe_server(limits);
    let mut c = Client::go(&srv.sock);
    c.write(1, 0, b"then idle");
    let t0 = Instant::now();
    assert!(c.reaches_eof(), "idle connection was not closed");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Check that a listener serves the export (its size and a read), with the
/// raw test client: in process (nbdinfo and the other real clients are run
/// by the `clients` tests).
fn check_served(stream: Box<dyn Stream>) {
    let (mut c, size) = Client::go_on(stream);
    assert_eq!(size, SIZE as u64);
    assert_eq!(c.read(1, 0, 4), vec![0; 4]);
}

#[test]
fn inherited_unix_and_tcp_listeners_serve_clients() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::new(SIZE));
    let server = Server::new([("", backend)]).unwrap();

    let path = dir.path().join("inherited.sock");
    let ul = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let uh = {
        let _g = rt.enter();
        server.serve_unix_listener(ul).unwrap()
    };
    assert_eq!(uh.addr(), &ListenAddr::Unix(path.clone()));
    assert_eq!(uh.uri(), format!("nbd+unix:///?socket={}", path.display()));
    let p = path.clone();
    check_served(Box::new(Client::unix(&p)));

    let tl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let local = tl.local_addr().unwrap();
    let th = {
        let _g = rt.enter();
        server.serve_tcp_listener(tl).unwrap()
    };
    assert_eq!(th.addr(), &ListenAddr::Tcp(local));
    assert_eq!(th.uri(), format!("nbd://{local}/"));
    let s = std::net::TcpStream::connect(local).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    check_served(Box::new(s));

    rt.block_on(async {
        uh.shutdown().await;
        th.shutdown().await;
    });
    // The inherited socket's file belongs to whoever created it.
    assert!(path.exists());
}

#[test]
fn serve_unix_never_removes_a_file_that_is_not_a_socket() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-socket");
    std::fs::write(&path, b"precious").unwrap();
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::new(SIZE));
    let server = Server::new([("", backend)]).unwrap();
    assert!(rt.block_on(server.serve_unix(&path)).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
}

#[test]
fn shutdown_all_stops_every_listener_and_waits_for_connections() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let backend: Arc<dyn Backend> = Arc::new(MemBackend::new(SIZE));
    let limits = Limits {
        shutdown_grace: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = Server::with_limits([("", backend)], limits).unwrap();
    let a = dir.path().join("a.sock");
    let b = dir.path().join("b.sock");
    let _ha = rt.block_on(server.serve_unix(&a)).unwrap();
    let _hb = rt.block_on(server.serve_unix(&b)).unwrap();
    let mut ca = Client::go(&a);
    let mut cb = Client::go(&b);
    queue_reads(&mut cb, 32, MIB as u32);
    let t0 = Instant::now();
    rt.block_on(server.shutdown_all());
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    assert!(server.is_shut_down());
    assert!(ca.reaches_eof() && cb.reaches_eof());
    assert!(!a.exists() && !b.exists());
}

#[test]
fn limits_are_validated() {
    let mem = || Arc::new(MemBackend::new(4096)) as Arc<dyn Backend>;
    let bad = [
        Limits {
            max_connections: 0,
            ..Limits::default()
        },
        Limits {
            max_total_in_flight_bytes: 1024,
            ..Limits::default()
        },
        Limits {
            io_timeout: Duration::ZERO,
            ..Limits::default()
        },
        Limits {
            handshake_timeout: Duration::ZERO,
            ..Limits::default()
        },
        Limits {
            idle_timeout: Some(Duration::ZERO),
            ..Limits::default()
        },
    ];
    for l in bad {
        assert!(Server::with_limits([("", mem())], l).is_err(), "{l:?}");
    }
    let d = Limits::default();
    assert_eq!(d.max_connections, 100);
    assert_eq!(d.handshake_timeout, Duration::from_secs(10));
    assert_eq!(d.io_timeout, Duration::from_secs(30));
    assert_eq!(d.idle_timeout, None);
    assert_eq!(d.max_total_in_flight_bytes, 256 * MIB);
    assert_eq!(d.shutdown_grace, Duration::from_secs(10));
    assert!(d.validate().is_ok());
    assert_eq!(
        tiercache_nbd::Error::shutdown("bye").errno(),
        tiercache_nbd::Errno::Shutdown
    );
}
