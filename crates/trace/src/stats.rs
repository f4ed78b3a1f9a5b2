//! Trace statistics (in progress).
/// Summary of a trace.
pub struct TraceStats;
/// Computes statistics (in progress).
pub fn trace_stats() {}
