//! Reply writer of the transmission phase: serializes replies to the socket
//! and drops the connection when the client stops reading them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::Payload;
use crate::error::Error;
use crate::protocol::*;

/// One reply queued for the writer, holding its in-flight permits.
pub(super) struct Reply {
    pub(super) cookie: u64,
    pub(super) offset: u64,
    /// READ or BLOCK_STATUS with structured replies negotiated: use chunks.
    pub(super) chunked: bool,
    pub(super) result: Result<Payload, Error>,
    pub(super) _permits: Permits,
}

/// In-flight permits of one request, released when its reply is written.
pub(super) struct Permits {
    pub(super) _request: OwnedSemaphorePermit,
    pub(super) _bytes: Option<OwnedSemaphorePermit>,
    pub(super) _total_bytes: Option<OwnedSemaphorePermit>,
}

/// Write one reply in the form the session negotiated (simple or structured).
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
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
    w: W,
    mut rx: mpsc::UnboundedReceiver<Vec<Reply>>,
    dead: CancellationToken,
) {
    let mut w = BufWriter::with_capacity(256 * 1024, w);
    let failed = loop {
        let Some(replies) = rx.recv().await else {
            break None;
        };
        let mut failed = None;
        for reply in replies {
            if let Err(e) = write_reply(&mut w, &reply).await {
                failed = Some(e);
                break;
            }
            drop(reply); // releases the in-flight permits
        }
        if failed.is_some() {
            break failed;
        }
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
pub(super) struct ProgressTimeout<W> {
    inner: W,
    limit: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed: bool,
}

impl<W> ProgressTimeout<W> {
    pub(super) fn new(inner: W, limit: Duration) -> Self {
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
