//! The DRAM level of TICA: a read-cache partition (LRU of pages brought in by
//! read misses) and a write-cache partition (dirty pages waiting for, or in,
//! their asynchronous flush to the RO-SSD), resized at run time as
//! Algorithm 1 describes.
//!
//! The write partition starts at the baseline size `write_base`. When a write
//! finds it full it grows by one page, but above the baseline only every
//! `W / write_base`-th time (a growth credit of `write_base / W` per full
//! event), so it does not crowd out read hits; when it does not grow the
//! write waits for a flush to free a slot. When a read miss finds the read
//! partition full and the write partition is above its baseline, the write
//! partition shrinks by one page (`W = max(write_base, W - 1)`); the read
//! partition only gets that slot if no dirty page still occupies it
//! (the flush finished "before the disk I/O"), otherwise it evicts its LRU
//! page.

use hashlink::LinkedHashMap;
use rustc_hash::FxBuildHasher;

use crate::Page;

type Map<V> = LinkedHashMap<Page, V, FxBuildHasher>;

/// A dirty page of the write partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteSlot {
    /// Generation of this copy: a rewrite makes older flush tokens stale.
    pub gen: u64,
    /// Its flush to the RO-SSD has been issued.
    pub flushing: bool,
}

/// DRAM read and write partitions (see the module documentation).
#[derive(Debug)]
pub struct Dram {
    capacity: usize,
    write_base: usize,
    write_cap: usize,
    grow_credit: f64,
    read: Map<()>,
    /// Dirty pages in arrival order (flush order).
    write: Map<WriteSlot>,
    flushing: usize,
}

impl Dram {
    /// `capacity` pages in all (at least 2); the write partition's baseline
    /// `write_base` is clamped to `1..capacity`.
    pub fn new(capacity: usize, write_base: usize) -> Dram {
        let capacity = capacity.max(2);
        let write_base = write_base.clamp(1, capacity - 1);
        Dram {
            capacity,
            write_base,
            write_cap: write_base,
            grow_credit: 0.0,
            read: Map::default(),
            write: Map::default(),
            flushing: 0,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Current write partition size `W`.
    pub fn write_cap(&self) -> usize {
        self.write_cap
    }
    pub fn write_base(&self) -> usize {
        self.write_base
    }
    /// Pages in the write partition (pending or flushing).
    pub fn write_len(&self) -> usize {
        self.write.len()
    }
    pub fn read_len(&self) -> usize {
        self.read.len()
    }
    /// Pages whose flush is in flight.
    pub fn flushing(&self) -> usize {
        self.flushing
    }
    /// Space the read partition may use now: what neither the write
    /// partition's size nor its dirty pages take.
    pub fn read_cap(&self) -> usize {
        self.capacity - self.write_cap.max(self.write.len())
    }
    pub fn in_read(&self, p: Page) -> bool {
        self.read.contains_key(&p)
    }
    pub fn write_slot(&self, p: Page) -> Option<WriteSlot> {
        self.write.get(&p).copied()
    }
    /// Pages of the write partition, oldest first.
    pub fn write_pages(&self) -> impl Iterator<Item = (Page, WriteSlot)> + '_ {
        self.write.iter().map(|(p, s)| (*p, *s))
    }

    /// A read hit in the read partition: make `p` most recently used.
    pub fn touch_read(&mut self, p: Page) -> bool {
        self.read.to_back(&p).is_some()
    }

    /// Drop any copy of `p` (a newer write, a trim, or a write-back).
    pub fn remove(&mut self, p: Page) {
        self.read.remove(&p);
        if let Some(s) = self.write.remove(&p) {
            if s.flushing {
                self.flushing -= 1;
            }
        }
    }

    /// Algorithm 1, lines 5-6: the write partition is full; try to grow it.
    /// Returns whether it grew; if so the caller must evict read pages until
    /// `read_len() <= read_cap()` ([`Dram::evict_read`]).
    pub fn try_grow_write(&mut self) -> bool {
        if self.write_cap + 1 >= self.capacity {
            return false;
        }
        self.grow_credit += self.write_base as f64 / self.write_cap as f64;
        if self.grow_credit >= 1.0 - 1e-9 {
            self.grow_credit -= 1.0;
            self.write_cap += 1;
            true
        } else {
            false
        }
    }

    /// Whether a new dirty page fits in the write partition now.
    pub fn write_full(&self) -> bool {
        self.write.len() >= self.write_cap
    }

    /// Algorithm 1, line 29: a read miss found the read partition full;
    /// shrink the write partition towards its baseline.
    pub fn shrink_write(&mut self) {
        self.write_cap = self.write_base.max(self.write_cap.saturating_sub(1));
    }

    /// Evict the least recently used read page.
    pub fn evict_read(&mut self) -> Option<Page> {
        self.read.pop_front().map(|(p, ())| p)
    }

    /// Insert a page brought in by a read miss (the caller made room).
    pub fn insert_read(&mut self, p: Page) {
        self.read.insert(p, ());
    }

    /// Insert a dirty page with generation `gen` (the caller made room).
    pub fn insert_write(&mut self, p: Page, gen: u64) {
        self.remove(p);
        self.write.insert(
            p,
            WriteSlot {
                gen,
                flushing: false,
            },
        );
    }

    /// Oldest page whose flush has not started yet.
    pub fn oldest_pending(&self) -> Option<(Page, u64)> {
        self.write
            .iter()
            .find(|(_, s)| !s.flushing)
            .map(|(p, s)| (*p, s.gen))
    }

    /// Oldest page whose flush is in flight.
    pub fn oldest_flushing(&self) -> Option<(Page, u64)> {
        if self.flushing == 0 {
            return None;
        }
        self.write
            .iter()
            .find(|(_, s)| s.flushing)
            .map(|(p, s)| (*p, s.gen))
    }

    /// Mark the flush of `p` as started.
    pub fn mark_flushing(&mut self, p: Page) {
        if let Some(s) = self.write.get_mut(&p) {
            if !s.flushing {
                s.flushing = true;
                self.flushing += 1;
            }
        }
    }

    /// The flush of `p` at generation `gen` completed: the page leaves DRAM.
    /// Returns false for a stale token.
    pub fn complete_flush(&mut self, p: Page, gen: u64) -> bool {
        match self.write.get(&p) {
            Some(s) if s.gen == gen && s.flushing => {
                self.write.remove(&p);
                self.flushing -= 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_partition_grows_every_time_at_baseline_then_slower() {
        // capacity 10, baseline 2: at W = 2 the credit is 2/2 = 1 -> grow;
        // at W = 3 the credit is 2/3 per event -> grows on the 2nd event
        // (2/3 + 2/3 = 4/3 >= 1, remainder 1/3); at W = 4 credit 1/3 + 1/2
        // < 1, then + 1/2 = 4/3 -> grows on the 2nd event again.
        let mut d = Dram::new(10, 2);
        assert_eq!(d.write_cap(), 2);
        assert!(d.try_grow_write());
        assert_eq!(d.write_cap(), 3);
        assert!(!d.try_grow_write());
        assert!(d.try_grow_write());
        assert_eq!(d.write_cap(), 4);
        assert!(!d.try_grow_write());
        assert!(d.try_grow_write());
        assert_eq!(d.write_cap(), 5);
    }

    #[test]
    fn write_partition_never_takes_the_last_read_page() {
        let mut d = Dram::new(3, 2);
        assert!(
            !d.try_grow_write(),
            "W = 2 of 3: growing would leave no read space"
        );
        assert_eq!(d.write_cap(), 2);
        assert_eq!(d.read_cap(), 1);
    }

    #[test]
    fn shrink_stops_at_baseline_and_dirty_pages_keep_their_slots() {
        let mut d = Dram::new(8, 2);
        assert!(d.try_grow_write()); // W = 3
        for p in 0..3 {
            d.insert_write(p, 1);
        }
        d.shrink_write();
        assert_eq!(d.write_cap(), 2);
        // Three dirty pages still occupy three slots: read space is 8 - 3.
        assert_eq!(d.read_cap(), 5);
        d.shrink_write();
        assert_eq!(d.write_cap(), 2, "never below the baseline");
        d.mark_flushing(0);
        assert!(d.complete_flush(0, 1));
        assert_eq!(d.read_cap(), 6);
    }

    #[test]
    fn stale_flush_tokens_are_ignored() {
        let mut d = Dram::new(8, 2);
        d.insert_write(7, 1);
        d.mark_flushing(7);
        d.insert_write(7, 2); // rewritten while its flush was in flight
        assert_eq!(d.flushing(), 0);
        assert!(!d.complete_flush(7, 1));
        assert_eq!(
            d.write_slot(7),
            Some(WriteSlot {
                gen: 2,
                flushing: false
            })
        );
        assert_eq!(d.oldest_pending(), Some((7, 2)));
    }

    #[test]
    fn read_partition_is_lru() {
        let mut d = Dram::new(8, 2);
        for p in [1, 2, 3] {
            d.insert_read(p);
        }
        assert!(d.touch_read(1));
        assert_eq!(d.evict_read(), Some(2));
        assert_eq!(d.evict_read(), Some(3));
        assert_eq!(d.evict_read(), Some(1));
        assert_eq!(d.evict_read(), None);
    }
}
