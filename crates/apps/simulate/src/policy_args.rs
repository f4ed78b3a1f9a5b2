//! The SSD cache's policy options as the command line takes them: the one
//! clap definition `sim` and `format` flatten (and Python checks its names
//! and defaults against). `sim` sweeps every value of a list option;
//! `format` takes one value of each ([`PolicyArgs::single`]).

use crate::policy::{defaults as d, PolicyError, PolicySpec};
use clap::Args;
use tiercache_sim::units::parse_fraction;

/// Every policy option of the SSD cache. The list options (line size,
/// associativity, eviction, write policy, admission) take comma-separated
/// values in `sim`, one simulation per combination.
#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Cache line size (list in `sim`): a power of two from 4KiB to 1MiB;
    /// `sim` also takes 512B to 2KiB, for traces counted in 512-byte pages.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, default_value = d::LINE_SIZE)]
    pub line_size: Vec<String>,
    /// Valid/dirty granularity inside a line [default: the smaller of 4KiB and the line size].
    #[arg(long, allow_hyphen_values = true)]
    pub sub_block: Option<String>,
    /// Associativity (list in `sim`): direct, N-way (e.g. 8-way), full.
    #[arg(long, value_delimiter = ',', default_value = d::ASSOC)]
    pub assoc: Vec<String>,
    /// Eviction policy (list in `sim`): lru, fifo, arc, s3fifo.
    #[arg(long, value_delimiter = ',', default_value = d::EVICTION)]
    pub eviction: Vec<String>,
    /// Write policy (list in `sim`): write-back, write-through (Azor
    /// write-hdd-ssd), write-hdd-upd, write-hdd-inv (write-around), read-only.
    #[arg(long, value_delimiter = ',', default_value = d::WRITE_POLICY)]
    pub write_policy: Vec<String>,
    /// Do not allocate lines on write misses (write-back and write-through).
    #[arg(long)]
    pub no_write_allocate: bool,
    /// Admission policy (list in `sim`): always, seq-cutoff, nhit, 2lbs.
    #[arg(long, value_delimiter = ',', default_value = d::ADMISSION)]
    pub admission: Vec<String>,
    /// Sequential cutoff: bypass a stream once it has run this far (a size such as 4MiB).
    #[arg(long, allow_hyphen_values = true, default_value = d::SEQ_CUTOFF)]
    pub seq_cutoff: String,
    /// n-hit: admit a line on its n-th access.
    #[arg(long, default_value = d::NHIT_THRESHOLD)]
    pub nhit_threshold: u32,
    /// n-hit: filter only once the cache is this full (a percentage such as 80% or a share such as 0.8).
    #[arg(long, default_value = d::NHIT_TRIGGER, value_parser = parse_fraction)]
    pub nhit_trigger: f64,
    /// 2LBS levels: metadata, frequency, or both (comma-separated).
    #[arg(
        long = "2lbs-levels",
        value_delimiter = ',',
        default_value = d::TWOLBS_LEVELS
    )]
    pub twolbs_levels: Vec<String>,
    /// 2LBS: halve access counts every this many line accesses (0: never).
    #[arg(long = "2lbs-window", default_value = d::TWOLBS_WINDOW)]
    pub twolbs_window: u64,
    /// Write-back: share of lines that may be dirty before cleaning speeds up
    /// (a percentage such as 20% or a share such as 0.2).
    #[arg(long, default_value = d::DIRTY_TARGET, value_parser = parse_fraction)]
    pub dirty_target: f64,
    /// Write-back: dirty lines each request writes back after a dirty
    /// eviction (for the next 1024 requests); the rest of the cleaning is
    /// time-driven (see --timed-cleaning).
    #[arg(long, default_value = d::CLEAN_RATE)]
    pub clean_rate: u32,
    /// Write-back: the time-driven cleaner (a PI rate controller above the
    /// dirty target, full speed during a 10 ms tick with no request), on or
    /// off; the simulator runs it in the trace's time (100 µs per request
    /// for a trace without timestamps), the live server on the wall clock.
    #[arg(long, default_value = d::TIMED_CLEANING)]
    pub timed_cleaning: String,
}

impl PolicyArgs {
    /// The one configuration these options name, for a command that makes
    /// one cache (`format`): a list option with several values is refused.
    pub fn single(&self) -> Result<PolicySpec, PolicyError> {
        let one = |option: &'static str, v: &[String]| match v {
            [x] => Ok(x.clone()),
            _ => Err(PolicyError::of(
                option,
                format!(
                    "one value, not {} ('{}'): lists are for sim's sweeps",
                    v.len(),
                    v.join(",")
                ),
            )),
        };
        Ok(PolicySpec {
            line_size: one("line_size", &self.line_size)?,
            assoc: one("assoc", &self.assoc)?,
            eviction: one("eviction", &self.eviction)?,
            write_policy: one("write_policy", &self.write_policy)?,
            admission: one("admission", &self.admission)?,
            ..self.with(PolicySpec::default())
        })
    }

    /// `base` with this value of every option that is not a list.
    pub fn with(&self, base: PolicySpec) -> PolicySpec {
        PolicySpec {
            sub_block: self.sub_block.clone(),
            no_write_allocate: self.no_write_allocate,
            seq_cutoff: self.seq_cutoff.clone(),
            nhit_threshold: self.nhit_threshold,
            nhit_trigger: self.nhit_trigger,
            twolbs_levels: self.twolbs_levels.clone(),
            twolbs_window: self.twolbs_window,
            dirty_target: self.dirty_target,
            clean_rate: self.clean_rate,
            timed_cleaning: self.timed_cleaning.clone(),
            ..base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        p: PolicyArgs,
    }

    fn parse(args: &[&str]) -> PolicyArgs {
        Cmd::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .unwrap()
            .p
    }

    #[test]
    fn no_options_are_the_builders_defaults() {
        assert_eq!(parse(&[]).single().unwrap(), PolicySpec::default());
    }

    #[test]
    fn a_list_is_refused_where_one_cache_is_made() {
        let e = parse(&["--assoc", "full,8-way"]).single().unwrap_err();
        assert!(
            e.to_string().starts_with("--assoc: one value, not 2"),
            "{e}"
        );
        let s = parse(&["--assoc", "8-way", "--dirty-target", "10%"])
            .single()
            .unwrap();
        assert_eq!((s.assoc.as_str(), s.dirty_target), ("8-way", 0.1));
    }
}
