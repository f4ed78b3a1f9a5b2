//! The one error type of the live designs: what went wrong, said once, with a
//! kind that maps to the NBD error a client sees.

/// What kind of failure, as a client of the export sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A device failed (EIO).
    Io,
    /// The server is shutting down or detaching (NBD_ESHUTDOWN): retry elsewhere.
    Shutdown,
    /// No space left (ENOSPC).
    NoSpace,
    /// The request or setting is invalid (EINVAL).
    Invalid,
    /// The design cannot do this (ENOTSUP).
    NotSupported,
}

/// A failure of a live design: a kind and one message (the cause, said once).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    /// A device failure.
    pub fn io(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Io,
            message: message.into(),
        }
    }
    /// A request refused because the server is stopping.
    pub fn shutdown(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Shutdown,
            message: message.into(),
        }
    }
    /// Something the design does not support.
    pub fn not_supported(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::NotSupported,
            message: message.into(),
        }
    }
    /// An invalid request or setting.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Invalid,
            message: message.into(),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        match e.raw_os_error() {
            Some(c) if c == rustix::io::Errno::NOSPC.raw_os_error() => Error {
                kind: ErrorKind::NoSpace,
                message: e.to_string(),
            },
            Some(c) if c == rustix::io::Errno::SHUTDOWN.raw_os_error() => {
                Error::shutdown(e.to_string())
            }
            _ => Error::io(e.to_string()),
        }
    }
}

impl From<Error> for tiercache_nbd::Error {
    fn from(e: Error) -> Self {
        use tiercache_nbd::Errno;
        let errno = match e.kind {
            ErrorKind::Io => Errno::Io,
            ErrorKind::Shutdown => Errno::Shutdown,
            ErrorKind::NoSpace => Errno::NoSpc,
            ErrorKind::Invalid => Errno::Inval,
            ErrorKind::NotSupported => Errno::NotSup,
        };
        tiercache_nbd::Error::new(errno, e.message)
    }
}

/// Result of a live design's operation.
pub type Result<T> = std::result::Result<T, Error>;

/// Run a synchronous design call on tokio's blocking pool (the log-structured
/// and three-level stores do device I/O under a lock).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(Error::io(format!("request task failed: {e}"))))
}
