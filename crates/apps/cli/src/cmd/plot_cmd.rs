//! `tiercache plot RESULTS --x ... --y ... -o FIG.svg`: draws sweep results
//! with `python3 -m tiercache.plot`, which reads the results (Parquet, CSV,
//! JSON) with pandas and draws them with the one renderer of tiercache (the
//! `tiercache-plot` crate, also behind the sweep SVG of `sim --out`): log x
//! axis for sizes, legends naming only what varies, no empty panel, the
//! Okabe-Ito palette.

use anyhow::{bail, Context, Result};
use clap::Args;

/// Arguments, passed unchanged to `python3 -m tiercache.plot`.
#[derive(Args, Debug)]
#[command(
    disable_help_flag = true,
    after_help = "Needs the Python package: `pip install .` from the repository root. \
Run `tiercache plot --help` for its options. PYTHON selects the interpreter [default: python3]."
)]
pub struct PlotArgs {
    /// RESULTS.parquet --x COL --y COL [--hue COL] [--style COL] [--title T] [--logx|--no-logx] -o FIG.svg
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Run the Python plotter and return its exit status as an error if it failed.
pub fn run(a: PlotArgs) -> Result<()> {
    let py = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = std::process::Command::new(&py)
        .args(["-m", "tiercache.plot"])
        .args(&a.args)
        .status()
        .with_context(|| format!("running {py} -m tiercache.plot (is Python installed?)"))?;
    if !status.success() {
        bail!("{py} -m tiercache.plot failed ({status}); if the module is missing, run `pip install .` in the repository root");
    }
    Ok(())
}
