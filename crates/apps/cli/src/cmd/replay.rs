//! `tiercache replay`: a trace-driven NBD load generator. Every record of a
//! trace (any format the simulator reads) becomes a READ, WRITE, TRIM or
//! FLUSH against an NBD export, tiercache or not, closed-loop at a queue depth
//! or open-loop at a multiple of the trace's timestamps. Written sectors carry
//! a self-describing pattern so that `--verify` can check every read.

use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tiercache_block::IoKind;
use tiercache_nbd_client::{self as nbd, Client, Reply, Uri};
use tiercache_sim::units::{format_bytes, parse_bytes};
use tiercache_trace::{Format, ReadOptions};

/// Sector size of the verification pattern and of request alignment.
pub const SECTOR: u64 = 512;
/// Largest request sent (longer records are cut).
pub const MAX_REQUEST: u64 = 32 << 20;
/// Mismatches described on stderr (all are counted).
const SHOWN_MISMATCHES: u64 = 10;

/// Options of `tiercache replay`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Requests: each READ, WRITE and TRIM record goes to offset (trace offset modulo the export \
size, aligned down to 512 B) with its length rounded up to 512 B and capped at 32 MiB and at the end of the \
export; records longer than the export or of zero length are skipped and counted, as are TRIM/FLUSH records \
the server does not support. Every 512-byte sector written carries (sector offset, version, run id) and a \
CRC32C; --verify checks every read against what this run last wrote there (sectors this run never wrote are \
counted, not checked) and exits non-zero on any mismatch or NBD error. With --verify, a request that overlaps \
an in-flight write waits for it, so that expected contents are well defined.\n\n\
URIs: nbd+unix:///EXPORT?socket=PATH, nbd://HOST[:PORT]/EXPORT (port 10809 by default; EXPORT may be empty).\n\n\
Usage against a running server (nbdkit here; `tiercache serve` alike):\n  \
nbdkit memory 1G --unix /tmp/mem.sock\n  \
tiercache replay --trace ../shared/traces/samples/msr-cambridge1-sample.csv --uri 'nbd+unix:///?socket=/tmp/mem.sock' --verify\n  \
tiercache replay --trace ../shared/traces/samples/systor17-traces-sample.csv.gz --uri nbd://localhost/ --speed 2 --json"
)]
pub struct ReplayArgs {
    /// Trace file (compressed .gz/.xz/.zst/.bz2 are read transparently).
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace format: msr, arc-lis, disksim, blkparse, fiu, tencent, systor, cloudphysics, vscsi, blockid, native [default: detected].
    #[arg(long)]
    pub format: Option<String>,
    /// NBD server: nbd+unix:///EXPORT?socket=PATH or nbd://HOST[:PORT]/EXPORT.
    #[arg(long)]
    pub uri: String,
    /// Requests in flight at most (closed loop: always this many), as `sim --queue-depth`;
    /// raise it to load the server (e.g. 32).
    #[arg(long, default_value_t = tiercache_simulate::DEFAULT_QUEUE_DEPTH, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub queue_depth: u32,
    /// Open loop: issue each request at its trace timestamp divided by X (1: real time), still
    /// bounded by --queue-depth.
    #[arg(long, value_name = "X", conflicts_with = "closed")]
    pub speed: Option<f64>,
    /// Closed loop: keep --queue-depth requests in flight, ignoring timestamps [default].
    #[arg(long)]
    pub closed: bool,
    /// Check every read against what this run last wrote; exit non-zero on a mismatch.
    #[arg(long)]
    pub verify: bool,
    /// Replay at most N trace records.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// Count and skip malformed trace lines instead of stopping.
    #[arg(long)]
    pub skip_bad: bool,
    /// Bytes per block id for blockid, cloudphysics and arc-lis traces.
    #[arg(long, default_value = tiercache_simulate::DEFAULT_TRACE_BLOCK)]
    pub block_size: String,
    /// Only this volume/LUN/disk of a multi-volume trace.
    #[arg(long)]
    pub volume: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

// ---------------------------------------------------------------------------
// Request mapping

/// What a trace record becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapped {
    Io { op: Op, offset: u64, len: u64 },
    Flush,
    TooLarge,
    ZeroLength,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Trim,
}

/// Map a record into an export of `usable` bytes (a multiple of 512).
pub fn map_record(kind: IoKind, offset: u64, len: u64, usable: u64) -> Mapped {
    let op = match kind {
        IoKind::Read => Op::Read,
        IoKind::Write => Op::Write,
        IoKind::Trim => Op::Trim,
        IoKind::Flush => return Mapped::Flush,
    };
    if len == 0 {
        return Mapped::ZeroLength;
    }
    if len > usable {
        return Mapped::TooLarge;
    }
    let off = (offset % usable) / SECTOR * SECTOR;
    let len = len
        .div_ceil(SECTOR)
        .saturating_mul(SECTOR)
        .min(MAX_REQUEST)
        .min(usable - off);
    Mapped::Io {
        op,
        offset: off,
        len,
    }
}

// ---------------------------------------------------------------------------
// Verification pattern

const MAGIC: &[u8; 8] = b"TCRPLAY1";

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fill one 512-byte sector at byte offset `at` with version `version` of run `run`.
pub fn fill_sector(buf: &mut [u8], at: u64, version: u64, run: u64) {
    buf[0..8].copy_from_slice(MAGIC);
    buf[8..16].copy_from_slice(&at.to_le_bytes());
    buf[16..24].copy_from_slice(&version.to_le_bytes());
    buf[24..32].copy_from_slice(&run.to_le_bytes());
    let mut x = mix(at ^ version.rotate_left(32) ^ run);
    for w in buf[32..508].chunks_mut(8) {
        x = mix(x);
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
    let crc = crc32c::crc32c(&buf[..508]);
    buf[508..512].copy_from_slice(&crc.to_le_bytes());
}

/// Check one sector read at byte offset `at` against `version` of run `run`.
pub fn check_sector(buf: &[u8], at: u64, version: u64, run: u64) -> Result<(), String> {
    let u = |r: std::ops::Range<usize>| u64::from_le_bytes(buf[r].try_into().expect("8 bytes"));
    if &buf[0..8] != MAGIC {
        return Err(if buf.iter().all(|&b| b == 0) {
            "all zeros (the write was lost)".into()
        } else {
            "no replay pattern (foreign or corrupted data)".into()
        });
    }
    let crc = u32::from_le_bytes(buf[508..512].try_into().expect("4 bytes"));
    if crc32c::crc32c(&buf[..508]) != crc {
        return Err("checksum mismatch (corrupted sector)".into());
    }
    if u(8..16) != at {
        return Err(format!(
            "holds the sector of offset {} (misdirected)",
            u(8..16)
        ));
    }
    if u(24..32) != run {
        return Err("written by another run (the write was lost)".into());
    }
    if u(16..24) != version {
        return Err(format!(
            "holds version {} instead of {version} (stale or lost write)",
            u(16..24)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Report

#[derive(Debug, Default, serde::Serialize)]
pub struct Latency {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p99_9: u64,
    pub max: u64,
    pub mean: f64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Skipped {
    pub total: u64,
    pub too_large: u64,
    pub zero_length: u64,
    /// TRIM/FLUSH the server does not advertise, writes to a read-only export.
    pub unsupported: u64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Verify {
    pub enabled: bool,
    /// Reads with at least one sector checked.
    pub verified_reads: u64,
    pub verified_sectors: u64,
    /// Sectors read that this run never wrote (not checked).
    pub unchecked_sectors: u64,
    /// Sectors that did not hold what this run last wrote.
    pub mismatches: u64,
    pub mismatched_reads: u64,
    /// Requests held back because they overlapped an in-flight write.
    pub ordering_waits: u64,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub trace: String,
    pub format: String,
    pub uri: String,
    pub export_size: u64,
    /// "closed" or "open".
    pub mode: String,
    pub speed: Option<f64>,
    pub queue_depth: u32,
    /// Open loop: requests that found the queue-depth bound reached when due.
    pub queue_full: u64,
    pub records: u64,
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub trims: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub elapsed_s: f64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub latency_us: Latency,
    pub skipped: Skipped,
    /// Requests the server failed (NBD error replies).
    pub errors: u64,
    pub verify: Verify,
}

// ---------------------------------------------------------------------------
// Replay

struct Inflight {
    op: Option<Op>,
    offset: u64,
    len: u64,
    t0: Instant,
}

type Completion = std::io::Result<(Reply, Instant)>;

struct Run {
    tx: nbd::Sender,
    rx: mpsc::Receiver<Completion>,
    inflight: HashMap<u64, Inflight>,
    /// Version this run last wrote in each sector (verify only).
    written: HashMap<u64, u64>,
    verify: bool,
    run_id: u64,
    version: u64,
    hist: Histogram<u64>,
    rep: Report,
    first_error: Option<String>,
    buf: Vec<u8>,
}

impl Run {
    fn complete(&mut self, c: Completion) -> Result<()> {
        let (reply, t) = c.context("connection to the NBD server lost")?;
        let Some(inf) = self.inflight.remove(&reply.cookie) else {
            bail!("NBD server replied to unknown cookie {}", reply.cookie);
        };
        let us = t.saturating_duration_since(inf.t0).as_micros() as u64;
        self.hist.saturating_record(us.max(1));
        if reply.error != 0 {
            self.rep.errors += 1;
            if self.first_error.is_none() {
                self.first_error = Some(format!(
                    "{} of {} bytes at offset {} failed with NBD error {}",
                    match inf.op {
                        None => "FLUSH",
                        Some(Op::Read) => "READ",
                        Some(Op::Write) => "WRITE",
                        Some(Op::Trim) => "TRIM",
                    },
                    inf.len,
                    inf.offset,
                    reply.error
                ));
            }
            if self.verify && matches!(inf.op, Some(Op::Write | Op::Trim)) {
                for s in inf.offset / SECTOR..(inf.offset + inf.len) / SECTOR {
                    self.written.remove(&s);
                }
            }
            return Ok(());
        }
        if self.verify && inf.op == Some(Op::Read) {
            if reply.data.len() as u64 != inf.len {
                bail!(
                    "NBD server returned {} bytes for a read of {}",
                    reply.data.len(),
                    inf.len
                );
            }
            let (mut checked, mut bad) = (0, 0);
            for (i, sec) in reply.data.chunks_exact(SECTOR as usize).enumerate() {
                let at = inf.offset + i as u64 * SECTOR;
                let Some(&v) = self.written.get(&(at / SECTOR)) else {
                    self.rep.verify.unchecked_sectors += 1;
                    continue;
                };
                checked += 1;
                if let Err(why) = check_sector(sec, at, v, self.run_id) {
                    bad += 1;
                    if self.rep.verify.mismatches + bad <= SHOWN_MISMATCHES {
                        eprintln!("tiercache: mismatch: sector at byte offset {at}: {why}");
                    }
                }
            }
            self.rep.verify.verified_sectors += checked;
            self.rep.verify.mismatches += bad;
            if checked > 0 {
                self.rep.verify.verified_reads += 1;
            }
            if bad > 0 {
                self.rep.verify.mismatched_reads += 1;
            }
        }
        Ok(())
    }

    /// Wait for one completion (up to `until`, when given); false on timeout.
    fn wait_one(&mut self, until: Option<Instant>) -> Result<bool> {
        let c = match until {
            None => self
                .rx
                .recv()
                .context("connection to the NBD server lost")?,
            Some(u) => match self
                .rx
                .recv_timeout(u.saturating_duration_since(Instant::now()))
            {
                Ok(c) => c,
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(false),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    bail!("connection to the NBD server lost")
                }
            },
        };
        self.complete(c)?;
        Ok(true)
    }

    fn conflicts(&self, op: Op, offset: u64, len: u64) -> bool {
        self.inflight.values().any(|i| {
            let Some(iop) = i.op else { return false };
            (op != Op::Read || iop != Op::Read)
                && i.offset < offset + len
                && offset < i.offset + i.len
        })
    }

    fn issue(&mut self, op: Option<Op>, offset: u64, len: u64) -> Result<()> {
        let t0 = Instant::now();
        let cookie = match op {
            None => {
                self.rep.flushes += 1;
                self.tx.send_flush()
            }
            Some(Op::Read) => {
                self.rep.reads += 1;
                self.rep.bytes_read += len;
                self.tx.send_read(offset, len as u32)
            }
            Some(Op::Trim) => {
                self.rep.trims += 1;
                if self.verify {
                    for s in offset / SECTOR..(offset + len) / SECTOR {
                        self.written.remove(&s);
                    }
                }
                self.tx.send_trim(offset, len as u32)
            }
            Some(Op::Write) => {
                self.rep.writes += 1;
                self.rep.bytes_written += len;
                self.version += 1;
                self.buf.resize(len as usize, 0);
                for (i, sec) in self.buf.chunks_exact_mut(SECTOR as usize).enumerate() {
                    let at = offset + i as u64 * SECTOR;
                    fill_sector(sec, at, self.version, self.run_id);
                    if self.verify {
                        self.written.insert(at / SECTOR, self.version);
                    }
                }
                self.tx.send_write(offset, &self.buf, false)
            }
        }
        .context("sending to the NBD server")?;
        self.rep.requests += 1;
        self.inflight.insert(
            cookie,
            Inflight {
                op,
                offset,
                len,
                t0,
            },
        );
        Ok(())
    }
}

fn open_trace(a: &ReplayArgs) -> Result<tiercache_trace::TraceReader> {
    let format = a
        .format
        .as_deref()
        .map(|f| f.parse::<Format>())
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let bs = parse_bytes(&a.block_size).map_err(anyhow::Error::msg)?;
    let opts = ReadOptions {
        skip_bad: a.skip_bad,
        block_size: u32::try_from(bs).context("--block-size too large")?,
        volume: a.volume.clone(),
    };
    if !a.trace.exists() {
        bail!("trace {} does not exist", a.trace.display());
    }
    Ok(tiercache_trace::open(&a.trace, format, &opts)?)
}

pub fn run(a: ReplayArgs) -> Result<()> {
    let uri: Uri = a.uri.parse()?;
    if let Some(x) = a.speed {
        if !(x.is_finite() && x > 0.0) {
            bail!("--speed must be a positive number (1: the trace's real time), not {x}");
        }
    }
    let mut trace = open_trace(&a)?;
    let format = trace.format();
    // A trace that cannot be read fails before any load is sent.
    let first = match trace.next() {
        Some(Err(e)) => return Err(e.into()),
        first => first,
    };
    let mut records = first.into_iter().chain(&mut trace);
    let client = Client::connect(&uri)?;
    let (size, flags) = (client.size, client.flags);
    let usable = size / SECTOR * SECTOR;
    if usable == 0 {
        bail!("export {uri} is empty ({size} bytes)");
    }
    let (tx, mut rxh) = client.split();
    let (ctx, rx) = mpsc::channel::<Completion>();
    let reader = std::thread::spawn(move || loop {
        let r = rxh.recv().map(|rep| (rep, Instant::now()));
        let end = r.is_err();
        if ctx.send(r).is_err() || end {
            return;
        }
    });
    let run_id = mix(std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id()));
    let mut r = Run {
        tx,
        rx,
        inflight: HashMap::new(),
        written: HashMap::new(),
        verify: a.verify,
        run_id,
        version: 0,
        hist: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds"),
        rep: Report {
            trace: a.trace.display().to_string(),
            format: format.to_string(),
            uri: uri.to_string(),
            export_size: size,
            mode: if a.speed.is_some() { "open" } else { "closed" }.into(),
            speed: a.speed,
            queue_depth: a.queue_depth,
            ..Report::default()
        },
        first_error: None,
        buf: Vec::new(),
    };
    r.rep.verify.enabled = a.verify;
    let qd = a.queue_depth as usize;
    let mut bar = Progress::new("replaying", None);
    let start = Instant::now();
    let limit = a.limit.unwrap_or(u64::MAX);
    let result = (|| -> Result<()> {
        while r.rep.records < limit {
            let Some(rec) = records.next() else { break };
            let rec = rec?;
            r.rep.records += 1;
            if r.rep.records & 0xff == 0 {
                bar.set(r.rep.records);
            }
            let (op, offset, len) =
                match map_record(rec.kind, rec.offset, u64::from(rec.len), usable) {
                    Mapped::TooLarge => {
                        r.rep.skipped.too_large += 1;
                        continue;
                    }
                    Mapped::ZeroLength => {
                        r.rep.skipped.zero_length += 1;
                        continue;
                    }
                    Mapped::Flush => (None, 0, 0),
                    Mapped::Io { op, offset, len } => (Some(op), offset, len),
                };
            let supported = match op {
                None => flags & nbd::TFLAG_SEND_FLUSH != 0,
                Some(Op::Trim) => flags & nbd::TFLAG_SEND_TRIM != 0,
                Some(Op::Write) => flags & nbd::TFLAG_READ_ONLY == 0,
                Some(Op::Read) => true,
            };
            if !supported {
                r.rep.skipped.unsupported += 1;
                continue;
            }
            if let Some(x) = a.speed {
                let due = start + Duration::from_secs_f64(rec.time_ns as f64 / 1e9 / x);
                while Instant::now() < due {
                    if r.inflight.is_empty() {
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    } else {
                        r.wait_one(Some(due))?;
                    }
                }
                if r.inflight.len() >= qd {
                    r.rep.queue_full += 1;
                }
            }
            while r.inflight.len() >= qd {
                r.wait_one(None)?;
            }
            if let (true, Some(o)) = (a.verify, op) {
                if r.conflicts(o, offset, len) {
                    r.rep.verify.ordering_waits += 1;
                    while r.conflicts(o, offset, len) {
                        r.wait_one(None)?;
                    }
                }
            }
            r.issue(op, offset, len)?;
        }
        while !r.inflight.is_empty() {
            r.wait_one(None)?;
        }
        Ok(())
    })();
    let elapsed = start.elapsed().as_secs_f64();
    bar.finish();
    r.tx.disconnect();
    let _ = reader.join();
    result?;
    let rep = &mut r.rep;
    rep.skipped.total = rep.skipped.too_large + rep.skipped.zero_length + rep.skipped.unsupported;
    rep.elapsed_s = elapsed;
    let secs = elapsed.max(1e-9);
    rep.iops = rep.requests as f64 / secs;
    rep.mb_per_s = (rep.bytes_read + rep.bytes_written) as f64 / secs / 1e6;
    if !r.hist.is_empty() {
        rep.latency_us = Latency {
            p50: r.hist.value_at_quantile(0.5),
            p90: r.hist.value_at_quantile(0.9),
            p99: r.hist.value_at_quantile(0.99),
            p99_9: r.hist.value_at_quantile(0.999),
            max: r.hist.max(),
            mean: r.hist.mean(),
        };
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_text(rep);
    }
    if let Some(e) = &r.first_error {
        eprintln!("tiercache: first failed request: {e}");
    }
    match (rep.verify.mismatches, rep.errors) {
        (0, 0) => Ok(()),
        (m, 0) => bail!(
            "--verify: {m} sectors in {} reads did not hold what this run wrote",
            rep.verify.mismatched_reads
        ),
        (0, e) => bail!("the NBD server failed {e} requests"),
        (m, e) => bail!("the NBD server failed {e} requests, and {m} sectors read did not hold what this run wrote"),
    }
}

fn print_text(r: &Report) {
    println!("replay {} ({}) -> {}", r.trace, r.format, r.uri);
    println!("  export            {:>14}", format_bytes(r.export_size));
    match r.speed {
        Some(x) => println!(
            "  mode              open loop at {x}x, queue depth {} (bound hit by {} requests)",
            r.queue_depth, r.queue_full
        ),
        None => println!(
            "  mode              closed loop, queue depth {}",
            r.queue_depth
        ),
    }
    println!(
        "  requests          {:>14}   reads {}, writes {}, trims {}, flushes {}",
        r.requests, r.reads, r.writes, r.trims, r.flushes
    );
    println!("  bytes read        {:>14}", format_bytes(r.bytes_read));
    println!("  bytes written     {:>14}", format_bytes(r.bytes_written));
    println!("  elapsed           {:>12.3} s", r.elapsed_s);
    println!("  IOPS              {:>14.1}", r.iops);
    println!("  throughput        {:>9.2} MB/s", r.mb_per_s);
    let l = &r.latency_us;
    println!(
        "  latency (us)      p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        l.p50, l.p90, l.p99, l.p99_9, l.max
    );
    println!(
        "  skipped           {:>14}   too large {}, zero length {}, unsupported by the server {}",
        r.skipped.total, r.skipped.too_large, r.skipped.zero_length, r.skipped.unsupported
    );
    println!("  NBD errors        {:>14}", r.errors);
    let v = &r.verify;
    if v.enabled {
        println!(
            "  verified reads    {:>14}   {} sectors checked, {} never written by this run",
            v.verified_reads, v.verified_sectors, v.unchecked_sectors
        );
        println!(
            "  mismatches        {:>14}   sectors (in {} reads); {} requests waited for overlapping writes",
            v.mismatches, v.mismatched_reads, v.ordering_waits
        );
    } else {
        println!("  verify                       off   (--verify to check reads)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping() {
        let g = 1 << 30;
        assert_eq!(
            map_record(IoKind::Read, g + 1000, 100, g),
            Mapped::Io {
                op: Op::Read,
                offset: 512,
                len: 512
            }
        );
        assert_eq!(
            map_record(IoKind::Write, g - 512, 4096, g),
            Mapped::Io {
                op: Op::Write,
                offset: g - 512,
                len: 512
            }
        );
        assert_eq!(
            map_record(IoKind::Write, 0, 64 << 20, g),
            Mapped::Io {
                op: Op::Write,
                offset: 0,
                len: MAX_REQUEST
            }
        );
        assert_eq!(map_record(IoKind::Read, 0, g + 1, g), Mapped::TooLarge);
        assert_eq!(map_record(IoKind::Read, 0, 0, g), Mapped::ZeroLength);
        assert_eq!(map_record(IoKind::Flush, 0, 0, g), Mapped::Flush);
    }

    #[test]
    fn pattern_detects_corruption() {
        let mut s = vec![0u8; 512];
        fill_sector(&mut s, 4096, 7, 99);
        assert_eq!(check_sector(&s, 4096, 7, 99), Ok(()));
        assert!(check_sector(&s, 4096, 8, 99).is_err());
        assert!(check_sector(&s, 4608, 7, 99).is_err());
        assert!(check_sector(&s, 4096, 7, 98).is_err());
        for bit in [0usize, 100, 300 * 8 + 3, 511 * 8 + 7] {
            let mut c = s.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(check_sector(&c, 4096, 7, 99).is_err(), "bit {bit}");
        }
        assert!(check_sector(&[0u8; 512], 4096, 7, 99).is_err());
    }
}
