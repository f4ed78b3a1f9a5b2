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
pub use shards::{hash, hash_seeded, sampled, sampled_seeded, Sampling, Shards, MODULUS};
pub use stack::StackDistance;

/// What a request does to one cache line, as the SSD cache's engine splits
/// it (one access per line a request touches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub line: u64,
    /// The request covers the whole line.
    pub whole: bool,
    /// The request covers at least one whole sub-block of the line: a
    /// write-back cache keeps a line a write misses only then (the other
    /// pieces go to the backing device and the slot is freed).
    pub keeps: bool,
}

/// The lines of 2^`shift` bytes, with sub-blocks of `sub` bytes, that `len`
/// bytes at `offset` touch.
pub fn pieces(offset: u64, len: u64, shift: u32, sub: u64) -> impl Iterator<Item = Piece> {
    let end = offset + len;
    let (first, last) = if len == 0 {
        (1, 0)
    } else {
        (offset >> shift, (end - 1) >> shift)
    };
    (first..=last).map(move |line| {
        let start = (line << shift).max(offset);
        let stop = ((line + 1) << shift).min(end);
        let first_whole = start.div_ceil(sub) * sub;
        Piece {
            line,
            whole: stop - start == 1u64 << shift,
            keeps: first_whole + sub <= stop,
        }
    })
}

/// What kind of access: the curves count reads and writes apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}
