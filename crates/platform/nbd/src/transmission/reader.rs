//! Reader-side waits of the transmission phase: every wait on the client is
//! raced against shutdown and writer failure and bounded by the timeouts.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncRead, AsyncReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::protocol::*;

/// Why the reader stopped.
#[derive(Debug)]
pub(super) enum End {
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
pub(super) struct Watch {
    pub(super) cancel: CancellationToken,
    pub(super) dead: CancellationToken,
    pub(super) io_timeout: Duration,
}

impl Watch {
    /// Shutdown or writer failure, checked without waiting: the fast path
    /// below admits a request only after this check.
    pub(super) fn stopped(&self) -> Result<(), End> {
        if self.cancel.is_cancelled() {
            Err(End::Shutdown)
        } else if self.dead.is_cancelled() {
            Err(End::WriterFailed)
        } else {
            Ok(())
        }
    }

    pub(super) async fn run<F: Future>(&self, f: F) -> Result<F::Output, End> {
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
    pub(super) async fn header<R: AsyncRead + Unpin>(
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
    pub(super) async fn payload<R: AsyncRead + Unpin>(
        &self,
        rd: &mut R,
        len: usize,
    ) -> Result<Vec<u8>, End> {
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
    pub(super) async fn skip<R: AsyncRead + Unpin>(
        &self,
        rd: &mut R,
        mut len: u64,
    ) -> Result<(), End> {
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

/// Take the next `n` bytes if they are already buffered: no wait, so no
/// timer and no select (the common case under load, when one socket read
/// brings several requests). `None` leaves the buffer untouched.
pub(super) fn take_buffered<R, T>(
    rd: &mut BufReader<R>,
    n: usize,
    f: impl FnOnce(&[u8]) -> T,
) -> Option<T>
where
    R: AsyncRead + Unpin,
{
    let v = f(rd.buffer().get(..n)?);
    Pin::new(rd).consume(n);
    Some(v)
}
