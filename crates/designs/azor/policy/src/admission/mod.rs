//! Admission: whether a missed line may enter the cache at all.
//!
//! Four policies, each in its own module: `always`, sequential cutoff
//! ([`seq_cutoff`], as bcache), n-hit promotion ([`nhit`], as Open CAS) and
//! Azor's two-level block selection ([`two_level`]). The first three judge the
//! request alone ([`Admission::admit_request`]); 2LBS also compares the
//! incoming line with the victim the eviction policy proposes
//! ([`two_level::TwoLevel::decide`]).

pub mod nhit;
pub mod seq_cutoff;
pub mod two_level;

use crate::error::ConfigError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which admission policy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdmissionKind {
    Always,
    SeqCutoff,
    Nhit,
    #[serde(rename = "2lbs")]
    TwoLevel,
}

impl AdmissionKind {
    pub const ALL: [(AdmissionKind, &'static str); 4] = [
        (AdmissionKind::Always, "always"),
        (AdmissionKind::SeqCutoff, "seq-cutoff"),
        (AdmissionKind::Nhit, "nhit"),
        (AdmissionKind::TwoLevel, "2lbs"),
    ];
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map(|(_, s)| *s)
            .unwrap_or("?")
    }
}

impl fmt::Display for AdmissionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AdmissionKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(s))
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                format!("unknown admission policy '{s}' (allowed: always, seq-cutoff, nhit, 2lbs)")
            })
    }
}

/// Admission settings. Fields of policies not selected are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AdmissionConfig {
    pub kind: AdmissionKind,
    /// Sequential cutoff: bypass a stream once it has run this many bytes (bcache default 4 MiB).
    pub seq_cutoff_bytes: u64,
    /// n-hit: admit a line on its n-th access (Open CAS default 3).
    pub nhit_threshold: u32,
    /// n-hit: only filter once the cache is this full (Open CAS default 0.8).
    pub nhit_trigger: f64,
    /// 2LBS level 1: metadata first.
    pub twolbs_metadata: bool,
    /// 2LBS level 2: between data lines, the one accessed more often wins.
    pub twolbs_frequency: bool,
    /// 2LBS: access counts are halved every `window` line accesses (0: never).
    pub twolbs_window: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            kind: AdmissionKind::Always,
            seq_cutoff_bytes: 4 << 20,
            nhit_threshold: 3,
            nhit_trigger: 0.8,
            twolbs_metadata: true,
            twolbs_frequency: true,
            twolbs_window: 0,
        }
    }
}

impl AdmissionConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.kind == AdmissionKind::SeqCutoff && self.seq_cutoff_bytes == 0 {
            return Err(ConfigError(
                "sequential cutoff of 0 bytes (allowed: at least 1 B, e.g. 4MiB)".into(),
            ));
        }
        if self.kind == AdmissionKind::Nhit && self.nhit_threshold == 0 {
            return Err(ConfigError("n-hit threshold 0 (allowed: 1 or more)".into()));
        }
        if !(0.0..=1.0).contains(&self.nhit_trigger) {
            return Err(ConfigError(format!(
                "n-hit trigger {} (allowed: 0.0 to 1.0)",
                self.nhit_trigger
            )));
        }
        if self.kind == AdmissionKind::TwoLevel && !self.twolbs_metadata && !self.twolbs_frequency {
            return Err(ConfigError(
                "2lbs with both levels off (allowed: metadata, frequency or both)".into(),
            ));
        }
        Ok(())
    }
}
