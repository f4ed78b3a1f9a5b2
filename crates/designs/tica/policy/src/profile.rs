//! Device parameters of the three-level caches: timing models for DRAM, the
//! RO-SSD, the WO-SSD and the HDD, and Table I's reliability, cost,
//! endurance and power figures.
//!
//! Table I of the paper gives MTTF, $/GB, endurance (full-device writes,
//! "writes/GB") and read/write/idle power, but no latencies. The SSD timing
//! parameters are ours, chosen to reproduce the paper's qualitative facts:
//! reads of both SSDs are close (the RO-SSD slightly faster, Fig. 6 is
//! normalised to its read latency) and RO-SSD writes are about 5x slower
//! than WO-SSD writes (section 3, Fig. 4). HDD and DRAM timing are
//! `tiercache_model`'s defaults. Every value can be overridden from TOML.

use serde::{Deserialize, Serialize};
use tiercache_model::{DramParams, HddParams, SsdParams};

/// Table I row of one device.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Mean time to failure, hours.
    pub mttf_hours: f64,
    /// Price, US dollars per GB (10^9 bytes).
    pub usd_per_gb: f64,
    /// Endurance in full-device writes ("Writes/GB"); 0 for DRAM (unlimited).
    pub endurance_writes_per_gb: f64,
    /// Power while reading / writing / idle, watts.
    pub read_w: f64,
    pub write_w: f64,
    pub idle_w: f64,
}

impl DeviceSpec {
    /// Table I, DRAM.
    pub const DRAM: DeviceSpec = DeviceSpec {
        mttf_hours: 4.0e6,
        usd_per_gb: 7.875,
        endurance_writes_per_gb: 0.0,
        read_w: 4.0,
        write_w: 4.0,
        idle_w: 4.0,
    };
    /// Table I, RO-SSD.
    pub const RO_SSD: DeviceSpec = DeviceSpec {
        mttf_hours: 2.0e6,
        usd_per_gb: 0.74,
        endurance_writes_per_gb: 1171.0,
        read_w: 3.3,
        write_w: 3.4,
        idle_w: 0.07,
    };
    /// Table I, WO-SSD.
    pub const WO_SSD: DeviceSpec = DeviceSpec {
        mttf_hours: 2.0e6,
        usd_per_gb: 0.842,
        endurance_writes_per_gb: 6416.0,
        read_w: 2.4,
        write_w: 3.1,
        idle_w: 1.3,
    };
}

/// All parameters of a three-level run (TOML sections `hdd`, `dram`,
/// `ro_ssd`, `wo_ssd`, `dram_spec`, `ro_ssd_spec`, `wo_ssd_spec`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LevelsProfile {
    pub hdd: HddParams,
    pub dram: DramParams,
    pub ro_ssd: SsdParams,
    pub wo_ssd: SsdParams,
    pub dram_spec: DeviceSpec,
    pub ro_ssd_spec: DeviceSpec,
    pub wo_ssd_spec: DeviceSpec,
}

impl Default for LevelsProfile {
    fn default() -> Self {
        let base = SsdParams::default();
        LevelsProfile {
            hdd: HddParams::default(),
            dram: DramParams::default(),
            // Read-optimized: faster array reads, ~5x slower writes.
            ro_ssd: SsdParams {
                page_read_us: 50.0,
                page_write_us: 900.0,
                block_erase_us: 3000.0,
                pages_per_block: 128,
                ..base.clone()
            },
            wo_ssd: SsdParams {
                page_read_us: 80.0,
                ..base
            },
            dram_spec: DeviceSpec::DRAM,
            ro_ssd_spec: DeviceSpec::RO_SSD,
            wo_ssd_spec: DeviceSpec::WO_SSD,
        }
    }
}

impl LevelsProfile {
    /// Parse a TOML profile; missing keys take the defaults.
    pub fn from_toml_str(s: &str) -> Result<LevelsProfile, String> {
        let p: LevelsProfile =
            toml::from_str(s).map_err(|e| format!("invalid three-level device profile: {e}"))?;
        p.validate()?;
        Ok(p)
    }

    /// Check every model parameter and spec value.
    pub fn validate(&self) -> Result<(), String> {
        self.hdd.validate().map_err(|e| e.to_string())?;
        self.dram.validate().map_err(|e| e.to_string())?;
        self.ro_ssd.validate().map_err(|e| format!("ro_ssd: {e}"))?;
        self.wo_ssd.validate().map_err(|e| format!("wo_ssd: {e}"))?;
        for (name, s) in [
            ("dram_spec", &self.dram_spec),
            ("ro_ssd_spec", &self.ro_ssd_spec),
            ("wo_ssd_spec", &self.wo_ssd_spec),
        ] {
            let vals = [
                s.mttf_hours,
                s.usd_per_gb,
                s.endurance_writes_per_gb,
                s.read_w,
                s.write_w,
                s.idle_w,
            ];
            if vals.iter().any(|v| !v.is_finite() || *v < 0.0) || s.mttf_hours <= 0.0 {
                return Err(format!(
                    "{name}: every value must be a finite number >= 0 and mttf_hours > 0"
                ));
            }
        }
        Ok(())
    }
}
