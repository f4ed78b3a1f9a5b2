//! The options every command that talks to a running server shares: which
//! server (its cache device or control socket) and JSON output.

use clap::Args;
use std::path::PathBuf;

/// Options of the commands that talk to a running server.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// Cache device of the running server (its control socket is CACHE.ctl).
    #[arg(long, required_unless_present = "control")]
    pub cache: Option<PathBuf>,
    /// Control socket of the running server.
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl CtlArgs {
    /// The control socket: `--control`, or `CACHE.ctl`.
    pub fn socket(&self) -> PathBuf {
        self.control.clone().unwrap_or_else(|| {
            tiercache_runtime::control::default_path(
                self.cache
                    .as_deref()
                    .unwrap_or(std::path::Path::new("cache")),
            )
        })
    }
}
