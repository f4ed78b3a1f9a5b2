//! Translation layers: map logical pages (SSD addresses or, on an SSC, disk
//! block numbers) to physical flash pages and reclaim space.

pub mod hybrid;
pub mod page;
pub mod page_log;

use crate::flash::Flash;
use crate::FlashError;
use serde::Serialize;

/// Device memory held by a layer's maps.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MapMemory {
    /// Bytes of the block-level (or, page-mapped, the page-level) forward map.
    pub forward_bytes: u64,
    /// Bytes reserved for page-level translations of log blocks.
    pub log_map_bytes: u64,
    /// Bytes of per-block dirty-page bitmaps (SSC: 8 B per mapped data block).
    pub dirty_bitmap_bytes: u64,
}

impl MapMemory {
    /// Total bytes.
    pub fn total(&self) -> u64 {
        self.forward_bytes + self.log_map_bytes + self.dirty_bitmap_bytes
    }
}

/// What a translation layer offers a device.
pub trait Translation: Send {
    /// Write logical page `lpn` (dirty or clean).
    fn write(&mut self, lpn: u64, dirty: bool) -> Result<(), FlashError>;
    /// Read `lpn`: true when mapped (counts a flash read).
    fn read(&mut self, lpn: u64) -> bool;
    /// Whether `lpn` is mapped, without touching flash.
    fn contains(&self, lpn: u64) -> bool;
    /// Dirty state of a mapped page.
    fn is_dirty(&self, lpn: u64) -> Option<bool>;
    /// Unmap `lpn` (trim or evict); true when it was mapped.
    fn remove(&mut self, lpn: u64) -> bool;
    /// Mark a mapped page clean (it becomes a candidate for silent eviction).
    fn set_clean(&mut self, lpn: u64) -> bool;
    /// The flash array.
    fn flash(&self) -> &Flash;
    /// The flash array, to account traffic outside translation (metadata).
    fn flash_mut(&mut self) -> &mut Flash;
    /// Logical pages mapped.
    fn mapped(&self) -> u64;
    /// Device memory for translations.
    fn memory(&self) -> MapMemory;
    /// Log blocks in use (0 for page-mapped layers).
    fn log_blocks(&self) -> u64;
}
