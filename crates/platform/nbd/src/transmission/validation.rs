//! Request validation of the transmission phase: checks a request header
//! against the negotiated session in the spec's error order.

use crate::backend::in_range;
use crate::error::{Errno, Error};
use crate::handshake::Session;
use crate::protocol::*;

/// A validated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Command {
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

/// Command flags this server understands.
const KNOWN_FLAGS: u16 =
    CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_DF | CMD_FLAG_REQ_ONE | CMD_FLAG_FAST_ZERO;

/// Wire name of a command, for error messages.
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
pub(super) fn validate(h: &RequestHeader, s: &Session, max_payload: u32) -> Result<Command, Error> {
    let name = command_name(h.kind);
    check_kind_and_flags(h, s, name)?;
    check_permitted(h, s, name)?;
    check_length(h, s, max_payload, name)?;
    to_command(h, s, name)
}

/// Reject unknown commands and flags, and flags on commands they do not
/// apply to (the first rows of the spec's error order).
fn check_kind_and_flags(h: &RequestHeader, s: &Session, name: &str) -> Result<(), Error> {
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
    Ok(())
}

/// Reject writes to a read-only export (EPERM) and commands the export did
/// not advertise.
fn check_permitted(h: &RequestHeader, s: &Session, name: &str) -> Result<(), Error> {
    let mutating = matches!(h.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if mutating && s.backend.is_read_only() {
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
    Ok(())
}

/// Enforce the maximum payload size and, when the client agreed to it, the
/// minimum block size alignment.
fn check_length(h: &RequestHeader, s: &Session, max_payload: u32, name: &str) -> Result<(), Error> {
    let (offset, len) = (h.offset, h.length);
    let bs = s.backend.block_size();
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
    Ok(())
}

/// Check the range against the export (with each command's errno) and build
/// the [`Command`]; the last step, after every flag and size check.
fn to_command(h: &RequestHeader, s: &Session, name: &str) -> Result<Command, Error> {
    let b = &*s.backend;
    let size = b.size();
    let (offset, len) = (h.offset, h.length);
    let fua = h.flags & CMD_FLAG_FUA != 0;
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
