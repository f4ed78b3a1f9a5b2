//! Options of `tiercache.simulate`, spelled and defaulted exactly as the
//! flags of `tiercache sim`, and their translation into [`SimOptions`] the
//! way the CLI builds them, so that one configuration gives one result
//! whichever front end runs it.

use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tiercache_model::Profile;
use tiercache_sim::units::{parse_bytes, parse_fraction, parse_size, SizeSpec};
use tiercache_sim::{Replay, SimOptions};
use tiercache_simulate::{PolicyError, PolicySpec, SimArgs, DEFAULT_QUEUE_DEPTH};
use tiercache_trace::{Format, ReadOptions, TraceError};

/// A value as passed from Python.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// As Python spells the value, for error messages (`'yes'`, `True`, `3`).
impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(s) => write!(f, "'{s}'"),
        }
    }
}

/// What kind of value an option takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A string (numbers are converted to their decimal spelling).
    Text,
    /// An on/off flag (a bool).
    Flag,
    /// An unsigned integer.
    Int,
    /// A real number.
    Float,
    /// A share: a number from 0 to 1, or a string percentage such as '10%'.
    Fraction,
}

/// Every option `simulate` accepts: (name, kind). Defaults come from
/// `tiercache sim`'s own definition ([`default_of`]).
/// `--json`, `--out` and `--jobs` only shape the CLI's output and are left out.
pub const OPTIONS: &[(&str, Kind)] = &[
    ("design", Kind::Text),
    ("mode", Kind::Text),
    ("tier_policy", Kind::Text),
    ("fast_tier_size", Kind::Text),
    ("tier_block", Kind::Text),
    ("capacity", Kind::Text),
    ("plan_every", Kind::Int),
    ("moves_per_round", Kind::Int),
    ("plan_clock", Kind::Text),
    ("tier_volume_size", Kind::Text),
    ("tica_policy", Kind::Text),
    ("dram_size", Kind::Text),
    ("ftl", Kind::Text),
    ("segment_size", Kind::Text),
    ("victim", Kind::Text),
    ("compress", Kind::Text),
    ("compressibility", Kind::Text),
    ("compress_us", Kind::Float),
    ("decompress_us", Kind::Float),
    ("format", Kind::Text),
    ("cache_size", Kind::Text),
    ("line_size", Kind::Text),
    ("sub_block", Kind::Text),
    ("assoc", Kind::Text),
    ("eviction", Kind::Text),
    ("write_policy", Kind::Text),
    ("no_write_allocate", Kind::Flag),
    ("admission", Kind::Text),
    ("seq_cutoff", Kind::Text),
    ("nhit_threshold", Kind::Int),
    ("nhit_trigger", Kind::Fraction),
    ("2lbs_levels", Kind::Text),
    ("2lbs_window", Kind::Int),
    ("dirty_target", Kind::Fraction),
    ("clean_rate", Kind::Int),
    ("timed_cleaning", Kind::Text),
    ("no_timing", Kind::Flag),
    ("replay", Kind::Text),
    ("queue_depth", Kind::Int),
    ("profile", Kind::Text),
    ("no_baseline", Kind::Flag),
    ("skip_bad", Kind::Flag),
    ("block_size", Kind::Text),
    ("volume", Kind::Text),
];

/// Options that `tiercache sim` accepts as comma-separated lists (a sweep).
const LIST_OPTIONS: &[&str] = &[
    "cache_size",
    "line_size",
    "assoc",
    "eviction",
    "write_policy",
    "admission",
    "tier_policy",
    "fast_tier_size",
];

/// The canonical name of an option: `--line-size`, `line-size` and
/// `line_size` are one option; `twolbs_*` are Python-friendly aliases of `2lbs_*`.
pub fn canonical_name(name: &str) -> String {
    let n = name.trim_start_matches('-').replace('-', "_");
    match n.strip_prefix("twolbs_") {
        Some(rest) => format!("2lbs_{rest}"),
        None => n,
    }
}

/// Names of all options, for error messages.
pub fn option_names() -> String {
    OPTIONS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The default of option `name` as `tiercache sim` defines it (its
/// argument definition, [`SimArgs`], is the one place), as the command line
/// spells it; `None` when it has none.
pub fn default_of(name: &str) -> Option<String> {
    static DEFAULTS: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    DEFAULTS
        .get_or_init(|| {
            let mut cmd = SimArgs::augment_args(clap::Command::new("sim"));
            // Flags get their implicit "false" when the command is built.
            cmd.build();
            cmd.get_arguments()
                .filter_map(|a| {
                    let long = a.get_long()?;
                    let d = a.get_default_values();
                    (!d.is_empty()).then(|| {
                        let v: Vec<String> =
                            d.iter().map(|v| v.to_string_lossy().into_owned()).collect();
                        (long.replace('-', "_"), v.join(","))
                    })
                })
                .collect()
        })
        .get(name)
        .cloned()
}

/// An error about one option: names it and says what is allowed.
fn opt_err(name: &str, msg: impl std::fmt::Display) -> String {
    format!("option {name}: {msg}")
}

/// Validated options, still as the CLI would have read them.
pub struct Parsed {
    vals: BTreeMap<&'static str, Value>,
}

impl Parsed {
    /// Check names and value types and fill in the defaults.
    pub fn new(given: Vec<(String, Value)>) -> Result<Parsed, String> {
        let mut vals = BTreeMap::new();
        for (raw, v) in given {
            let name = canonical_name(&raw);
            let Some(&(n, kind)) = OPTIONS.iter().find(|(n, _)| *n == name) else {
                return Err(format!(
                    "unknown option '{raw}' (allowed: {})",
                    option_names()
                ));
            };
            let v = match (kind, v) {
                (Kind::Flag, Value::Bool(b)) => Value::Bool(b),
                (Kind::Flag, v) => {
                    return Err(opt_err(n, format!("expected True or False, got {v}")))
                }
                (_, Value::Bool(b)) => {
                    return Err(opt_err(
                        n,
                        format!("expected a value, got {b} (only flags take True/False)"),
                    ))
                }
                (Kind::Text, Value::Int(i)) => Value::Str(i.to_string()),
                (Kind::Text, Value::Float(f)) => Value::Str(f.to_string()),
                (_, v) => v,
            };
            if vals.insert(n, v).is_some() {
                return Err(opt_err(n, "given twice (under two spellings)"));
            }
        }
        // `design` names a mode (and FTL), as `sim --design` does.
        if let Some(Value::Str(name)) = vals.remove("design") {
            if let Some(other) = ["mode", "ftl"].into_iter().find(|o| vals.contains_key(o)) {
                return Err(opt_err(
                    "design",
                    format!("give design or {other}, not both (design sets mode and ftl)"),
                ));
            }
            let d = tiercache_simulate::design::design(&name).map_err(|e| opt_err("design", e))?;
            vals.insert("mode", Value::Str(d.sim_mode.into()));
            if let Some(ftl) = d.sim_ftl {
                vals.insert("ftl", Value::Str(ftl.into()));
            }
        }
        Ok(Parsed { vals })
    }

    /// The flags of `tiercache sim` for the options given (`--name=value`,
    /// `--flag` for a flag that is on), after checking that each option the
    /// CLI takes as a list has one value.
    pub fn argv(&self) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for (name, v) in &self.vals {
            if LIST_OPTIONS.contains(name) {
                self.single(name)?;
            }
            let flag = format!("--{}", name.replace('_', "-"));
            match v {
                Value::Bool(true) => out.push(flag),
                Value::Bool(false) => {}
                Value::Int(i) => out.push(format!("{flag}={i}")),
                Value::Float(x) => out.push(format!("{flag}={x}")),
                Value::Str(s) => out.push(format!("{flag}={s}")),
            }
        }
        Ok(out)
    }

    /// The value of a text option (the default when not given).
    pub fn text(&self, name: &str) -> Option<String> {
        match self.vals.get(name) {
            Some(Value::Str(s)) => Some(s.clone()),
            Some(_) => None,
            None => default_of(name),
        }
    }

    fn flag(&self, name: &str) -> bool {
        matches!(self.vals.get(name), Some(Value::Bool(true)))
    }

    fn int(&self, name: &str) -> Result<u64, String> {
        let default = || default_of(name).unwrap_or_else(|| "0".into());
        let s = match self.vals.get(name) {
            Some(Value::Int(i)) => i.to_string(),
            Some(Value::Str(s)) => s.clone(),
            Some(Value::Float(f)) if f.fract() == 0.0 => (*f as i64).to_string(),
            Some(v) => return Err(opt_err(name, format!("expected an integer, got {v}"))),
            None => default(),
        };
        s.trim()
            .parse::<u64>()
            .map_err(|_| opt_err(name, format!("expected a non-negative integer, got '{s}'")))
    }

    /// A share: a number (range-checked by the policy builder) or a string
    /// percentage or share, parsed as the CLI parses it.
    fn fraction(&self, name: &str) -> Result<f64, String> {
        match self.vals.get(name) {
            Some(Value::Str(s)) => parse_fraction(s).map_err(|e| opt_err(name, e)),
            Some(Value::Float(f)) => Ok(*f),
            Some(Value::Int(i)) => Ok(*i as f64),
            Some(v) => Err(opt_err(
                name,
                format!("expected a number or a percentage, got {v}"),
            )),
            None => {
                let d = default_of(name);
                Ok(d.and_then(|d| parse_fraction(&d).ok()).unwrap_or(0.0))
            }
        }
    }

    /// One value of an option the CLI takes as a list: a list here is an error.
    fn single(&self, name: &str) -> Result<String, String> {
        let s = self
            .text(name)
            .ok_or_else(|| opt_err(name, "required (for example cache_size=\"10%\")"))?;
        if LIST_OPTIONS.contains(&name) && s.contains(',') {
            return Err(opt_err(
                name,
                format!("one value per run, got the list '{s}' (use tiercache.sweep for several)"),
            ));
        }
        Ok(s.trim().to_string())
    }
}

/// Everything needed to run one simulation.
pub struct Run {
    pub trace: PathBuf,
    pub format: Option<Format>,
    pub read: ReadOptions,
    pub sim: SimOptions,
}

/// Errors of building a run: a bad option, or a trace that cannot be read.
pub enum BuildError {
    Option(String),
    Missing(String),
    Trace(TraceError),
    Other(String),
}

impl From<TraceError> for BuildError {
    fn from(e: TraceError) -> Self {
        BuildError::Trace(e)
    }
}

/// Trace format, if given.
pub fn format_of(p: &Parsed) -> Result<Option<Format>, BuildError> {
    match p.text("format") {
        Some(f) => f
            .parse::<Format>()
            .map(Some)
            .map_err(|e| BuildError::Option(opt_err("format", e))),
        None => Ok(None),
    }
}

/// How to read the trace (`format`, `block_size`, `volume`, `skip_bad`).
pub fn read_options(p: &Parsed) -> Result<ReadOptions, BuildError> {
    let bs = p.text("block_size").unwrap_or_default();
    let block_size = parse_bytes(&bs).map_err(|e| BuildError::Option(opt_err("block_size", e)))?;
    Ok(ReadOptions {
        skip_bad: p.flag("skip_bad"),
        block_size: u32::try_from(block_size)
            .map_err(|_| BuildError::Option(opt_err("block_size", "too large")))?,
        volume: p.text("volume"),
    })
}

/// Build the run of `tiercache sim --trace TRACE` with these options: the
/// same parsing, defaults, footprint resolution and replay detection as
/// `crates/cli/src/cmd/sim.rs`.
pub fn build(trace: &Path, p: &Parsed) -> Result<Run, BuildError> {
    let o = |name: &'static str| move |e: String| BuildError::Option(opt_err(name, e));
    let mode = p.text("mode").unwrap_or_default();
    if mode != "cache" {
        return Err(BuildError::Option(opt_err(
            "mode",
            format!("mode '{mode}' is not the SSD cache (run it with modes::run)"),
        )));
    }
    if !matches!(p.text("compress").as_deref(), None | Some("off" | "none")) {
        return Err(BuildError::Option(opt_err(
            "compress",
            "applies to mode='ssc', ftl='log' (the compressed log-structured layout), not mode='cache'",
        )));
    }
    let format = format_of(p)?;
    let read = read_options(p)?;
    let size = parse_size(&p.single("cache_size").map_err(BuildError::Option)?)
        .map_err(o("cache_size"))?;
    let spec = spec_of(p)?;
    let line = tiercache_simulate::policy::parse_line_size(&spec.line_size).map_err(policy_err)?;
    let queue_depth = match p.vals.get("queue_depth") {
        None => DEFAULT_QUEUE_DEPTH,
        Some(_) => u32::try_from(p.int("queue_depth").map_err(BuildError::Option)?)
            .map_err(|_| BuildError::Option(opt_err("queue_depth", "too large")))?,
    };
    let profile = match p.text("profile") {
        Some(path) => Profile::load(&path).map_err(|e| {
            BuildError::Option(opt_err("profile", format!("device profile {path}: {e}")))
        })?,
        None => Profile::default(),
    };
    if !trace.exists() {
        return Err(BuildError::Missing(format!(
            "trace {} does not exist",
            trace.display()
        )));
    }
    let footprint = if matches!(size, SizeSpec::Percent(_)) {
        let r = tiercache_trace::open(trace, format, &read)?;
        tiercache_trace::stats::trace_stats(r, line)?.footprint_bytes
    } else {
        0
    };
    let cfg = spec
        .config(size.bytes(line as u64, footprint))
        .map_err(|e| match e.option {
            Some(_) => policy_err(e),
            None => BuildError::Option(format!(
                "configuration cache size {size}, line {line} B, {}: {}",
                spec.assoc, e.message
            )),
        })?;
    let replay = match p.text("replay").as_deref() {
        Some("open") => Replay::Open,
        Some("closed") => Replay::Closed { queue_depth },
        Some(x) => {
            return Err(BuildError::Option(opt_err(
                "replay",
                format!("unknown replay mode '{x}' (allowed: open, closed)"),
            )))
        }
        None => {
            // Open loop when the trace carries timestamps (as the CLI decides).
            let mut r = tiercache_trace::open(trace, format, &read)?;
            let timed = r
                .by_ref()
                .take(1000)
                .filter_map(|x| x.ok())
                .any(|x| x.time_ns > 0);
            if timed {
                Replay::Open
            } else {
                Replay::Closed { queue_depth }
            }
        }
    };
    let sim = SimOptions {
        cache: cfg,
        timing: !p.flag("no_timing"),
        replay,
        profile,
        baseline: !p.flag("no_baseline"),
    };
    Ok(Run {
        trace: trace.to_path_buf(),
        format,
        read,
        sim,
    })
}

/// A refusal of the shared builder, as Python spells it: `option NAME: ...`.
fn policy_err(e: PolicyError) -> BuildError {
    match e.option {
        Some(o) => BuildError::Option(opt_err(o, e.message)),
        None => BuildError::Option(e.message),
    }
}

/// The SSD cache's policy options, for the builder `sim` and `format` share.
pub fn spec_of(p: &Parsed) -> Result<PolicySpec, BuildError> {
    let int = |n: &str| p.int(n).map_err(BuildError::Option);
    let u32_of = |n: &'static str| {
        int(n)
            .and_then(|v| u32::try_from(v).map_err(|_| BuildError::Option(opt_err(n, "too large"))))
    };
    Ok(PolicySpec {
        line_size: p.single("line_size").map_err(BuildError::Option)?,
        sub_block: p.text("sub_block"),
        assoc: p.single("assoc").map_err(BuildError::Option)?,
        eviction: p.single("eviction").map_err(BuildError::Option)?,
        write_policy: p.single("write_policy").map_err(BuildError::Option)?,
        no_write_allocate: p.flag("no_write_allocate"),
        admission: p.single("admission").map_err(BuildError::Option)?,
        seq_cutoff: p.text("seq_cutoff").unwrap_or_default(),
        nhit_threshold: u32_of("nhit_threshold")?,
        nhit_trigger: p.fraction("nhit_trigger").map_err(BuildError::Option)?,
        twolbs_levels: vec![p.text("2lbs_levels").unwrap_or_default()],
        twolbs_window: int("2lbs_window")?,
        dirty_target: p.fraction("dirty_target").map_err(BuildError::Option)?,
        clean_rate: u32_of("clean_rate")?,
        timed_cleaning: p.text("timed_cleaning").unwrap_or_default(),
    })
}

/// The configuration these options give for a cache of `cache_bytes`, as
/// JSON (the `CacheConfig` `tiercache format` records and `stats --json`
/// reports as `config`).
pub fn config_json(p: &Parsed, cache_bytes: u64) -> Result<String, BuildError> {
    let cfg = spec_of(p)?.config(cache_bytes).map_err(policy_err)?;
    Ok(serde_json::to_string(&cfg).expect("config serializes"))
}

/// Parse a line size for `trace_stats` (a power of two in bytes).
pub fn parse_line(s: &str) -> Result<u32, String> {
    parse_bytes(s).and_then(|b| u32::try_from(b).map_err(|_| format!("line size {s} too large")))
}

#[allow(dead_code)]
fn _assert_send() {
    fn is_send<T: Send>() {}
    is_send::<tiercache_trace::TraceReader>();
}

impl From<String> for BuildError {
    fn from(e: String) -> Self {
        BuildError::Other(e)
    }
}
