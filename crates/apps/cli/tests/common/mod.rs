//! Shared helpers of the live-server crash and fault tests: a small pipelined
//! NBD client, self-checking versioned 4 KiB blocks, a ledger of what was
//! written, acknowledged and flushed, a random write/read/flush load, and the
//! `tiercache serve` process; the kill -9 harness of every design (`crash`)
//! and the in-process fixture of the fault tests (`inproc`).
#![allow(dead_code)]

pub mod crash;
pub mod designs;
pub mod fio;
pub mod inproc;
pub mod resize;
pub mod wait;

// Not every test uses each of these.
#[allow(unused_imports)]
pub use fio::FIO_NO_STATE;
#[allow(unused_imports)]
pub use wait::{poll_for, wait_for, wait_until, READY_TIMEOUT};

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Size of one checked block (the unit the ledger tracks).
pub const BLOCK: usize = 4096;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const INFO_EXPORT: u16 = 0;
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const FLAG_FUA: u16 = 1;
/// NBD_EIO.
pub const NBD_EIO: u32 = 5;

// ---------------------------------------------------------------------------
// Client

/// One reply of the server (simple replies only: the client never asks for structured ones).
#[derive(Debug)]
pub struct Reply {
    pub cookie: u64,
    pub error: u32,
    pub data: Vec<u8>,
}

/// A blocking NBD client over a Unix socket, fixed newstyle with NBD_OPT_GO.
/// Requests can be pipelined: `send_*` return a cookie, `recv` returns the
/// next reply in whatever order the server answers.
pub struct NbdClient {
    s: UnixStream,
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags the server advertised.
    pub flags: u16,
    next: u64,
    /// Payload length of each READ in flight (simple replies do not carry it).
    reads: HashMap<u64, usize>,
}

fn rd_u16(s: &mut impl Read) -> io::Result<u16> {
    let mut b = [0; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}
fn rd_u32(s: &mut impl Read) -> io::Result<u32> {
    let mut b = [0; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}
fn rd_u64(s: &mut impl Read) -> io::Result<u64> {
    let mut b = [0; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}
fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl NbdClient {
    /// Connect and negotiate the default export with NBD_OPT_GO.
    pub fn connect(sock: &Path) -> io::Result<NbdClient> {
        let mut s = UnixStream::connect(sock)?;
        s.set_read_timeout(Some(Duration::from_secs(20)))?;
        if rd_u64(&mut s)? != NBDMAGIC || rd_u64(&mut s)? != IHAVEOPT {
            return Err(bad("bad greeting".into()));
        }
        let hflags = rd_u16(&mut s)?;
        if hflags & 3 != 3 {
            return Err(bad(format!(
                "handshake flags {hflags:#x} lack FIXED_NEWSTYLE|NO_ZEROES"
            )));
        }
        s.write_all(&3u32.to_be_bytes())?;
        // OPT_GO, empty name, no info requests.
        let mut opt = Vec::new();
        opt.extend_from_slice(&IHAVEOPT.to_be_bytes());
        opt.extend_from_slice(&OPT_GO.to_be_bytes());
        opt.extend_from_slice(&6u32.to_be_bytes());
        opt.extend_from_slice(&0u32.to_be_bytes());
        opt.extend_from_slice(&0u16.to_be_bytes());
        s.write_all(&opt)?;
        let (mut size, mut flags) = (None, 0);
        loop {
            if rd_u64(&mut s)? != OPT_REPLY_MAGIC {
                return Err(bad("bad option reply magic".into()));
            }
            let _opt = rd_u32(&mut s)?;
            let typ = rd_u32(&mut s)?;
            let len = rd_u32(&mut s)? as usize;
            let mut data = vec![0; len];
            s.read_exact(&mut data)?;
            match typ {
                REP_ACK => break,
                REP_INFO if len >= 12 && u16::from_be_bytes([data[0], data[1]]) == INFO_EXPORT => {
                    size = Some(u64::from_be_bytes(data[2..10].try_into().expect("8")));
                    flags = u16::from_be_bytes([data[10], data[11]]);
                }
                REP_INFO => {}
                t => return Err(bad(format!("NBD_OPT_GO failed with reply type {t:#x}"))),
            }
        }
        let size = size.ok_or_else(|| bad("no NBD_INFO_EXPORT before the ACK".into()))?;
        Ok(NbdClient {
            s,
            size,
            flags,
            next: 1,
            reads: HashMap::new(),
        })
    }

    fn send(
        &mut self,
        typ: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) -> io::Result<u64> {
        let cookie = self.next;
        self.next += 1;
        let mut h = Vec::with_capacity(28 + payload.len());
        h.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        h.extend_from_slice(&flags.to_be_bytes());
        h.extend_from_slice(&typ.to_be_bytes());
        h.extend_from_slice(&cookie.to_be_bytes());
        h.extend_from_slice(&offset.to_be_bytes());
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(payload);
        if typ == CMD_READ {
            self.reads.insert(cookie, len as usize);
        }
        self.s.write_all(&h)?;
        Ok(cookie)
    }

    pub fn send_read(&mut self, offset: u64, len: usize) -> io::Result<u64> {
        self.send(CMD_READ, 0, offset, len as u32, &[])
    }
    pub fn send_write(&mut self, offset: u64, data: &[u8], fua: bool) -> io::Result<u64> {
        let f = if fua { FLAG_FUA } else { 0 };
        self.send(CMD_WRITE, f, offset, data.len() as u32, data)
    }
    pub fn send_flush(&mut self) -> io::Result<u64> {
        self.send(CMD_FLUSH, 0, 0, 0, &[])
    }

    /// The next reply (blocks).
    pub fn recv(&mut self) -> io::Result<Reply> {
        let magic = rd_u32(&mut self.s)?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(bad(format!("unexpected reply magic {magic:#x}")));
        }
        let error = rd_u32(&mut self.s)?;
        let cookie = rd_u64(&mut self.s)?;
        let len = self.reads.remove(&cookie).unwrap_or(0);
        let mut data = Vec::new();
        if error == 0 && len > 0 {
            data = vec![0; len];
            self.s.read_exact(&mut data)?;
        }
        Ok(Reply {
            cookie,
            error,
            data,
        })
    }

    fn wait(&mut self, cookie: u64) -> io::Result<Reply> {
        let r = self.recv()?;
        if r.cookie != cookie {
            return Err(bad(format!(
                "reply for cookie {} while waiting for {cookie}",
                r.cookie
            )));
        }
        Ok(r)
    }

    /// Synchronous READ: the data, or the NBD error number.
    pub fn read(&mut self, offset: u64, len: usize) -> io::Result<Result<Vec<u8>, u32>> {
        let c = self.send_read(offset, len)?;
        let r = self.wait(c)?;
        Ok(if r.error == 0 {
            Ok(r.data)
        } else {
            Err(r.error)
        })
    }
    /// Synchronous WRITE: Ok or the NBD error number.
    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> io::Result<Result<(), u32>> {
        let c = self.send_write(offset, data, fua)?;
        let r = self.wait(c)?;
        Ok(if r.error == 0 { Ok(()) } else { Err(r.error) })
    }
    /// Synchronous WRITE_ZEROES of `len` bytes at `offset`: Ok or the NBD error number.
    pub fn write_zeroes(
        &mut self,
        offset: u64,
        len: u32,
        fua: bool,
    ) -> io::Result<Result<(), u32>> {
        let f = if fua { FLAG_FUA } else { 0 };
        let c = self.send(CMD_WRITE_ZEROES, f, offset, len, &[])?;
        let r = self.wait(c)?;
        Ok(if r.error == 0 { Ok(()) } else { Err(r.error) })
    }
    /// Synchronous FLUSH.
    pub fn flush(&mut self) -> io::Result<Result<(), u32>> {
        let c = self.send_flush()?;
        let r = self.wait(c)?;
        Ok(if r.error == 0 { Ok(()) } else { Err(r.error) })
    }
    /// The socket, to send malformed or partial requests.
    pub fn raw(&mut self) -> &mut UnixStream {
        &mut self.s
    }

    /// NBD_CMD_DISC, then close.
    pub fn disconnect(mut self) {
        let _ = self.send(CMD_DISC, 0, 0, 0, &[]);
    }
}

// ---------------------------------------------------------------------------
// Versioned blocks

const BLOCK_MAGIC: u64 = 0x5443_424c_4f43_4b31; // "TCBLOCK1"

/// Splitmix64: the PRNG of the tests (seeded, reproducible).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

fn fnv1a(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Set (once, by a test binary) to make [`make_block`]'s fill compressible
/// for even blocks (each random word repeated four times): the compressed
/// cache then stores both compressed and raw records.
pub static COMPRESSIBLE_BLOCKS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// The content of `block` at `version`: magic, block number, version, a
/// fill derived from both, and a checksum of everything before it.
pub fn make_block(block: u64, version: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(BLOCK);
    v.extend_from_slice(&BLOCK_MAGIC.to_le_bytes());
    v.extend_from_slice(&block.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    let mut r = Rng(block.wrapping_mul(0x1000_0001) ^ version.rotate_left(32));
    let repeat = if block.is_multiple_of(2)
        && COMPRESSIBLE_BLOCKS.load(std::sync::atomic::Ordering::Relaxed)
    {
        4
    } else {
        1
    };
    while v.len() < BLOCK - 8 {
        let w = r.next().to_le_bytes();
        for _ in 0..repeat {
            if v.len() < BLOCK - 8 {
                v.extend_from_slice(&w);
            }
        }
    }
    let c = fnv1a(&v);
    v.extend_from_slice(&c.to_le_bytes());
    v
}

/// The version a block holds, or why it is not a well-formed block `block`.
pub fn parse_block(block: u64, data: &[u8]) -> Result<u64, String> {
    let u = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8"));
    if data.len() != BLOCK {
        return Err(format!("{} bytes, not {BLOCK}", data.len()));
    }
    if u(0) != BLOCK_MAGIC {
        return Err(format!("no block magic (first bytes {:02x?})", &data[..16]));
    }
    if u(8) != block {
        return Err(format!("holds block {} (misdirected data)", u(8)));
    }
    let version = u(16);
    if make_block(block, version) != data {
        return Err(format!(
            "version {version} header but torn or corrupt content ({})",
            torn_detail(block, version, data)
        ));
    }
    Ok(version)
}

/// Which version of `block` each 512-byte sector of a torn block comes from
/// (versions up to `version + 64` are tried; the last sector without its
/// checksum): tells a tear by sector or page, a mix of two writes, or
/// foreign bytes apart when a crash test fails.
fn torn_detail(block: u64, version: u64, data: &[u8]) -> String {
    let versions: Vec<Vec<u8>> = (0..=version + 64).map(|v| make_block(block, v)).collect();
    let sectors: Vec<String> = (0..BLOCK / 512)
        .map(|i| {
            let (a, z) = (i * 512, ((i + 1) * 512).min(BLOCK - 8));
            match versions.iter().position(|b| b[a..z] == data[a..z]) {
                Some(v) => format!("v{v}"),
                None if data[a..z].iter().all(|&b| b == 0) => "zeros".into(),
                None => "?".into(),
            }
        })
        .collect();
    format!("512-byte sectors hold {}", sectors.join(" "))
}

/// Write version 0 of every block into `path` (the initial backing file).
pub fn init_backing(path: &Path, blocks: u64) {
    let mut all = Vec::with_capacity(blocks as usize * BLOCK);
    for b in 0..blocks {
        all.extend_from_slice(&make_block(b, 0));
    }
    std::fs::write(path, all).expect("write backing file");
}

// ---------------------------------------------------------------------------
// Ledger

/// What the client knows about one block.
#[derive(Clone, Debug, Default)]
pub struct BlockState {
    /// Version read back at the last verification (or 0 initially): the device held it then.
    pub base: u64,
    /// Versions sent since (ascending); each may or may not have reached the device.
    pub issued: Vec<u64>,
    /// Newest version acknowledged.
    pub acked: u64,
    /// Newest version a completed FLUSH (or a FUA write) made durable.
    pub durable: u64,
    /// Next version number to use.
    pub next: u64,
    /// A write to the block is in flight (the load never overlaps writes to one block).
    pub writing: bool,
}

/// Every block's versions: the reference the device is checked against.
pub struct Ledger {
    pub blocks: Vec<BlockState>,
    /// Counters for the report.
    pub writes_acked: u64,
    pub flushes_done: u64,
    pub reads_checked: u64,
    /// Reads that overlapped a write and returned a mix of two versions (legal).
    pub reads_mixed: u64,
    /// `writes_acked`, for another thread to watch while a load runs.
    pub writes_acked_shared: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Ledger {
    pub fn new(blocks: u64) -> Ledger {
        Ledger {
            blocks: (0..blocks)
                .map(|_| BlockState {
                    next: 1,
                    ..Default::default()
                })
                .collect(),
            writes_acked: 0,
            flushes_done: 0,
            reads_checked: 0,
            reads_mixed: 0,
            writes_acked_shared: Default::default(),
        }
    }

    /// Whether `v` is a version the device may hold for `b` now, given that
    /// reads must never go back behind `floor`.
    fn allowed(&self, b: u64, v: u64, floor: u64) -> Result<(), String> {
        let s = &self.blocks[b as usize];
        if v < floor {
            return Err(format!(
                "block {b}: read version {v}, older than {floor} (stale: durable {}, acked {}, base {})",
                s.durable, s.acked, s.base
            ));
        }
        if v != s.base && s.issued.binary_search(&v).is_err() {
            return Err(format!(
                "block {b}: read version {v}, which was never written since the last check (base {}, issued {:?})",
                s.base,
                &s.issued[s.issued.len().saturating_sub(5)..]
            ));
        }
        Ok(())
    }

    /// Check a block read while the server ran: at least what was acknowledged
    /// when the read was sent (`acked_at_send`), never unwritten data.
    pub fn check_live(&mut self, b: u64, data: &[u8], acked_at_send: u64) -> Result<(), String> {
        let v = parse_block(b, data).map_err(|e| format!("block {b}: {e}"))?;
        self.reads_checked += 1;
        self.allowed(b, v, acked_at_send)
    }

    /// Check a block read that overlapped a write to it (the write was in
    /// flight when the read was sent, or sent while it was): every 8-byte word must come from a
    /// version the device may hold (written, and not older than
    /// `acked_at_send`); a whole-block version need not. Overlapping requests
    /// have no order in NBD, as on a disk, but a read never returns bytes that
    /// were never written or that are stale.
    pub fn check_live_overlapped(
        &mut self,
        b: u64,
        data: &[u8],
        acked_at_send: u64,
    ) -> Result<(), String> {
        if parse_block(b, data).is_ok() {
            return self.check_live(b, data, acked_at_send);
        }
        let s = &self.blocks[b as usize];
        let candidates: Vec<Vec<u8>> = std::iter::once(s.base)
            .chain(s.issued.iter().copied())
            .filter(|&v| v >= acked_at_send)
            .map(|v| make_block(b, v))
            .collect();
        for (w, word) in data.chunks(8).enumerate() {
            if !candidates
                .iter()
                .any(|c| &c[w * 8..w * 8 + word.len()] == word)
            {
                return Err(format!(
                    "block {b}: overlapped read, word {w} matches no version written since \
                     {acked_at_send} (stale or corrupt)"
                ));
            }
        }
        self.reads_checked += 1;
        self.reads_mixed += 1;
        Ok(())
    }

    /// Check a block read after a restart: at least its durable version, and
    /// one that was written; then make what was read the new base.
    pub fn check_recovered(&mut self, b: u64, data: &[u8]) -> Result<u64, String> {
        let v = parse_block(b, data).map_err(|e| format!("block {b}: {e}"))?;
        let floor = self.blocks[b as usize].durable;
        self.allowed(b, v, floor)?;
        let s = &mut self.blocks[b as usize];
        s.base = v;
        s.issued.clear();
        s.acked = v;
        s.writing = false;
        Ok(v)
    }

    /// After a verification followed by a completed FLUSH: what was read is durable.
    pub fn settle(&mut self) {
        for s in &mut self.blocks {
            s.durable = s.base;
        }
    }

    /// Every block's newest acknowledged version (what a flush sent now covers).
    pub fn acked_snapshot(&self) -> Vec<u64> {
        self.blocks.iter().map(|s| s.acked).collect()
    }
}

// ---------------------------------------------------------------------------
// Load

/// Shape of the random load.
#[derive(Clone, Copy, Debug)]
pub struct LoadShape {
    /// Requests kept in flight.
    pub depth: usize,
    /// Blocks of the hot set (a share of accesses go there, so some hit).
    pub hot_blocks: u64,
    /// Share of requests that are reads.
    pub read_share: f64,
    /// Share of requests that are flushes.
    pub flush_share: f64,
    /// Share of writes sent with FUA.
    pub fua_share: f64,
    /// Largest request in blocks.
    pub max_blocks: u64,
}

impl Default for LoadShape {
    fn default() -> Self {
        LoadShape {
            depth: 8,
            hot_blocks: 96,
            read_share: 0.2,
            flush_share: 0.04,
            fua_share: 0.03,
            max_blocks: 4,
        }
    }
}

enum Pending {
    Write {
        first: u64,
        versions: Vec<u64>,
        fua: bool,
    },
    Read {
        first: u64,
        acked: Vec<u64>,
        /// Per block: a write to it was sent while this read was in flight. The
        /// two overlap, and like a disk (and the NBD spec) the read may then
        /// return any mix of the old and the new bytes.
        overlapped: Vec<bool>,
    },
    Flush {
        snapshot: Vec<u64>,
    },
}

/// How a load run ended.
#[derive(Debug)]
pub enum LoadEnd {
    /// The load stopped sending and every request was answered.
    Done,
    /// The connection broke (the server was killed): the I/O error.
    Broken(String),
}

/// When a load stops sending.
#[derive(Clone, Copy, Debug)]
pub enum Until {
    /// At this instant (a bound on a load that runs until the server stops).
    Time(Instant),
    /// Once the ledger counts this many acknowledged writes.
    WritesAcked(u64),
}

impl From<Instant> for Until {
    fn from(t: Instant) -> Until {
        Until::Time(t)
    }
}

impl Until {
    fn reached(self, ledger: &Ledger) -> bool {
        match self {
            Until::Time(t) => Instant::now() >= t,
            Until::WritesAcked(n) => ledger.writes_acked >= n,
        }
    }
}

/// Run the random load on `c` until `until` (then drain) or until the
/// connection breaks. Every reply updates the ledger; a read that breaks
/// the rules, or an error reply, fails with a message.
pub fn run_load(
    c: &mut NbdClient,
    ledger: &mut Ledger,
    rng: &mut Rng,
    shape: LoadShape,
    until: impl Into<Until>,
) -> Result<LoadEnd, String> {
    let until = until.into();
    let nblocks = ledger.blocks.len() as u64;
    let mut pending: HashMap<u64, Pending> = HashMap::new();
    let pick = |rng: &mut Rng, n: u64| -> u64 {
        let first = if rng.chance(0.5) {
            rng.below(shape.hot_blocks.min(nblocks))
        } else {
            rng.below(nblocks)
        };
        first.min(nblocks - n)
    };
    loop {
        let sending = !until.reached(ledger);
        if sending && pending.len() < shape.depth {
            let r = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            let n = 1 + rng.below(shape.max_blocks);
            let sent = if r < shape.flush_share {
                let snapshot = ledger.acked_snapshot();
                c.send_flush().map(|ck| (ck, Pending::Flush { snapshot }))
            } else if r < shape.flush_share + shape.read_share {
                let first = pick(rng, n);
                let acked = (first..first + n)
                    .map(|b| ledger.blocks[b as usize].acked)
                    .collect();
                // A write still in flight overlaps the read as much as one
                // sent after it: NBD orders neither (a mix of the two
                // versions is allowed, word by word).
                let overlapped = (first..first + n)
                    .map(|b| ledger.blocks[b as usize].writing)
                    .collect();
                c.send_read(first * BLOCK as u64, n as usize * BLOCK)
                    .map(|ck| {
                        (
                            ck,
                            Pending::Read {
                                first,
                                acked,
                                overlapped,
                            },
                        )
                    })
            } else {
                let first = pick(rng, n);
                if (first..first + n).any(|b| ledger.blocks[b as usize].writing) {
                    continue;
                }
                let fua = rng.chance(shape.fua_share);
                let mut data = Vec::with_capacity(n as usize * BLOCK);
                let mut versions = Vec::new();
                for b in first..first + n {
                    let s = &mut ledger.blocks[b as usize];
                    let v = s.next;
                    s.next += 1;
                    s.issued.push(v);
                    s.writing = true;
                    versions.push(v);
                    data.extend_from_slice(&make_block(b, v));
                }
                for p in pending.values_mut() {
                    if let Pending::Read {
                        first: rf,
                        overlapped,
                        ..
                    } = p
                    {
                        for (i, o) in overlapped.iter_mut().enumerate() {
                            let b = *rf + i as u64;
                            *o |= (first..first + n).contains(&b);
                        }
                    }
                }
                c.send_write(first * BLOCK as u64, &data, fua).map(|ck| {
                    (
                        ck,
                        Pending::Write {
                            first,
                            versions,
                            fua,
                        },
                    )
                })
            };
            match sent {
                Ok((ck, p)) => {
                    pending.insert(ck, p);
                    continue;
                }
                Err(e) => return Ok(LoadEnd::Broken(format!("send: {e}"))),
            }
        }
        if pending.is_empty() {
            return Ok(LoadEnd::Done);
        }
        let reply = match c.recv() {
            Ok(r) => r,
            Err(e) => return Ok(LoadEnd::Broken(format!("recv: {e}"))),
        };
        let Some(p) = pending.remove(&reply.cookie) else {
            return Err(format!("reply for unknown cookie {}", reply.cookie));
        };
        if reply.error != 0 {
            return Err(format!(
                "server answered error {} to a request",
                reply.error
            ));
        }
        match p {
            Pending::Write {
                first,
                versions,
                fua,
            } => {
                ledger.writes_acked += 1;
                ledger
                    .writes_acked_shared
                    .store(ledger.writes_acked, std::sync::atomic::Ordering::Relaxed);
                for (i, v) in versions.into_iter().enumerate() {
                    let s = &mut ledger.blocks[(first + i as u64) as usize];
                    s.acked = s.acked.max(v);
                    s.writing = false;
                    if fua {
                        s.durable = s.durable.max(v);
                    }
                }
            }
            Pending::Read {
                first,
                acked,
                overlapped,
            } => {
                for (i, a) in acked.into_iter().enumerate() {
                    let b = first + i as u64;
                    let data = &reply.data[i * BLOCK..(i + 1) * BLOCK];
                    if overlapped[i] {
                        ledger.check_live_overlapped(b, data, a)
                    } else {
                        ledger.check_live(b, data, a)
                    }
                    .map_err(|e| format!("read during load: {e}"))?;
                }
            }
            Pending::Flush { snapshot } => {
                ledger.flushes_done += 1;
                for (s, a) in ledger.blocks.iter_mut().zip(snapshot) {
                    s.durable = s.durable.max(a);
                }
            }
        }
    }
}

/// Read every block (pipelined) and check it against the ledger after a
/// restart; then FLUSH and settle. Returns how many blocks held a version
/// newer than their durable one (acknowledged or in-flight writes that survived).
pub fn verify_all(c: &mut NbdClient, ledger: &mut Ledger) -> Result<u64, String> {
    let n = ledger.blocks.len() as u64;
    let per = 16u64;
    let mut newer = 0;
    let mut inflight: HashMap<u64, u64> = HashMap::new();
    let mut next = 0u64;
    while next < n || !inflight.is_empty() {
        while next < n && inflight.len() < 8 {
            let k = per.min(n - next);
            let ck = c
                .send_read(next * BLOCK as u64, (k as usize) * BLOCK)
                .map_err(|e| format!("verify send: {e}"))?;
            inflight.insert(ck, next);
            next += k;
        }
        let r = c.recv().map_err(|e| format!("verify recv: {e}"))?;
        let first = inflight.remove(&r.cookie).ok_or("verify: unknown cookie")?;
        if r.error != 0 {
            return Err(format!(
                "verify: read of block {first} failed with error {}",
                r.error
            ));
        }
        for (i, chunk) in r.data.chunks(BLOCK).enumerate() {
            let b = first + i as u64;
            let durable = ledger.blocks[b as usize].durable;
            let v = ledger.check_recovered(b, chunk)?;
            if v > durable {
                newer += 1;
            }
        }
    }
    match c.flush().map_err(|e| format!("verify flush: {e}"))? {
        Ok(()) => ledger.settle(),
        Err(e) => return Err(format!("verify flush failed with error {e}")),
    }
    Ok(newer)
}

/// Compare a file (the backing device after detach) with the ledger's newest versions.
pub fn check_file_latest(path: &Path, ledger: &Ledger) -> Result<(), String> {
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    for (b, s) in ledger.blocks.iter().enumerate() {
        let want = s.issued.last().copied().unwrap_or(s.base);
        let got = parse_block(b as u64, &data[b * BLOCK..(b + 1) * BLOCK])
            .map_err(|e| format!("backing block {b}: {e}"))?;
        if got != want {
            return Err(format!(
                "backing block {b} holds version {got}, the client last wrote {want}"
            ));
        }
    }
    Ok(())
}

/// Compare a file (the backing device after detach) with the ledger: every
/// block holds its newest acknowledged version or a newer one the client
/// sent (a write the server never read may or may not have landed).
pub fn check_file_acked(path: &Path, ledger: &Ledger) -> Result<(), String> {
    let data = std::fs::read(path).map_err(|e| e.to_string())?;
    for (b, s) in ledger.blocks.iter().enumerate() {
        let got = parse_block(b as u64, &data[b * BLOCK..(b + 1) * BLOCK])
            .map_err(|e| format!("backing block {b}: {e}"))?;
        if got < s.acked.max(s.base) || (got != s.base && !s.issued.contains(&got)) {
            return Err(format!(
                "backing block {b} holds version {got}; the newest acknowledged write was version {}",
                s.acked
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The server process

/// The `tiercache` binary under test.
/// The last 40 lines of a server log, for failure messages.
pub fn tail(log: &Path) -> String {
    let s = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// An integer from the environment (test knobs such as `TIERCACHE_CRASH_ROUNDS`).
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// `tiercache format` of `cache` (created with `size`) in front of
/// `backing`, with `extra` policy options; returns what it printed.
pub fn format_cache(cache: &Path, backing: &Path, size: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "format",
        "--cache",
        cache.to_str().expect("utf-8 path"),
        "--backing",
        backing.to_str().expect("utf-8 path"),
        "--size",
        size,
    ];
    args.extend_from_slice(extra);
    tiercache(&args)
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tiercache"))
}

/// Run `tiercache` with `args`; panic with its output unless it succeeds.
pub fn tiercache(args: &[&str]) -> String {
    // A hung command (a flush or detach that never answers) fails the test in
    // bounded time instead of stalling the whole run.
    let out = Command::new("timeout")
        .args(["--kill-after=10", "600"])
        .arg(bin())
        .args(args)
        .output()
        .expect("run tiercache");
    assert_ne!(
        out.status.code(),
        Some(124),
        "tiercache {args:?} hung: no answer within 600 s"
    );
    assert!(
        out.status.success(),
        "tiercache {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tiercache serve` on a cache, listening on a Unix socket; killed on drop.
pub struct ServeProc {
    pub child: Child,
    pub sock: PathBuf,
    pub cache: PathBuf,
    pub log: PathBuf,
}

impl ServeProc {
    /// Start the server and wait until both its NBD and control sockets answer.
    pub fn start(cache: &Path, sock: &Path, log: &Path) -> ServeProc {
        Self::start_with(cache, sock, log, &[])
    }

    /// Like `start`, with more `serve` options.
    pub fn start_with(cache: &Path, sock: &Path, log: &Path, extra: &[&str]) -> ServeProc {
        Self::start_env(cache, sock, log, extra, &[])
    }

    /// Like `start_with`, with environment variables for the server.
    pub fn start_env(
        cache: &Path,
        sock: &Path,
        log: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> ServeProc {
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let child = Command::new(bin())
            .env("TIERCACHE_DEBUG_OPS", "1")
            .envs(env.iter().copied())
            .args(["serve", "--cache"])
            .arg(cache)
            .arg("--listen")
            .arg(format!("unix:{}", sock.display()))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .expect("spawn tiercache serve");
        let mut p = ServeProc {
            child,
            sock: sock.to_path_buf(),
            cache: cache.to_path_buf(),
            log: log.to_path_buf(),
        };
        // Listening and the control socket answering: the cache is open.
        let ready = poll_for(READY_TIMEOUT, || {
            if let Ok(Some(st)) = p.child.try_wait() {
                panic!(
                    "tiercache serve exited with {st} before listening:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            (UnixStream::connect(sock).is_ok() && p.try_stats().is_some()).then_some(())
        });
        assert!(
            ready.is_some(),
            "tiercache serve did not start listening:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        p
    }

    pub fn try_stats(&self) -> Option<serde_json::Value> {
        let out = Command::new(bin())
            .args(["stats", "--json", "--cache"])
            .arg(&self.cache)
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The server's `debug` control answer (ops in flight and what they wait
    /// for), for the message of a test that found it stuck.
    pub fn debug(&self) -> String {
        use std::io::{BufRead, BufReader, Write};
        let mut ctl = self.cache.as_os_str().to_owned();
        ctl.push(".ctl");
        let Ok(mut s) = UnixStream::connect(&ctl) else {
            return "(control socket unreachable)".into();
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = s.write_all(b"{\"cmd\":\"debug\"}\n");
        let mut line = String::new();
        let _ = BufReader::new(s).read_line(&mut line);
        line
    }

    /// `tiercache stats --json`.
    pub fn stats(&self) -> serde_json::Value {
        self.try_stats().expect("tiercache stats --json")
    }

    /// kill -9.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Wait for the process to exit on its own (after detach or SIGTERM).
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        wait_for("the server to exit", READY_TIMEOUT, || {
            self.child.try_wait().expect("try_wait")
        })
    }
}

impl Drop for ServeProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill9();
        }
    }
}

/// `../shared/traces/samples/NAME` beside the repository, or `None` (with a
/// message saying the test skips) when the shared traces are absent.
pub fn shared_sample(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("repository root")
        .join("../shared/traces/samples")
        .join(name);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!(
            "skipping: shared trace {} is absent (see ../shared/notes/traces.md)",
            p.display()
        );
        None
    }
}

/// The MSR Cambridge sample the conformance and `sim --like` tests replay.
pub fn sample_trace() -> Option<PathBuf> {
    shared_sample("msr-cambridge1-sample.csv")
}

/// `tiercache sim --json` of an MSR-format `trace` with `args`.
pub fn sim_json(trace: &Path, args: &[&str]) -> serde_json::Value {
    let mut a = vec![
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "msr",
        "--json",
    ];
    a.extend_from_slice(args);
    serde_json::from_str(&tiercache(&a)).expect("sim --json")
}
