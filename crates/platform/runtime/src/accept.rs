//! One accept loop for the runtime's side channels (the control socket and
//! the metrics endpoint): it stops on cancel, and it outlives EMFILE and
//! other accept errors by backing off (10 ms doubling to 1 s) instead of
//! spinning or ending, so the channel stays usable once descriptors free up.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// A listener whose connections the loop accepts.
pub(crate) trait Accept {
    type Stream;
    fn accept_one(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_one(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_one(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// Accept connections on `listener` until `stop`, handing each to `on_conn`;
/// `what` names the channel in the warning an accept error logs.
pub(crate) async fn accept_loop<L: Accept>(
    what: &str,
    listener: L,
    stop: CancellationToken,
    mut on_conn: impl FnMut(L::Stream),
) {
    let mut backoff = Duration::from_millis(10);
    loop {
        let r = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept_one() => r,
        };
        match r {
            Ok(stream) => {
                backoff = Duration::from_millis(10);
                on_conn(stream);
            }
            Err(e) => {
                tracing::warn!(
                    "{what}: accept failed: {e}; retrying in {} ms",
                    backoff.as_millis()
                );
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
