//! DRAM model: fixed access latency plus transfer at the memory bandwidth,
//! one bus (operations are served one at a time, in submission order).
//! Trim and flush cost the access latency only.

use serde::{Deserialize, Serialize};

use crate::profile::{check_at_least, check_positive, ProfileError};
use crate::queue::Units;
use crate::stats::DeviceStats;
use crate::{transfer_ns, DeviceModel, IoKind, ModelOp};

/// DRAM parameters (TOML section `[dram]`).
///
/// Defaults are assumptions for the DDR-II memory of Azor's platform (Azor
/// thesis, section 3: "32 GB of DDR-II DRAM"); TICA Table I lists DRAM only
/// for power, cost and reliability.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DramParams {
    /// Access latency per operation, ns. Default 100 ns (typical DRAM
    /// load-to-use latency).
    pub latency_ns: f64,
    /// Copy bandwidth, GB/s (GB = 10^9 B). Default 6.4 GB/s (one DDR2-800
    /// channel, 800 MT/s x 8 B).
    pub bandwidth_gb_s: f64,
}

impl Default for DramParams {
    fn default() -> Self {
        DramParams {
            latency_ns: 100.0,
            bandwidth_gb_s: 6.4,
        }
    }
}

impl DramParams {
    /// Check every parameter.
    pub fn validate(&self) -> Result<(), ProfileError> {
        check_at_least("dram.latency_ns", self.latency_ns, 0.0)?;
        check_positive("dram.bandwidth_gb_s", self.bandwidth_gb_s)
    }
}

/// DRAM timing model: `latency + len / bandwidth`.
#[derive(Clone, Debug)]
pub struct DramModel {
    params: DramParams,
    latency_ns: u64,
    ns_per_byte: f64,
    bus: Units,
    stats: DeviceStats,
}

impl DramModel {
    /// Build the model; fails if `params` are invalid.
    pub fn new(params: DramParams) -> Result<Self, ProfileError> {
        params.validate()?;
        Ok(DramModel {
            latency_ns: params.latency_ns.round() as u64,
            ns_per_byte: 1.0 / params.bandwidth_gb_s,
            params,
            bus: Units::new(1),
            stats: DeviceStats::default(),
        })
    }

    /// The parameters this model was built from.
    pub fn params(&self) -> &DramParams {
        &self.params
    }

    /// Service time of `op`, ns.
    pub fn service_ns(&self, op: &ModelOp) -> u64 {
        match op.kind {
            IoKind::Read | IoKind::Write => self
                .latency_ns
                .saturating_add(transfer_ns(op.len, self.ns_per_byte)),
            IoKind::Trim | IoKind::Flush => self.latency_ns,
        }
    }
}

impl DeviceModel for DramModel {
    fn submit(&mut self, now_ns: u64, op: &ModelOp) -> u64 {
        self.stats.record(op);
        let dur = self.service_ns(op);
        self.bus.serve_one(now_ns, dur)
    }

    fn busy_ns(&self) -> u64 {
        self.bus.busy_ns()
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self.bus.busy_ns(),
            ..self.stats
        }
    }

    fn name(&self) -> &str {
        "dram"
    }
}
