//! Segment cleaning: which segment to reclaim next. The segment table and
//! the victim rule are the FlashTier policy crate's
//! ([`tiercache_flash::logstore`], [`tiercache_flash::gc::pick_victim`]), the
//! same code the simulator runs.

pub use tiercache_flash::logstore::{pick_victim, SegInfo, SegState};
/// How to choose a victim: the FlashTier policy crate's rule.
pub use tiercache_flash::GcPolicy as VictimPolicy;
