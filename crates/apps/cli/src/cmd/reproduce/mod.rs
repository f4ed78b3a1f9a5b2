//! `tiercache reproduce PAPER`: one file per paper.

use anyhow::Result;
use clap::Subcommand;

pub mod flashtier;
pub mod tica;

#[derive(Subcommand, Debug)]
pub enum ReproduceCmd {
    /// FlashTier Tables VI and VII: SSD against SSC against SSC-V.
    Flashtier(flashtier::Args),
    /// TICA Figs. 11-14: TICA-A, EF and WED against uCache and S-RAC.
    Tica(tica::Args),
}

pub fn run(c: ReproduceCmd) -> Result<()> {
    match c {
        ReproduceCmd::Flashtier(a) => flashtier::run(a),
        ReproduceCmd::Tica(a) => tica::run(a),
    }
}
