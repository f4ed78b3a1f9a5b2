//! Device profiles: every model parameter, read from TOML.
//!
//! ```toml
//! [hdd]
//! rpm = 7200
//! avg_seek_ms = 8.9
//! [ssd]
//! channels = 10
//! [dram]
//! latency_ns = 100
//! ```
//!
//! Every key carries its unit in its name. Missing sections and keys take the
//! defaults of [`Profile::default`]; unknown sections or keys are refused with
//! an error naming them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{DramModel, DramParams, HddModel, HddParams, SsdModel, SsdParams};

/// Why a profile could not be loaded or a model built.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The profile file could not be read.
    #[error("cannot read device profile {path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// Not valid TOML, an unknown section or key, or a value of the wrong type.
    #[error("invalid device profile: {0}")]
    Parse(String),
    /// A parameter is out of range; `key` is `section.name`.
    #[error("invalid device profile: {key}: {reason}")]
    Invalid { key: String, reason: String },
}

impl ProfileError {
    pub(crate) fn invalid(key: &str, reason: impl Into<String>) -> Self {
        ProfileError::Invalid {
            key: key.to_string(),
            reason: reason.into(),
        }
    }
}

/// Require a finite value `> 0`.
pub(crate) fn check_positive(key: &str, v: f64) -> Result<(), ProfileError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(ProfileError::invalid(
            key,
            format!("must be a finite number greater than 0, got {v}"),
        ))
    }
}

/// Require a finite value `>= min`.
pub(crate) fn check_at_least(key: &str, v: f64, min: f64) -> Result<(), ProfileError> {
    if v.is_finite() && v >= min {
        Ok(())
    } else {
        Err(ProfileError::invalid(
            key,
            format!("must be a finite number at least {min}, got {v}"),
        ))
    }
}

/// Parameters of every device model. `Profile::default()` is the paper setup
/// (WD5001AALS-class HDD, FlashTier/X25-E-class SSD, DDR-II DRAM) and equals
/// the crate's `profiles/default.toml`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Profile {
    pub hdd: HddParams,
    pub ssd: SsdParams,
    pub dram: DramParams,
}

impl Profile {
    /// The text of `profiles/default.toml`, shipped in the crate.
    pub const DEFAULT_TOML: &'static str = include_str!("../profiles/default.toml");

    /// Parse and validate a TOML profile.
    pub fn from_toml_str(text: &str) -> Result<Profile, ProfileError> {
        let profile: Profile =
            toml::from_str(text).map_err(|e| ProfileError::Parse(e.to_string()))?;
        profile.validate()?;
        Ok(profile)
    }

    /// Read, parse and validate a TOML profile file.
    pub fn load(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|cause| ProfileError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        Profile::from_toml_str(&text)
    }

    /// Serialize to TOML (every key, suitable for [`Profile::from_toml_str`]).
    pub fn to_toml_string(&self) -> String {
        // Serializing plain structs of numbers cannot fail.
        toml::to_string(self).unwrap_or_default()
    }

    /// Check every parameter of every section (including the HDD seek fit).
    pub fn validate(&self) -> Result<(), ProfileError> {
        self.hdd.validate()?;
        self.ssd.validate()?;
        self.dram.validate()
    }

    /// Build the HDD model of this profile.
    pub fn hdd_model(&self) -> Result<HddModel, ProfileError> {
        HddModel::new(self.hdd.clone())
    }

    /// Build the SSD model of this profile.
    pub fn ssd_model(&self) -> Result<SsdModel, ProfileError> {
        SsdModel::new(self.ssd.clone())
    }

    /// Build the DRAM model of this profile.
    pub fn dram_model(&self) -> Result<DramModel, ProfileError> {
        DramModel::new(self.dram.clone())
    }
}
