//! NBD wire format: magics, option/command/flag codes and the encoders for
//! the messages this server sends (spec: NetworkBlockDevice/nbd `doc/proto.md`).
//!
//! All integers on the wire are big-endian.

/// `NBDMAGIC`, first 8 bytes of the greeting.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`, second greeting word and prefix of every option request.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Magic of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a (compact) transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Server handshake flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flags.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR | 1;
pub const REP_ERR_POLICY: u32 = REP_ERR | 2;
pub const REP_ERR_INVALID: u32 = REP_ERR | 3;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR | 5;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR | 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR | 7;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR | 9;

/// `NBD_INFO_*` types (in `NBD_OPT_INFO`/`NBD_OPT_GO`).
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_ROTATIONAL: u16 = 1 << 4;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_SEND_DF: u16 = 1 << 7;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;
pub const TFLAG_SEND_FAST_ZERO: u16 = 1 << 11;

/// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Structured reply chunk flags and types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

/// The one metadata context this server offers.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// Context id used for `base:allocation`.
pub const BASE_ALLOCATION_ID: u32 = 1;
/// `base:allocation` status flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// Size of a compact transmission request header.
pub const REQUEST_LEN: usize = 28;
/// Size of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Size of a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;

/// A decoded transmission request header (payload, if any, follows on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub magic: u32,
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl RequestHeader {
    /// Decode the 28-byte request header.
    pub fn decode(b: &[u8; REQUEST_LEN]) -> Self {
        RequestHeader {
            magic: u32::from_be_bytes(b[0..4].try_into().expect("4 bytes")),
            flags: u16::from_be_bytes(b[4..6].try_into().expect("2 bytes")),
            kind: u16::from_be_bytes(b[6..8].try_into().expect("2 bytes")),
            cookie: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
            offset: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
            length: u32::from_be_bytes(b[24..28].try_into().expect("4 bytes")),
        }
    }

    /// Encode (used by tests and clients).
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..4].copy_from_slice(&self.magic.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// Encode an option reply header followed by `data`.
pub fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(20 + data.len());
    v.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&reply_type.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// Encode a simple reply header (READ data, if any, follows separately).
pub fn simple_reply(error: u32, cookie: u64) -> [u8; SIMPLE_REPLY_LEN] {
    let mut b = [0u8; SIMPLE_REPLY_LEN];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// Encode a structured reply chunk header.
pub fn chunk_header(flags: u16, kind: u16, cookie: u64, length: u32) -> [u8; CHUNK_HEADER_LEN] {
    let mut b = [0u8; CHUNK_HEADER_LEN];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&length.to_be_bytes());
    b
}

/// Encode a complete `NBD_REPLY_TYPE_ERROR` chunk with the DONE flag.
pub fn error_chunk(cookie: u64, error: u32, message: &str) -> Vec<u8> {
    // Message length is a u16; keep it well within one chunk.
    let msg = truncate_utf8(message, 4096);
    let len = 4 + 2 + msg.len();
    let mut v = Vec::with_capacity(CHUNK_HEADER_LEN + len);
    v.extend_from_slice(&chunk_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        len as u32,
    ));
    v.extend_from_slice(&error.to_be_bytes());
    v.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    v.extend_from_slice(msg.as_bytes());
    v
}

/// Longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_round_trips_and_matches_spec_layout() {
        let h = RequestHeader {
            magic: REQUEST_MAGIC,
            flags: CMD_FLAG_FUA,
            kind: CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 4096,
            length: 512,
        };
        let b = h.encode();
        // Hand-assembled from proto.md: magic, flags, type, cookie, offset, length.
        let mut expected = vec![0x25, 0x60, 0x95, 0x13, 0, 1, 0, 1];
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x10, 0]);
        expected.extend_from_slice(&[0, 0, 2, 0]);
        assert_eq!(b.to_vec(), expected);
        assert_eq!(RequestHeader::decode(&b), h);
    }

    #[test]
    fn error_chunk_layout() {
        let v = error_chunk(7, 22, "bad");
        assert_eq!(&v[0..4], &[0x66, 0x8e, 0x33, 0xef]);
        assert_eq!(u16::from_be_bytes([v[4], v[5]]), REPLY_FLAG_DONE);
        assert_eq!(u16::from_be_bytes([v[6], v[7]]), 32769);
        assert_eq!(u32::from_be_bytes(v[16..20].try_into().unwrap()), 9);
        assert_eq!(u32::from_be_bytes(v[20..24].try_into().unwrap()), 22);
        assert_eq!(&v[26..], b"bad");
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("abc", 10), "abc");
    }
}
