//! Errors a [`Backend`](crate::Backend) returns, carrying the NBD errno sent to the client.

use std::fmt;

/// NBD error values (the protocol's own numbering, which matches Linux errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Errno {
    /// Operation not permitted, e.g. a write to a read-only export.
    Perm = 1,
    /// I/O error.
    Io = 5,
    /// Out of memory (avoid).
    NoMem = 12,
    /// Invalid argument: unknown command or flag, range past the end of a read/trim.
    Inval = 22,
    /// No space left: write or write-zeroes beyond the end, or out of backing space.
    NoSpc = 28,
    /// Value too large: oversize request without payload, DF read that cannot be one chunk.
    Overflow = 75,
    /// Operation not supported: only for `NBD_CMD_FLAG_FAST_ZERO` that cannot be fast.
    NotSup = 95,
    /// Server is shutting down.
    Shutdown = 108,
}

impl Errno {
    /// The value sent on the wire.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Map an OS errno to the closest NBD errno (spec: unknown errors become EINVAL,
    /// but for a storage backend EIO is the honest default).
    pub fn from_os(raw: i32) -> Errno {
        match raw {
            1 | 13 | 30 => Errno::Perm, // EPERM, EACCES, EROFS
            12 => Errno::NoMem,
            22 => Errno::Inval,
            28 | 122 | 27 => Errno::NoSpc, // ENOSPC, EDQUOT, EFBIG
            75 => Errno::Overflow,
            95 => Errno::NotSup, // EOPNOTSUPP
            108 => Errno::Shutdown,
            _ => Errno::Io,
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Errno::Perm => "EPERM",
            Errno::Io => "EIO",
            Errno::NoMem => "ENOMEM",
            Errno::Inval => "EINVAL",
            Errno::NoSpc => "ENOSPC",
            Errno::Overflow => "EOVERFLOW",
            Errno::NotSup => "ENOTSUP",
            Errno::Shutdown => "ESHUTDOWN",
        };
        f.write_str(name)
    }
}

/// A failed backend or request operation: the NBD errno plus a human-readable
/// message (sent to the client in a structured `ERROR` chunk when negotiated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    errno: Errno,
    message: String,
}

impl Error {
    /// An error with an explicit errno and message.
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        Error {
            errno,
            message: message.into(),
        }
    }

    /// The NBD errno reported to the client.
    pub fn errno(&self) -> Errno {
        self.errno
    }

    /// The message reported to the client.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Shorthand for `Error::new(Errno::Io, msg)`.
    pub fn io(message: impl Into<String>) -> Self {
        Error::new(Errno::Io, message)
    }

    /// Shorthand for `Error::new(Errno::Inval, msg)`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(Errno::Inval, message)
    }

    /// Shorthand for `Error::new(Errno::NotSup, msg)`.
    pub fn not_supported(message: impl Into<String>) -> Self {
        Error::new(Errno::NotSup, message)
    }

    /// Shorthand for `Error::new(Errno::Shutdown, msg)` (`NBD_ESHUTDOWN`):
    /// for a backend that refuses work because it is shutting down.
    pub fn shutdown(message: impl Into<String>) -> Self {
        Error::new(Errno::Shutdown, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.errno, self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        let errno = match e.raw_os_error() {
            Some(raw) => Errno::from_os(raw),
            None => match e.kind() {
                std::io::ErrorKind::PermissionDenied => Errno::Perm,
                std::io::ErrorKind::InvalidInput => Errno::Inval,
                std::io::ErrorKind::Unsupported => Errno::NotSup,
                std::io::ErrorKind::StorageFull => Errno::NoSpc,
                _ => Errno::Io,
            },
        };
        Error::new(errno, e.to_string())
    }
}

/// Result of a backend operation.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_map_to_nbd_errnos_per_spec_table() {
        // Values from Linux errno.h; mapping from the NBD spec's error section.
        assert_eq!(Errno::from_os(libc_enospc()), Errno::NoSpc);
        assert_eq!(Errno::from_os(122), Errno::NoSpc); // EDQUOT
        assert_eq!(Errno::from_os(27), Errno::NoSpc); // EFBIG
        assert_eq!(Errno::from_os(30), Errno::Perm); // EROFS
        assert_eq!(Errno::from_os(95), Errno::NotSup);
        assert_eq!(Errno::from_os(61), Errno::Io); // ENODATA -> EIO
        let e: Error = std::io::Error::from_raw_os_error(28).into();
        assert_eq!(e.errno().code(), 28);
    }

    fn libc_enospc() -> i32 {
        rustix::io::Errno::NOSPC.raw_os_error()
    }
}
