//! Segment cleaning: which segment to reclaim next. The segment table and
//! the victim rule are the FlashTier policy crate's
//! ([`tiercache_flashtier_policy::logstore`], [`tiercache_flashtier_policy::gc::pick_victim`]), the
//! same code the simulator runs.

pub use tiercache_flashtier_policy::logstore::{pick_victim, SegInfo, SegState};
/// How to choose a victim: the FlashTier policy crate's rule.
pub use tiercache_flashtier_policy::GcPolicy as VictimPolicy;
