//! The modes of `tiercache sim` beyond the SSD cache, run in this process by
//! the same code as the CLI (`tiercache_simulate::modes`): the options become
//! the flags of `tiercache sim`, parsed by the CLI's own parser, so the result
//! is exactly what `tiercache sim --mode M --json` prints.

use std::path::PathBuf;

use clap::Parser;
use pyo3::exceptions::PyFileNotFoundError;
use pyo3::prelude::*;
use tiercache_simulate::{BadOption, SimArgs};
use tiercache_trace::TraceError as RsTraceError;

use crate::options::{Parsed, OPTIONS};
use crate::{trace_err, OptionError};

/// `tiercache sim` as a command of its own, for parsing its flags.
#[derive(Parser)]
#[command(name = "tiercache sim")]
struct SimCommand {
    #[command(flatten)]
    args: SimArgs,
}

/// A message of the CLI in Python terms: `--fast-tier-size` becomes `fast_tier_size`.
fn python_terms(msg: &str) -> String {
    let mut names: Vec<&str> = OPTIONS.iter().map(|(n, _)| *n).collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut out = msg.to_string();
    for n in names {
        out = out.replace(&format!("--{}", n.replace('_', "-")), n);
    }
    out
}

/// A mode's error as a Python exception: a bad option or a bad value as an
/// `OptionError` naming the option, a bad trace line as a `TraceError`.
fn mode_err(py: Python<'_>, e: anyhow::Error) -> PyErr {
    if let Some(b) = e.downcast_ref::<BadOption>() {
        return OptionError::new_err(format!("option {}: {}", b.option, python_terms(&b.msg)));
    }
    if let Some(t) = e.downcast_ref::<RsTraceError>() {
        return trace_err(py, t);
    }
    OptionError::new_err(python_terms(&format!("{e:#}")))
}

/// Run the mode `parsed` names on `trace`; the JSON text of `sim --json`.
pub fn simulate_json(py: Python<'_>, trace: PathBuf, parsed: &Parsed) -> PyResult<String> {
    if !trace.exists() {
        return Err(PyFileNotFoundError::new_err(format!(
            "trace {} does not exist",
            trace.display()
        )));
    }
    let mut argv = vec![
        "tiercache sim".to_string(),
        format!("--trace={}", trace.display()),
    ];
    argv.extend(parsed.argv().map_err(OptionError::new_err)?);
    let args = SimCommand::try_parse_from(&argv)
        .map_err(|e| {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid option");
            OptionError::new_err(python_terms(first.trim_start_matches("error: ")))
        })?
        .args;
    py.allow_threads(move || tiercache_simulate::modes::run(&args))
        .map(|out| out.json())
        .map_err(|e| mode_err(py, e))
}
