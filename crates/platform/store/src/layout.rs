//! Where each region lives on the cache device.
//!
//! ```text
//! 0      superblock copy 0 (4 KiB)
//! 4 KiB  superblock copy 1 (4 KiB)
//! 8 KiB  checkpoint region A  (4 KiB header + slots * entry size, 4 KiB aligned)
//!        checkpoint region B  (same size)
//!        log region (ring of 4 KiB blocks)
//!        data region, aligned to max(line size, 1 MiB): slot i at data_offset + i * line_size
//! ```

use crate::codec::align_up;
use crate::error::{Result, StoreError};

/// Unit of metadata I/O: log blocks, checkpoint headers and superblocks.
pub const BLOCK: u64 = 4096;
/// Offset of the second superblock copy.
pub const SUPERBLOCK_COPY: u64 = BLOCK;
/// Largest number of sub-blocks a line may have (bitmaps are 256 bits).
pub const MAX_SUB_BLOCKS: u32 = 256;
/// Smallest default log region.
const MIN_DEFAULT_LOG: u64 = 4 << 20;
/// Largest default log region.
const MAX_DEFAULT_LOG: u64 = 256 << 20;
/// The data region is aligned to at least this much.
const DATA_ALIGN: u64 = 1 << 20;

/// The computed placement of every region on one cache device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Cache device size in bytes.
    pub dev_size: u64,
    /// Cache line size in bytes (a power of two, at least 4 KiB).
    pub line_size: u32,
    /// Sub-block size in bytes (a power of two, at least 512, dividing the line).
    pub sub_block_size: u32,
    /// Number of line slots in the data region.
    pub slots: u32,
    /// Offsets of checkpoint regions A and B.
    pub checkpoint_offsets: [u64; 2],
    /// Size of each checkpoint region in bytes.
    pub checkpoint_size: u64,
    /// Offset of the log region.
    pub log_offset: u64,
    /// Number of 4 KiB blocks in the log region.
    pub log_blocks: u64,
    /// Offset of slot 0's data.
    pub data_offset: u64,
}

impl Layout {
    /// Sub-blocks per line (1..=256).
    pub fn sub_blocks(&self) -> u32 {
        self.line_size / self.sub_block_size
    }
    /// Bytes of one on-disk valid or dirty bitmap.
    pub fn bitmap_bytes(&self) -> usize {
        bitmap_bytes(self.sub_blocks())
    }
    /// Byte offset of a slot's data on the cache device.
    pub fn slot_offset(&self, slot: u32) -> Option<u64> {
        (slot < self.slots).then(|| self.data_offset + slot as u64 * self.line_size as u64)
    }
    /// Bytes of one checkpoint entry.
    pub fn checkpoint_entry_bytes(&self) -> usize {
        checkpoint_entry_bytes(self.sub_blocks())
    }
    /// End of the data region.
    pub fn data_end(&self) -> u64 {
        self.data_offset
            .saturating_add((self.slots as u64).saturating_mul(self.line_size as u64))
    }
    /// Most slots the checkpoint regions can describe: the largest size
    /// [`Layout::resized`] can grow to (reserved at format by
    /// [`crate::format_reserving`]).
    pub fn max_slots(&self) -> u32 {
        let entry = self.checkpoint_entry_bytes() as u64;
        (self.checkpoint_size.saturating_sub(BLOCK) / entry).min(u32::MAX as u64) as u32
    }
    /// The device size at which [`Layout::max_slots`] slots fit.
    pub fn max_dev_size(&self) -> u64 {
        self.data_offset + self.max_slots() as u64 * self.line_size as u64
    }
    /// The same regions on a device of `dev_size` bytes: as many slots as
    /// fit after the data offset, up to [`Layout::max_slots`]. Refuses a size
    /// that holds no slot and one past what the checkpoints can describe.
    pub fn resized(&self, dev_size: u64) -> Result<Layout> {
        let line = self.line_size as u64;
        let fit = dev_size.saturating_sub(self.data_offset) / line;
        if fit < 1 {
            return Err(StoreError::InvalidParams(format!(
                "a cache device of {dev_size} bytes holds no line: at least {} bytes are needed (its metadata takes {})",
                self.data_offset + line,
                self.data_offset
            )));
        }
        if fit > self.max_slots() as u64 {
            return Err(StoreError::InvalidParams(format!(
                "a cache device of {dev_size} bytes would hold {fit} lines, but the metadata regions were made for at most {} ({} bytes); format the cache with --max-size to reserve room for growing",
                self.max_slots(),
                self.max_dev_size()
            )));
        }
        let mut l = *self;
        l.dev_size = dev_size;
        l.slots = fit as u32;
        l.validate()?;
        Ok(l)
    }
    /// Checks that the regions are in order, do not overlap, fit the device
    /// and that a checkpoint region can hold every slot; says what is wrong.
    pub fn validate(&self) -> Result<()> {
        check_geometry(self.line_size, self.sub_block_size)?;
        let entry = self.checkpoint_entry_bytes() as u64;
        let cp_need = (self.slots as u64)
            .checked_mul(entry)
            .and_then(|b| b.checked_add(BLOCK));
        let ok = self.slots >= 1
            && self.log_blocks >= 2
            && self.checkpoint_offsets[0] >= 2 * BLOCK
            && cp_need.is_some_and(|n| self.checkpoint_size >= n)
            && self.checkpoint_offsets[0]
                .checked_add(self.checkpoint_size)
                .is_some_and(|e| e <= self.checkpoint_offsets[1])
            && self.checkpoint_offsets[1]
                .checked_add(self.checkpoint_size)
                .is_some_and(|e| e <= self.log_offset)
            && self
                .log_blocks
                .checked_mul(BLOCK)
                .and_then(|l| l.checked_add(self.log_offset))
                .is_some_and(|e| e <= self.data_offset)
            && self.data_end() <= self.dev_size
            && self.data_end() != u64::MAX;
        if ok {
            Ok(())
        } else {
            Err(StoreError::Corrupt(format!(
                "inconsistent layout (regions overlap, are out of order or exceed the device): {self:?}"
            )))
        }
    }
}

pub(crate) fn bitmap_bytes(sub_blocks: u32) -> usize {
    sub_blocks.div_ceil(8) as usize
}

/// slot u32, line u64, class u8, valid bitmap, dirty bitmap.
pub(crate) fn checkpoint_entry_bytes(sub_blocks: u32) -> usize {
    4 + 8 + 1 + 2 * bitmap_bytes(sub_blocks)
}

/// Validates line and sub-block sizes.
pub(crate) fn check_geometry(line_size: u32, sub_block: u32) -> Result<()> {
    if !line_size.is_power_of_two() || (line_size as u64) < BLOCK {
        return Err(StoreError::InvalidParams(format!(
            "line size {line_size} must be a power of two of at least 4096 bytes"
        )));
    }
    if !sub_block.is_power_of_two() || sub_block < 512 || sub_block > line_size {
        return Err(StoreError::InvalidParams(format!(
            "sub-block size {sub_block} must be a power of two between 512 and the line size {line_size}"
        )));
    }
    if line_size / sub_block > MAX_SUB_BLOCKS {
        return Err(StoreError::InvalidParams(format!(
            "line size {line_size} / sub-block size {sub_block} = {} sub-blocks; at most {MAX_SUB_BLOCKS} are allowed",
            line_size / sub_block
        )));
    }
    Ok(())
}

/// Computes the layout for a cache device: as many data slots as fit after
/// the metadata regions. `log_bytes` overrides the default log size
/// (the checkpoint size clamped to 4..256 MiB); it is rounded up to 4 KiB.
pub fn layout(
    cache_dev_size: u64,
    line_size: u32,
    sub_block: u32,
    log_bytes: Option<u64>,
) -> Result<Layout> {
    check_geometry(line_size, sub_block)?;
    if let Some(l) = log_bytes {
        if l < 2 * BLOCK {
            return Err(StoreError::InvalidParams(format!(
                "log size {l} bytes is too small; at least {} bytes are needed",
                2 * BLOCK
            )));
        }
    }
    let sub_blocks = line_size / sub_block;
    let entry = checkpoint_entry_bytes(sub_blocks) as u64;
    let line = line_size as u64;
    let data_align = line.max(DATA_ALIGN);
    // Metadata placement for `n` slots; None on overflow.
    let place = |n: u64| -> Option<(u64, u64, u64, u64)> {
        let cp_size = BLOCK + align_up(n.checked_mul(entry)?, BLOCK)?;
        let log = match log_bytes {
            Some(l) => align_up(l, BLOCK)?,
            None => cp_size.clamp(MIN_DEFAULT_LOG, MAX_DEFAULT_LOG),
        };
        let cp0 = 2 * BLOCK;
        let log_off = cp0 + 2 * cp_size;
        let data_off = align_up(log_off.checked_add(log)?, data_align)?;
        Some((cp_size, log_off, log, data_off))
    };
    let fits = |n: u64| -> bool {
        match place(n) {
            Some((_, _, _, data_off)) => n
                .checked_mul(line)
                .and_then(|d| d.checked_add(data_off))
                .is_some_and(|end| end <= cache_dev_size),
            None => false,
        }
    };
    // The metadata size grows with n, so `fits` is monotone: binary search the largest n.
    let (mut lo, mut hi) = (0u64, (cache_dev_size / line).min(u32::MAX as u64));
    if !fits(1) {
        let need = place(1).map(|p| p.3 + line).unwrap_or(u64::MAX);
        return Err(StoreError::InvalidParams(format!(
            "cache device of {cache_dev_size} bytes is too small: at least {need} bytes are needed for one {line_size}-byte line plus metadata"
        )));
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let n = lo;
    let (cp_size, log_off, log, data_off) =
        place(n).ok_or_else(|| StoreError::InvalidParams("layout overflows u64".into()))?;
    Ok(Layout {
        dev_size: cache_dev_size,
        line_size,
        sub_block_size: sub_block,
        slots: n as u32,
        checkpoint_offsets: [2 * BLOCK, 2 * BLOCK + cp_size],
        checkpoint_size: cp_size,
        log_offset: log_off,
        log_blocks: log / BLOCK,
        data_offset: data_off,
    })
}

/// [`layout`] with the metadata regions made for a device of `max_size`
/// bytes (so that [`Layout::resized`] can grow the data region up to it
/// later) and the data region filling `cache_dev_size`. `max_size` below the
/// device size is the device size.
pub fn layout_reserving(
    cache_dev_size: u64,
    line_size: u32,
    sub_block: u32,
    log_bytes: Option<u64>,
    max_size: u64,
) -> Result<Layout> {
    let full = layout(
        max_size.max(cache_dev_size),
        line_size,
        sub_block,
        log_bytes,
    )?;
    if full.dev_size == cache_dev_size {
        return Ok(full);
    }
    full.resized(cache_dev_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_do_not_overlap_and_slots_are_maximal() {
        for &(size, line, sub) in &[
            (64u64 << 20, 4096u32, 4096u32),
            (1 << 30, 65536, 4096),
            (100 << 20, 1 << 20, 4096),
            (3 << 30, 4096, 512),
        ] {
            let l = layout(size, line, sub, None).unwrap();
            assert_eq!(
                l.checkpoint_offsets[1],
                l.checkpoint_offsets[0] + l.checkpoint_size
            );
            assert_eq!(l.log_offset, l.checkpoint_offsets[1] + l.checkpoint_size);
            assert!(l.data_offset >= l.log_offset + l.log_blocks * BLOCK);
            assert_eq!(l.data_offset % (line as u64).max(1 << 20), 0);
            // The checkpoint holds every slot mapped.
            assert!(
                l.checkpoint_size >= BLOCK + l.slots as u64 * l.checkpoint_entry_bytes() as u64
            );
            let end = l.data_offset + l.slots as u64 * line as u64;
            assert!(end <= size);
            // Maximal: one more slot would not fit with its own (larger) metadata.
            let more = (l.slots + 1) as u64;
            let cp = BLOCK + align_up(more * l.checkpoint_entry_bytes() as u64, BLOCK).unwrap();
            let log = cp.clamp(MIN_DEFAULT_LOG, MAX_DEFAULT_LOG);
            let data = align_up(2 * BLOCK + 2 * cp + log, (line as u64).max(1 << 20)).unwrap();
            assert!(data + more * line as u64 > size);
        }
    }

    #[test]
    fn hand_computed_small_layout() {
        // 16 MiB device, 64 KiB lines, 4 KiB sub-blocks: entry = 4+8+1+2*2 = 17 bytes.
        // Default log 4 MiB; checkpoints tiny (8 KiB each); data starts at 5 MiB
        // (8K + 16K + 4M = 4.02 MiB, aligned to 1 MiB), leaving 11 MiB = 176 lines.
        let l = layout(16 << 20, 65536, 4096, None).unwrap();
        assert_eq!(l.checkpoint_size, 8192);
        assert_eq!(l.log_offset, 8192 + 2 * 8192);
        assert_eq!(l.log_blocks, 1024);
        assert_eq!(l.data_offset, 5 << 20);
        assert_eq!(l.slots, 176);
        assert_eq!(l.slot_offset(175), Some((5 << 20) + 175 * 65536));
        assert_eq!(l.slot_offset(176), None);
    }

    #[test]
    fn bad_geometry_is_refused_with_a_reason() {
        let e = layout(1 << 30, 3000, 512, None).unwrap_err().to_string();
        assert!(e.contains("power of two"), "{e}");
        let e = layout(1 << 30, 1 << 20, 512, None).unwrap_err().to_string();
        assert!(e.contains("at most 256"), "{e}");
        let e = layout(1 << 20, 65536, 4096, None).unwrap_err().to_string();
        assert!(e.contains("too small"), "{e}");
    }
}

#[cfg(test)]
mod resize_tests {
    use super::*;

    #[test]
    fn a_reserving_layout_grows_and_shrinks_within_its_checkpoints() {
        let l = layout_reserving(16 << 20, 4096, 4096, None, 64 << 20).unwrap();
        let full = layout(64 << 20, 4096, 4096, None).unwrap();
        assert_eq!(l.data_offset, full.data_offset);
        assert!(
            l.max_slots() as u64 * l.checkpoint_entry_bytes() as u64 + BLOCK <= l.checkpoint_size
        );
        assert!(l.max_slots() >= full.slots);
        assert_eq!(l.slots as u64, ((16u64 << 20) - l.data_offset) / 4096);
        let grown = l.resized(64 << 20).unwrap();
        assert_eq!(grown.slots, full.slots);
        assert_eq!(grown.resized(16 << 20).unwrap(), l);
        let e = l.resized(1 << 30).unwrap_err().to_string();
        assert!(e.contains("--max-size"), "{e}");
        let e = l.resized(l.data_offset).unwrap_err().to_string();
        assert!(e.contains("holds no line"), "{e}");
    }

    #[test]
    fn a_plain_layout_cannot_grow_past_its_device() {
        let l = layout(64 << 20, 65536, 4096, None).unwrap();
        assert!(l.max_slots() >= l.slots);
        assert!(l.resized(l.max_dev_size()).is_ok());
        assert!(l.resized(l.max_dev_size() + 4 * 65536 * 4096).is_err());
        // Reserving less than the device is the plain layout.
        assert_eq!(
            layout_reserving(64 << 20, 65536, 4096, None, 1 << 20).unwrap(),
            l
        );
    }
}

#[cfg(test)]
mod validate_tests {
    use super::*;

    #[test]
    fn computed_layouts_validate_and_damaged_ones_do_not() {
        let l = layout(1 << 30, 65536, 4096, None).unwrap();
        l.validate().unwrap();
        let mut bad = l;
        bad.log_offset -= BLOCK; // log overlaps checkpoint B
        assert!(bad.validate().is_err());
        let mut bad = l;
        bad.slots += 1; // data past the device end
        assert!(bad.validate().is_err());
        let mut bad = l;
        bad.data_offset = u64::MAX - 10; // overflow must not pass
        assert!(bad.validate().is_err());
    }
}
