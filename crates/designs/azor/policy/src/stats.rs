//! Counters the core keeps. They add up: `hits + misses == block_accesses`,
//! `read_hits <= read_accesses`, and so on (checked in property tests).

use serde::Serialize;

/// Cache behaviour counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub requests: u64,
    pub read_requests: u64,
    pub write_requests: u64,
    pub trim_requests: u64,
    pub flush_requests: u64,
    /// Line-granular accesses: each line a read or write touches.
    pub block_accesses: u64,
    /// Accesses whose needed sub-blocks were all cached.
    pub hits: u64,
    pub read_accesses: u64,
    pub read_hits: u64,
    pub write_accesses: u64,
    pub write_hits: u64,
    /// Read-miss accesses on metadata-class lines, and their hits.
    pub metadata_accesses: u64,
    pub metadata_hits: u64,
    /// Lines that received fill data (read misses and write allocations).
    pub fills: u64,
    /// Lines evicted to make room.
    pub evictions: u64,
    /// Evictions whose victim held dirty data (a writeback before reuse).
    pub dirty_evictions: u64,
    /// Lines whose dirty data was written to the backing device (cleaning and dirty evictions).
    pub writebacks: u64,
    /// Allocations refused by admission (bypass, n-hit, 2LBS).
    pub admission_rejects: u64,
    /// Lines invalidated by writes (write-hdd-inv, read-only) and trims.
    pub invalidations: u64,
    /// Device operations and bytes.
    pub hdd_ops: u64,
    pub hdd_read_bytes: u64,
    pub hdd_write_bytes: u64,
    pub ssd_read_ops: u64,
    pub ssd_write_ops: u64,
    pub ssd_read_bytes: u64,
    pub ssd_write_bytes: u64,
    /// Bytes written by the workload.
    pub workload_write_bytes: u64,
    /// Bytes read by the workload.
    pub workload_read_bytes: u64,
}

impl Stats {
    /// Misses: accesses that needed at least one sub-block from the backing device.
    pub fn misses(&self) -> u64 {
        self.block_accesses - self.hits
    }
    pub fn hit_ratio(&self) -> f64 {
        ratio(self.hits, self.block_accesses)
    }
    pub fn read_hit_ratio(&self) -> f64 {
        ratio(self.read_hits, self.read_accesses)
    }
    pub fn write_hit_ratio(&self) -> f64 {
        ratio(self.write_hits, self.write_accesses)
    }
    /// Cache write amplification (TICA eq. 1): bytes written to the cache per byte the workload wrote.
    pub fn cwaf(&self) -> f64 {
        if self.workload_write_bytes == 0 {
            0.0
        } else {
            self.ssd_write_bytes as f64 / self.workload_write_bytes as f64
        }
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
