//! `tiercache sim --mode ...` for the designs beyond the SSD cache. One file per
//! family: [`flash`] (FlashTier: ssd, ssc, ssc-v), [`tier`] (OODT tiering),
//! [`tica`] (TICA and its baselines uCache and S-RAC).

use crate::cmd::sim::args::SimArgs;
use anyhow::{bail, Result};

pub mod flash;
pub mod tica;
pub mod tier;

/// Dispatch a non-cache mode.
pub fn run(a: &SimArgs) -> Result<()> {
    if a.out.is_some() {
        bail!(
            "--out writes the sweep files of --mode cache only; use --json with --mode {}",
            a.mode
        );
    }
    if a.no_timing {
        bail!(
            "--no-timing applies to --mode cache only (--mode {} always runs its model)",
            a.mode
        );
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
        m => {
            bail!("unknown mode '{m}' (allowed: cache, ssd, ssc, ssc-v, tier, tica, ucache, srac)")
        }
    }
}
