//! The one builder of the SSD cache's [`CacheConfig`] from its options, as
//! `tiercache sim` (once per sweep point), `tiercache format` and Python's
//! `tiercache.simulate` spell them: one parser, one set of defaults, one set
//! of error messages, so a configuration measured in simulation can be
//! formatted and a formatted one simulated.

use std::fmt;
use tiercache_azor_policy::admission::{AdmissionConfig, AdmissionKind};
use tiercache_azor_policy::cleaning::CleaningConfig;
use tiercache_azor_policy::eviction::EvictionKind;
use tiercache_azor_policy::{Assoc, CacheConfig, WritePolicy};
use tiercache_sim::units::{check_fraction, parse_bytes, parse_fraction};

/// The SSD cache's option defaults as the command line spells them: the one
/// definition `format`, `sim`, Python and [`PolicySpec::default`] take
/// (`defaults_are_the_core_defaults` ties them to the policy's own).
pub mod defaults {
    pub const LINE_SIZE: &str = "4KiB";
    pub const ASSOC: &str = "full";
    pub const EVICTION: &str = "lru";
    pub const WRITE_POLICY: &str = "write-back";
    pub const ADMISSION: &str = "always";
    pub const SEQ_CUTOFF: &str = "4MiB";
    pub const NHIT_THRESHOLD: &str = "3";
    pub const NHIT_TRIGGER: &str = "0.8";
    pub const TWOLBS_LEVELS: &str = "metadata,frequency";
    pub const TWOLBS_WINDOW: &str = "0";
    pub const DIRTY_TARGET: &str = "0.2";
    pub const CLEAN_RATE: &str = "2";
    pub const TIMED_CLEANING: &str = "on";
}

/// Every policy option of the SSD cache, one value each, as the command
/// line spells it. [`PolicySpec::default`] holds the CLI's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    /// `--line-size`.
    pub line_size: String,
    /// `--sub-block` (default: the smaller of 4 KiB and the line).
    pub sub_block: Option<String>,
    /// `--assoc`.
    pub assoc: String,
    /// `--eviction`.
    pub eviction: String,
    /// `--write-policy`.
    pub write_policy: String,
    /// `--no-write-allocate`.
    pub no_write_allocate: bool,
    /// `--admission`.
    pub admission: String,
    /// `--seq-cutoff`.
    pub seq_cutoff: String,
    /// `--nhit-threshold`.
    pub nhit_threshold: u32,
    /// `--nhit-trigger`.
    pub nhit_trigger: f64,
    /// `--2lbs-levels`.
    pub twolbs_levels: Vec<String>,
    /// `--2lbs-window`.
    pub twolbs_window: u64,
    /// `--dirty-target`.
    pub dirty_target: f64,
    /// `--clean-rate`: lines each request cleans after a dirty eviction.
    pub clean_rate: u32,
    /// `--timed-cleaning`: on or off.
    pub timed_cleaning: String,
}

impl Default for PolicySpec {
    fn default() -> Self {
        use defaults as d;
        let num = |s: &str| s.parse().expect("a default parses");
        PolicySpec {
            line_size: d::LINE_SIZE.into(),
            sub_block: None,
            assoc: d::ASSOC.into(),
            eviction: d::EVICTION.into(),
            write_policy: d::WRITE_POLICY.into(),
            no_write_allocate: false,
            admission: d::ADMISSION.into(),
            seq_cutoff: d::SEQ_CUTOFF.into(),
            nhit_threshold: num(d::NHIT_THRESHOLD) as u32,
            nhit_trigger: parse_fraction(d::NHIT_TRIGGER).expect("a default parses"),
            twolbs_levels: d::TWOLBS_LEVELS.split(',').map(str::to_string).collect(),
            twolbs_window: num(d::TWOLBS_WINDOW),
            dirty_target: parse_fraction(d::DIRTY_TARGET).expect("a default parses"),
            clean_rate: num(d::CLEAN_RATE) as u32,
            timed_cleaning: d::TIMED_CLEANING.into(),
        }
    }
}

/// A refused option value: which option (snake case, as Python names it;
/// `None` for the configuration as a whole) and why, with what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub option: Option<&'static str>,
    pub message: String,
}

impl PolicyError {
    pub(crate) fn of(option: &'static str, message: impl fmt::Display) -> PolicyError {
        PolicyError {
            option: Some(option),
            message: message.to_string(),
        }
    }
}

/// As the command line shows it: `--eviction: unknown eviction policy ...`.
impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.option {
            Some(o) => write!(f, "--{}: {}", o.replace('_', "-"), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for PolicyError {}

/// `--line-size`: a size in bytes that fits a `u32`.
pub fn parse_line_size(s: &str) -> Result<u32, PolicyError> {
    parse_bytes(s.trim())
        .and_then(|b| {
            u32::try_from(b).map_err(|_| format!("line size {s} too large (allowed: 512B to 1MiB)"))
        })
        .map_err(|e| PolicyError::of("line_size", e))
}

/// `--2lbs-levels`: which of Azor's two selection levels are on, as
/// (metadata first, access frequency).
pub fn parse_2lbs_levels(levels: &[String]) -> Result<(bool, bool), PolicyError> {
    let (mut lv_meta, mut lv_freq) = (false, false);
    for l in levels.iter().flat_map(|l| l.split(',')) {
        match l.trim() {
            "metadata" => lv_meta = true,
            "frequency" => lv_freq = true,
            "both" => (lv_meta, lv_freq) = (true, true),
            x => {
                return Err(PolicyError::of(
                    "2lbs_levels",
                    format!("unknown 2LBS level '{x}' (allowed: metadata, frequency, both)"),
                ))
            }
        }
    }
    Ok((lv_meta, lv_freq))
}

impl PolicySpec {
    /// The configuration of a cache of `cache_bytes`, checked (geometry and
    /// admission); errors name the option and say what is allowed.
    pub fn config(&self, cache_bytes: u64) -> Result<CacheConfig, PolicyError> {
        let line = parse_line_size(&self.line_size)?;
        let sub = match &self.sub_block {
            Some(s) => parse_bytes(s.trim())
                .and_then(|b| u32::try_from(b).map_err(|_| format!("sub-block {s} too large")))
                .map_err(|e| PolicyError::of("sub_block", e))?,
            None => line.min(4096),
        };
        let p = |o: &'static str| move |e: String| PolicyError::of(o, e);
        let (lv_meta, lv_freq) = parse_2lbs_levels(&self.twolbs_levels)?;
        let timed = match self.timed_cleaning.trim() {
            "on" => true,
            "off" => false,
            x => {
                return Err(PolicyError::of(
                    "timed_cleaning",
                    format!("'{x}' is not understood (allowed: on, off)"),
                ))
            }
        };
        let cfg = CacheConfig {
            cache_bytes,
            line_bytes: line,
            sub_block_bytes: sub,
            assoc: self.assoc.trim().parse::<Assoc>().map_err(p("assoc"))?,
            eviction: self
                .eviction
                .trim()
                .parse::<EvictionKind>()
                .map_err(p("eviction"))?,
            write_policy: self
                .write_policy
                .trim()
                .parse::<WritePolicy>()
                .map_err(p("write_policy"))?,
            write_allocate: !self.no_write_allocate,
            admission: AdmissionConfig {
                kind: self
                    .admission
                    .trim()
                    .parse::<AdmissionKind>()
                    .map_err(p("admission"))?,
                seq_cutoff_bytes: parse_bytes(self.seq_cutoff.trim()).map_err(p("seq_cutoff"))?,
                nhit_threshold: self.nhit_threshold,
                nhit_trigger: self.nhit_trigger,
                twolbs_metadata: lv_meta,
                twolbs_frequency: lv_freq,
                twolbs_window: self.twolbs_window,
            },
            dirty_target: self.dirty_target,
            cleaning: CleaningConfig {
                pressure_lines: self.clean_rate,
                timed,
            },
        };
        // The message `--nhit-trigger 150%` gets from the argument parser.
        for (option, v) in [
            ("nhit_trigger", self.nhit_trigger),
            ("dirty_target", self.dirty_target),
        ] {
            check_fraction(v, &v.to_string()).map_err(|e| PolicyError::of(option, e))?;
        }
        cfg.geometry().map_err(|e| PolicyError {
            option: None,
            message: e.0,
        })?;
        Ok(cfg)
    }

    /// The options that give `cfg` (the inverse of [`PolicySpec::config`]):
    /// what `sim --like` reads back from a formatted cache.
    pub fn of_config(cfg: &CacheConfig) -> PolicySpec {
        let a = &cfg.admission;
        let mut levels = Vec::new();
        if a.twolbs_metadata {
            levels.push("metadata".to_string());
        }
        if a.twolbs_frequency {
            levels.push("frequency".to_string());
        }
        PolicySpec {
            line_size: format!("{}B", cfg.line_bytes),
            sub_block: Some(format!("{}B", cfg.sub_block_bytes)),
            assoc: cfg.assoc.to_string(),
            eviction: cfg.eviction.to_string(),
            write_policy: cfg.write_policy.to_string(),
            no_write_allocate: !cfg.write_allocate,
            admission: a.kind.to_string(),
            seq_cutoff: format!("{}B", a.seq_cutoff_bytes),
            nhit_threshold: a.nhit_threshold,
            nhit_trigger: a.nhit_trigger,
            twolbs_levels: levels,
            twolbs_window: a.twolbs_window,
            dirty_target: cfg.dirty_target,
            clean_rate: cfg.cleaning.pressure_lines,
            timed_cleaning: if cfg.cleaning.timed { "on" } else { "off" }.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_core_defaults() {
        let c = PolicySpec::default().config(64 << 20).unwrap();
        assert_eq!(c, CacheConfig::default());
    }

    #[test]
    fn every_option_round_trips() {
        let s = PolicySpec {
            line_size: "64KiB".into(),
            sub_block: Some("8KiB".into()),
            assoc: "8-way".into(),
            eviction: "s3fifo".into(),
            write_policy: "write-through".into(),
            no_write_allocate: true,
            admission: "2lbs".into(),
            seq_cutoff: "1MiB".into(),
            nhit_threshold: 5,
            nhit_trigger: 0.5,
            twolbs_levels: vec!["frequency".into()],
            twolbs_window: 1000,
            dirty_target: 0.4,
            clean_rate: 7,
            timed_cleaning: "off".into(),
        };
        let c = s.config(64 << 20).unwrap();
        assert_eq!(PolicySpec::of_config(&c).config(64 << 20).unwrap(), c);
    }

    #[test]
    fn errors_name_the_option() {
        let bad = |f: fn(&mut PolicySpec)| {
            let mut s = PolicySpec::default();
            f(&mut s);
            s.config(64 << 20).unwrap_err().to_string()
        };
        assert!(bad(|s| s.eviction = "nope".into()).starts_with("--eviction: unknown eviction"));
        assert!(bad(|s| s.nhit_trigger = 2.0).starts_with("--nhit-trigger: 2 is not a share"));
        assert!(bad(|s| s.timed_cleaning = "x".into()).contains("allowed: on, off"));
        assert!(bad(|s| s.twolbs_levels = vec!["x".into()]).starts_with("--2lbs-levels:"));
    }
}
