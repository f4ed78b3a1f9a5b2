//! Errors of trace reading, detection and conversion.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in a trace file a problem was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// 1-based line number of a text trace.
    Line(u64),
    /// 1-based record number of a binary trace.
    Record(u64),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(n) => write!(f, "{n}"),
            Location::Record(n) => write!(f, " record {n}"),
        }
    }
}

/// Everything that can go wrong while reading or writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened, read or written.
    ///
    /// The cause is part of the message and deliberately not exposed as
    /// `source()`, so that printing the error chain says it once.
    #[error("{}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// Reading (or decompressing) failed part way through, e.g. a truncated
    /// compressed stream.
    #[error("{}:{at}: read error: {cause}", path.display())]
    Read {
        path: PathBuf,
        at: Location,
        cause: std::io::Error,
    },
    /// A line or record is malformed or truncated.
    #[error("{}:{at}: {msg}", path.display())]
    Parse {
        path: PathBuf,
        at: Location,
        msg: String,
    },
    /// A trace format name was not recognised.
    #[error("unknown trace format '{name}'; allowed: {allowed}")]
    UnknownFormat { name: String, allowed: String },
    /// The format of a file could not be guessed.
    #[error("{}: cannot detect the trace format ({reason}); give it with --format (allowed: {allowed})", path.display())]
    Detect {
        path: PathBuf,
        reason: String,
        allowed: String,
    },
    /// The file is not valid for the requested format as a whole (bad header,
    /// unsupported version, ...).
    #[error("{}: {msg}", path.display())]
    Invalid { path: PathBuf, msg: String },
    /// The trace yielded no request at all (empty, every line ignored, or
    /// every request filtered out).
    #[error("trace {} holds no requests (format {format}{})", path.display(), volume.as_ref().map(|v| format!(", volume {v}")).unwrap_or_default())]
    Empty {
        path: PathBuf,
        format: String,
        volume: Option<String>,
    },
    /// The file is mostly (or, for a binary format, from its start) not
    /// records of the format: it is refused rather than replayed as garbage.
    #[error("{}: not a {format} trace: {msg}", path.display())]
    NotFormat {
        path: PathBuf,
        format: String,
        msg: String,
    },
    /// A caller-supplied parameter is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A record cannot be represented in the output format of a conversion.
    #[error("cannot write record {index} as {format}: {msg}")]
    Unrepresentable {
        index: u64,
        format: String,
        msg: String,
    },
}

impl TraceError {
    pub(crate) fn io(path: &Path, cause: std::io::Error) -> Self {
        TraceError::Io {
            path: path.to_path_buf(),
            cause,
        }
    }

    pub(crate) fn parse(path: &Path, at: Location, msg: impl Into<String>) -> Self {
        TraceError::Parse {
            path: path.to_path_buf(),
            at,
            msg: msg.into(),
        }
    }

    /// True for errors about one bad line/record, which `skip_bad` may skip.
    pub fn is_bad_record(&self) -> bool {
        matches!(self, TraceError::Parse { .. })
    }
}

/// Result alias of this crate.
pub type Result<T, E = TraceError> = std::result::Result<T, E>;
