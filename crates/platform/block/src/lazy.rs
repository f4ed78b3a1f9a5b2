//! Arrays sized by the cache that take memory only where they are written.
//!
//! A cache's per-slot and per-set tables have one entry per slot of the
//! nominal cache (2^28 slots for 1 TiB of 4 KiB lines), while a simulation
//! touches the slots its trace fills. [`Paged`] is such a table: fixed
//! length, every entry starting at one fill value, pages of [`PAGE`] entries
//! allocated on the first write into them. Reads of an untouched page return
//! the fill value without allocating.

use std::ops::{Index, IndexMut};

const PAGE_SHIFT: u32 = 10;
/// Entries per page.
pub const PAGE: usize = 1 << PAGE_SHIFT;
const MASK: usize = PAGE - 1;

/// A fixed-length array whose pages are allocated on first write.
#[derive(Clone, Debug)]
pub struct Paged<T: Copy> {
    pages: Vec<Option<Box<[T; PAGE]>>>,
    fill: T,
    len: usize,
}

impl<T: Copy> Paged<T> {
    /// `len` entries, all `fill`; nothing allocated yet.
    pub fn new(len: usize, fill: T) -> Self {
        Paged {
            pages: Vec::new(),
            fill,
            len,
        }
    }

    /// Number of entries (touched or not).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the array would take fully allocated, as a plain array
    /// (the design's footprint, which metadata figures report).
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// Append an entry.
    pub fn push(&mut self, v: T) {
        self.len += 1;
        let i = self.len - 1;
        self[i] = v;
    }

    /// Indices of the entries in allocated pages (a superset of those ever
    /// written), in ascending order.
    pub fn touched(&self) -> impl Iterator<Item = usize> + '_ {
        let len = self.len;
        self.pages
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .flat_map(move |(i, _)| (i << PAGE_SHIFT)..((i + 1) << PAGE_SHIFT).min(len))
    }

    /// Bytes allocated now (pages and the page table).
    pub fn allocated_bytes(&self) -> usize {
        let pages = self.pages.iter().filter(|p| p.is_some()).count();
        pages * PAGE * std::mem::size_of::<T>() + self.pages.capacity() * 8
    }
}

impl<T: Copy> Index<usize> for Paged<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        debug_assert!(i < self.len, "index {i} out of {}", self.len);
        match self.pages.get(i >> PAGE_SHIFT) {
            Some(Some(p)) => &p[i & MASK],
            _ => &self.fill,
        }
    }
}

impl<T: Copy> IndexMut<usize> for Paged<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        assert!(i < self.len, "index {i} out of {}", self.len);
        let pi = i >> PAGE_SHIFT;
        if pi >= self.pages.len() {
            self.pages.resize_with(pi + 1, || None);
        }
        let fill = self.fill;
        &mut self.pages[pi].get_or_insert_with(|| Box::new([fill; PAGE]))[i & MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fill_until_written_and_allocates_only_touched_pages() {
        let mut a = Paged::new(1 << 30, 7u32);
        assert_eq!(a[123_456_789], 7);
        assert_eq!(a.allocated_bytes(), 0);
        a[123_456_789] = 1;
        a[5] = 2;
        assert_eq!((a[123_456_789], a[5], a[6]), (1, 2, 7));
        assert!(a.allocated_bytes() < 2 * PAGE * 4 + (1 << 30) / PAGE * 8);
        let t: Vec<usize> = a.touched().collect();
        assert_eq!(t.len(), 2 * PAGE);
        assert!(t.contains(&5) && t.contains(&123_456_789));
        assert_eq!(a.capacity(), 1 << 30);
        let mut b = Paged::new(0, 0u8);
        b.push(3);
        b.push(4);
        assert_eq!((b.len(), b[0], b[1]), (2, 3, 4));
    }
}
