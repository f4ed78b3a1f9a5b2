//! Device I/O for the tiercache live server.
//!
//! The policy core (`tiercache-azor-policy`) decides *which* device operations to
//! run; this crate runs them on real files and block devices.
//!
//! - [`BlockDev`]: one device (file or block device) with positional, full
//!   reads and writes, flush, FUA writes and trim.
//! - [`FileDev`]: the real thing, `pread`/`pwrite` on a file or block device,
//!   optionally with `O_DIRECT` (aligned bounce buffers, read-modify-write of
//!   unaligned edges; falls back to buffered I/O with a log line when the
//!   file system refuses it).
//! - [`MemDev`]: a device in memory (tests, reference models).
//! - [`Engine`]: runs many operations concurrently and completes them out of
//!   order, with a callback ([`Engine::submit`]) or a future
//!   ([`Engine::run`], for the tokio-based NBD server).
//!   [`PoolEngine`] is a portable thread pool, [`UringEngine`] uses io_uring
//!   for files and block devices and the pool for everything else. Both
//!   hand an op to a device that submits asynchronously itself
//!   ([`BlockDev::submit`]: a remote [`NbdDev`], many requests in flight).
//! - Test and emulation wrappers: [`FaultyDev`] injects EIO errors,
//!   [`CrashDev`] emulates a volatile write cache that loses unflushed writes
//!   on a crash, [`EmulatedHdd`] delays every operation as the HDD model of
//!   `tiercache-model` predicts.
//!
//! From async code (the NBD server):
//!
//! ```
//! # async fn serve(dev: std::sync::Arc<dyn tiercache_io::BlockDev>) -> std::io::Result<()> {
//! use tiercache_io::{auto_engine, IoOp};
//! let engine = auto_engine(256, 4)?; // io_uring if available, else threads
//! let data = engine.run(&dev, IoOp::Read { offset: 0, len: 4096 }).await?;
//! engine.run(&dev, IoOp::Write { offset: 0, data, fua: true }).await?;
//! # Ok(()) }
//! ```
//!
//! From plain threads:
//!
//! ```
//! use std::sync::Arc;
//! use tiercache_io::{BlockDev, Engine, IoOp, MemDev, PoolEngine};
//!
//! let dev: Arc<dyn BlockDev> = Arc::new(MemDev::new("example", 1 << 20));
//! let engine = PoolEngine::new(2, 64)?;
//! engine.run_blocking(&dev, IoOp::Write { offset: 100, data: b"hello".to_vec(), fua: false })?;
//! let data = engine.run_blocking(&dev, IoOp::Read { offset: 100, len: 5 })?;
//! assert_eq!(data, b"hello");
//! # Ok::<(), std::io::Error>(())
//! ```

mod aligned;
mod crash;
mod emulated_hdd;
mod engine;
mod errors;
mod faulty;
mod file;
mod mem;
mod nbd;
mod pool;
mod uring;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

pub use aligned::AlignedBuf;
pub use crash::{CrashDev, CrashMode, CrashReport};
pub use emulated_hdd::EmulatedHdd;
pub use engine::{Completion, Engine, IoOp, RunFuture};
pub use errors::{role_label, CountErrors, DeviceErrors, IoErrors, ROLES};
pub use faulty::{FaultCounts, FaultRule, FaultyDev, OpKinds};
pub use file::{FileDev, FileDevOptions};
pub use mem::MemDev;
pub use nbd::{
    is_nbd_uri, nbd_defaults, set_nbd_defaults, NbdDev, NbdOptions, RemoteState, RemoteStatus,
    DEFAULT_MAX_IN_FLIGHT as NBD_MAX_IN_FLIGHT, MAX_REQUEST as NBD_MAX_REQUEST,
};
pub use pool::PoolEngine;
pub use uring::{UringEngine, UringStats};

/// Open the file or block device at `path` as the design's `what` (the
/// role goes into the error, e.g. "opening the backing device /dev/sdb: ...").
/// The checks every design's devices pass, by `serve` and `format` alike:
/// a regular file or block device (not a character device such as
/// `/dev/null`), opened read-write (not on a read-only file system), not empty.
/// An NBD URI (`nbd://HOST[:PORT]/EXPORT`, `nbd+unix:///EXPORT?socket=PATH`)
/// opens an [`NbdDev`] with the options of [`nbd_defaults`].
pub fn open_device(
    path: &std::path::Path,
    direct: bool,
    what: &str,
) -> io::Result<Arc<dyn BlockDev>> {
    if let Some(uri) = path.to_str().filter(|s| is_nbd_uri(s)) {
        return match NbdDev::open(uri, nbd_defaults()) {
            Ok(d) => Ok(Arc::new(d)),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("opening the {what} {uri}: {e}"),
            )),
        };
    }
    let o = FileDevOptions {
        direct,
        ..Default::default()
    };
    match FileDev::open(path, o) {
        Ok(d) if d.is_empty() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the {what} {} is empty (0 bytes)", path.display()),
        )),
        Ok(d) => Ok(Arc::new(d)),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("opening the {what} {}: {e}", path.display()),
        )),
    }
}

/// The name a design records for the device at `path`: an NBD URI as
/// given, a local path made canonical (it must exist).
pub fn canonical_device(path: &std::path::Path) -> io::Result<std::path::PathBuf> {
    if path.to_str().is_some_and(is_nbd_uri) {
        return Ok(path.to_path_buf());
    }
    std::fs::canonicalize(path)
        .map_err(|e| io::Error::new(e.kind(), format!("resolving {}: {e}", path.display())))
}

/// Whether `path` exists: a local path that exists, or an NBD URI (whose
/// server is only asked when the device is opened).
pub fn device_exists(path: &std::path::Path) -> bool {
    path.to_str().is_some_and(is_nbd_uri) || path.exists()
}

/// The identity of the backing device at `path` as the cache superblock
/// records it: [`tiercache_store::BackingIdentity::probe`] for local
/// devices; for an NBD URI the URI (as path and serial), the export size and
/// the fingerprints of its first and last 64 KiB and of its sampled blocks,
/// read over the network.
pub fn probe_identity(
    path: &std::path::Path,
) -> Result<tiercache_store::BackingIdentity, tiercache_store::error::StoreError> {
    let Some(uri) = path.to_str().filter(|s| is_nbd_uri(s)) else {
        return tiercache_store::BackingIdentity::probe(path);
    };
    // The caller names the device; these say only what failed.
    let ctx =
        |what: &'static str| move |e: io::Error| tiercache_store::error::StoreError::io(what, e);
    let o = NbdOptions {
        connections: 1,
        ..nbd_defaults()
    };
    let dev: std::sync::Arc<dyn BlockDev> =
        std::sync::Arc::new(NbdDev::open(uri, o).map_err(ctx("connecting"))?);
    let size = dev.len();
    let fingerprint = tiercache_store::superblock::fingerprint(&MetaOnDev(dev.clone()), size)
        .map_err(ctx("reading the export's first and last 64 KiB"))?;
    let sampled = tiercache_store::superblock::sampled_fingerprint(&MetaOnDev(dev.clone()), size)
        .map_err(ctx("reading the export's sampled blocks"))?;
    Ok(tiercache_store::BackingIdentity {
        path: dev.name().to_string(),
        size,
        fingerprint,
        file_id: None,
        serial: Some(dev.name().to_string()),
        sampled: Some(sampled),
        times: None,
    })
}

/// A [`BlockDev`] as the metadata store's device: the same bytes, the same
/// faults and the same volatile cache as the data, as on a real cache
/// device (fingerprints, the three-level cache's SSDs, simulated caches).
pub struct MetaOnDev(pub std::sync::Arc<dyn BlockDev>);

impl tiercache_store::device::MetaDevice for MetaOnDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.flush()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.len())
    }
}

/// [`BlockDev::write_zeroes`] for devices without a zeroing command: write
/// zero buffers of at most 1 MiB.
pub fn write_zeroes_by_writing<D: BlockDev + ?Sized>(
    dev: &D,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    let z = vec![0u8; len.min(1 << 20) as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(z.len() as u64) as usize;
        dev.write_at(&z[..n], offset + done)?;
        done += n as u64;
    }
    Ok(())
}

/// The best engine available here: a [`UringEngine`] with `queue_depth`
/// ring entries and `threads` fallback threads if io_uring works, else (with
/// a warning naming the reason) a [`PoolEngine`] of `threads` threads and a
/// queue of `queue_depth` ops. Sizes as for those constructors.
pub fn auto_engine(queue_depth: u32, threads: usize) -> io::Result<Arc<dyn Engine>> {
    match UringEngine::new(queue_depth, threads) {
        Ok(e) => Ok(Arc::new(e)),
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            tracing::warn!("{e}; using {threads} I/O threads");
            Ok(Arc::new(PoolEngine::new(threads, queue_depth as usize)?))
        }
        Err(e) => Err(e),
    }
}

/// A block device or file the server reads and writes.
///
/// Every method may be called concurrently from many threads. Operations on
/// overlapping byte ranges that run at the same time have no defined order
/// (as on a real disk); callers order them. All ranges must lie within
/// `0..len()`: reads past the end fail with [`io::ErrorKind::UnexpectedEof`],
/// writes and trims past the end with [`io::ErrorKind::InvalidInput`], and
/// nothing is transferred.
pub trait BlockDev: Send + Sync {
    /// Size in bytes, fixed for the life of the object.
    fn len(&self) -> u64;

    /// Whether the device has zero bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fill all of `buf` with the bytes at `offset..offset + buf.len()`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Write all of `buf` at `offset`. The data may sit in a volatile cache
    /// until the next [`BlockDev::flush`].
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Write all of `buf` at `offset` and return only once this data is
    /// durable (Force Unit Access). The default writes, then flushes.
    fn write_at_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_at(buf, offset)?;
        self.flush()
    }

    /// Make every write that completed before this call durable
    /// (`fdatasync` on files and block devices).
    fn flush(&self) -> io::Result<()>;

    /// Change the size the device is used to (a cache resized while it
    /// serves): a regular file is extended (sparse) or truncated to `len`
    /// bytes; a block device keeps its size, and `len` may not pass it.
    /// Devices that cannot change refuse.
    fn set_len(&self, len: u64) -> io::Result<()> {
        let _ = len;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{} cannot change its size", self.name()),
        ))
    }

    /// Discard `len` bytes at `offset`: their contents are no longer needed.
    ///
    /// Advisory: afterwards the range reads back as either its old contents or
    /// zeros, depending on the device. A device that cannot discard returns
    /// `Ok(())` and keeps the data (a discard is never needed for
    /// correctness, and writing zeros instead would cost a full write).
    fn trim(&self, offset: u64, len: u64) -> io::Result<()>;

    /// Make `len` bytes at `offset` read back as zeros. The default writes
    /// zero buffers; devices with a zeroing command (NBD WRITE_ZEROES) use it.
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        write_zeroes_by_writing(self, offset, len)
    }

    /// Short human-readable name (a path, or a description of a wrapper).
    fn name(&self) -> &str;

    /// The connection state of a remote device ([`NbdDev`]); `None` (the
    /// default) for local devices.
    fn remote_status(&self) -> Option<RemoteStatus> {
        None
    }

    /// The file descriptor behind this device, for engines that submit I/O
    /// to the kernel themselves ([`UringEngine`]). `None` (the default) makes
    /// engines call the methods above instead; wrappers that add behaviour
    /// must return `None`.
    fn raw_target(&self) -> Option<RawTarget> {
        None
    }

    /// Count a failed read (`write == false`) or write done on this
    /// device's raw descriptor, outside its methods ([`write_buffered`]);
    /// devices that count errors ([`CountErrors`]) record it, others ignore it.
    fn note_error(&self, write: bool) {
        let _ = write;
    }

    /// Start `op` without blocking and call `done` once with its result, for
    /// a device whose operations wait on something other than this
    /// machine's threads: [`NbdDev`] sends it on its connections, many in
    /// flight, and completes it when the server replies. Engines offer every
    /// op here first, so such a device is not limited by their threads.
    /// `Err` hands `op` and `done` back untouched: the device has no such
    /// path for this op (the default), run it with the methods above.
    /// `done` runs on a thread of the device, or on the caller's thread for
    /// an op that completes at once (a range error). Wrappers that add
    /// behaviour must keep the default.
    fn submit(&self, op: IoOp, done: Completion) -> Result<(), (IoOp, Completion)> {
        Err((op, done))
    }
}

/// Keep a buffered device's page cache in 4 KiB folios, for a cache that
/// reads and writes single 4 KiB pages at scattered offsets: no readahead on
/// it (`POSIX_FADV_RANDOM`, so reads fill 4 KiB folios), and its cached pages
/// dropped (after a sync, so none is dirty) before the cache uses it. Why:
/// readahead (a sequential pass over the slots, as recovery or a warm-up
/// read makes) fills the file's cache with large folios, and a 4 KiB `pwrite`
/// into a large folio costs ext4 several times one into a 4 KiB folio
/// (measured by `bench/page_cache_folios.py`). Advisory
/// only: nothing changes what a read returns. A device without a raw
/// descriptor or opened `O_DIRECT` is left alone, and a failure only costs
/// speed (a failing device shows up at its first write or sync).
pub fn keep_page_cache_small(dev: &dyn BlockDev) {
    let Some(t) = dev.raw_target() else {
        return;
    };
    if t.direct_align.is_some() {
        return;
    }
    // SAFETY: `raw_target` promises the descriptor stays open while `dev`
    // lives, and `dev` is borrowed for the whole call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(t.fd) };
    let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::Random);
    if dev.flush().is_ok() {
        let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::DontNeed);
    }
}

/// Read `buf.len()` bytes at `offset` from the page cache without blocking
/// (`preadv2` with `RWF_NOWAIT`), on the caller's thread: a cached read then
/// costs no hand-off to an engine thread. `Some(Ok(()))` when all of `buf` was
/// read; `None` when the read would block, was short, failed, or the device
/// cannot do it (no raw descriptor, `O_DIRECT`, out of range): then run it on
/// an engine, which also reports any error. A file in RAM (tmpfs) is read
/// with a plain `pread`, as `RWF_NOWAIT` is refused there.
pub fn read_cached(dev: &dyn BlockDev, buf: &mut [u8], offset: u64) -> Option<io::Result<()>> {
    let t = dev.raw_target()?;
    if t.direct_align.is_some() || buf.is_empty() {
        return None;
    }
    if offset.checked_add(buf.len() as u64)? > dev.len() {
        return None;
    }
    // SAFETY: `raw_target` promises the descriptor stays open while `dev` lives,
    // and `dev` is borrowed for the whole call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(t.fd) };
    let want = buf.len();
    match rustix::io::preadv2(
        fd,
        &mut [io::IoSliceMut::new(buf)],
        offset,
        rustix::io::ReadWriteFlags::NOWAIT,
    ) {
        Ok(n) if n == want => Some(Ok(())),
        // tmpfs refuses RWF_NOWAIT, but its pages are in memory: without
        // this every read of a cache file there went to an engine thread.
        Err(rustix::io::Errno::OPNOTSUPP) if t.memory_resident => {
            match rustix::io::pread(fd, buf, offset) {
                Ok(n) if n == want => Some(Ok(())),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Largest write [`write_buffered`] does on the caller's thread.
pub const INLINE_WRITE_MAX: usize = 64 << 10;

/// Write `buf` at `offset` with a plain buffered `pwrite` on the caller's
/// thread, when the device is a file or block device opened without
/// `O_DIRECT` and `buf` is at most [`INLINE_WRITE_MAX`] bytes: the data goes
/// to the page cache (as [`BlockDev::write_at`] would), with no hand-off to an
/// engine thread. `None` when the device cannot do it (then use an engine);
/// otherwise the write's result. Such a write may still sleep when the kernel
/// throttles dirty pages (Linux has no non-blocking buffered write on most
/// filesystems: `RWF_NOWAIT` writes fail with `EOPNOTSUPP` on ext4).
pub fn write_buffered(dev: &dyn BlockDev, buf: &[u8], offset: u64) -> Option<io::Result<()>> {
    let t = dev.raw_target()?;
    if t.direct_align.is_some() || buf.is_empty() || buf.len() > INLINE_WRITE_MAX {
        return None;
    }
    if offset.checked_add(buf.len() as u64)? > dev.len() {
        return None;
    }
    // SAFETY: as in `read_cached`.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(t.fd) };
    let mut done = 0;
    while done < buf.len() {
        let e = match rustix::io::pwrite(fd, &buf[done..], offset + done as u64) {
            Ok(0) => io::Error::from(io::ErrorKind::WriteZero),
            Ok(n) => {
                done += n;
                continue;
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => e.into(),
        };
        dev.note_error(true);
        return Some(Err(e));
    }
    Some(Ok(()))
}

/// Write `bufs` one after another from `offset`: as `pwritev` calls on a
/// file or block device opened without `O_DIRECT` (one system call and one
/// pass through the file system for a run of adjacent pages, which costs
/// about a third less per page than one `pwrite` each), else one
/// [`BlockDev::write_at`] per buffer (wrappers that inject faults or model a
/// volatile cache see every write). The bytes on the device are the same either
/// way; a failure may leave any part of the range written. A range past the
/// device's end fails before anything is written.
pub fn write_vectored(dev: &dyn BlockDev, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
    let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
    check_range(dev.name(), dev.len(), Access::Write, offset, total)?;
    let raw = dev.raw_target().filter(|t| t.direct_align.is_none());
    let Some(t) = raw else {
        let mut at = offset;
        for b in bufs {
            dev.write_at(b, at)?;
            at += b.len() as u64;
        }
        return Ok(());
    };
    // SAFETY: as in `read_cached`.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(t.fd) };
    let mut slices: Vec<io::IoSlice<'_>> = bufs
        .iter()
        .filter(|b| !b.is_empty())
        .map(|b| io::IoSlice::new(b))
        .collect();
    let mut rest = &mut slices[..];
    let mut at = offset;
    while !rest.is_empty() {
        let n = rest.len().min(1024); // IOV_MAX
        let e = match rustix::io::pwritev(fd, &rest[..n], at) {
            Ok(0) => io::Error::from(io::ErrorKind::WriteZero),
            Ok(w) => {
                at += w as u64;
                io::IoSlice::advance_slices(&mut rest, w);
                continue;
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => e.into(),
        };
        dev.note_error(true);
        return Err(e);
    }
    Ok(())
}

/// A file descriptor an engine may use for direct kernel I/O
/// (see [`BlockDev::raw_target`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawTarget {
    /// Open descriptor; valid as long as the device object lives.
    pub fd: RawFd,
    /// `Some(a)`: the descriptor is open with `O_DIRECT`, so offsets, lengths
    /// and memory addresses must be multiples of `a` bytes.
    pub direct_align: Option<usize>,
    /// The file lives in RAM (tmpfs, ramfs): a plain read waits for no
    /// device (swap aside), although such file systems refuse `RWF_NOWAIT`.
    pub memory_resident: bool,
}

impl<T: BlockDev + ?Sized> BlockDev for Arc<T> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        (**self).set_len(len)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn write_at_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at_fua(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        (**self).trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        (**self).write_zeroes(offset, len)
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn remote_status(&self) -> Option<RemoteStatus> {
        (**self).remote_status()
    }
    fn raw_target(&self) -> Option<RawTarget> {
        (**self).raw_target()
    }
    fn note_error(&self, write: bool) {
        (**self).note_error(write)
    }
    fn submit(&self, op: IoOp, done: Completion) -> Result<(), (IoOp, Completion)> {
        (**self).submit(op, done)
    }
}

/// What an access is, for range errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
    Trim,
}

/// Check that `offset..offset + len` lies within a device of `dev_len` bytes.
/// Reads past the end are `UnexpectedEof`, writes and trims `InvalidInput`.
pub(crate) fn check_range(
    name: &str,
    dev_len: u64,
    access: Access,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    let fits = offset.checked_add(len).is_some_and(|end| end <= dev_len);
    if fits {
        return Ok(());
    }
    let (what, kind) = match access {
        Access::Read => ("read", io::ErrorKind::UnexpectedEof),
        Access::Write => ("write", io::ErrorKind::InvalidInput),
        Access::Trim => ("trim", io::ErrorKind::InvalidInput),
    };
    Err(io::Error::new(
        kind,
        format!(
            "{what} of {len} bytes at offset {offset} goes past the end of {name} \
             ({dev_len} bytes); the range must lie within 0..{dev_len}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_errors_name_the_limit() {
        assert!(check_range("d", 100, Access::Read, 90, 10).is_ok());
        let e = check_range("d", 100, Access::Read, 95, 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("0..100"), "{e}");
        let e = check_range("d", 100, Access::Write, u64::MAX, 2).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = check_range("d", 100, Access::Trim, 101, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn read_cached_reads_page_cached_files_and_declines_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.img");
        let data: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let dev = FileDev::open(&path, FileDevOptions::default()).unwrap();
        // Just written: in the page cache.
        let mut buf = vec![0u8; 4096];
        assert!(matches!(read_cached(&dev, &mut buf, 8192), Some(Ok(()))));
        assert_eq!(buf, data[8192..12288]);
        // Out of range, empty, or no descriptor (a wrapper or memory device): declined.
        assert!(read_cached(&dev, &mut buf, 65536 - 100).is_none());
        assert!(read_cached(&dev, &mut [], 0).is_none());
        let mem = MemDev::new("m", 65536);
        assert!(read_cached(&mem, &mut buf, 0).is_none());
    }

    #[test]
    fn read_cached_reads_files_in_ram_although_tmpfs_refuses_nowait() {
        let shm = std::path::Path::new("/dev/shm");
        let Ok(dir) = tempfile::tempdir_in(shm) else {
            eprintln!("skipped: /dev/shm is not writable here");
            return;
        };
        let path = dir.path().join("f.img");
        let data: Vec<u8> = (0..65536u32).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let dev = FileDev::open(&path, FileDevOptions::default()).unwrap();
        let t = dev.raw_target().unwrap();
        let is_tmpfs =
            |p: &std::path::Path| rustix::fs::statfs(p).is_ok_and(|s| s.f_type == 0x0102_1994);
        if !is_tmpfs(shm) {
            eprintln!("skipped: /dev/shm is not a tmpfs here");
            return;
        }
        assert!(t.memory_resident, "a tmpfs file is memory-resident");
        let mut buf = vec![0u8; 4096];
        assert!(matches!(read_cached(&dev, &mut buf, 12288), Some(Ok(()))));
        assert_eq!(buf, data[12288..16384]);
        assert!(read_cached(&dev, &mut buf, 65536 - 100).is_none());
        // A file on a disk file system is not memory-resident.
        let disk = tempfile::tempdir().unwrap();
        let p2 = disk.path().join("g.img");
        std::fs::write(&p2, &data).unwrap();
        let on_disk = FileDev::open(&p2, FileDevOptions::default()).unwrap();
        let t2 = on_disk.raw_target().unwrap();
        assert_eq!(t2.memory_resident, is_tmpfs(disk.path()));
    }

    #[test]
    fn write_buffered_writes_small_buffered_writes_and_declines_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.img");
        std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        let dev = FileDev::open(&path, FileDevOptions::default()).unwrap();
        assert!(matches!(
            write_buffered(&dev, &[7u8; 4096], 4096),
            Some(Ok(()))
        ));
        let mut back = vec![0u8; 4096];
        dev.read_at(&mut back, 4096).unwrap();
        assert_eq!(back, vec![7u8; 4096]);
        assert!(write_buffered(&dev, &vec![1u8; INLINE_WRITE_MAX + 1], 0).is_none());
        assert!(write_buffered(&dev, &[1u8; 8], (1 << 20) - 4).is_none());
        let mem = MemDev::new("m", 65536);
        assert!(write_buffered(&mem, &[1u8; 8], 0).is_none());
    }

    /// Against `write_at` one buffer at a time on a second device: the
    /// same bytes, on a file (`pwritev`) and on a device without a
    /// descriptor; a range past the end fails and writes nothing.
    #[test]
    fn write_vectored_writes_the_buffers_back_to_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.img");
        std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
        let file = FileDev::open(&path, FileDevOptions::default()).unwrap();
        let mem = MemDev::new("m", 1 << 20);
        let reference = MemDev::new("ref", 1 << 20);
        let bufs: Vec<Vec<u8>> = (0..5u8)
            .map(|i| vec![i + 1; 4096 * (1 + i as usize % 2) + 3])
            .collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        let mut at = 12_345u64;
        for b in &refs {
            reference.write_at(b, at).unwrap();
            at += b.len() as u64;
        }
        for dev in [&file as &dyn BlockDev, &mem] {
            write_vectored(dev, &refs, 12_345).unwrap();
            let (mut got, mut want) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
            dev.read_at(&mut got, 0).unwrap();
            reference.read_at(&mut want, 0).unwrap();
            assert!(got == want, "{}", dev.name());
            let e =
                write_vectored(dev, &[&[9u8; 4096], &[9u8; 4096]], (1 << 20) - 4096).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{}", dev.name());
            let mut tail = vec![1u8; 4096];
            dev.read_at(&mut tail, (1 << 20) - 4096).unwrap();
            assert_eq!(tail, vec![0u8; 4096], "{}: nothing written", dev.name());
        }
    }
}
