//! Reproduction of this paper's experiments (being written).

use anyhow::{bail, Result};

/// Options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of the shared traces.
    #[arg(long, default_value = "../shared/traces")]
    pub traces: std::path::PathBuf,
}

pub fn run(_a: Args) -> Result<()> {
    bail!("this reproduction is not available in this build yet")
}
