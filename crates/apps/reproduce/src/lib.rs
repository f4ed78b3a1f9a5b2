//! The papers' experiments, one module per paper: `tiercache reproduce
//! PAPER` parses its options (each module's `Args`) and calls its `run`.
//! Simulated parts run the simulator's code in process; live parts run the
//! `tiercache` binary given to them (real `format` and `serve` processes)
//! and real clients (fio, nbdkit, mkfs, PostgreSQL). Each writes its report
//! (Markdown, CSV, SVG) into the `--out` folder.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub mod azor;
pub mod flashtier;
pub mod oodt;
pub mod tica;
pub mod tools;

/// The options every full reproduction (`azor`, `oodt`) shares: where the
/// traces are, where the report goes, and the short run.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Folder of the shared traces.
    #[arg(long, default_value = "../shared/traces")]
    pub traces: PathBuf,
    /// Folder for the report (PAPER.md), the CSV tables and the figures
    /// (created if absent).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: PathBuf,
    /// A short run (fewer traces and sizes, short live runs): under 10 minutes.
    #[arg(long)]
    pub quick: bool,
}

impl RunArgs {
    /// The traces of `rels` present under `--traces` (see [`find_traces`]),
    /// checked before the output folder is created, which this then does.
    pub fn traces_and_out<'a>(&self, rels: &[&'a str]) -> Result<Vec<(&'a str, PathBuf)>> {
        let found = find_traces(&self.traces, rels)?;
        self.create_out()?;
        Ok(found)
    }

    /// Creates the output folder.
    pub fn create_out(&self) -> Result<()> {
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("creating the output folder {}", self.out.display()))
    }
}

/// The traces of `rels` present under `dir`. An error, not an empty
/// result, when the folder is missing or holds none of them: a reproduction
/// run from the wrong directory must not print empty tables and succeed.
pub fn find_traces<'a>(dir: &Path, rels: &[&'a str]) -> Result<Vec<(&'a str, PathBuf)>> {
    let hint =
        "run from the repository root (the traces live in ../shared/traces) or pass --traces DIR";
    if !dir.is_dir() {
        bail!("traces folder {} not found; {hint}", dir.display());
    }
    let mut found = Vec::new();
    for rel in rels {
        let p = dir.join(rel);
        if p.exists() {
            found.push((*rel, p));
        } else {
            tracing::warn!("skipping {}: not found", p.display());
        }
    }
    if found.is_empty() {
        bail!(
            "none of the expected traces ({}) is under {}; {hint}",
            rels.join(", "),
            dir.display()
        );
    }
    Ok(found)
}
