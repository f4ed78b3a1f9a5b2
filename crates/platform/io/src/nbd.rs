//! [`NbdDev`]: a remote NBD export as a [`BlockDev`], so any design can use
//! `nbd://HOST[:PORT]/EXPORT` or `nbd+unix:///EXPORT?socket=PATH` as its
//! backing device.
//!
//! Built on the project's blocking client (`tiercache-nbd-client`): each
//! connection has one sending lock and one receiver thread that hands
//! replies to the waiting callers, so requests from many threads are
//! pipelined. Structured replies are negotiated; several connections are
//! opened when the server advertises `CAN_MULTI_CONN`; FLUSH, FUA, TRIM and
//! WRITE_ZEROES pass through when the server advertises them.
//!
//! Outages: a request whose connection breaks (or cannot be made) is retried
//! on a new connection with exponential backoff until it succeeds or the
//! configured timeout has passed since its first failure; then it fails
//! with `EIO`. An error the *server* returns (e.g. `EIO` from its disk) is
//! not retried. Writes are positional, so resending one after a broken
//! connection is harmless. [`NbdDev::status`] (also
//! [`BlockDev::remote_status`]) says whether the remote is connected or
//! since when it is being reconnected; transitions are logged.

use crate::{check_range, Access, BlockDev};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};
use tiercache_nbd_client as nbd;

/// Largest single request sent (longer ones are split).
const MAX_REQUEST: u64 = 8 << 20;
/// First and largest pause between reconnection attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// Whether `s` names a remote NBD export rather than a local path.
pub fn is_nbd_uri(s: &str) -> bool {
    ["nbd://", "nbd+unix://", "nbds://", "nbds+unix://"]
        .iter()
        .any(|p| s.starts_with(p))
}

/// How to use a remote export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdOptions {
    /// Most connections to open when the server allows several (multi-conn).
    pub connections: usize,
    /// How long a request keeps retrying an unreachable server before it fails with EIO.
    pub timeout: Duration,
}

impl Default for NbdOptions {
    fn default() -> Self {
        NbdOptions {
            connections: 4,
            timeout: Duration::from_secs(30),
        }
    }
}

static DEFAULTS: RwLock<Option<NbdOptions>> = RwLock::new(None);

/// Set the options [`crate::open_device`] uses for NBD URIs (the CLI's
/// `--backing-timeout`, `--backing-connections`).
pub fn set_nbd_defaults(o: NbdOptions) {
    *DEFAULTS.write().unwrap_or_else(|e| e.into_inner()) = Some(o);
}

/// The options [`crate::open_device`] uses for NBD URIs.
pub fn nbd_defaults() -> NbdOptions {
    DEFAULTS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
}

/// The state of a remote backing device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteState {
    /// Requests are being served.
    Connected,
    /// The connection broke at `since`; requests wait and retry.
    Reconnecting { since: SystemTime, error: String },
    /// Unreachable for longer than the timeout since `since`: requests fail with EIO (and still retry).
    Error { since: SystemTime, error: String },
}

impl RemoteState {
    /// "connected", "reconnecting" or "error".
    pub fn label(&self) -> &'static str {
        match self {
            RemoteState::Connected => "connected",
            RemoteState::Reconnecting { .. } => "reconnecting",
            RemoteState::Error { .. } => "error",
        }
    }
}

/// What a remote backing device reports (for stats and metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteStatus {
    /// The export's URI.
    pub uri: String,
    pub state: RemoteState,
    /// Connections in use (more than one only with multi-conn).
    pub connections: usize,
    /// Whether the server agreed to structured replies.
    pub structured_replies: bool,
    /// Whether the server advertised `CAN_MULTI_CONN`.
    pub multi_conn: bool,
    /// Successful reconnections since the device was opened.
    pub reconnects: u64,
    /// Requests that failed with EIO because the server stayed unreachable.
    pub timeouts: u64,
}

/// One negotiated connection: the sending half under a lock, and the
/// callers waiting for replies (the receiver thread completes them).
struct Live {
    sender: Mutex<nbd::Sender>,
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    dead: bool,
    map: HashMap<u64, SyncSender<io::Result<nbd::Reply>>>,
}

impl Live {
    /// Mark broken: fail every waiter, refuse new ones, close the socket.
    fn kill(&self, why: &str) {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        w.dead = true;
        for (_, tx) in w.map.drain() {
            let _ = tx.try_send(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                why.to_string(),
            )));
        }
        drop(w);
        self.sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown();
    }
}

#[derive(Default)]
struct Slot {
    live: Mutex<Option<Arc<Live>>>,
    /// Held while (re)connecting, so one caller connects and the others wait.
    connecting: Mutex<()>,
}

struct Outage {
    since: SystemTime,
    started: Instant,
    error: String,
}

/// A remote NBD export as a [`BlockDev`] (see the module docs).
pub struct NbdDev {
    uri: nbd::Uri,
    name: String,
    size: u64,
    flags: u16,
    structured: bool,
    slots: Vec<Slot>,
    next: AtomicUsize,
    opts: NbdOptions,
    outage: Mutex<Option<Outage>>,
    reconnects: AtomicU64,
    timeouts: AtomicU64,
}

/// Why a request did not complete on a connection.
enum Failure {
    /// The connection is broken or could not be made: retry.
    Link(String),
    /// The server answered with this NBD error: final.
    Server(u32),
}

fn nbd_errno(e: u32) -> io::Error {
    let errno = match e {
        1 | 5 | 12 | 22 | 28 | 75 | 95 | 108 => e as i32,
        _ => 5,
    };
    io::Error::from_raw_os_error(errno)
}

impl NbdDev {
    /// Connect to the export at `uri` (one attempt: an unreachable server at
    /// open is an error). Refuses read-only exports and TLS URIs.
    pub fn open(uri: &str, opts: NbdOptions) -> io::Result<NbdDev> {
        let parsed: nbd::Uri = uri
            .parse()
            .map_err(|e: nbd::Error| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let client = nbd::Client::connect(&parsed).map_err(|e| match e {
            nbd::Error::Connect { source, .. } => io::Error::new(
                source.kind(),
                format!("cannot connect to NBD server {uri}: {source}"),
            ),
            e => io::Error::other(e.to_string()),
        })?;
        if client.flags & nbd::TFLAG_READ_ONLY != 0 {
            client.disconnect();
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("NBD export {uri} is read-only; a backing device must be writable"),
            ));
        }
        let multi = client.flags & nbd::TFLAG_CAN_MULTI_CONN != 0;
        let n = if multi { opts.connections.max(1) } else { 1 };
        let dev = NbdDev {
            name: parsed.to_string(),
            uri: parsed,
            size: client.size,
            flags: client.flags,
            structured: client.structured,
            slots: (0..n).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
            opts,
            outage: Mutex::new(None),
            reconnects: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
        };
        *dev.slots[0].live.lock().unwrap_or_else(|e| e.into_inner()) = Some(start(client));
        tracing::info!(
            "NBD backing {}: {} bytes, {} connection(s){}{}",
            dev.name,
            dev.size,
            n,
            if dev.structured {
                ", structured replies"
            } else {
                ""
            },
            if multi { ", multi-conn" } else { "" }
        );
        Ok(dev)
    }

    /// Transmission flags the server advertised (`tiercache_nbd_client::TFLAG_*`).
    pub fn flags(&self) -> u16 {
        self.flags
    }

    /// Connection state and counters.
    pub fn status(&self) -> RemoteStatus {
        let state = match &*self.outage.lock().unwrap_or_else(|e| e.into_inner()) {
            None => RemoteState::Connected,
            Some(o) if o.started.elapsed() > self.opts.timeout => RemoteState::Error {
                since: o.since,
                error: o.error.clone(),
            },
            Some(o) => RemoteState::Reconnecting {
                since: o.since,
                error: o.error.clone(),
            },
        };
        RemoteStatus {
            uri: self.name.clone(),
            state,
            connections: self.slots.len(),
            structured_replies: self.structured,
            multi_conn: self.flags & nbd::TFLAG_CAN_MULTI_CONN != 0,
            reconnects: self.reconnects.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
        }
    }

    /// The slot's live connection, connecting it if needed.
    fn live(&self, slot: &Slot) -> Result<Arc<Live>, String> {
        if let Some(l) = slot.live.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(l);
        }
        let _g = slot.connecting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = slot.live.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(l);
        }
        let c = nbd::Client::connect(&self.uri).map_err(|e| e.to_string())?;
        if c.size != self.size {
            let found = c.size;
            c.disconnect();
            return Err(format!(
                "the export's size changed from {} to {found} bytes: refusing to use it",
                self.size
            ));
        }
        let l = start(c);
        *slot.live.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&l));
        Ok(l)
    }

    /// One request on one connection.
    fn attempt(
        &self,
        slot: &Slot,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> Result<nbd::Reply, Failure> {
        let live = self.live(slot).map_err(Failure::Link)?;
        let (tx, rx) = sync_channel(1);
        {
            let mut s = live.sender.lock().unwrap_or_else(|e| e.into_inner());
            {
                let mut w = live.waiters.lock().unwrap_or_else(|e| e.into_inner());
                if w.dead {
                    drop(w);
                    drop(s);
                    self.drop_live(slot, &live);
                    return Err(Failure::Link("connection closed".into()));
                }
                w.map.insert(s.next_cookie(), tx);
            }
            if let Err(e) = s.send(typ, flags, offset, len, payload) {
                drop(s);
                live.kill(&e.to_string());
                self.drop_live(slot, &live);
                return Err(Failure::Link(format!("sending: {e}")));
            }
        }
        match rx.recv() {
            Ok(Ok(r)) if r.error == 0 => Ok(r),
            Ok(Ok(r)) => Err(Failure::Server(r.error)),
            Ok(Err(e)) => {
                self.drop_live(slot, &live);
                Err(Failure::Link(e.to_string()))
            }
            Err(_) => {
                self.drop_live(slot, &live);
                Err(Failure::Link("connection closed".into()))
            }
        }
    }

    /// Forget `live` in `slot` (if still there), so the next request reconnects.
    fn drop_live(&self, slot: &Slot, live: &Arc<Live>) {
        let mut g = slot.live.lock().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_some_and(|l| Arc::ptr_eq(l, live)) {
            *g = None;
        }
    }

    /// Run one request, retrying broken connections up to the timeout.
    fn request(
        &self,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> io::Result<Vec<u8>> {
        let mut first_failure: Option<Instant> = None;
        let mut backoff = BACKOFF_MIN;
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
            match self.attempt(&self.slots[i], typ, flags, offset, len, payload) {
                Ok(r) => {
                    if first_failure.is_some() || self.in_outage() {
                        self.recovered();
                    }
                    return Ok(r.data);
                }
                Err(Failure::Server(e)) => return Err(nbd_errno(e)),
                Err(Failure::Link(msg)) => {
                    let t0 = *first_failure.get_or_insert_with(Instant::now);
                    self.failed(&msg);
                    let left = self.opts.timeout.saturating_sub(t0.elapsed());
                    if left.is_zero() {
                        self.timeouts.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(
                            "NBD backing {} unreachable for {:.1} s (limit {:.1} s): failing the request with EIO: {msg}",
                            self.name,
                            t0.elapsed().as_secs_f64(),
                            self.opts.timeout.as_secs_f64()
                        );
                        return Err(io::Error::other(format!(
                            "NBD backing {} unreachable for {:.1} s: {msg}",
                            self.name,
                            t0.elapsed().as_secs_f64()
                        )));
                    }
                    std::thread::sleep(backoff.min(left));
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    fn in_outage(&self) -> bool {
        self.outage
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn failed(&self, msg: &str) {
        let mut o = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *o {
            Some(o) => o.error = msg.to_string(),
            None => {
                tracing::warn!(
                    "NBD backing {}: connection lost ({msg}); reconnecting (requests wait up to {:.1} s)",
                    self.name,
                    self.opts.timeout.as_secs_f64()
                );
                *o = Some(Outage {
                    since: SystemTime::now(),
                    started: Instant::now(),
                    error: msg.to_string(),
                });
            }
        }
    }

    fn recovered(&self) {
        if let Some(o) = self.outage.lock().unwrap_or_else(|e| e.into_inner()).take() {
            self.reconnects.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                "NBD backing {}: reconnected after {:.1} s",
                self.name,
                o.started.elapsed().as_secs_f64()
            );
        }
    }

    /// Run a request over `offset..offset + len` in pieces of at most [`MAX_REQUEST`].
    fn ranged(
        offset: u64,
        len: u64,
        mut each: impl FnMut(u64, u32) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(MAX_REQUEST);
            each(offset + done, n as u32)?;
            done += n;
        }
        Ok(())
    }
}

/// Start the receiver thread of a new connection.
fn start(c: nbd::Client) -> Arc<Live> {
    let (sender, mut receiver) = c.split();
    let live = Arc::new(Live {
        sender: Mutex::new(sender),
        waiters: Mutex::new(Waiters::default()),
    });
    let l = Arc::clone(&live);
    std::thread::Builder::new()
        .name("nbd-backing-rx".into())
        .spawn(move || loop {
            match receiver.recv() {
                Ok(r) => {
                    let tx = l
                        .waiters
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .map
                        .remove(&r.cookie);
                    if let Some(tx) = tx {
                        let _ = tx.try_send(Ok(r));
                    }
                }
                Err(e) => {
                    l.kill(&format!("connection lost: {e}"));
                    return;
                }
            }
        })
        .expect("spawning the NBD receiver thread");
    live
}

impl BlockDev for NbdDev {
    fn len(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(
            &self.name,
            self.size,
            Access::Read,
            offset,
            buf.len() as u64,
        )?;
        let mut pos = 0usize;
        Self::ranged(offset, buf.len() as u64, |o, n| {
            let d = self.request(nbd::CMD_READ, 0, o, n, &[])?;
            if d.len() != n as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("NBD read of {n} bytes returned {}", d.len()),
                ));
            }
            buf[pos..pos + n as usize].copy_from_slice(&d);
            pos += n as usize;
            Ok(())
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(
            &self.name,
            self.size,
            Access::Write,
            offset,
            buf.len() as u64,
        )?;
        Self::ranged(offset, buf.len() as u64, |o, n| {
            let p = (o - offset) as usize;
            self.request(nbd::CMD_WRITE, 0, o, n, &buf[p..p + n as usize])
                .map(drop)
        })
    }

    fn write_at_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.flags & nbd::TFLAG_SEND_FUA == 0 {
            self.write_at(buf, offset)?;
            return self.flush();
        }
        check_range(
            &self.name,
            self.size,
            Access::Write,
            offset,
            buf.len() as u64,
        )?;
        Self::ranged(offset, buf.len() as u64, |o, n| {
            let p = (o - offset) as usize;
            self.request(
                nbd::CMD_WRITE,
                nbd::CMD_FLAG_FUA,
                o,
                n,
                &buf[p..p + n as usize],
            )
            .map(drop)
        })
    }

    fn flush(&self) -> io::Result<()> {
        if self.flags & nbd::TFLAG_SEND_FLUSH == 0 {
            // The server has no volatile cache to flush.
            return Ok(());
        }
        self.request(nbd::CMD_FLUSH, 0, 0, 0, &[]).map(drop)
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, self.size, Access::Trim, offset, len)?;
        if self.flags & nbd::TFLAG_SEND_TRIM == 0 {
            return Ok(());
        }
        Self::ranged(offset, len, |o, n| {
            self.request(nbd::CMD_TRIM, 0, o, n, &[]).map(drop)
        })
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, self.size, Access::Write, offset, len)?;
        if self.flags & nbd::TFLAG_SEND_WRITE_ZEROES == 0 {
            return crate::write_zeroes_by_writing(self, offset, len);
        }
        Self::ranged(offset, len, |o, n| {
            self.request(nbd::CMD_WRITE_ZEROES, nbd::CMD_FLAG_NO_HOLE, o, n, &[])
                .map(drop)
        })
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn remote_status(&self) -> Option<RemoteStatus> {
        Some(self.status())
    }
}

impl Drop for NbdDev {
    fn drop(&mut self) {
        for s in &self.slots {
            if let Some(l) = s.live.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let mut snd = l.sender.lock().unwrap_or_else(|e| e.into_inner());
                let _ = snd.send(nbd::CMD_DISC, 0, 0, 0, &[]);
                snd.shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_recognised() {
        assert!(is_nbd_uri("nbd://h/x"));
        assert!(is_nbd_uri("nbd+unix:///x?socket=/s"));
        assert!(!is_nbd_uri("/dev/sdb"));
        assert!(!is_nbd_uri("nbd.img"));
    }

    #[test]
    fn unreachable_server_is_a_clear_error() {
        let e = match NbdDev::open(
            "nbd+unix:///x?socket=/nonexistent/tiercache.sock",
            NbdOptions::default(),
        ) {
            Err(e) => e,
            Ok(_) => panic!("opened a missing socket"),
        };
        assert!(e.to_string().contains("cannot connect"), "{e}");
        let e = match NbdDev::open("nbds://h/x", NbdOptions::default()) {
            Err(e) => e,
            Ok(_) => panic!("opened a TLS URI without certificates"),
        };
        assert!(e.to_string().contains("tls-certificates"), "{e}");
    }
}
