//! `tiercache sim --mode ...` for the designs beyond the SSD cache. One file per
//! family: [`flash`] (FlashTier: ssd, ssc, ssc-v), [`tier`] (OODT tiering),
//! [`tica`] (TICA and its baselines uCache and S-RAC).

use crate::cmd::sim::SimArgs;
use anyhow::{bail, Result};

pub mod flash;
pub mod tica;
pub mod tier;

/// Dispatch a non-cache mode.
pub fn run(a: &SimArgs) -> Result<()> {
    match a.mode.as_str() {
        "ssd" | "ssc" | "ssc-v" => flash::run(a),
        "tier" => tier::run(a),
        "tica" | "ucache" | "srac" => tica::run(a),
        m => {
            bail!("unknown mode '{m}' (allowed: cache, ssd, ssc, ssc-v, tier, tica, ucache, srac)")
        }
    }
}
