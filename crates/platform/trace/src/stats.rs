//! Summary statistics of a trace: mix, volume, footprint, sizes, sequentiality.

use rustc_hash::FxHashSet;
use serde::Serialize;
use tiercache_block::IoKind;

use crate::error::{Result, TraceError};
use crate::Record;

/// One power-of-two bucket of the request-size histogram: requests with
/// `min_bytes <= len < 2 * min_bytes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SizeBucket {
    /// Lower bound of the bucket in bytes (a power of two; 0 for empty requests).
    pub min_bytes: u64,
    /// Requests in the bucket.
    pub count: u64,
}

/// Statistics of a whole trace, as computed by [`trace_stats`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceStats {
    /// All records (reads + writes + trims + flushes).
    pub requests: u64,
    /// Requests by kind.
    pub reads: u64,
    pub writes: u64,
    pub trims: u64,
    pub flushes: u64,
    /// Bytes requested by kind.
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub bytes_trimmed: u64,
    /// Block size used for the footprint, in bytes.
    pub line_size: u32,
    /// Distinct `line_size` blocks touched by reads, writes or trims.
    pub unique_blocks: u64,
    /// `unique_blocks * line_size`.
    pub footprint_bytes: u64,
    /// Distinct blocks touched by reads / by writes.
    pub unique_blocks_read: u64,
    pub unique_blocks_written: u64,
    /// Non-empty power-of-two size buckets, smallest first.
    pub size_histogram: Vec<SizeBucket>,
    /// Mean request length in bytes (0 for an empty trace).
    pub mean_request_bytes: f64,
    /// Fraction of requests starting exactly where the previous request of
    /// the same kind ended (the first request of each kind never counts).
    pub sequential_fraction: f64,
    /// Requests whose class is metadata or journal.
    pub metadata_requests: u64,
    /// `metadata_requests / requests` (0 for an empty trace).
    pub metadata_share: f64,
    /// Last minus first time, in ns (times of the trace as read).
    pub duration_ns: u64,
    /// Lowest byte touched (0 for an empty trace).
    pub min_offset: u64,
    /// Highest byte touched, exclusive (0 for an empty trace).
    pub max_end: u64,
}

/// Reads `records` to the end and summarises them. `line_size` (> 0) is the
/// block size of the footprint: a request covers every `line_size` block it
/// overlaps. Stops at the first error of the reader.
pub fn trace_stats<I>(records: I, line_size: u32) -> Result<TraceStats>
where
    I: IntoIterator<Item = Result<Record>>,
{
    if line_size == 0 {
        return Err(TraceError::InvalidArgument("line size must be > 0".into()));
    }
    let mut acc = Acc::new(line_size);
    for rec in records {
        acc.add(&rec?);
    }
    Ok(acc.finish())
}

/// Running state of [`trace_stats`]: the counters kept directly in the
/// result plus the sets and sums the derived fields are computed from.
struct Acc {
    s: TraceStats,
    all: FxHashSet<u64>,
    read_set: FxHashSet<u64>,
    write_set: FxHashSet<u64>,
    /// Requests by power-of-two length (index: log2), empty requests at 32.
    hist: [u64; 33],
    /// End offset of the previous request of each kind (read, write, trim, flush).
    prev_end: [Option<u64>; 4],
    sequential: u64,
    total_bytes: u128,
    t_min: u64,
    t_max: u64,
}

impl Acc {
    /// Empty statistics for blocks of `line_size` bytes.
    fn new(line_size: u32) -> Acc {
        Acc {
            s: TraceStats {
                requests: 0,
                reads: 0,
                writes: 0,
                trims: 0,
                flushes: 0,
                bytes_read: 0,
                bytes_written: 0,
                bytes_trimmed: 0,
                line_size,
                unique_blocks: 0,
                footprint_bytes: 0,
                unique_blocks_read: 0,
                unique_blocks_written: 0,
                size_histogram: Vec::new(),
                mean_request_bytes: 0.0,
                sequential_fraction: 0.0,
                metadata_requests: 0,
                metadata_share: 0.0,
                duration_ns: 0,
                min_offset: u64::MAX,
                max_end: 0,
            },
            all: FxHashSet::default(),
            read_set: FxHashSet::default(),
            write_set: FxHashSet::default(),
            hist: [0u64; 33],
            prev_end: [None; 4],
            sequential: 0,
            total_bytes: 0,
            t_min: u64::MAX,
            t_max: 0,
        }
    }

    /// Account one record: mix, sizes, sequentiality, class, time and footprint.
    fn add(&mut self, r: &Record) {
        let s = &mut self.s;
        s.requests += 1;
        let len = u64::from(r.len);
        let end = r.offset.saturating_add(len);
        self.total_bytes += u128::from(len);
        let k = count_kind(s, r.kind, len);
        if self.prev_end[k] == Some(r.offset) {
            self.sequential += 1;
        }
        self.prev_end[k] = Some(end);
        if r.len > 0 {
            self.hist[31 - r.len.leading_zeros() as usize] += 1;
        } else {
            self.hist[32] += 1;
        }
        if r.class.is_some_and(|c| c.is_metadata()) {
            s.metadata_requests += 1;
        }
        self.t_min = self.t_min.min(r.time_ns);
        self.t_max = self.t_max.max(r.time_ns);
        if r.kind != IoKind::Flush && len > 0 {
            s.min_offset = s.min_offset.min(r.offset);
            s.max_end = s.max_end.max(end);
            self.touch(r);
        }
    }

    /// Add the `line_size` blocks `r` overlaps to the footprint sets.
    fn touch(&mut self, r: &Record) {
        for b in r.blocks(self.s.line_size) {
            self.all.insert(b);
            match r.kind {
                IoKind::Read => {
                    self.read_set.insert(b);
                }
                IoKind::Write => {
                    self.write_set.insert(b);
                }
                _ => {}
            }
        }
    }

    /// Derive footprint, histogram, means and shares from the running state.
    fn finish(self) -> TraceStats {
        let mut s = self.s;
        if s.min_offset == u64::MAX {
            s.min_offset = 0;
        }
        s.unique_blocks = self.all.len() as u64;
        s.footprint_bytes = s.unique_blocks.saturating_mul(u64::from(s.line_size));
        s.unique_blocks_read = self.read_set.len() as u64;
        s.unique_blocks_written = self.write_set.len() as u64;
        s.size_histogram = size_histogram(&self.hist);
        if s.requests > 0 {
            let n = s.requests as f64;
            s.mean_request_bytes = self.total_bytes as f64 / n;
            s.sequential_fraction = self.sequential as f64 / n;
            s.metadata_share = s.metadata_requests as f64 / n;
            s.duration_ns = self.t_max - self.t_min;
        }
        s
    }
}

/// Count a request of `kind` and `len` bytes in `s`; returns the kind's index
/// (read, write, trim, flush) for the per-kind sequentiality state.
fn count_kind(s: &mut TraceStats, kind: IoKind, len: u64) -> usize {
    match kind {
        IoKind::Read => {
            s.reads += 1;
            s.bytes_read += len;
            0
        }
        IoKind::Write => {
            s.writes += 1;
            s.bytes_written += len;
            1
        }
        IoKind::Trim => {
            s.trims += 1;
            s.bytes_trimmed += len;
            2
        }
        IoKind::Flush => {
            s.flushes += 1;
            3
        }
    }
}

/// Non-empty buckets of `hist`, smallest first (empty requests as bucket 0).
fn size_histogram(hist: &[u64; 33]) -> Vec<SizeBucket> {
    let mut buckets: Vec<SizeBucket> = hist[..32]
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| SizeBucket {
            min_bytes: 1u64 << i,
            count: c,
        })
        .collect();
    if hist[32] > 0 {
        buckets.insert(
            0,
            SizeBucket {
                min_bytes: 0,
                count: hist[32],
            },
        );
    }
    buckets
}
