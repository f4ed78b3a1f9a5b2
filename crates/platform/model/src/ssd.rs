//! Flash SSD model: per-page array latency plus channel transfer, with
//! `channels` independent units.
//!
//! An operation of `P = ceil(len / page_bytes)` pages is striped over
//! `k = min(P, channels)` channels, which start it together (FIFO: it waits
//! for the `k` earliest-free channels). Each channel handles `ceil(P / k)` or
//! `floor(P / k)` pages, one after another, so the operation takes
//! `command_overhead + ceil(P / k) * page_time`, with
//! - read `page_time = page_read + page_bytes / channel_transfer_rate`,
//! - write `page_time = page_write + block_erase / pages_per_block +
//!   page_bytes / channel_transfer_rate` (the erase of a block amortized over
//!   the pages written into it; set `block_erase_us = 0` when a separate FTL
//!   model charges erases and garbage collection explicitly).
//!
//! Trim costs `command_overhead` on one channel. Flush is a barrier: it
//! completes `command_overhead` after every earlier operation has completed,
//! without holding a channel. A zero-length read or write costs
//! `command_overhead`. No garbage collection, no write buffer, no host-link
//! limit.

use serde::{Deserialize, Serialize};

use crate::profile::{check_at_least, check_positive, ProfileError};
use crate::queue::Units;
use crate::stats::DeviceStats;
use crate::{DeviceModel, IoKind, ModelOp};

/// Most channels a profile may ask for.
pub const MAX_SSD_CHANNELS: u32 = 1024;

/// SSD parameters (TOML section `[ssd]`).
///
/// Defaults: FlashTier (Saxena et al., TOS 2014) Table IV flash timings, with
/// the channel count and bus rate chosen so that sequential rates match the
/// Intel X25-E of Azor's platform (Azor thesis Table 1.1: 277/202 MB/s R/W,
/// 0.17 ms response time). Resulting 4 KiB latencies: read 0.179 ms, write
/// 0.215 ms; sequential read 245 MB/s, write 202 MB/s. DiskSim's SSD
/// validation means (shared notes, traces.md) are 0.13 ms for 4K reads and
/// 0.31-0.33 ms for 4K writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SsdParams {
    /// Independent flash channels serving operations concurrently.
    /// Default 10 (FlashTier Table IV: 10 flash planes; the X25-E also has
    /// 10 channels).
    pub channels: u32,
    /// Flash page size in bytes. Default 4096 (FlashTier Table IV).
    pub page_bytes: u64,
    /// Array read latency per page, µs. Default 65 (FlashTier Table IV).
    pub page_read_us: f64,
    /// Array program latency per page, µs. Default 85 (FlashTier Table IV).
    pub page_write_us: f64,
    /// Block erase latency, µs, amortized over `pages_per_block` writes.
    /// Default 1000 (FlashTier Table IV).
    pub block_erase_us: f64,
    /// Pages per erase block. Default 64 (FlashTier Table IV).
    pub pages_per_block: u64,
    /// Per-channel bus transfer rate, MB/s (MB = 10^6 B). Default 40: the
    /// 25 ns/byte ONFI 1.0 bus that DiskSim's SSD model uses, which with 10
    /// channels reproduces the X25-E's 202 MB/s sequential writes.
    pub channel_transfer_mb_s: f64,
    /// Fixed controller cost per operation, µs. Default 12 (FlashTier
    /// Table IV: control delay 10 µs + bus control delay 2 µs).
    pub command_overhead_us: f64,
}

impl Default for SsdParams {
    fn default() -> Self {
        SsdParams {
            channels: 10,
            page_bytes: 4096,
            page_read_us: 65.0,
            page_write_us: 85.0,
            block_erase_us: 1000.0,
            pages_per_block: 64,
            channel_transfer_mb_s: 40.0,
            command_overhead_us: 12.0,
        }
    }
}

impl SsdParams {
    /// Check every parameter.
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.channels == 0 || self.channels > MAX_SSD_CHANNELS {
            return Err(ProfileError::invalid(
                "ssd.channels",
                format!(
                    "must be between 1 and {MAX_SSD_CHANNELS}, got {}",
                    self.channels
                ),
            ));
        }
        if self.page_bytes == 0 {
            return Err(ProfileError::invalid(
                "ssd.page_bytes",
                "must be at least 1",
            ));
        }
        if self.pages_per_block == 0 {
            return Err(ProfileError::invalid(
                "ssd.pages_per_block",
                "must be at least 1",
            ));
        }
        check_at_least("ssd.page_read_us", self.page_read_us, 0.0)?;
        check_at_least("ssd.page_write_us", self.page_write_us, 0.0)?;
        check_at_least("ssd.block_erase_us", self.block_erase_us, 0.0)?;
        check_positive("ssd.channel_transfer_mb_s", self.channel_transfer_mb_s)?;
        check_at_least("ssd.command_overhead_us", self.command_overhead_us, 0.0)?;
        Ok(())
    }
}

/// SSD timing model (see the module docs for the formula).
#[derive(Clone, Debug)]
pub struct SsdModel {
    params: SsdParams,
    overhead_ns: u64,
    read_page_ns: u64,
    write_page_ns: u64,
    channels: Units,
    stats: DeviceStats,
}

impl SsdModel {
    /// Build the model; fails if `params` are invalid.
    pub fn new(params: SsdParams) -> Result<Self, ProfileError> {
        params.validate()?;
        let xfer_us = params.page_bytes as f64 / params.channel_transfer_mb_s;
        let erase_share_us = params.block_erase_us / params.pages_per_block as f64;
        Ok(SsdModel {
            overhead_ns: (params.command_overhead_us * 1e3).round() as u64,
            read_page_ns: ((params.page_read_us + xfer_us) * 1e3).round() as u64,
            write_page_ns: ((params.page_write_us + erase_share_us + xfer_us) * 1e3).round() as u64,
            channels: Units::new(params.channels as usize),
            params,
            stats: DeviceStats::default(),
        })
    }

    /// The parameters this model was built from.
    pub fn params(&self) -> &SsdParams {
        &self.params
    }

    /// Time one channel spends on one page of `kind` (0 for trim/flush), ns.
    pub fn page_ns(&self, kind: IoKind) -> u64 {
        match kind {
            IoKind::Read => self.read_page_ns,
            IoKind::Write => self.write_page_ns,
            IoKind::Trim | IoKind::Flush => 0,
        }
    }

    /// Service time of `op` on an idle device, ns.
    pub fn unloaded_latency_ns(&self, op: &ModelOp) -> u64 {
        let pages = op.len.div_ceil(self.params.page_bytes);
        let k = pages.clamp(1, self.params.channels as u64);
        match op.kind {
            IoKind::Read | IoKind::Write => self
                .overhead_ns
                .saturating_add(pages.div_ceil(k).saturating_mul(self.page_ns(op.kind))),
            IoKind::Trim | IoKind::Flush => self.overhead_ns,
        }
    }
}

impl DeviceModel for SsdModel {
    fn submit(&mut self, now_ns: u64, op: &ModelOp) -> u64 {
        self.stats.record(op);
        let page_ns = match op.kind {
            IoKind::Read => self.read_page_ns,
            IoKind::Write => self.write_page_ns,
            IoKind::Trim => return self.channels.serve_one(now_ns, self.overhead_ns),
            IoKind::Flush => return self.channels.barrier(now_ns, self.overhead_ns),
        };
        let pages = op.len.div_ceil(self.params.page_bytes);
        if pages <= 1 {
            return self
                .channels
                .serve_one(now_ns, self.overhead_ns + pages * page_ns);
        }
        let k = pages.min(self.params.channels as u64);
        let (per, extra) = (pages / k, pages % k);
        let overhead = self.overhead_ns;
        self.channels.serve_many(now_ns, k as usize, |i| {
            let n = per + u64::from((i as u64) < extra);
            overhead.saturating_add(n.saturating_mul(page_ns))
        })
    }

    fn busy_ns(&self) -> u64 {
        self.channels.busy_ns()
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self.channels.busy_ns(),
            ..self.stats
        }
    }

    fn name(&self) -> &str {
        "ssd"
    }
}
