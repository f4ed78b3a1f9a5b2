//! A wrapper emulating a volatile write cache that can lose power.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::{check_range, Access, BlockDev, RawTarget};

/// Unit of tearing in [`CrashMode::Torn`]: a 512-byte sector.
const SECTOR: u64 = 512;

/// What survives a [`CrashDev::crash`] of the writes and trims since the
/// last flush ("unflushed ops", in the order they were issued).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unflushed op is lost.
    DropAll,
    /// The first `n` unflushed ops reached the media, the rest are lost
    /// (a cache that destages in order).
    KeepFirst(usize),
    /// Each 512-byte sector (aligned to multiples of 512 on the device) of
    /// each unflushed write independently reached the media or not, with
    /// probability 1/2 from an RNG seeded with `seed`; each unflushed trim
    /// likewise, as a whole. Surviving parts are applied in issue order, so
    /// every sector ends up holding its flushed contents or one of its
    /// unflushed versions, never a mix within a sector.
    Torn { seed: u64 },
}

/// What a crash did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unflushed writes and trims at the time of the crash.
    pub unflushed_ops: usize,
    /// Sectors (or trims) that reached the media.
    pub pieces_kept: u64,
    /// Sectors (or trims) that were lost.
    pub pieces_lost: u64,
}

#[derive(Clone, Debug)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    Trim { offset: u64, len: u64 },
}

/// A [`BlockDev`] wrapper that emulates a volatile write cache in front of
/// `inner` (the "media"), for crash tests.
///
/// Writes and trims are held in memory, in order, and are visible to reads
/// at once; [`BlockDev::flush`] applies them to the inner device in order
/// and flushes it. FUA writes flush everything (stronger than FUA, which
/// only covers its own data). [`CrashDev::crash`] emulates a power loss:
/// the unflushed ops are dropped or torn as [`CrashMode`] says, and the
/// device carries on from what reached the media, as after a reboot.
/// Reads of a range with an unflushed trim return zeros. Every op takes one
/// lock: this is a test tool, not a fast path.
pub struct CrashDev {
    inner: Arc<dyn BlockDev>,
    name: String,
    pending: Mutex<Vec<Pending>>,
}

impl CrashDev {
    /// Wrap `inner`, which holds what is on the media.
    pub fn new(inner: Arc<dyn BlockDev>) -> CrashDev {
        let name = format!("crash({})", inner.name());
        CrashDev {
            inner,
            name,
            pending: Mutex::new(Vec::new()),
        }
    }

    /// Number of writes and trims since the last flush.
    pub fn unflushed_ops(&self) -> usize {
        self.lock().len()
    }

    /// Lose power: apply the part of the unflushed ops that `mode` keeps to
    /// the inner device (without flushing it), forget the rest.
    pub fn crash(&self, mode: CrashMode) -> io::Result<CrashReport> {
        let mut pending = self.lock();
        let ops = std::mem::take(&mut *pending);
        let mut report = CrashReport {
            unflushed_ops: ops.len(),
            ..CrashReport::default()
        };
        match mode {
            CrashMode::DropAll => report.pieces_lost = ops.len() as u64,
            CrashMode::KeepFirst(n) => {
                let n = n.min(ops.len());
                for op in &ops[..n] {
                    self.apply(op)?;
                }
                report.pieces_kept = n as u64;
                report.pieces_lost = (ops.len() - n) as u64;
            }
            CrashMode::Torn { seed } => {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
                for op in &ops {
                    match op {
                        Pending::Trim { .. } => {
                            if rng.random::<bool>() {
                                self.apply(op)?;
                                report.pieces_kept += 1;
                            } else {
                                report.pieces_lost += 1;
                            }
                        }
                        Pending::Write { offset, data } => {
                            let end = offset + data.len() as u64;
                            let mut at = *offset;
                            while at < end {
                                let next = ((at / SECTOR + 1) * SECTOR).min(end);
                                if rng.random::<bool>() {
                                    let piece =
                                        &data[(at - offset) as usize..(next - offset) as usize];
                                    self.inner.write_at(piece, at)?;
                                    report.pieces_kept += 1;
                                } else {
                                    report.pieces_lost += 1;
                                }
                                at = next;
                            }
                        }
                    }
                }
            }
        }
        Ok(report)
    }

    /// The wrapped device (the media).
    pub fn inner(&self) -> &Arc<dyn BlockDev> {
        &self.inner
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn apply(&self, op: &Pending) -> io::Result<()> {
        match op {
            Pending::Write { offset, data } => self.inner.write_at(data, *offset),
            Pending::Trim { offset, len } => self.inner.trim(*offset, *len),
        }
    }
}

/// Overlay `op` on `buf`, which holds the bytes at `buf_off..`.
fn overlay(buf: &mut [u8], buf_off: u64, op: &Pending) {
    let buf_end = buf_off + buf.len() as u64;
    let (off, len) = match op {
        Pending::Write { offset, data } => (*offset, data.len() as u64),
        Pending::Trim { offset, len } => (*offset, *len),
    };
    let start = off.max(buf_off);
    let end = (off + len).min(buf_end);
    if start >= end {
        return;
    }
    let dst = &mut buf[(start - buf_off) as usize..(end - buf_off) as usize];
    match op {
        Pending::Write { data, .. } => {
            dst.copy_from_slice(&data[(start - off) as usize..(end - off) as usize])
        }
        Pending::Trim { .. } => dst.fill(0),
    }
}

impl BlockDev for CrashDev {
    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let pending = self.lock();
        self.inner.read_at(buf, offset)?;
        for op in pending.iter() {
            overlay(buf, offset, op);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(
            &self.name,
            self.len(),
            Access::Write,
            offset,
            buf.len() as u64,
        )?;
        if !buf.is_empty() {
            self.lock().push(Pending::Write {
                offset,
                data: buf.to_vec(),
            });
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut pending = self.lock();
        for (i, op) in pending.iter().enumerate() {
            if let Err(e) = self.apply(op) {
                pending.drain(..i);
                return Err(e);
            }
        }
        pending.clear();
        self.inner.flush()
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, self.len(), Access::Trim, offset, len)?;
        if len > 0 {
            self.lock().push(Pending::Trim { offset, len });
        }
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_target(&self) -> Option<RawTarget> {
        None
    }
}
