//! `tiercache sim --mode ...` for the designs beyond the SSD cache. One file per
//! family: [`flash`] (FlashTier: ssd, ssc, ssc-v), [`tier`] (OODT tiering),
//! [`tica`] (TICA and its baselines uCache and S-RAC).
//!
//! A mode returns a [`ModeOutput`]: the rows of `--json` and the text report.
//! It prints nothing, so the CLI and the Python module show the same results.

use crate::args::SimArgs;
use anyhow::{bail, Result};
use std::path::Path;
use tiercache_sim::units::parse_bytes;
use tiercache_trace::{Format, ReadOptions};

pub use crate::error::{bad, BadOption};

pub mod flash;
pub mod tica;
pub mod tier;

/// Every `--mode` of `tiercache sim`, the SSD cache (`cache`) first.
pub const MODES: [&str; 8] = [
    "cache", "ssd", "ssc", "ssc-v", "tier", "tica", "ucache", "srac",
];

/// What a mode computed: one JSON object per configuration and the text report.
#[derive(Debug, Clone)]
pub struct ModeOutput {
    /// The objects of `--json`, one per configuration, with `trace` set.
    pub rows: Vec<serde_json::Value>,
    /// The report printed without `--json`.
    pub text: String,
}

impl ModeOutput {
    /// The text `--json` prints: one object, or an array of several.
    pub fn json(&self) -> String {
        let out = match self.rows.as_slice() {
            [one] => serde_json::to_string_pretty(one),
            rows => serde_json::to_string_pretty(rows),
        };
        out.expect("JSON values serialize")
    }
}

/// Trace format and read options of `a` (`--format`, `--block-size`,
/// `--skip-bad`, `--volume`); an error if the trace does not exist.
pub fn trace_input(a: &SimArgs) -> Result<(Option<Format>, ReadOptions)> {
    let format = match &a.format {
        Some(f) => Some(f.parse::<Format>().map_err(|e| bad("format", e))?),
        None => None,
    };
    let block_size = parse_bytes(&a.block_size).map_err(|e| bad("block_size", e))?;
    let ropts = ReadOptions {
        skip_bad: a.skip_bad,
        block_size: u32::try_from(block_size)
            .map_err(|_| bad("block_size", format!("{} too large", a.block_size)))?,
        volume: a.volume.clone(),
    };
    if !Path::new(&a.trace).exists() {
        bail!("trace {} does not exist", a.trace.display());
    }
    Ok((format, ropts))
}

/// `--compress` (and its settings) with a mode that does not model the
/// compressed layout: an error naming the one that does.
pub fn no_compress(a: &SimArgs) -> Result<()> {
    crate::compress::settings(a)?.map_or(Ok(()), |_| {
        Err(bad(
            "compress",
            format!(
                "applies to --mode ssc --ftl log (the compressed log-structured layout), not --mode {}{}",
                a.mode,
                if a.mode == "ssc" { format!(" --ftl {}", a.ftl) } else { String::new() }
            ),
        ))
    })
}

/// Run a mode other than `cache`.
pub fn run(a: &SimArgs) -> Result<ModeOutput> {
    if !matches!(a.mode.as_str(), "ssd" | "ssc" | "ssc-v") {
        no_compress(a)?;
    }
    if a.out.is_some() {
        bail!(
            "--out writes the sweep files of --mode cache only; use --json with --mode {}",
            a.mode
        );
    }
    // The flash modes have no timing model: --no-timing changes nothing.
    // TICA: flushes complete with their request, no timed flushing.
    if a.no_timing && !matches!(a.mode.as_str(), "ssd" | "ssc" | "ssc-v" | "tica" | "tier") {
        return Err(bad(
            "no_timing",
            format!(
                "applies to --mode cache, ssd, ssc, ssc-v, tica and tier (--mode {} always runs its model)",
                a.mode
            ),
        ));
    }
    if matches!(a.mode.as_str(), "ssd" | "ssc" | "ssc-v")
        && (a.replay.is_some() || a.queue_depth.is_some())
    {
        bail!(
            "--replay and --queue-depth do not apply to --mode {} (the flash model counts operations, it has no timing)",
            a.mode
        );
    }
    match a.mode.as_str() {
        "ssd" | "ssc" | "ssc-v" => flash::run(a),
        "tier" => tier::run(a),
        "tica" | "ucache" | "srac" => tica::run(a),
        m => Err(bad(
            "mode",
            format!("unknown mode '{m}' (allowed: {})", MODES.join(", ")),
        )),
    }
}

/// The JSON object of one report, with `trace` set.
pub fn json_row(trace: &Path, report: &impl serde::Serialize) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(report)?;
    v["trace"] = serde_json::Value::String(trace.display().to_string());
    Ok(v)
}
