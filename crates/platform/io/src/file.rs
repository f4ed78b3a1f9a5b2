//! Files and block devices through `pread`/`pwrite`, optionally `O_DIRECT`.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use rustix::fs::{AtFlags, FallocateFlags, StatxFlags};
use rustix::io::Errno;
use rustix::ioctl::{self, opcode, Getter, Opcode, Setter};

use crate::{check_range, Access, AlignedBuf, BlockDev, RawTarget};

/// `BLKGETSIZE64`: `_IOR(0x12, 114, size_t)`, device size in bytes.
const BLKGETSIZE64: Opcode = opcode::read::<usize>(0x12, 114);
/// `BLKDISCARD`: `_IO(0x12, 119)`, argument `u64[2] = {start, len}`.
const BLKDISCARD: Opcode = opcode::none(0x12, 119);

/// Memory alignment of bounce buffers: a page, which satisfies every
/// `O_DIRECT` memory constraint in practice.
const PAGE: usize = 4096;

/// How to open a [`FileDev`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileDevOptions {
    /// Ask for `O_DIRECT` (bypass the page cache). If the file system or
    /// device refuses it, or the size is not a multiple of the direct I/O
    /// alignment, the device opens buffered and logs a warning; check
    /// [`FileDev::is_direct`].
    pub direct: bool,
    /// Open read-only: writes, trims and FUA writes fail with `EBADF`.
    pub read_only: bool,
}

/// A regular file or block device, accessed with positional reads and writes.
///
/// - Size: the file size at open, or `BLKGETSIZE64` for block devices; fixed.
/// - `O_DIRECT` (see [`FileDevOptions::direct`]): any offset, length and
///   buffer address is accepted. Unaligned requests go through a page-aligned
///   bounce buffer; unaligned writes read-modify-write their first and last
///   blocks, serialised per block so that concurrent writes to different
///   bytes of one block do not lose each other's data.
/// - Flush: `fdatasync`. FUA writes: write, then `fdatasync`.
/// - Trim: `fallocate(PUNCH_HOLE | KEEP_SIZE)` on files (the range then reads
///   as zeros), `BLKDISCARD` on block devices (rounded inwards to whole
///   logical sectors; what the range reads afterwards depends on the device).
///   If the file system or device does not support it, trim does nothing and
///   returns `Ok` (logged once).
pub struct FileDev {
    file: File,
    /// The size used: a regular file's changes with [`BlockDev::set_len`].
    len: AtomicU64,
    name: String,
    block_device: bool,
    /// Logical sector size (block devices), 512 for files.
    sector: u64,
    direct: Option<Direct>,
    edges: EdgeLocks,
    trim_unsupported_logged: AtomicBool,
    /// The file lives in RAM (tmpfs, ramfs): see [`RawTarget::memory_resident`].
    memory_resident: bool,
}

/// Alignment rules of an `O_DIRECT` descriptor.
#[derive(Clone, Copy, Debug)]
struct Direct {
    /// Offsets and lengths must be multiples of this.
    align: usize,
    /// Buffer addresses must be multiples of this.
    mem_align: usize,
}

impl FileDev {
    /// Open an existing regular file or block device.
    pub fn open(path: impl AsRef<Path>, options: FileDevOptions) -> io::Result<FileDev> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = open_file(path, options.read_only, false)?;
        let md = file.metadata().map_err(|e| context(e, &name, "stat"))?;
        let ft = md.file_type();
        let (len, block_device, sector) = if ft.is_block_device() {
            let len = blkgetsize64(&file).map_err(|e| context(e, &name, "BLKGETSIZE64"))?;
            let sector = rustix::fs::ioctl_blksszget(&file)
                .map_err(|e| context(e.into(), &name, "BLKSSZGET"))?;
            (len, true, u64::from(sector.max(512)))
        } else if ft.is_file() {
            (md.len(), false, 512)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is neither a regular file nor a block device"),
            ));
        };
        let memory_resident = !block_device && in_memory_fs(&file);
        let mut dev = FileDev {
            file,
            len: AtomicU64::new(len),
            name,
            block_device,
            sector,
            direct: None,
            edges: EdgeLocks::default(),
            trim_unsupported_logged: AtomicBool::new(false),
            memory_resident,
        };
        if options.direct {
            match dev.open_direct(path, options.read_only)? {
                Ok((file, direct)) => {
                    dev.file = file;
                    dev.direct = Some(direct);
                }
                Err(reason) => tracing::warn!(
                    device = %dev.name,
                    "O_DIRECT unavailable ({reason}); using buffered I/O"
                ),
            }
        }
        Ok(dev)
    }

    /// Create (or resize) a regular file of `len` bytes, sparse, then open it.
    /// Existing contents within `len` are kept.
    pub fn create(
        path: impl AsRef<Path>,
        len: u64,
        options: FileDevOptions,
    ) -> io::Result<FileDev> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| context(e, &name, "create"))?;
        file.set_len(len)
            .map_err(|e| context(e, &name, "set the size of"))?;
        drop(file);
        FileDev::open(
            path,
            FileDevOptions {
                read_only: false,
                ..options
            },
        )
    }

    /// Whether I/O bypasses the page cache (`O_DIRECT` is in effect).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Offset/length alignment of direct I/O, if `O_DIRECT` is in effect.
    /// Unaligned requests still work, through bounce buffers.
    pub fn direct_alignment(&self) -> Option<usize> {
        self.direct.map(|d| d.align)
    }

    /// Whether this is a block device (else a regular file).
    pub fn is_block_device(&self) -> bool {
        self.block_device
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Try to reopen with `O_DIRECT`. The outer error is a real failure; the
    /// inner `Err` says why direct I/O is not possible (fall back).
    fn open_direct(
        &self,
        path: &Path,
        read_only: bool,
    ) -> io::Result<Result<(File, Direct), String>> {
        let mut direct = Direct {
            align: self.sector as usize,
            mem_align: PAGE,
        };
        if !self.block_device {
            // Linux 6.1+ reports the file's direct I/O constraints.
            match rustix::fs::statx(&self.file, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN) {
                Ok(st) if st.stx_mask & StatxFlags::DIOALIGN.bits() != 0 => {
                    if st.stx_dio_offset_align == 0 {
                        return Ok(Err(
                            "the file system does not support it for this file".into()
                        ));
                    }
                    direct.align = st.stx_dio_offset_align as usize;
                    direct.mem_align = (st.stx_dio_mem_align as usize).max(1);
                }
                // Unknown: assume the strictest common rule, the probe decides.
                _ => direct.align = PAGE,
            }
        }
        if direct.mem_align > PAGE || !direct.align.is_power_of_two() {
            return Ok(Err(format!(
                "unusual alignment rules (offset {}, memory {})",
                direct.align, direct.mem_align
            )));
        }
        if !self.len().is_multiple_of(direct.align as u64) {
            return Ok(Err(format!(
                "size {} is not a multiple of the direct I/O alignment {}",
                self.len(),
                direct.align
            )));
        }
        let file = match open_file(path, read_only, true) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(Errno::INVAL.raw_os_error()) => {
                return Ok(Err(format!("open with O_DIRECT failed: {e}")));
            }
            Err(e) => return Err(e),
        };
        // Some file systems accept the flag and refuse the I/O: probe.
        if self.len() >= direct.align as u64 {
            let mut probe = AlignedBuf::zeroed(direct.align, PAGE)?;
            if let Err(e) = file.read_exact_at(&mut probe, 0) {
                if e.raw_os_error() == Some(Errno::INVAL.raw_os_error()) {
                    return Ok(Err(format!("a direct read failed: {e}")));
                }
                return Err(context(e, &self.name, "read (O_DIRECT probe)"));
            }
        }
        Ok(Ok((file, direct)))
    }

    fn read_direct(&self, buf: &mut [u8], offset: u64, d: Direct) -> io::Result<()> {
        if is_aligned(offset, buf.len(), buf.as_ptr(), d) {
            return self.file.read_exact_at(buf, offset);
        }
        let a = d.align as u64;
        let start = offset / a * a;
        let end = (offset + buf.len() as u64).div_ceil(a) * a;
        let mut bounce = AlignedBuf::zeroed((end - start) as usize, PAGE)?;
        self.file.read_exact_at(&mut bounce, start)?;
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&bounce[skip..skip + buf.len()]);
        Ok(())
    }

    fn write_direct(&self, buf: &[u8], offset: u64, d: Direct) -> io::Result<()> {
        if is_aligned(offset, buf.len(), buf.as_ptr(), d) {
            return self.file.write_all_at(buf, offset);
        }
        let a = d.align as u64;
        let end = offset + buf.len() as u64;
        let start = offset / a * a;
        let span_end = end.div_ceil(a) * a;
        let mut bounce = AlignedBuf::zeroed((span_end - start) as usize, PAGE)?;
        let head_partial = !offset.is_multiple_of(a);
        let tail_partial = !end.is_multiple_of(a);
        let mut edge_blocks = [None, None];
        if head_partial {
            edge_blocks[0] = Some(start / a);
        }
        if tail_partial && (span_end - a) / a != start / a {
            edge_blocks[1] = Some((span_end - a) / a);
        } else if tail_partial {
            edge_blocks[0] = Some(start / a);
        }
        // Only the partial edge blocks are read back; hold their locks from
        // the read to the write so concurrent edits of one block compose.
        let _guard = self.edges.lock(edge_blocks);
        if let Some(b) = edge_blocks[0] {
            let at = (b * a - start) as usize;
            self.file
                .read_exact_at(&mut bounce[at..at + d.align], b * a)?;
        }
        if let Some(b) = edge_blocks[1] {
            let at = (b * a - start) as usize;
            self.file
                .read_exact_at(&mut bounce[at..at + d.align], b * a)?;
        }
        let skip = (offset - start) as usize;
        bounce[skip..skip + buf.len()].copy_from_slice(buf);
        self.file.write_all_at(&bounce, start)
    }

    fn trim_unsupported(&self, e: Errno) -> io::Result<()> {
        if !self.trim_unsupported_logged.swap(true, Ordering::Relaxed) {
            tracing::info!(
                device = %self.name,
                "discard is not supported ({e}); trims are ignored"
            );
        }
        Ok(())
    }
}

impl BlockDev for FileDev {
    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if let Some(d) = self.direct {
            if !len.is_multiple_of(d.align as u64) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: {len} bytes is not a multiple of the direct I/O alignment {}",
                        self.name, d.align
                    ),
                ));
            }
        }
        if self.block_device {
            let size =
                blkgetsize64(&self.file).map_err(|e| context(e, &self.name, "BLKGETSIZE64"))?;
            if len > size {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} holds {size} bytes, fewer than {len}", self.name),
                ));
            }
            return Ok(());
        }
        let now = self.len();
        if len > now {
            let st = rustix::fs::fstatvfs(&self.file)
                .map_err(|e| context(e.into(), &self.name, "statvfs"))?;
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            if len - now > free {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!(
                        "{} cannot grow by {} bytes: its file system has {free} bytes free",
                        self.name,
                        len - now
                    ),
                ));
            }
        }
        // Extending: the size first, then the new bytes are used; truncating:
        // the caller stopped using them before.
        self.file
            .set_len(len)
            .map_err(|e| context(e, &self.name, "set the size of"))?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(
            &self.name,
            self.len(),
            Access::Read,
            offset,
            buf.len() as u64,
        )?;
        if buf.is_empty() {
            return Ok(());
        }
        match self.direct {
            Some(d) => self.read_direct(buf, offset, d),
            None => self.file.read_exact_at(buf, offset),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(
            &self.name,
            self.len(),
            Access::Write,
            offset,
            buf.len() as u64,
        )?;
        if buf.is_empty() {
            return Ok(());
        }
        match self.direct {
            Some(d) => self.write_direct(buf, offset, d),
            None => self.file.write_all_at(buf, offset),
        }
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, self.len(), Access::Trim, offset, len)?;
        let result = if self.block_device {
            let start = offset.div_ceil(self.sector) * self.sector;
            let end = (offset + len) / self.sector * self.sector;
            if start >= end {
                return Ok(());
            }
            // SAFETY: BLKDISCARD reads a u64[2] {start, len} from the pointer.
            unsafe {
                ioctl::ioctl(
                    &self.file,
                    Setter::<BLKDISCARD, [u64; 2]>::new([start, end - start]),
                )
            }
        } else {
            if len == 0 {
                return Ok(());
            }
            rustix::fs::fallocate(
                &self.file,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                offset,
                len,
            )
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) if e == Errno::OPNOTSUPP || e == Errno::NOSYS => self.trim_unsupported(e),
            Err(e) => Err(e.into()),
        }
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn raw_target(&self) -> Option<RawTarget> {
        Some(RawTarget {
            fd: self.file.as_raw_fd(),
            direct_align: self.direct.map(|d| d.align.max(d.mem_align)),
            memory_resident: self.memory_resident,
        })
    }
}

/// Whether `file` is on a file system that keeps its data in RAM (tmpfs,
/// ramfs): reads never wait for a device there.
fn in_memory_fs(file: &File) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    rustix::fs::fstatfs(file).is_ok_and(|st| {
        let t = st.f_type;
        t == TMPFS_MAGIC || t == RAMFS_MAGIC
    })
}

fn open_file(path: &Path, read_only: bool, direct: bool) -> io::Result<File> {
    let mut oo = OpenOptions::new();
    oo.read(true).write(!read_only);
    if direct {
        oo.custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32);
    }
    oo.open(path).map_err(|e| {
        let what = if direct { "open (O_DIRECT)" } else { "open" };
        context(e, &path.display().to_string(), what)
    })
}

fn blkgetsize64(file: &File) -> io::Result<u64> {
    // SAFETY: BLKGETSIZE64 writes one u64 to the pointer.
    let len = unsafe { ioctl::ioctl(file, Getter::<BLKGETSIZE64, u64>::new()) }?;
    Ok(len)
}

fn is_aligned(offset: u64, len: usize, ptr: *const u8, d: Direct) -> bool {
    offset.is_multiple_of(d.align as u64)
        && len.is_multiple_of(d.align)
        && (ptr as usize).is_multiple_of(d.mem_align)
}

/// Add which file and which action to an OS error, keeping its kind and errno.
fn context(e: io::Error, name: &str, action: &str) -> io::Error {
    match e.raw_os_error() {
        Some(code) => {
            let os = io::Error::from_raw_os_error(code);
            io::Error::new(os.kind(), format!("cannot {action} {name}: {os}"))
        }
        None => io::Error::new(e.kind(), format!("cannot {action} {name}: {e}")),
    }
}

/// Per-block locks for read-modify-write of partial `O_DIRECT` blocks.
#[derive(Default)]
struct EdgeLocks {
    held: Mutex<Vec<u64>>,
    freed: Condvar,
}

struct EdgeGuard<'a> {
    locks: &'a EdgeLocks,
    blocks: [Option<u64>; 2],
}

impl EdgeLocks {
    /// Take both blocks at once (no lock-order deadlock), waiting while any
    /// is held.
    fn lock(&self, blocks: [Option<u64>; 2]) -> EdgeGuard<'_> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while blocks.iter().flatten().any(|b| held.contains(b)) {
            held = self
                .freed
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held.extend(blocks.iter().flatten());
        EdgeGuard {
            locks: self,
            blocks,
        }
    }
}

impl Drop for EdgeGuard<'_> {
    fn drop(&mut self) {
        let mut held = self
            .locks
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for b in self.blocks.iter().flatten() {
            if let Some(i) = held.iter().position(|h| h == b) {
                held.swap_remove(i);
            }
        }
        drop(held);
        self.locks.freed.notify_all();
    }
}
