//! Miss-ratio curves in one pass over a stream of cache-line accesses.
//!
//! - [`StackDistance`]: exact LRU stack distances (Mattson), in O(log M) per
//!   access with a Fenwick tree over last-access times, M the lines live in
//!   the stack. A line removed from every cache (a trim) leaves a hole, the
//!   free slot it frees, which the next insertion above it takes, so the
//!   distances stay those of a cache that does not refill a freed slot from
//!   below.
//! - [`Curve`]: hit counts by stack distance, queried at any cache size.
//! - [`Shards`]: SHARDS (Waldspurger et al., FAST'15): spatially hashed
//!   sampling of lines at a fixed rate, or of at most a fixed number of
//!   lines (the rate then falls as the sample fills), with the paper's
//!   adjustment of the first bucket by the difference between the expected
//!   and the actual sampled references.
//!
//! Memory: [`StackDistance`] keeps per live line a hash entry and up to two
//! slots of its time array and Fenwick tree; with [`Curve::exact`]'s one
//! 16-byte counter per distance seen (at most the distinct lines), about 70
//! bytes per distinct line (67 measured on the ARC OLTP trace). [`Shards`]
//! with a fixed size keeps at most that many lines and a histogram of at
//! most [`QUANT_BUCKETS`] buckets (about 450 KiB): memory independent of
//! the trace.

mod curve;
mod fenwick;
mod shards;
mod stack;

pub use curve::{Curve, QUANT_BUCKETS};
pub use fenwick::Fenwick;
pub use shards::{hash, sampled, Sampling, Shards, MODULUS};
pub use stack::StackDistance;

/// What kind of access: the curves count reads and writes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}
