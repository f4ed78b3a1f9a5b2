//! The store's metadata memory: what a cache of a given geometry holds in
//! host memory at most, whatever it caches. `format` refuses a cache whose
//! metadata would exceed the machine's allowance
//! ([`tiercache_runtime::memory::metadata_allowance`]) and `open` refuses to
//! serve one, with the same one line ([`check_fits`]).
//!
//! Per slot (a 4 KiB block of cache), at most:
//! - the unified map's table: its entry width (5 to 8 bytes, from the
//!   backing device's and the cache's sizes) over the load factor 0.9,
//!   allocated whole when the cache is opened ([`SparseMap::table_bytes`]);
//! - write-back only: the ordered index of dirty blocks,
//!   [`DIRTY_INDEX_BYTES`] per dirty block, counted as if every block of
//!   the data area were dirty;
//! - one bit (the `shadows` set);
//! - compressed layout: [`COMPRESSED_SLOT_BYTES`] (record places, and the
//!   places recovery found);
//!
//! and per segment [`SEGMENT_BYTES`] (its entry in the segment table and the
//! free list, and recovery's per-segment tables). Checkpoints are written
//! and read in chunks of [`crate::checkpoint::CHUNK`] bytes, never as a
//! copy of the map. Everything else is a fixed overhead (threads, buffers,
//! the open segment's summary) independent of the cache's size.

use tiercache_flashtier_policy::sparse::{SparseMap, DIRTY_INDEX_BYTES};
use tiercache_runtime::memory::{check_allowance, human_bytes};

use crate::layout::{Superblock, WritePolicy};

/// Host bytes per segment: its entry in the segment table (16) and in the
/// free list (4), the checkpoint's segment table (8), recovery's journal
/// marks, last lives and sequence numbers (17), rounded up.
pub const SEGMENT_BYTES: u64 = 64;
/// Compressed layout: host bytes per slot of the record places (4) and,
/// while recovering, of which places are known (1).
pub const COMPRESSED_SLOT_BYTES: u64 = 5;

/// The metadata memory of a cache, by part (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataMemory {
    /// The unified map's table.
    pub map: u64,
    /// The dirty index with every data block dirty (0 in write-through).
    pub dirty_index: u64,
    /// One bit per slot.
    pub shadows: u64,
    /// Per segment.
    pub segments: u64,
    /// Compressed layout: record places.
    pub records: u64,
    /// Slots of the cache.
    pub slots: u64,
}

impl MetadataMemory {
    /// The bound, in bytes.
    pub fn total(&self) -> u64 {
        self.map + self.dirty_index + self.shadows + self.segments + self.records
    }
    /// The bound per slot (4 KiB of cache), in bytes.
    pub fn per_slot(&self) -> f64 {
        self.total() as f64 / self.slots.max(1) as f64
    }
}

/// The most metadata memory a cache with superblock `sb` takes.
pub fn metadata_memory(sb: &Superblock) -> Result<MetadataMemory, String> {
    let slots = sb.slots();
    let g = sb.geometry();
    let data_blocks = sb.nsegs as u64 * g.phys_blocks() as u64;
    Ok(MetadataMemory {
        map: SparseMap::table_bytes(slots, sb.backing_blocks(), slots)?,
        dirty_index: match sb.write_policy {
            WritePolicy::WriteBack => data_blocks * DIRTY_INDEX_BYTES as u64,
            WritePolicy::WriteThrough => 0,
        },
        shadows: slots.div_ceil(64) * 8,
        segments: sb.nsegs as u64 * SEGMENT_BYTES,
        records: if g.is_compressed() {
            slots * COMPRESSED_SLOT_BYTES
        } else {
            0
        },
        slots,
    })
}

/// Refuse (one line) a cache whose metadata would exceed the machine's
/// allowance, saying how large a cache would fit.
pub fn check_fits(sb: &Superblock) -> Result<(), String> {
    let m = metadata_memory(sb)?;
    let cache = sb.nsegs as u64 * sb.seg_bytes;
    let what = format!(
        "a log-structured cache of {} ({} slots of 4 KiB, {:.1} B each)",
        human_bytes(cache),
        m.slots,
        m.per_slot()
    );
    check_allowance(&what, m.total(), |allowance| {
        let fits = (cache as f64 * allowance as f64 / m.total() as f64) as u64;
        let fits = fits / (1 << 30) * (1 << 30);
        format!(
            "the block size is fixed at 4 KiB and the segment size does not change this: \
             format at most --size {} (or {} with --write-policy write-through)",
            gib(fits),
            gib(
                ((cache as f64 * allowance as f64 / (m.total() - m.dirty_index).max(1) as f64)
                    as u64)
                    / (1 << 30)
                    * (1 << 30)
            )
        )
    })
}

/// A size for `--size` in whole GiB.
fn gib(b: u64) -> String {
    format!("{}GiB", b >> 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_of_common_geometries() {
        let mut sb = crate::layout::plan(1 << 40, 1 << 20).unwrap();
        sb.backing_size = 4 << 40;
        let m = metadata_memory(&sb).unwrap();
        // 1 TiB of 1 MiB segments: 254 slots each; 8-byte entries (31 + 28 + 1
        // bits) at a load of 0.9, 20 B of dirty index, a bit, 64 B per segment.
        assert_eq!(m.slots, sb.nsegs as u64 * 254);
        assert!(
            (8.88..8.90).contains(&(m.map as f64 / m.slots as f64)),
            "{m:?}"
        );
        assert!((29.2..29.35).contains(&m.per_slot()), "{m:?}");
        sb.write_policy = WritePolicy::WriteThrough;
        assert!(metadata_memory(&sb).unwrap().per_slot() < 9.5);
    }
}
