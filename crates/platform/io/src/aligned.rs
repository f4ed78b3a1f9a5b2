//! Zeroed heap buffers with a chosen memory alignment, for `O_DIRECT` I/O.

use std::alloc::{self, Layout};
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A zero-initialised byte buffer whose address is a multiple of `align`
/// (a power of two), as `O_DIRECT` requires.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocate `len` zero bytes aligned to `align`. Fails if `align` is not a
    /// power of two or the size overflows; aborts like `Vec` if memory runs out.
    pub fn zeroed(len: usize, align: usize) -> io::Result<AlignedBuf> {
        // Never allocate zero bytes (undefined for the global allocator).
        let layout = Layout::from_size_align(len.max(1), align).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot allocate an aligned buffer of {len} bytes aligned to {align}: \
                     the alignment must be a power of two and the size at most isize::MAX"
                ),
            )
        })?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Ok(AlignedBuf { ptr, len, layout })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Alignment of the start address.
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("align", &self.align())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for (len, align) in [(0, 4096), (1, 512), (12288, 4096), (100, 65536)] {
            let mut b = AlignedBuf::zeroed(len, align).unwrap();
            assert_eq!(b.as_ptr() as usize % align, 0);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            b.fill(7);
            assert!(b.iter().all(|&x| x == 7));
        }
    }

    #[test]
    fn bad_alignment_is_an_error() {
        let e = AlignedBuf::zeroed(10, 3).unwrap_err();
        assert!(e.to_string().contains("power of two"), "{e}");
    }
}
