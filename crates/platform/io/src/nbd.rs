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
//! Asynchronous ops ([`BlockDev::submit`], which the I/O engines use): a
//! dispatcher thread sends each op on the next connection, with up to
//! [`NbdOptions::max_in_flight`] of them in flight (more wait in its queue),
//! and the connection's receiver thread completes it when the reply
//! arrives: no thread waits for a round trip, so misses and write-backs go
//! out as many as the cache has. An op that needs more than one request
//! (longer than [`MAX_REQUEST`], or a FUA write to a server without FUA)
//! runs on the blocking methods instead.
//!
//! Outages: a request whose connection breaks (or cannot be made) is retried
//! on a new connection with exponential backoff until it succeeds or the
//! configured timeout has passed since its first failure; then it fails
//! with `EIO` (an asynchronous op does this on a thread of its own, so the
//! same rules hold). An error the *server* returns (e.g. `EIO` from its
//! disk) is not retried. Writes are positional, so resending one after a broken
//! connection is harmless. [`NbdDev::status`] (also
//! [`BlockDev::remote_status`]) says whether the remote is connected or
//! since when it is being reconnected; transitions are logged.

use crate::engine::{Completion, IoOp};
use crate::{check_range, Access, BlockDev};
use std::collections::HashMap;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant, SystemTime};
use tiercache_nbd_client as nbd;

/// Largest single request sent (longer ones are split).
pub const MAX_REQUEST: u64 = 8 << 20;
/// Default of [`NbdOptions::max_in_flight`] (`serve --backing-queue-depth`).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
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
    /// Most asynchronous requests ([`BlockDev::submit`]) in flight on all
    /// connections together; more wait in the device's queue.
    pub max_in_flight: usize,
}

impl Default for NbdOptions {
    fn default() -> Self {
        NbdOptions {
            connections: 4,
            timeout: Duration::from_secs(30),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
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
    map: HashMap<u64, Waiter>,
}

/// Who gets a reply: a blocked caller, or an asynchronous op.
enum Waiter {
    Blocked(SyncSender<io::Result<nbd::Reply>>),
    Async(Job),
}

impl Live {
    /// Mark broken: fail every blocked waiter, hand every asynchronous op to
    /// a retry thread, refuse new ones, close the socket.
    fn kill(&self, why: &str) {
        let mut w = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        w.dead = true;
        let waiting: Vec<Waiter> = w.map.drain().map(|(_, v)| v).collect();
        drop(w);
        for waiter in waiting {
            match waiter {
                Waiter::Blocked(tx) => {
                    let _ = tx.try_send(Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        why.to_string(),
                    )));
                }
                Waiter::Async(job) => Inner::retry(job, Some(why)),
            }
        }
        self.sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shutdown();
    }
}

/// One asynchronous op: a single request, and whom to tell.
struct Job {
    dev: Arc<Inner>,
    typ: u16,
    flags: u16,
    offset: u64,
    len: u32,
    /// A write's bytes (shared with the send, kept for a resend).
    payload: Arc<Vec<u8>>,
    done: Completion,
}

/// What an op needs from the server.
enum Plan {
    /// Nothing (an empty range, a flush or trim the server does not take):
    /// this result at once.
    Now(io::Result<Vec<u8>>),
    /// One request: type and flags.
    Request(u16, u16),
    /// More than one request: the blocking methods run it.
    Blocking,
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
    inner: Arc<Inner>,
    /// The dispatcher's queue, started by the first asynchronous op (`None`:
    /// its thread could not start; the blocking methods run every op).
    queue: OnceLock<Option<crossbeam_channel::Sender<Job>>>,
}

/// The device's state, shared with the dispatcher and the ops in flight.
struct Inner {
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
    /// Asynchronous requests in flight; the dispatcher waits on `room`.
    in_flight: Mutex<usize>,
    room: Condvar,
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
        let dev = Inner {
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
            in_flight: Mutex::new(0),
            room: Condvar::new(),
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
        Ok(NbdDev {
            inner: Arc::new(dev),
            queue: OnceLock::new(),
        })
    }

    /// Transmission flags the server advertised (`tiercache_nbd_client::TFLAG_*`).
    pub fn flags(&self) -> u16 {
        self.inner.flags
    }

    /// Connection state and counters.
    pub fn status(&self) -> RemoteStatus {
        self.inner.status()
    }

    /// The dispatcher's queue, starting its thread on first use.
    fn queue(&self) -> Option<&crossbeam_channel::Sender<Job>> {
        self.queue
            .get_or_init(|| {
                let (tx, rx) = crossbeam_channel::unbounded::<Job>();
                let inner = Arc::clone(&self.inner);
                match std::thread::Builder::new()
                    .name("nbd-backing-tx".into())
                    .spawn(move || inner.dispatch(rx))
                {
                    Ok(_) => Some(tx),
                    Err(e) => {
                        tracing::warn!(
                            "NBD backing {}: cannot start the dispatcher thread ({e}); \
                             requests run one per I/O thread",
                            self.inner.name
                        );
                        None
                    }
                }
            })
            .as_ref()
    }
}

impl Inner {
    fn status(&self) -> RemoteStatus {
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
                w.map.insert(s.next_cookie(), Waiter::Blocked(tx));
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
        self.request_from(None, typ, flags, offset, len, payload)
    }

    /// [`Inner::request`] of a request that first failed at `first_failure`
    /// (its timeout counts from then).
    fn request_from(
        &self,
        mut first_failure: Option<Instant>,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> io::Result<Vec<u8>> {
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

    /// What `op` needs from the server (see [`Plan`]).
    fn plan(&self, op: &IoOp) -> Plan {
        let fits = |n: u64| n <= MAX_REQUEST;
        match op {
            IoOp::Read { offset, len } => {
                let n = *len as u64;
                if let Err(e) = check_range(&self.name, self.size, Access::Read, *offset, n) {
                    Plan::Now(Err(e))
                } else if n == 0 {
                    Plan::Now(Ok(Vec::new()))
                } else if fits(n) {
                    Plan::Request(nbd::CMD_READ, 0)
                } else {
                    Plan::Blocking
                }
            }
            IoOp::Write { offset, data, fua } => {
                let n = data.len() as u64;
                let fua_flag = if *fua { nbd::CMD_FLAG_FUA } else { 0 };
                if let Err(e) = check_range(&self.name, self.size, Access::Write, *offset, n) {
                    Plan::Now(Err(e))
                } else if n == 0 && !*fua {
                    Plan::Now(Ok(Vec::new()))
                } else if n == 0 || !fits(n) || (*fua && self.flags & nbd::TFLAG_SEND_FUA == 0) {
                    Plan::Blocking
                } else {
                    Plan::Request(nbd::CMD_WRITE, fua_flag)
                }
            }
            IoOp::Trim { offset, len } => {
                if let Err(e) = check_range(&self.name, self.size, Access::Trim, *offset, *len) {
                    Plan::Now(Err(e))
                } else if *len == 0 || self.flags & nbd::TFLAG_SEND_TRIM == 0 {
                    Plan::Now(Ok(Vec::new()))
                } else if fits(*len) {
                    Plan::Request(nbd::CMD_TRIM, 0)
                } else {
                    Plan::Blocking
                }
            }
            IoOp::Flush if self.flags & nbd::TFLAG_SEND_FLUSH == 0 => Plan::Now(Ok(Vec::new())),
            IoOp::Flush => Plan::Request(nbd::CMD_FLUSH, 0),
        }
    }

    /// The dispatcher: send each queued op once fewer than
    /// `max_in_flight` are in flight; returns when the device is dropped
    /// and its queue is empty.
    fn dispatch(self: Arc<Self>, rx: crossbeam_channel::Receiver<Job>) {
        let max = self.opts.max_in_flight.max(1);
        for job in rx {
            {
                let mut n = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
                while *n >= max {
                    n = self.room.wait(n).unwrap_or_else(|e| e.into_inner());
                }
                *n += 1;
            }
            self.send_async(job);
        }
    }

    /// Send `job` on the next connection, its reply to complete it; a
    /// connection not (or no longer) there hands it to a retry thread.
    fn send_async(&self, job: Job) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let slot = &self.slots[i];
        let live = slot.live.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(live) = live else {
            // Not connected yet (or reconnecting): connecting blocks, so a
            // thread of its own does it, with the usual retries.
            return Inner::retry(job, None);
        };
        let (typ, flags, offset, len) = (job.typ, job.flags, job.offset, job.len);
        let payload = Arc::clone(&job.payload);
        let mut s = live.sender.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut w = live.waiters.lock().unwrap_or_else(|e| e.into_inner());
            if w.dead {
                drop(w);
                drop(s);
                self.drop_live(slot, &live);
                return Inner::retry(job, Some("connection closed"));
            }
            // Registered before sending, so no reply arrives unannounced.
            w.map.insert(s.next_cookie(), Waiter::Async(job));
        }
        if let Err(e) = s.send(typ, flags, offset, len, &payload) {
            drop(s);
            // Hands the job (with the others waiting here) to retry threads.
            live.kill(&format!("sending: {e}"));
            self.drop_live(slot, &live);
        }
    }

    /// Run `job` with the blocking, retrying request on a thread of its own:
    /// after its connection failed with `why` (an outage: its timeout starts
    /// now), or with `None` when it found no connection to send on.
    fn retry(job: Job, why: Option<&str>) {
        let first_failure = why.map(|msg| {
            job.dev.failed(msg);
            Instant::now()
        });
        // Shared with the thread, so a thread that cannot start still
        // leaves the job to complete here.
        let cell = Arc::new(Mutex::new(Some(job)));
        let mine = Arc::clone(&cell);
        let spawned = std::thread::Builder::new()
            .name("nbd-backing-retry".into())
            .spawn(move || {
                let Some(job) = mine.lock().unwrap_or_else(|e| e.into_inner()).take() else {
                    return;
                };
                let r = job.dev.request_from(
                    first_failure,
                    job.typ,
                    job.flags,
                    job.offset,
                    job.len,
                    &job.payload,
                );
                let r = r.and_then(|d| checked_read(job.typ, job.len, d));
                Inner::finish(job, r);
            });
        if let Err(e) = spawned {
            let job = cell.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(job) = job {
                let msg = format!("NBD backing: cannot start a thread to retry a request: {e}");
                tracing::error!("{msg}");
                Inner::finish(job, Err(io::Error::other(msg)));
            }
        }
    }

    /// The server's reply to `job`.
    fn reply(job: Job, r: nbd::Reply) {
        let res = if r.error != 0 {
            Err(nbd_errno(r.error))
        } else {
            if job.dev.in_outage() {
                job.dev.recovered();
            }
            checked_read(job.typ, job.len, r.data)
        };
        Inner::finish(job, res);
    }

    /// Complete `job` with `res` and make room for the next one.
    fn finish(job: Job, res: io::Result<Vec<u8>>) {
        let Job { dev, done, .. } = job;
        if catch_unwind(AssertUnwindSafe(move || done(res))).is_err() {
            tracing::error!("an I/O completion callback panicked");
        }
        let mut n = dev.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        drop(n);
        dev.room.notify_one();
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

/// A READ reply's data, checked to be as long as the read; other replies
/// carry none.
fn checked_read(typ: u16, len: u32, data: Vec<u8>) -> io::Result<Vec<u8>> {
    if typ != nbd::CMD_READ {
        return Ok(Vec::new());
    }
    if data.len() != len as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("NBD read of {len} bytes returned {}", data.len()),
        ));
    }
    Ok(data)
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
                    let waiter = l
                        .waiters
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .map
                        .remove(&r.cookie);
                    match waiter {
                        Some(Waiter::Blocked(tx)) => {
                            let _ = tx.try_send(Ok(r));
                        }
                        Some(Waiter::Async(job)) => Inner::reply(job, r),
                        None => {}
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
        self.inner.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn write_at_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at_fua(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.write_zeroes(offset, len)
    }
    fn name(&self) -> &str {
        &self.inner.name
    }
    fn remote_status(&self) -> Option<RemoteStatus> {
        Some(self.inner.status())
    }

    /// One request sent by the dispatcher and completed by the
    /// connection's receiver thread (see the module docs).
    fn submit(&self, op: IoOp, done: Completion) -> Result<(), (IoOp, Completion)> {
        let (typ, flags) = match self.inner.plan(&op) {
            Plan::Blocking => return Err((op, done)),
            Plan::Now(r) => {
                done(r);
                return Ok(());
            }
            Plan::Request(typ, flags) => (typ, flags),
        };
        let Some(queue) = self.queue() else {
            return Err((op, done));
        };
        let (offset, len, payload) = match op {
            IoOp::Read { offset, len } => (offset, len as u32, Vec::new()),
            IoOp::Write { offset, data, .. } => (offset, data.len() as u32, data),
            IoOp::Trim { offset, len } => (offset, len as u32, Vec::new()),
            IoOp::Flush => (0, 0, Vec::new()),
        };
        let job = Job {
            dev: Arc::clone(&self.inner),
            typ,
            flags,
            offset,
            len,
            payload: Arc::new(payload),
            done,
        };
        if let Err(e) = queue.send(job) {
            // The dispatcher stopped (it only does when this device is
            // dropped, so never while `self` is borrowed).
            (e.into_inner().done)(Err(io::Error::other(
                "the NBD backing's dispatcher stopped",
            )));
        }
        Ok(())
    }
}

/// The blocking methods, on the shared state (the retry threads use them).
impl BlockDev for Inner {
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

/// Runs once the device, its dispatcher and every op in flight are gone.
impl Drop for Inner {
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
