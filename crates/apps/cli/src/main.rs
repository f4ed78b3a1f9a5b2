//! `tiercache`: simulate, serve and operate hybrid SSD/HDD caches.

mod cmd;
mod log;
mod progress;

use clap::{Parser, Subcommand};

/// tiercache: a hybrid storage cache (DRAM/SSD in front of HDD), as a
/// trace-driven simulator and a live block device, from one policy core.
#[derive(Parser)]
#[command(name = "tiercache", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// More log output (-v: info, -vv: debug, -vvv: trace). TIERCACHE_LOG or
    /// RUST_LOG (e.g. `debug`, `tiercache_azor_live=trace`) take precedence.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors in the log.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a block trace through a cache configuration (or a sweep of them).
    Sim(Box<cmd::sim::SimArgs>),
    /// Miss-ratio curve: the hit ratio at many cache sizes in one pass (exact LRU, SHARDS, miniature simulation).
    Mrc(Box<cmd::mrc::MrcArgs>),
    /// Inspect and convert block traces.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCmd),
    /// Write a new cache on a file or block device, in front of a backing device.
    Format(Box<cmd::live::FormatArgs>),
    /// Export a cache over NBD (Unix socket or loopback TCP).
    Serve(Box<cmd::live::ServeArgs>),
    /// Counters of a running server (hits, dirty lines, latencies, recovery time).
    Stats(cmd::live::StatsArgs),
    /// Write back every dirty line of a running server and commit.
    Flush(cmd::live::CtlArgs),
    /// Change the policy of a running cache (write policy, dirty target,
    /// sequential cutoff), recorded in its superblock.
    Set(cmd::live::SetArgs),
    /// Grow or shrink the cache of a running server, recorded in its superblock.
    Resize(cmd::live::resize::ResizeArgs),
    /// Clean everything and stop the server: the backing device alone is then complete.
    Detach(cmd::live::CtlArgs),
    /// Record the requests a running cache serves into a trace file (start, stop, status).
    Record(cmd::live::record::RecordCmdArgs),
    /// Verify the metadata of a cache that is not in use.
    Check(cmd::live::CheckArgs),
    /// Detect ext4 or XFS in an image and classify its blocks (metadata, journal, data).
    Classify(cmd::classify::ClassifyArgs),
    /// Rerun a paper's experiments on the shared traces and print its tables.
    #[command(subcommand)]
    Reproduce(cmd::reproduce::ReproduceCmd),
    /// Start a cache in front of an emulated HDD, run fio through it, and report the speedup.
    Demo(cmd::demo::DemoArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (tiercache.1 and one per subcommand) into DIR.
    Man {
        /// Where to write them (e.g. /usr/local/share/man/man1).
        dir: std::path::PathBuf,
    },
    /// Plot sweep results (Parquet/CSV) as a figure, with the Python package's code.
    Plot(cmd::plot_cmd::PlotArgs),
    /// Replay a trace as load against an NBD server (tiercache or any other), optionally verifying reads.
    Replay(Box<cmd::replay::ReplayArgs>),
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => argument_error(e),
    };
    log::init(cli.verbose, cli.quiet);
    tiercache_runtime::panic::install();
    quiet_on_closed_output();
    let r = match cli.command {
        Command::Sim(a) => cmd::sim::run(*a),
        Command::Mrc(a) => cmd::mrc::run(*a),
        Command::Trace(t) => cmd::trace::run(t),
        Command::Format(a) => cmd::live::format(*a),
        Command::Serve(a) => cmd::live::serve(*a),
        Command::Stats(a) => cmd::live::stats(a),
        Command::Flush(a) => cmd::live::ctl("flush", a),
        Command::Detach(a) => cmd::live::ctl("detach", a),
        Command::Set(a) => cmd::live::set(a),
        Command::Record(a) => cmd::live::record::run(a),
        Command::Resize(a) => cmd::live::resize::resize(a),
        Command::Check(a) => cmd::live::check(a),
        Command::Classify(a) => cmd::classify::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::Reproduce(r) => cmd::reproduce::run(r),
        Command::Plot(a) => cmd::plot_cmd::run(a),
        Command::Completions { shell } => {
            let mut c = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut c, "tiercache", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script).map_err(Into::into)
        }
        Command::Man { dir } => man_pages(&dir),
        Command::Replay(a) => cmd::replay::run(*a),
    };
    if let Err(e) = r {
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
        }) && output_closed()
        {
            die_of_sigpipe();
        }
        eprintln!("tiercache: error: {}", render_error(&e));
        std::process::exit(1);
    }
}

/// Report a command-line error as every other error is reported
/// (`tiercache: error: ...`, exit status 2 as the parser gives); help and
/// version go to stdout unchanged.
fn argument_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    let text = e.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    eprint!("tiercache: error: {text}");
    if !text.ends_with('\n') {
        eprintln!();
    }
    std::process::exit(e.exit_code())
}

/// End the command as any Unix tool ends when the reader of its output goes
/// away (`tiercache stats | head -3`): killed by SIGPIPE, without a message.
/// Rust ignores SIGPIPE so that writes to a closed socket fail with EPIPE
/// instead of killing the process, which `serve` relies on (its NBD and
/// control sockets); that stays. Printing to a closed stdout then panics
/// ("failed printing to stdout: Broken pipe"): this hook catches exactly
/// that panic, when stdout or stderr is a pipe without a reader, before the
/// runtime's hook reports a bug. A write error returned instead of a panic
/// is handled the same way in `main`.
fn quiet_on_closed_output() {
    let next = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if info
            .payload_as_str()
            .is_some_and(|m| m.contains("Broken pipe"))
            && output_closed()
        {
            die_of_sigpipe();
        }
        next(info)
    }));
}

/// Whether stdout or stderr is a pipe or socket whose reader is gone.
fn output_closed() -> bool {
    [1, 2].into_iter().any(|fd| {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLOUT,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
    })
}

/// Die of SIGPIPE (exit status 141 in a shell), as `yes | head -1` does.
fn die_of_sigpipe() -> ! {
    // SAFETY: restoring the default action and raising a signal.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    std::process::exit(128 + libc::SIGPIPE)
}

/// The error and its causes on one line, each cause said once: a cause whose
/// text an outer message already contains (thiserror messages that embed
/// their source) is not repeated.
fn render_error(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// `tiercache man DIR`: the man pages, generated from the command definitions.
fn man_pages(dir: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cmd = <Cli as clap::CommandFactory>::command();
    clap_mangen::generate_to(cmd, dir)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    println!("wrote the man pages into {}", dir.display());
    Ok(())
}
