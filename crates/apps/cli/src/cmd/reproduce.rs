//! `tiercache reproduce PAPER`: parses the options and runs the paper's
//! experiments from the `tiercache-reproduce` library.

use anyhow::{Context, Result};
use clap::Subcommand;
use tiercache_reproduce::{azor, flashtier, oodt, tica};

#[derive(Subcommand, Debug)]
pub enum ReproduceCmd {
    /// Azor thesis: parameter studies (simulated) and a live run beside nbdkit's cache filter.
    Azor(azor::Args),
    /// FlashTier Tables VI and VII: SSD against SSC against SSC-V.
    Flashtier(flashtier::Args),
    /// OODT: OODT against frequency-only, Hystor and RAF, simulated and live.
    Oodt(oodt::Args),
    /// TICA Figs. 11-14: TICA-A, EF and WED against uCache and S-RAC.
    Tica(tica::Args),
}

pub fn run(c: ReproduceCmd) -> Result<()> {
    // The live parts run this binary's `format` and `serve`.
    let exe = std::env::current_exe().context("finding the tiercache binary")?;
    match c {
        ReproduceCmd::Azor(a) => azor::run(a, &exe),
        ReproduceCmd::Flashtier(a) => flashtier::run(a),
        ReproduceCmd::Oodt(a) => oodt::run(a, &exe),
        ReproduceCmd::Tica(a) => tica::run(a),
    }
}
