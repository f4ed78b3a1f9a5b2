//! Transmission phase: concurrent request processing with out-of-order replies.
//!
//! A reader task parses requests and spawns one task per request; a writer
//! task serializes replies. In-flight work is bounded by three semaphores
//! (request count and payload bytes of the connection, payload bytes of the
//! whole server) whose permits are released only after the reply has been
//! written, so slow clients cannot make the server buffer unbounded data.
//!
//! Every wait of the reader (next request, permits, WRITE payload) is inside
//! one select with the shutdown signal and with the writer's failure; waits
//! on the client are bounded by `io_timeout` (and `idle_timeout` between
//! requests), and the writer drops the connection when a reply makes no
//! progress for `io_timeout`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{in_range, Backend, Extent};
use crate::error::{Errno, Error};
use crate::handshake::Session;
use crate::protocol::*;
use crate::server::Shared;

/// A validated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Read {
        offset: u64,
        len: u32,
    },
    Write {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Disconnect,
    Flush,
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Cache {
        offset: u64,
        len: u32,
    },
    Zero {
        offset: u64,
        len: u32,
        no_hole: bool,
        fua: bool,
    },
    BlockStatus {
        offset: u64,
        len: u32,
        req_one: bool,
    },
}

/// Successful reply contents.
enum Payload {
    None,
    Data(Vec<u8>),
    /// `base:allocation` descriptors (length, status flags).
    Extents(Vec<(u32, u32)>),
}

/// Most descriptors sent in one BLOCK_STATUS reply (spec: at most 2^20).
const MAX_EXTENTS: usize = 1 << 20;

const KNOWN_FLAGS: u16 =
    CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_DF | CMD_FLAG_REQ_ONE | CMD_FLAG_FAST_ZERO;

fn command_name(kind: u16) -> &'static str {
    match kind {
        CMD_READ => "READ",
        CMD_WRITE => "WRITE",
        CMD_DISC => "DISC",
        CMD_FLUSH => "FLUSH",
        CMD_TRIM => "TRIM",
        CMD_CACHE => "CACHE",
        CMD_WRITE_ZEROES => "WRITE_ZEROES",
        CMD_BLOCK_STATUS => "BLOCK_STATUS",
        _ => "unknown",
    }
}

/// Validate a request header against the negotiated session (spec order:
/// unknown command, bad flags, read-only, size limit, range).
fn validate(h: &RequestHeader, s: &Session, max_payload: u32) -> Result<Command, Error> {
    let b = &*s.backend;
    let ro = b.is_read_only();
    let size = b.size();
    let (offset, len) = (h.offset, h.length);
    let name = command_name(h.kind);
    if h.kind > CMD_BLOCK_STATUS {
        return Err(Error::invalid(format!(
            "unknown command {} (supported: READ, WRITE, DISC, FLUSH, TRIM, CACHE, WRITE_ZEROES, BLOCK_STATUS)",
            h.kind
        )));
    }
    if h.flags & !KNOWN_FLAGS != 0 {
        return Err(Error::invalid(format!(
            "unknown command flags {:#x} on {name}",
            h.flags & !KNOWN_FLAGS
        )));
    }
    if h.flags & (CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO) != 0 && h.kind != CMD_WRITE_ZEROES {
        return Err(Error::invalid(format!(
            "NO_HOLE/FAST_ZERO flags are only valid on WRITE_ZEROES, not {name}"
        )));
    }
    if h.flags & CMD_FLAG_DF != 0 && (h.kind != CMD_READ || !s.structured) {
        return Err(Error::invalid(
            "DF flag is only valid on READ after structured replies were negotiated",
        ));
    }
    if h.flags & CMD_FLAG_REQ_ONE != 0 && h.kind != CMD_BLOCK_STATUS {
        return Err(Error::invalid(format!(
            "REQ_ONE flag is only valid on BLOCK_STATUS, not {name}"
        )));
    }
    let fua = h.flags & CMD_FLAG_FUA != 0;
    let mutating = matches!(h.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if mutating && ro {
        return Err(Error::new(
            Errno::Perm,
            format!("{name} on a read-only export"),
        ));
    }
    if h.kind == CMD_TRIM && s.flags & TFLAG_SEND_TRIM == 0 {
        return Err(Error::invalid("TRIM is not supported by this export"));
    }
    if h.kind == CMD_WRITE_ZEROES && s.flags & TFLAG_SEND_WRITE_ZEROES == 0 {
        return Err(Error::invalid(
            "WRITE_ZEROES is not supported by this export",
        ));
    }
    let bs = b.block_size();
    let max_len = max_payload.min(bs.maximum);
    if matches!(h.kind, CMD_READ | CMD_WRITE) && len > max_len {
        return Err(Error::invalid(format!(
            "{name} length {len} exceeds the maximum block size of {max_len} bytes"
        )));
    }
    let min = bs.minimum as u64;
    if s.enforce_minimum
        && !matches!(h.kind, CMD_FLUSH | CMD_DISC)
        && !(offset.is_multiple_of(min) && (len as u64).is_multiple_of(min))
    {
        return Err(Error::invalid(format!(
            "{name} at {offset}+{len} is not aligned to the minimum block size {min} the client agreed to"
        )));
    }
    let range_ok = in_range(offset, len as u64, size);
    let past_end = |errno: Errno| {
        Error::new(
            errno,
            format!("{name} range {offset}+{len} is past the end of the export ({size} bytes)"),
        )
    };
    match h.kind {
        CMD_READ if !range_ok => Err(past_end(Errno::Inval)),
        CMD_READ => Ok(Command::Read { offset, len }),
        CMD_WRITE if !range_ok => Err(past_end(Errno::NoSpc)),
        CMD_WRITE => Ok(Command::Write { offset, len, fua }),
        CMD_DISC => Ok(Command::Disconnect),
        CMD_FLUSH => Ok(Command::Flush),
        CMD_TRIM if !range_ok => Err(past_end(Errno::Inval)),
        CMD_TRIM => Ok(Command::Trim { offset, len, fua }),
        CMD_CACHE if !range_ok => Err(past_end(Errno::Inval)),
        CMD_CACHE => Ok(Command::Cache { offset, len }),
        CMD_BLOCK_STATUS if !s.base_allocation => Err(Error::invalid(
            "BLOCK_STATUS needs the base:allocation metadata context to be selected",
        )),
        CMD_BLOCK_STATUS if len == 0 => Err(Error::invalid("BLOCK_STATUS length must not be 0")),
        CMD_BLOCK_STATUS if !range_ok => Err(past_end(Errno::Inval)),
        CMD_BLOCK_STATUS => Ok(Command::BlockStatus {
            offset,
            len,
            req_one: h.flags & CMD_FLAG_REQ_ONE != 0,
        }),
        CMD_WRITE_ZEROES if !range_ok => Err(past_end(Errno::NoSpc)),
        CMD_WRITE_ZEROES => {
            if h.flags & CMD_FLAG_FAST_ZERO != 0 && !b.can_fast_zero() {
                return Err(Error::not_supported(
                    "fast zeroing is not available on this export",
                ));
            }
            Ok(Command::Zero {
                offset,
                len,
                no_hole: h.flags & CMD_FLAG_NO_HOLE != 0,
                fua,
            })
        }
        _ => Err(Error::invalid("unknown command")),
    }
}

/// One reply queued for the writer, holding its in-flight permits.
struct Reply {
    cookie: u64,
    offset: u64,
    /// READ or BLOCK_STATUS with structured replies negotiated: use chunks.
    chunked: bool,
    result: Result<Payload, Error>,
    _permits: Permits,
}

/// In-flight permits of one request, released when its reply is written.
struct Permits {
    _request: OwnedSemaphorePermit,
    _bytes: Option<OwnedSemaphorePermit>,
    _total_bytes: Option<OwnedSemaphorePermit>,
}

async fn write_reply<W: AsyncWrite + Unpin>(w: &mut W, r: &Reply) -> std::io::Result<()> {
    let done = REPLY_FLAG_DONE;
    match (&r.result, r.chunked) {
        (Ok(Payload::Data(data)), true) if !data.is_empty() => {
            let len = 8 + data.len() as u32;
            w.write_all(&chunk_header(done, REPLY_TYPE_OFFSET_DATA, r.cookie, len))
                .await?;
            w.write_all(&r.offset.to_be_bytes()).await?;
            w.write_all(data).await
        }
        (Ok(Payload::Extents(extents)), true) => {
            let len = 4 + 8 * extents.len() as u32;
            let mut v = Vec::with_capacity(CHUNK_HEADER_LEN + len as usize);
            v.extend_from_slice(&chunk_header(done, REPLY_TYPE_BLOCK_STATUS, r.cookie, len));
            v.extend_from_slice(&BASE_ALLOCATION_ID.to_be_bytes());
            for (length, flags) in extents {
                v.extend_from_slice(&length.to_be_bytes());
                v.extend_from_slice(&flags.to_be_bytes());
            }
            w.write_all(&v).await
        }
        (Ok(_), true) => {
            w.write_all(&chunk_header(done, REPLY_TYPE_NONE, r.cookie, 0))
                .await
        }
        (Err(e), true) => {
            w.write_all(&error_chunk(r.cookie, e.errno().code(), e.message()))
                .await
        }
        (Ok(payload), false) => {
            w.write_all(&simple_reply(0, r.cookie)).await?;
            if let Payload::Data(d) = payload {
                w.write_all(d).await?;
            }
            Ok(())
        }
        (Err(e), false) => w.write_all(&simple_reply(e.errno().code(), r.cookie)).await,
    }
}

/// Drain replies to the socket until every sender is gone. If a reply cannot
/// be written (error, or no progress for `io_timeout`), cancel `dead` so the
/// reader stops, close the socket's write side and drop every further reply
/// (releasing its permits).
async fn write_loop<W: AsyncWrite + Unpin>(
    w: W,
    mut rx: mpsc::UnboundedReceiver<Reply>,
    dead: CancellationToken,
) {
    let mut w = BufWriter::with_capacity(256 * 1024, w);
    let failed = loop {
        let Some(reply) = rx.recv().await else {
            break None;
        };
        if let Err(e) = write_reply(&mut w, &reply).await {
            break Some(e);
        }
        drop(reply); // releases the in-flight permits
        if rx.is_empty() {
            if let Err(e) = w.flush().await {
                break Some(e);
            }
        }
    };
    match failed {
        None => {
            let _ = w.flush().await;
            let _ = w.shutdown().await;
        }
        Some(e) => {
            if e.kind() == std::io::ErrorKind::TimedOut {
                tracing::warn!("client did not read its replies: {e}; closing the connection");
            } else {
                tracing::debug!("writing reply failed: {e}; closing the connection");
            }
            dead.cancel();
            drop(w);
            rx.close();
            while rx.recv().await.is_some() {}
        }
    }
}

/// A writer that fails with `TimedOut` when a write, flush or shutdown makes
/// no progress for `limit` (the client stopped reading).
struct ProgressTimeout<W> {
    inner: W,
    limit: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed: bool,
}

impl<W> ProgressTimeout<W> {
    fn new(inner: W, limit: Duration) -> Self {
        ProgressTimeout {
            inner,
            limit,
            sleep: Box::pin(tokio::time::sleep(limit)),
            armed: false,
        }
    }

    /// Called when the inner writer is blocked: start or check the clock.
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        if !self.armed {
            let deadline = tokio::time::Instant::now() + self.limit;
            self.sleep.as_mut().reset(deadline);
            self.armed = true;
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no progress writing to the client for {:?}", self.limit),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(&mut self, p: Poll<T>, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        match p {
            Poll::Ready(v) => {
                self.armed = false;
                Poll::Ready(Ok(v))
            }
            Poll::Pending => self.blocked(cx),
        }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for ProgressTimeout<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(p, cx).map(|r| r.and_then(|r| r))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let p = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(p, cx).map(|r| r.and_then(|r| r))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let p = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(p, cx).map(|r| r.and_then(|r| r))
    }
}

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

/// Why the reader stopped.
#[derive(Debug)]
enum End {
    /// Server shutdown.
    Shutdown,
    /// The writer could not deliver a reply; the connection is being dropped.
    WriterFailed,
    /// The client closed the connection (between requests: normal).
    Eof,
    /// The client sent NBD_CMD_DISC.
    Disconnect,
    /// A request header or WRITE payload made no progress for `io_timeout`.
    Stalled(&'static str),
    /// No request for `idle_timeout`.
    Idle,
    /// Protocol violation or I/O error.
    Broken(String),
}

/// The reader's view of the connection: stop at once on shutdown or when
/// the writer has failed, whatever the reader is waiting for.
struct Watch {
    cancel: CancellationToken,
    dead: CancellationToken,
    io_timeout: Duration,
}

impl Watch {
    async fn run<F: Future>(&self, f: F) -> Result<F::Output, End> {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(End::Shutdown),
            _ = self.dead.cancelled() => Err(End::WriterFailed),
            v = f => Ok(v),
        }
    }

    /// One read that must make progress within `io_timeout`.
    async fn read_some<R: AsyncRead + Unpin>(
        &self,
        rd: &mut R,
        buf: &mut [u8],
        what: &'static str,
    ) -> Result<usize, End> {
        match self
            .run(tokio::time::timeout(self.io_timeout, rd.read(buf)))
            .await?
        {
            Err(_) => Err(End::Stalled(what)),
            Ok(Ok(0)) => Err(End::Eof),
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(End::Broken(e.to_string())),
        }
    }

    /// Read a request header. Between requests the wait is unbounded, or
    /// bounded by `idle` when nothing is in flight; once the first byte has
    /// arrived, the rest must follow within `io_timeout`.
    async fn header<R: AsyncRead + Unpin>(
        &self,
        rd: &mut R,
        idle: Option<Duration>,
        nothing_in_flight: impl Fn() -> bool,
    ) -> Result<[u8; REQUEST_LEN], End> {
        let mut hdr = [0u8; REQUEST_LEN];
        let mut filled = 0;
        while filled == 0 {
            let read = rd.read(&mut hdr);
            let r = match idle {
                None => Some(self.run(read).await?),
                Some(d) => self.run(tokio::time::timeout(d, read)).await?.ok(),
            };
            filled = match r {
                None if nothing_in_flight() => return Err(End::Idle),
                None => continue,
                Some(Ok(0)) => return Err(End::Eof),
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(End::Broken(e.to_string())),
            };
        }
        while filled < REQUEST_LEN {
            filled += self
                .read_some(rd, &mut hdr[filled..], "request header")
                .await?;
        }
        Ok(hdr)
    }

    /// Read exactly `len` payload bytes into a new buffer.
    async fn payload<R: AsyncRead + Unpin>(&self, rd: &mut R, len: usize) -> Result<Vec<u8>, End> {
        // Read into spare capacity: no zeroing of a buffer about to be overwritten.
        let mut buf = Vec::with_capacity(len);
        while buf.len() < len {
            let left = (len - buf.len()) as u64;
            let mut limited = (&mut *rd).take(left);
            let read = limited.read_buf(&mut buf);
            match self
                .run(tokio::time::timeout(self.io_timeout, read))
                .await?
            {
                Err(_) => return Err(End::Stalled("WRITE payload")),
                Ok(Ok(0)) => return Err(End::Eof),
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(End::Broken(e.to_string())),
            }
        }
        Ok(buf)
    }

    /// Discard exactly `len` bytes of payload (of a rejected WRITE).
    async fn skip<R: AsyncRead + Unpin>(&self, rd: &mut R, mut len: u64) -> Result<(), End> {
        let mut scratch = vec![0u8; 64 * 1024];
        while len > 0 {
            let n = len.min(scratch.len() as u64) as usize;
            len -= self
                .read_some(rd, &mut scratch[..n], "WRITE payload")
                .await? as u64;
        }
        Ok(())
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
    let (tx, rx) = mpsc::unbounded_channel::<Reply>();
    let dead = CancellationToken::new();
    let mut writer = tokio::spawn(write_loop(
        ProgressTimeout::new(wr, limits.io_timeout),
        rx,
        dead.clone(),
    ));
    let requests = Arc::new(Semaphore::new(limits.max_in_flight_requests));
    let bytes = Arc::new(Semaphore::new(limits.max_in_flight_bytes));
    let total_bytes = Arc::clone(&shared.total_bytes);
    let tasks = TaskTracker::new();
    let session = Arc::new(session);
    let watch = Watch {
        cancel: cancel.clone(),
        dead,
        io_timeout: limits.io_timeout,
    };
    let nothing_in_flight = || requests.available_permits() == limits.max_in_flight_requests;

    let end: End = loop {
        let hdr = match watch
            .header(&mut rd, limits.idle_timeout, nothing_in_flight)
            .await
        {
            Ok(h) => h,
            Err(e) => break e,
        };
        let h = RequestHeader::decode(&hdr);
        if h.magic != REQUEST_MAGIC {
            break End::Broken(format!("bad request magic {:#x}", h.magic));
        }
        let req_permit = match watch.run(Arc::clone(&requests).acquire_owned()).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => break End::Broken("request semaphore closed".into()),
            Err(e) => break e,
        };
        let has_payload = h.kind == CMD_WRITE;
        let chunked = matches!(h.kind, CMD_READ | CMD_BLOCK_STATUS) && session.structured;
        let cmd = match validate(&h, &session, limits.max_payload) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("rejecting request {h:?}: {e}");
                if has_payload {
                    if let Err(end) = watch.skip(&mut rd, h.length as u64).await {
                        break end;
                    }
                }
                let _ = tx.send(Reply {
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
                continue;
            }
        };
        if cmd == Command::Disconnect {
            break End::Disconnect;
        }
        let data_len = match cmd {
            Command::Read { len, .. } | Command::Write { len, .. } => len,
            _ => 0,
        };
        let (byte_permit, total_permit) = if data_len > 0 {
            let conn = match watch
                .run(Arc::clone(&bytes).acquire_many_owned(data_len))
                .await
            {
                Ok(Ok(p)) => p,
                Ok(Err(_)) => break End::Broken("byte semaphore closed".into()),
                Err(e) => break e,
            };
            let total = match watch
                .run(Arc::clone(&total_bytes).acquire_many_owned(data_len))
                .await
            {
                Ok(Ok(p)) => p,
                Ok(Err(_)) => break End::Broken("byte semaphore closed".into()),
                Err(e) => break e,
            };
            (Some(conn), Some(total))
        } else {
            (None, None)
        };
        let payload = if has_payload {
            // A request whose payload is not fully received is never executed.
            match watch.payload(&mut rd, data_len as usize).await {
                Ok(buf) => Some(buf),
                Err(e) => break e,
            }
        } else {
            None
        };
        let tx = tx.clone();
        let session = Arc::clone(&session);
        let permits = Permits {
            _request: req_permit,
            _bytes: byte_permit,
            _total_bytes: total_permit,
        };
        tasks.spawn(async move {
            // No unwinding here: a panic aborts the process (the binary's
            // panic policy), and crash recovery restores the acknowledged state.
            let result = execute(&*session.backend, cmd, payload).await;
            let _ = tx.send(Reply {
                cookie: h.cookie,
                offset: h.offset,
                chunked,
                result,
                _permits: permits,
            });
        });
    };
    match &end {
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
    // Stop reading: the socket closes as soon as the writer is done, too.
    drop(rd);
    drop(tx);
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
