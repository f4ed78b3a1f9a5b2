//! Transmission phase: concurrent request processing with out-of-order replies.
//!
//! A reader task parses requests and hands each to the backend: the call is
//! polled once on the reader, and if it has to wait it continues in its own
//! tracked task (so a slow request never holds up the ones behind it, and
//! every call handed to the backend runs to completion); a writer task
//! serializes replies. Replies completed on the reader go to the writer in
//! one batch before the reader next waits. In-flight work is bounded by
//! three semaphores (request count and payload bytes of the connection,
//! payload bytes of the whole server) whose permits are released only after
//! the reply has been written, so slow clients cannot make the server buffer
//! unbounded data.
//!
//! Every wait of the reader (next request, permits, WRITE payload) is inside
//! one select with the shutdown signal and with the writer's failure; waits
//! on the client are bounded by `io_timeout` (and `idle_timeout` between
//! requests), and the writer drops the connection when a reply makes no
//! progress for `io_timeout`. A request that is already buffered and whose
//! permits are free needs no wait: it is admitted after one check of the
//! shutdown signal and the writer's failure.
//!
//! Write batches: for a backend that takes them ([`Backend::batches_writes`]),
//! plain WRITEs (no FUA) that are already buffered one after another are
//! collected and offered together ([`Backend::write_batch_now`]) before the
//! reader waits for anything or runs any other request, so arrival order is
//! kept; a batch the backend declines runs as single writes.

mod reader;
mod validation;
mod writer;

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{Backend, Extent};
#[cfg(test)]
use crate::error::Errno; // for the unit tests of validation below
use crate::error::Error;
use crate::handshake::Session;
use crate::limits::{Limits, Shared};
use crate::protocol::*;
use reader::{take_buffered, End, Watch};
use validation::{validate, Command};
use writer::{write_loop, Permits, ProgressTimeout, Reply};

/// Successful reply contents.
enum Payload {
    None,
    Data(Vec<u8>),
    /// `base:allocation` descriptors (length, status flags).
    Extents(Vec<(u32, u32)>),
}

/// Most writes, and payload bytes, offered to the backend in one batch.
const MAX_BATCH: usize = 32;
const MAX_BATCH_BYTES: usize = 128 << 10;

/// Most descriptors sent in one BLOCK_STATUS reply (spec: at most 2^20).
const MAX_EXTENTS: usize = 1 << 20;

/// Turn the backend's extents into wire descriptors: consecutive, non-empty,
/// covering at most `len` bytes (at least one descriptor), one with REQ_ONE.
fn descriptors(extents: Vec<Extent>, len: u32, req_one: bool) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut left = len as u64;
    for e in extents {
        if left == 0 || out.len() == MAX_EXTENTS || (req_one && !out.is_empty()) {
            break;
        }
        let n = e.length.min(left);
        if n == 0 {
            continue;
        }
        out.push((n as u32, e.flags()));
        left -= n;
    }
    if out.is_empty() {
        out.push((len, 0));
    }
    out
}

async fn execute(
    backend: &dyn Backend,
    cmd: Command,
    payload: Option<Vec<u8>>,
) -> Result<Payload, Error> {
    let done = |r: Result<(), Error>| r.map(|_| Payload::None);
    match cmd {
        Command::Read { offset, len } => {
            let mut buf = vec![0u8; len as usize];
            backend.read(offset, &mut buf).await?;
            Ok(Payload::Data(buf))
        }
        Command::Write { offset, fua, .. } => {
            let data = payload.unwrap_or_default();
            done(backend.write_owned(offset, data, fua).await)
        }
        Command::Flush => done(backend.flush().await),
        Command::Trim { offset, len, fua } => done(backend.trim(offset, len as u64, fua).await),
        Command::Zero {
            offset,
            len,
            no_hole,
            fua,
        } => done(backend.write_zeroes(offset, len as u64, no_hole, fua).await),
        Command::Cache { offset, len } => {
            if backend.can_cache() {
                backend.cache(offset, len as u64).await?;
            }
            Ok(Payload::None)
        }
        Command::BlockStatus {
            offset,
            len,
            req_one,
        } => {
            let extents = backend.block_status(offset, len as u64).await?;
            Ok(Payload::Extents(descriptors(extents, len, req_one)))
        }
        Command::Disconnect => Ok(Payload::None),
    }
}

/// Serve requests until DISC, EOF, a protocol violation, a timeout or
/// shutdown; then let the backend calls already started finish, write their
/// replies (within `shutdown_grace` on shutdown) and close the connection.
/// Returns only when no backend call of this connection is running.
pub(crate) async fn serve<S>(
    stream: S,
    session: Session,
    shared: &Shared,
    cancel: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let limits = shared.limits;
    let (rd, wr) = tokio::io::split(stream);
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    let (tx, rx) = mpsc::unbounded_channel::<Vec<Reply>>();
    let dead = CancellationToken::new();
    let batching = session.backend.batches_writes();
    let writer = tokio::spawn(write_loop(
        ProgressTimeout::new(wr, limits.io_timeout),
        rx,
        dead.clone(),
    ));
    let mut conn = Conn {
        watch: Watch {
            cancel: cancel.clone(),
            dead,
            io_timeout: limits.io_timeout,
        },
        limits,
        requests: Arc::new(Semaphore::new(limits.max_in_flight_requests)),
        bytes: Arc::new(Semaphore::new(limits.max_in_flight_bytes)),
        total_bytes: Arc::clone(&shared.total_bytes),
        tasks: TaskTracker::new(),
        session: Arc::new(session),
        tx,
        done: Vec::new(),
        batching,
        batch: Vec::new(),
        batch_bytes: 0,
        noop: Waker::from(Arc::new(NoWake)),
    };

    let end = conn.read_loop(&mut rd).await;
    log_end(&end, &limits);
    // Stop reading: the socket closes as soon as the writer is done, too.
    drop(rd);
    let Conn { tx, tasks, .. } = conn;
    drop(tx);
    finish(tasks, writer, &cancel, &limits).await;
}

/// The reader side of one connection: what each request needs to be
/// admitted (permits), validated and handed to a backend task.
struct Conn {
    watch: Watch,
    limits: Limits,
    /// In-flight requests of this connection.
    requests: Arc<Semaphore>,
    /// In-flight READ/WRITE payload bytes of this connection.
    bytes: Arc<Semaphore>,
    /// In-flight READ/WRITE payload bytes of the whole server.
    total_bytes: Arc<Semaphore>,
    tasks: TaskTracker,
    session: Arc<Session>,
    /// Replies of a batch of requests for the writer.
    tx: mpsc::UnboundedSender<Vec<Reply>>,
    /// Replies of requests completed on the reader, not yet sent: they go to
    /// the writer in one batch (one wake-up, one socket write) before the
    /// reader waits for anything, so their permits are never waited for.
    done: Vec<Reply>,
    /// The backend takes write batches ([`Backend::batches_writes`]).
    batching: bool,
    /// Plain writes received one after another, not run yet (`run_batch`).
    batch: Vec<PendingWrite>,
    batch_bytes: usize,
    /// Waker of the first poll of a backend call (see [`Conn::spawn`]).
    noop: Waker,
}

/// A received plain WRITE waiting in the batch.
struct PendingWrite {
    h: RequestHeader,
    cmd: Command,
    payload: Vec<u8>,
    permits: Permits,
}

/// A waker that does nothing (`Waker::noop` needs Rust 1.85).
struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

impl Conn {
    /// Handle requests one after another until one ends the connection.
    async fn read_loop<R: AsyncRead + Unpin>(&mut self, rd: &mut BufReader<R>) -> End {
        loop {
            if let Err(end) = self.next_request(rd).await {
                self.send_done();
                return end;
            }
        }
    }

    /// Hand the replies completed on the reader to the writer; called before
    /// every wait of the reader (and when it stops).
    fn send_done(&mut self) {
        self.run_batch();
        if !self.done.is_empty() {
            let _ = self.tx.send(std::mem::take(&mut self.done));
        }
    }

    /// Read, admit and validate one request, then hand it to the backend
    /// (see [`Conn::spawn`]) so replies can come out of order; `Err` ends the
    /// connection. When the request is already buffered and its permits are
    /// free, nothing here waits: shutdown and writer failure are checked once
    /// up front instead of being raced against every wait.
    async fn next_request<R: AsyncRead + Unpin>(
        &mut self,
        rd: &mut BufReader<R>,
    ) -> Result<(), End> {
        self.watch.stopped()?;
        let hdr = match take_buffered(rd, REQUEST_LEN, |b| {
            <[u8; REQUEST_LEN]>::try_from(b).expect("REQUEST_LEN bytes")
        }) {
            Some(hdr) => hdr,
            None => {
                self.send_done();
                let nothing_in_flight =
                    || self.requests.available_permits() == self.limits.max_in_flight_requests;
                self.watch
                    .header(rd, self.limits.idle_timeout, nothing_in_flight)
                    .await?
            }
        };
        let h = RequestHeader::decode(&hdr);
        if h.magic != REQUEST_MAGIC {
            return Err(End::Broken(format!("bad request magic {:#x}", h.magic)));
        }
        let req_permit = self.permit(Arc::clone(&self.requests), 1).await?;
        let has_payload = h.kind == CMD_WRITE;
        let chunked = matches!(h.kind, CMD_READ | CMD_BLOCK_STATUS) && self.session.structured;
        let cmd = match validate(&h, &self.session, self.limits.max_payload) {
            Ok(c) => c,
            Err(e) => return self.reject(rd, &h, chunked, req_permit, e).await,
        };
        if cmd == Command::Disconnect {
            return Err(End::Disconnect);
        }
        let data_len = match cmd {
            Command::Read { len, .. } | Command::Write { len, .. } => len,
            _ => 0,
        };
        let (byte_permit, total_permit) = self.byte_permits(data_len).await?;
        let payload = if has_payload {
            // A request whose payload is not fully received is never executed.
            let len = data_len as usize;
            Some(match take_buffered(rd, len, <[u8]>::to_vec) {
                Some(p) => p,
                None => {
                    self.send_done();
                    self.watch.payload(rd, len).await?
                }
            })
        } else {
            None
        };
        let permits = Permits {
            _request: req_permit,
            _bytes: byte_permit,
            _total_bytes: total_permit,
        };
        let payload = match (self.batching, cmd, payload) {
            (true, Command::Write { fua: false, .. }, Some(payload)) => {
                if self.batch_bytes + payload.len() > MAX_BATCH_BYTES {
                    self.run_batch();
                }
                self.batch_bytes += payload.len();
                self.batch.push(PendingWrite {
                    h,
                    cmd,
                    payload,
                    permits,
                });
                if self.batch.len() >= MAX_BATCH {
                    self.run_batch();
                }
                return Ok(());
            }
            (_, _, payload) => payload,
        };
        // Earlier writes first: requests run in the order they arrived.
        self.run_batch();
        self.spawn(h, chunked, cmd, payload, permits);
        Ok(())
    }

    /// Offer the collected writes to the backend as one batch; their replies
    /// join `done`. A batch of one, or one the backend declines, runs as
    /// single writes (in order).
    fn run_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        self.batch_bytes = 0;
        let batch = std::mem::take(&mut self.batch);
        if batch.len() > 1 {
            let writes: Vec<(u64, &[u8])> =
                batch.iter().map(|w| (w.h.offset, &w.payload[..])).collect();
            if let Some(results) = self.session.backend.write_batch_now(&writes) {
                let mut results = results.into_iter();
                for w in batch {
                    let result = results.next().unwrap_or_else(|| {
                        Err(Error::new(
                            crate::error::Errno::Io,
                            "the backend answered fewer writes than the batch had",
                        ))
                    });
                    self.done.push(Reply {
                        cookie: w.h.cookie,
                        offset: w.h.offset,
                        chunked: false,
                        result: result.map(|_| Payload::None),
                        _permits: w.permits,
                    });
                }
                return;
            }
        }
        for w in batch {
            self.spawn(w.h, false, w.cmd, Some(w.payload), w.permits);
        }
    }

    /// Take `n` permits of `sem`: at once if they are free, else waiting
    /// (raced against shutdown and writer failure).
    async fn permit(&mut self, sem: Arc<Semaphore>, n: u32) -> Result<OwnedSemaphorePermit, End> {
        let closed = || End::Broken("in-flight semaphore closed".into());
        match Arc::clone(&sem).try_acquire_many_owned(n) {
            Ok(p) => Ok(p),
            Err(TryAcquireError::Closed) => Err(closed()),
            Err(TryAcquireError::NoPermits) => {
                // The permits may be held by replies waiting in `done`.
                self.send_done();
                self.watch
                    .run(sem.acquire_many_owned(n))
                    .await?
                    .map_err(|_| closed())
            }
        }
    }

    /// Answer an invalid request with its error, first skipping a WRITE's
    /// payload so the stream stays in sync.
    async fn reject<R: AsyncRead + Unpin>(
        &mut self,
        rd: &mut R,
        h: &RequestHeader,
        chunked: bool,
        req_permit: OwnedSemaphorePermit,
        e: Error,
    ) -> Result<(), End> {
        tracing::debug!("rejecting request {h:?}: {e}");
        if h.kind == CMD_WRITE {
            self.send_done();
            self.watch.skip(rd, h.length as u64).await?;
        }
        self.done.push(Reply {
            cookie: h.cookie,
            offset: h.offset,
            chunked,
            result: Err(e),
            _permits: Permits {
                _request: req_permit,
                _bytes: None,
                _total_bytes: None,
            },
        });
        Ok(())
    }

    /// Reserve `data_len` payload bytes on the connection and server budgets
    /// (none for commands without payload), bounding buffered data.
    async fn byte_permits(
        &mut self,
        data_len: u32,
    ) -> Result<(Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>), End> {
        if data_len == 0 {
            return Ok((None, None));
        }
        let conn = self.permit(Arc::clone(&self.bytes), data_len).await?;
        let total = self.permit(Arc::clone(&self.total_bytes), data_len).await?;
        Ok((Some(conn), Some(total)))
    }

    /// Run one admitted command on the backend and queue its reply (with its
    /// permits) for the writer. The call is polled once right here: most
    /// backend calls (RAM, cache hits) complete without waiting, and then no
    /// task is spawned and the reply joins the batch in `done`. Otherwise the
    /// started call moves, unchanged, into a tracked task, so it runs to
    /// completion and later requests are read (and answered) while it waits.
    fn spawn(
        &mut self,
        h: RequestHeader,
        chunked: bool,
        cmd: Command,
        payload: Option<Vec<u8>>,
        permits: Permits,
    ) {
        let session = Arc::clone(&self.session);
        let mut call = Box::pin(async move {
            // No unwinding here: a panic aborts the process (the binary's
            // panic policy), and crash recovery restores the acknowledged state.
            let result = execute(&*session.backend, cmd, payload).await;
            Reply {
                cookie: h.cookie,
                offset: h.offset,
                chunked,
                result,
                _permits: permits,
            }
        });
        // A wake-up registered during this poll is lost, which is harmless:
        // the task polls the call again as soon as it starts, and a future
        // must register the waker of its latest poll.
        let mut cx = Context::from_waker(&self.noop);
        match call.as_mut().poll(&mut cx) {
            Poll::Ready(reply) => self.done.push(reply),
            Poll::Pending => {
                let tx = self.tx.clone();
                self.tasks.spawn(async move {
                    let _ = tx.send(vec![call.await]);
                });
            }
        }
    }
}

/// Log why the reader stopped, at a level matching how unusual it is.
fn log_end(end: &End, limits: &Limits) {
    match end {
        End::Stalled(what) => tracing::warn!(
            "{what} made no progress for {:?}; dropping the connection",
            limits.io_timeout
        ),
        End::Idle => tracing::info!(
            "no request for {:?}; closing the idle connection",
            limits.idle_timeout.unwrap_or_default()
        ),
        End::Broken(why) => tracing::debug!("{why}; disconnecting"),
        End::Shutdown | End::WriterFailed | End::Eof | End::Disconnect => {}
    }
}

/// Let started backend calls finish and their replies be written (within
/// `shutdown_grace` on shutdown), so no backend call outlives the connection.
async fn finish(
    tasks: TaskTracker,
    mut writer: tokio::task::JoinHandle<()>,
    cancel: &CancellationToken,
    limits: &Limits,
) {
    // Requests already handed to the backend always run to completion.
    tasks.close();
    tasks.wait().await;
    // Their replies are written; on shutdown within the grace period, after
    // which a client that does not read them is cut off.
    let grace = async {
        cancel.cancelled().await;
        tokio::time::sleep(limits.shutdown_grace).await;
    };
    tokio::select! {
        _ = &mut writer => {}
        _ = grace => {
            tracing::warn!(
                "client did not read its replies within the shutdown grace of {:?}; closing",
                limits.shutdown_grace
            );
            writer.abort();
            let _ = writer.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemBackend;

    fn session(ro: bool, structured: bool) -> Session {
        let mut b = MemBackend::new(1 << 20);
        if ro {
            b = b.read_only();
        }
        let backend: Arc<dyn Backend> = Arc::new(b);
        let flags = crate::handshake::transmission_flags(&*backend, structured);
        Session {
            backend,
            structured,
            flags,
            base_allocation: structured,
            enforce_minimum: false,
        }
    }

    fn req(kind: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
        RequestHeader {
            magic: REQUEST_MAGIC,
            flags,
            kind,
            cookie: 1,
            offset,
            length,
        }
    }

    fn errno(h: RequestHeader, s: &Session) -> Option<Errno> {
        validate(&h, s, 32 << 20).err().map(|e| e.errno())
    }

    #[test]
    fn validation_follows_the_spec_error_table() {
        let s = session(false, false);
        let end = 1u64 << 20;
        assert_eq!(errno(req(CMD_READ, 0, 0, 4096), &s), None);
        assert_eq!(errno(req(CMD_READ, 0, end - 1, 2), &s), Some(Errno::Inval));
        assert_eq!(errno(req(CMD_WRITE, 0, end, 1), &s), Some(Errno::NoSpc));
        assert_eq!(
            errno(req(CMD_WRITE_ZEROES, 0, end, 1), &s),
            Some(Errno::NoSpc)
        );
        assert_eq!(errno(req(CMD_TRIM, 0, end, 1), &s), Some(Errno::Inval));
        assert_eq!(errno(req(CMD_READ, 0, u64::MAX, 2), &s), Some(Errno::Inval));
        assert_eq!(errno(req(9, 0, 0, 0), &s), Some(Errno::Inval));
        assert_eq!(errno(req(CMD_READ, 1 << 3, 0, 1), &s), Some(Errno::Inval));
        assert_eq!(
            errno(req(CMD_WRITE, CMD_FLAG_NO_HOLE, 0, 1), &s),
            Some(Errno::Inval)
        );
        // DF needs structured replies
        assert_eq!(
            errno(req(CMD_READ, CMD_FLAG_DF, 0, 1), &s),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(req(CMD_READ, CMD_FLAG_DF, 0, 1), &session(false, true)),
            None
        );
        // FUA is accepted on any command
        assert_eq!(errno(req(CMD_READ, CMD_FLAG_FUA, 0, 1), &s), None);
        assert_eq!(
            errno(req(CMD_READ, 0, 0, (32 << 20) + 1), &s),
            Some(Errno::Inval)
        );
        let ro = session(true, false);
        assert_eq!(errno(req(CMD_WRITE, 0, 0, 1), &ro), Some(Errno::Perm));
        assert_eq!(errno(req(CMD_TRIM, 0, 0, 1), &ro), Some(Errno::Perm));
        assert_eq!(
            errno(req(CMD_WRITE_ZEROES, 0, 0, 1), &ro),
            Some(Errno::Perm)
        );
        assert_eq!(errno(req(CMD_READ, 0, 0, 1), &ro), None);
        // BLOCK_STATUS needs a selected context, nonzero length, in range.
        let st = session(false, true);
        assert_eq!(
            errno(req(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 9), &st),
            None
        );
        assert_eq!(
            errno(req(CMD_BLOCK_STATUS, 0, 0, 9), &s),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(req(CMD_BLOCK_STATUS, 0, 0, 0), &st),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(req(CMD_BLOCK_STATUS, 0, end, 1), &st),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(req(CMD_READ, CMD_FLAG_REQ_ONE, 0, 1), &st),
            Some(Errno::Inval)
        );
    }

    #[test]
    fn negotiated_minimum_block_size_is_enforced() {
        let bs = crate::BlockSize {
            minimum: 512,
            preferred: 4096,
            maximum: 1 << 20,
        };
        let backend: Arc<dyn Backend> = Arc::new(MemBackend::new(1 << 20).with_block_size(bs));
        let mut s = Session {
            flags: crate::handshake::transmission_flags(&*backend, false),
            backend,
            structured: false,
            base_allocation: false,
            enforce_minimum: false,
        };
        // Not negotiated: unaligned is fine, but max block size still applies.
        assert_eq!(errno(req(CMD_WRITE, 0, 100, 7), &s), None);
        assert_eq!(
            errno(req(CMD_READ, 0, 0, (1 << 20) + 512), &s),
            Some(Errno::Inval)
        );
        s.enforce_minimum = true;
        assert_eq!(errno(req(CMD_WRITE, 0, 100, 512), &s), Some(Errno::Inval));
        assert_eq!(errno(req(CMD_TRIM, 0, 512, 100), &s), Some(Errno::Inval));
        assert_eq!(errno(req(CMD_READ, 0, 1024, 512), &s), None);
        assert_eq!(errno(req(CMD_FLUSH, 0, 0, 0), &s), None);
    }

    #[test]
    fn descriptors_are_clamped_to_the_request() {
        let e = |l, z| Extent {
            length: l,
            hole: false,
            zero: z,
        };
        let ext = vec![e(10, false), e(0, true), e(20, true), e(50, false)];
        assert_eq!(
            descriptors(ext.clone(), 25, false),
            vec![(10, 0), (15, STATE_ZERO)]
        );
        assert_eq!(descriptors(ext.clone(), 100, true), vec![(10, 0)]);
        assert_eq!(descriptors(ext, 5, true), vec![(5, 0)]);
        assert_eq!(descriptors(vec![], 7, false), vec![(7, 0)]);
    }
}
