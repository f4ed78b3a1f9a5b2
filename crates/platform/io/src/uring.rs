//! An io_uring engine: one ring, driven by one thread, for files and block
//! devices; everything else goes to a small thread pool.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};
use io_uring::{opcode, squeue, types, IoUring, Probe};
use rustix::event::{eventfd, EventfdFlags};
use rustix::io::{Errno, ReadWriteFlags};
use slab::Slab;

use crate::engine::{aborted, Admission, Completion, Engine, IoOp, RunFuture};
use crate::{AlignedBuf, BlockDev, PoolEngine, RawTarget};

/// `user_data` of the eventfd read that wakes the ring thread.
const WAKE: u64 = u64::MAX;
/// Largest single op sent to the ring (the SQE length field is 32 bits).
const MAX_NATIVE: usize = 1 << 30;

/// An [`Engine`] on Linux io_uring.
///
/// Reads, writes (FUA as `RWF_DSYNC`) and flushes (`fdatasync`) of devices
/// that expose a [`RawTarget`] ([`crate::FileDev`]) go to one ring with up to
/// `entries - 1` ops in flight, submitted and reaped by a dedicated thread;
/// on an `O_DIRECT` device, ops whose offset and length are aligned use a
/// page-aligned buffer and bypass the page cache. A device that submits
/// asynchronously itself (a remote [`crate::NbdDev`], see
/// [`BlockDev::submit`]) gets its ops directly. Trims, unaligned ops on
/// `O_DIRECT` devices and other devices without a raw descriptor (wrappers
/// such as [`crate::FaultyDev`]) run on an internal [`PoolEngine`].
///
/// io_uring may be missing or forbidden (old kernels, seccomp filters in
/// containers, `kernel.io_uring_disabled`): [`UringEngine::new`] then fails
/// with [`io::ErrorKind::Unsupported`] and a message; use [`PoolEngine`].
pub struct UringEngine {
    tx: Option<Sender<Job>>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
    fallback: PoolEngine,
    admission: Admission,
    ring_ops: AtomicU64,
    fallback_ops: AtomicU64,
    device_ops: AtomicU64,
}

/// How many ops a [`UringEngine`] sent where.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UringStats {
    /// Ops submitted to the ring.
    pub ring_ops: u64,
    /// Ops run on the fallback thread pool.
    pub fallback_ops: u64,
    /// Ops the device submitted asynchronously itself ([`BlockDev::submit`]).
    pub device_ops: u64,
}

impl UringEngine {
    /// Check that io_uring can be used here (ring setup and the read, write
    /// and fsync opcodes). The error says why not.
    pub fn probe() -> io::Result<()> {
        let ring = IoUring::new(4).map_err(unavailable)?;
        let mut probe = Probe::new();
        ring.submitter()
            .register_probe(&mut probe)
            .map_err(unavailable)?;
        for (code, name) in [
            (opcode::Read::CODE, "READ"),
            (opcode::Write::CODE, "WRITE"),
            (opcode::Fsync::CODE, "FSYNC"),
        ] {
            if !probe.is_supported(code) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "io_uring is unavailable: the kernel lacks IORING_OP_{name} \
                         (needs Linux 5.6 or later); use the thread-pool engine"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Start an engine with a ring of `entries` slots (2..=4096, rounded up
    /// to a power of two by the kernel) and `fallback_threads` pool threads
    /// (1..=1024) for ops the ring does not take.
    pub fn new(entries: u32, fallback_threads: usize) -> io::Result<UringEngine> {
        if !(2..=4096).contains(&entries) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("io_uring engine: {entries} ring entries requested; allowed: 2..=4096"),
            ));
        }
        UringEngine::probe()?;
        let ring = IoUring::new(entries).map_err(unavailable)?;
        let slots = ring.params().sq_entries() as usize;
        let fallback = PoolEngine::new(fallback_threads, slots)?;
        let wake = Arc::new(eventfd(0, EventfdFlags::CLOEXEC)?);
        let (tx, rx) = bounded::<Job>(slots);
        let ring_wake = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("tiercache-uring".into())
            .spawn(move || ring_loop(ring, rx, ring_wake, slots - 1))?;
        Ok(UringEngine {
            tx: Some(tx),
            wake,
            thread: Some(thread),
            fallback,
            admission: Admission::new(slots),
            ring_ops: AtomicU64::new(0),
            fallback_ops: AtomicU64::new(0),
            device_ops: AtomicU64::new(0),
        })
    }

    /// Where ops went so far.
    pub fn stats(&self) -> UringStats {
        UringStats {
            ring_ops: self.ring_ops.load(Ordering::Relaxed),
            fallback_ops: self.fallback_ops.load(Ordering::Relaxed),
            device_ops: self.device_ops.load(Ordering::Relaxed),
        }
    }

    fn kick(&self) {
        // A full counter (never in practice) still wakes the reader.
        let _ = rustix::io::write(&*self.wake, &1u64.to_ne_bytes());
    }
}

fn unavailable(e: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("io_uring is unavailable ({e}); use the thread-pool engine"),
    )
}

/// What the ring does for one op.
enum Kind {
    Read,
    Write { fua: bool },
    Flush,
}

/// Bytes of an op in flight; their address stays put while the kernel uses it.
enum Buf {
    Vec(Vec<u8>),
    Aligned(AlignedBuf),
    None,
}

impl Buf {
    fn len(&self) -> usize {
        match self {
            Buf::Vec(v) => v.len(),
            Buf::Aligned(a) => a.len(),
            Buf::None => 0,
        }
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            Buf::Vec(v) => v.as_mut_ptr(),
            Buf::Aligned(a) => a.as_mut_ptr(),
            Buf::None => std::ptr::null_mut(),
        }
    }
    fn into_vec(self) -> Vec<u8> {
        match self {
            Buf::Vec(v) => v,
            Buf::Aligned(a) => a.to_vec(),
            Buf::None => Vec::new(),
        }
    }
}

/// An op on its way to, or in, the ring.
struct Job {
    /// Keeps the descriptor open while the kernel uses it.
    _dev: Arc<dyn BlockDev>,
    fd: RawFd,
    kind: Kind,
    offset: u64,
    buf: Buf,
    /// Bytes done so far (short transfers are resubmitted).
    pos: usize,
    done: Completion,
}

/// The ring's form of `op`, or `None` if the fallback pool must run it.
fn native(dev: &Arc<dyn BlockDev>, op: &IoOp) -> io::Result<Option<(RawFd, Kind, u64, Buf)>> {
    let Some(RawTarget {
        fd, direct_align, ..
    }) = dev.raw_target()
    else {
        return Ok(None);
    };
    let fits = |offset: u64, len: usize| {
        len > 0
            && len <= MAX_NATIVE
            && offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= dev.len())
            && direct_align.is_none_or(|a| offset.is_multiple_of(a as u64) && len.is_multiple_of(a))
    };
    let page = direct_align.map(|a| a.max(4096));
    Ok(match op {
        IoOp::Read { offset, len } if fits(*offset, *len) => {
            let buf = match page {
                Some(p) => Buf::Aligned(AlignedBuf::zeroed(*len, p)?),
                None => Buf::Vec(vec![0; *len]),
            };
            Some((fd, Kind::Read, *offset, buf))
        }
        IoOp::Write { offset, data, fua } if fits(*offset, data.len()) => {
            let buf = match page {
                Some(p) => {
                    let mut a = AlignedBuf::zeroed(data.len(), p)?;
                    a.copy_from_slice(data);
                    Buf::Aligned(a)
                }
                None => Buf::Vec(data.clone()),
            };
            Some((fd, Kind::Write { fua: *fua }, *offset, buf))
        }
        IoOp::Flush => Some((fd, Kind::Flush, 0, Buf::None)),
        _ => None,
    })
}

impl Engine for UringEngine {
    fn submit(&self, dev: &Arc<dyn BlockDev>, op: IoOp, done: Completion) {
        let (op, done) = match dev.submit(op, done) {
            Ok(()) => {
                self.device_ops.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(back) => back,
        };
        let (fd, kind, offset, buf) = match native(dev, &op) {
            Ok(Some(n)) => n,
            Ok(None) => {
                self.fallback_ops.fetch_add(1, Ordering::Relaxed);
                return self.fallback.submit(dev, op, done);
            }
            Err(e) => return done(Err(e)),
        };
        let job = Job {
            _dev: Arc::clone(dev),
            fd,
            kind,
            offset,
            buf,
            pos: 0,
            done,
        };
        match &self.tx {
            Some(tx) => match tx.send(job) {
                Ok(()) => {
                    self.ring_ops.fetch_add(1, Ordering::Relaxed);
                    self.kick();
                }
                Err(e) => (e.into_inner().done)(Err(aborted())),
            },
            None => (job.done)(Err(aborted())),
        }
    }

    fn run<'a>(&'a self, dev: &Arc<dyn BlockDev>, op: IoOp) -> RunFuture<'a> {
        self.admission.run(self, dev, op)
    }

    fn name(&self) -> &str {
        "io_uring"
    }
}

impl Drop for UringEngine {
    /// Finish every submitted op, then stop the ring thread.
    fn drop(&mut self) {
        self.tx = None;
        self.kick();
        if let Some(t) = self.thread.take() {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// The SQE for the remaining part of `job`.
fn sqe(job: &mut Job, key: usize) -> squeue::Entry {
    let fd = types::Fd(job.fd);
    let remaining = (job.buf.len() - job.pos) as u32;
    let offset = job.offset + job.pos as u64;
    // SAFETY (pointer arithmetic): pos <= len of the buffer.
    let ptr = if job.buf.len() == 0 {
        job.buf.as_mut_ptr()
    } else {
        unsafe { job.buf.as_mut_ptr().add(job.pos) }
    };
    let entry = match job.kind {
        Kind::Read => opcode::Read::new(fd, ptr, remaining).offset(offset).build(),
        Kind::Write { fua } => {
            let flags = if fua {
                ReadWriteFlags::DSYNC.bits() as i32
            } else {
                0
            };
            opcode::Write::new(fd, ptr, remaining)
                .offset(offset)
                .rw_flags(flags)
                .build()
        }
        Kind::Flush => opcode::Fsync::new(fd)
            .flags(types::FsyncFlags::DATASYNC)
            .build(),
    };
    entry.user_data(key as u64)
}

/// Queue an SQE, submitting queued ones first if the queue is full.
fn push(ring: &mut IoUring, entry: &squeue::Entry) {
    loop {
        // SAFETY: every buffer an SQE points to lives in the in-flight slab
        // (or the wake buffer) until its completion is reaped.
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return;
        }
        if let Err(e) = ring.submit() {
            tracing::warn!("io_uring submit failed: {e}; retrying");
            std::thread::yield_now();
        }
    }
}

fn ring_loop(mut ring: IoUring, rx: Receiver<Job>, wake: Arc<OwnedFd>, max_inflight: usize) {
    let mut inflight: Slab<Job> = Slab::with_capacity(max_inflight);
    let mut wake_buf = Box::new([0u8; 8]);
    let mut wake_armed = false;
    let mut closed = false;
    let mut reaped: Vec<(u64, i32)> = Vec::with_capacity(max_inflight + 1);
    loop {
        while !closed && inflight.len() < max_inflight {
            match rx.try_recv() {
                Ok(job) => {
                    let entry = inflight.vacant_entry();
                    let key = entry.key();
                    let job = entry.insert(job);
                    let sqe = sqe(job, key);
                    push(&mut ring, &sqe);
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    closed = true;
                    // The shutdown kick may have been consumed by an earlier
                    // wake read; complete the armed one ourselves.
                    if wake_armed {
                        let _ = rustix::io::write(&*wake, &1u64.to_ne_bytes());
                    }
                }
            }
        }
        if !closed && !wake_armed {
            let sqe = opcode::Read::new(types::Fd(wake.as_raw_fd()), wake_buf.as_mut_ptr(), 8)
                .build()
                .user_data(WAKE);
            push(&mut ring, &sqe);
            wake_armed = true;
        }
        if inflight.is_empty() && !wake_armed {
            return; // closed and drained
        }
        if let Err(e) = ring.submit_and_wait(1) {
            let code = e.raw_os_error();
            if code != Some(Errno::INTR.raw_os_error()) && code != Some(Errno::BUSY.raw_os_error())
            {
                tracing::warn!("io_uring wait failed: {e}; retrying");
                std::thread::yield_now();
            }
        }
        reaped.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        for (user_data, res) in reaped.drain(..) {
            if user_data == WAKE {
                wake_armed = false;
                continue;
            }
            complete(&mut ring, &mut inflight, user_data as usize, res);
        }
    }
}

/// Handle one completion: finish the op, or resubmit its remainder.
fn complete(ring: &mut IoUring, inflight: &mut Slab<Job>, key: usize, res: i32) {
    let Some(job) = inflight.get_mut(key) else {
        tracing::error!("io_uring completion for unknown op {key}");
        return;
    };
    let outcome = if res < 0 {
        let errno = -res;
        if errno == Errno::INTR.raw_os_error() || errno == Errno::AGAIN.raw_os_error() {
            let sqe = sqe(job, key);
            push(ring, &sqe);
            return;
        }
        Err(io::Error::from_raw_os_error(errno))
    } else {
        match job.kind {
            Kind::Flush => Ok(()),
            Kind::Read | Kind::Write { .. } if res == 0 => Err(match job.kind {
                Kind::Read => io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "read hit the end of the file at offset {}",
                        job.offset + job.pos as u64
                    ),
                ),
                _ => io::Error::new(io::ErrorKind::WriteZero, "the device accepted no bytes"),
            }),
            Kind::Read | Kind::Write { .. } => {
                job.pos += res as usize;
                if job.pos < job.buf.len() {
                    let sqe = sqe(job, key);
                    push(ring, &sqe);
                    return;
                }
                Ok(())
            }
        }
    };
    let job = inflight.remove(key);
    let result = outcome.map(|()| match job.kind {
        Kind::Read => job.buf.into_vec(),
        _ => Vec::new(),
    });
    let done = job.done;
    if catch_unwind(AssertUnwindSafe(move || done(result))).is_err() {
        tracing::error!("an I/O completion callback panicked");
    }
}
