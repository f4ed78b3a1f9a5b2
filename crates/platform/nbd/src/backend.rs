//! The storage interface the NBD server exports.

use async_trait::async_trait;

use crate::error::{Error, Result};

/// Block size constraints advertised with `NBD_INFO_BLOCK_SIZE`.
///
/// The server does not enforce `minimum` alignment: clients that ignore it
/// (the kernel, 512-byte sectors) still send valid requests, so backends must
/// accept any offset and length (read-modify-write internally if needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSize {
    /// Smallest addressable unit; power of two, at most 64 KiB.
    pub minimum: u32,
    /// Preferred I/O size; power of two, at least `max(minimum, 512)`.
    pub preferred: u32,
    /// Largest payload of a single READ/WRITE; at least `preferred`.
    pub maximum: u32,
}

impl Default for BlockSize {
    /// min 1, preferred 4 KiB, max 32 MiB (the spec's defaults).
    fn default() -> Self {
        BlockSize {
            minimum: 1,
            preferred: 4096,
            maximum: crate::MAX_PAYLOAD,
        }
    }
}

impl BlockSize {
    /// Check the spec's constraints; the message says which rule is broken.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let BlockSize {
            minimum,
            preferred,
            maximum,
        } = *self;
        if !minimum.is_power_of_two() || minimum > 65536 {
            return Err(format!(
                "minimum block size {minimum} must be a power of two between 1 and 65536"
            ));
        }
        if !preferred.is_power_of_two() || preferred < minimum.max(512) {
            return Err(format!(
                "preferred block size {preferred} must be a power of two >= max(minimum, 512)"
            ));
        }
        if maximum < preferred || (maximum != u32::MAX && maximum % minimum != 0) {
            return Err(format!(
                "maximum block size {maximum} must be >= preferred ({preferred}) and a multiple of minimum ({minimum})"
            ));
        }
        Ok(())
    }
}

/// One run of the `base:allocation` map returned by [`Backend::block_status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Bytes covered; extents are consecutive from the requested offset.
    pub length: u64,
    /// Not allocated in the backing store (`NBD_STATE_HOLE`).
    pub hole: bool,
    /// Reads back as zeroes (`NBD_STATE_ZERO`).
    pub zero: bool,
}

impl Extent {
    /// Allocated data, contents unknown: always a safe answer.
    pub fn data(length: u64) -> Self {
        Extent {
            length,
            hole: false,
            zero: false,
        }
    }

    /// Known to read as zeroes (allocated unless `hole`).
    pub fn zero(length: u64, hole: bool) -> Self {
        Extent {
            length,
            hole,
            zero: true,
        }
    }

    /// The `base:allocation` status flags.
    pub fn flags(&self) -> u32 {
        let mut f = 0;
        if self.hole {
            f |= crate::protocol::STATE_HOLE;
        }
        if self.zero {
            f |= crate::protocol::STATE_ZERO;
        }
        f
    }
}

/// A block device exported over NBD.
///
/// The server calls these methods concurrently, from many tasks and several
/// connections; requests of one connection are not serialized, so the backend
/// is responsible for ordering of overlapping operations. The server has
/// already validated every request: ranges lie within `size()`, lengths are
/// at most the payload limit (READ/WRITE), mutating calls never reach a
/// read-only export, and only advertised commands are forwarded.
///
/// Durability contract: `flush()` must make every write that has completed
/// (returned `Ok`) before `flush()` was called stable. `fua = true` means the
/// call must not return until its own data is stable. If `can_multi_conn()`
/// is true, this must hold across all connections (one shared state).
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Export size in bytes (fixed for the life of a connection).
    fn size(&self) -> u64;

    /// Block size constraints (min, preferred, max).
    fn block_size(&self) -> BlockSize {
        BlockSize::default()
    }

    /// Optional human-readable description (`NBD_INFO_DESCRIPTION`).
    fn description(&self) -> Option<String> {
        None
    }

    /// Export is read-only: writes, trims and zeroes fail with `EPERM`.
    fn is_read_only(&self) -> bool {
        false
    }
    /// Advertise `NBD_CMD_TRIM`.
    fn can_trim(&self) -> bool {
        false
    }
    /// Advertise `NBD_CMD_WRITE_ZEROES` (the default implementation writes zero buffers).
    fn can_zero(&self) -> bool {
        true
    }
    /// `write_zeroes` is cheap (no data written), so `NBD_CMD_FLAG_FAST_ZERO`
    /// requests are forwarded; otherwise they fail at once with `ENOTSUP`.
    fn can_fast_zero(&self) -> bool {
        false
    }
    /// Advertise `NBD_CMD_CACHE` (prefetch hint).
    fn can_cache(&self) -> bool {
        false
    }
    /// Advertise `NBD_FLAG_CAN_MULTI_CONN`: all connections share one state and a
    /// flush/FUA on any connection covers writes completed on every connection.
    fn can_multi_conn(&self) -> bool {
        false
    }
    /// Advertise `NBD_FLAG_ROTATIONAL` (hint for client I/O scheduling).
    fn is_rotational(&self) -> bool {
        false
    }

    /// Fill `buf` with the bytes at `offset..offset + buf.len()`.
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Store `data` at `offset`; with `fua`, it is stable when this returns.
    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()>;

    /// Write `data`, which the backend may keep: a backend that buffers the
    /// payload (a cache) takes it without a copy. Defaults to [`Backend::write`].
    async fn write_owned(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        self.write(offset, &data, fua).await
    }

    /// The server may offer plain writes received together as one batch
    /// ([`Backend::write_batch_now`]). Default: no.
    fn batches_writes(&self) -> bool {
        false
    }

    /// Store several plain writes (no FUA), received one after another and
    /// not yet answered, on the caller's thread and without waiting, if the
    /// backend can: one result per write, in order, each as [`Backend::write`]
    /// would give it (a later write of the same bytes wins). `None` when it
    /// cannot (nothing was done): each then runs as a single write. Why: a
    /// cache can append a batch with one lock hold and one device write.
    fn write_batch_now(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        let _ = writes;
        None
    }

    /// Make all completed writes stable.
    async fn flush(&self) -> Result<()>;

    /// Advisory discard of `offset..offset + len`; contents afterwards are unspecified.
    async fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        let _ = (offset, len, fua);
        Ok(())
    }

    /// Make `offset..offset + len` read back as zeroes. `no_hole`: the range must
    /// stay allocated (no deallocation). Default: writes zero buffers in 1 MiB pieces.
    async fn write_zeroes(&self, offset: u64, len: u64, no_hole: bool, fua: bool) -> Result<()> {
        let _ = no_hole;
        const PIECE: u64 = 1 << 20;
        let zeroes = vec![0u8; PIECE.min(len) as usize];
        let mut done = 0u64;
        while done < len {
            let n = PIECE.min(len - done);
            self.write(offset + done, &zeroes[..n as usize], false)
                .await?;
            done += n;
        }
        if fua {
            self.flush().await?;
        }
        Ok(())
    }

    /// Allocation map of `offset..offset + len` for `NBD_CMD_BLOCK_STATUS`
    /// (`base:allocation`), used by nbdcopy/qemu-img to skip zero regions.
    /// Return consecutive extents starting at `offset`; they may cover less
    /// than `len` (the client asks again) and the server trims any excess.
    /// Default: everything is allocated data.
    async fn block_status(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let _ = offset;
        Ok(vec![Extent::data(len)])
    }

    /// Prefetch hint for `offset..offset + len`; the default does nothing.
    async fn cache(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }
}

/// Check that `offset..offset + len` lies within `size`.
pub(crate) fn in_range(offset: u64, len: u64, size: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

/// Error for a range check failure inside a backend (defensive; the server checks first).
pub(crate) fn out_of_range(offset: u64, len: u64, size: u64) -> Error {
    Error::invalid(format!(
        "range {offset}+{len} is past the end of the export ({size} bytes)"
    ))
}
