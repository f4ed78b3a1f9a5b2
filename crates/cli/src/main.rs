//! `tiercache`: simulate, serve and operate hybrid SSD/HDD caches.

mod cmd;
mod plot;
mod progress;

use clap::{Parser, Subcommand};

/// tiercache: a hybrid storage cache (DRAM/SSD in front of HDD), as a
/// trace-driven simulator and a live block device, from one policy core.
#[derive(Parser)]
#[command(name = "tiercache", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a block trace through a cache configuration (or a sweep of them).
    Sim(Box<cmd::sim::SimArgs>),
    /// Inspect and convert block traces.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCmd),
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Sim(a) => cmd::sim::run(*a),
        Command::Trace(t) => cmd::trace::run(t),
    };
    if let Err(e) = r {
        eprintln!("tiercache: error: {e:#}");
        std::process::exit(1);
    }
}
