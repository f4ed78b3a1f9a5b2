//! `tiercache reproduce oodt`: the OODT paper's evaluation (Salkhordeh et
//! al., online OS-level data tiering) against our figures.
//!
//! Simulated part: OODT against frequency-only, Hystor-like and RAF-like
//! placement on the shared traces at the paper's fast-tier sizes (2-16 % of
//! the footprint), the same runs as `tiercache sim --mode tier --replay
//! closed` (Figs. 2, 4-8), then the data block size (Fig. 9) and the read
//! weight (Fig. 10a). Live part: the tiered volume (`format --mode tier`,
//! `serve --emulate-hdd`) under fio zipf through the nbd engine, against the
//! emulated HDD alone and nbdkit's cache filter in front of it. Writes
//! DIR/oodt.md, one CSV per table and SVG plots.

use crate::tools::write;
use anyhow::Result;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;
use tiercache_sim::units::{parse_bytes, parse_seconds};

mod claims;
mod live;
mod simulated;
mod table;

/// Options.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub run: crate::RunArgs,
    /// Fast-tier sizes of the simulated part, percentages of the footprint
    /// (list) [default: 2%,4%,8%,16%; --quick: 2%,8%].
    #[arg(long)]
    pub fast_sizes: Option<String>,
    /// Skip the simulated part.
    #[arg(long)]
    pub no_sim: bool,
    /// Skip the live part.
    #[arg(long)]
    pub no_live: bool,
    /// Live: time of each measured fio run, a duration such as 60s (a plain
    /// number is seconds) [default: 60s; --quick: 15s].
    #[arg(long, value_parser = parse_seconds)]
    pub live_runtime: Option<u64>,
    /// Live: time of the warm-up fio run before each measured run (the
    /// tiered volume migrates meanwhile) [default: 30s; --quick: 10s].
    #[arg(long, value_parser = parse_seconds)]
    pub live_warmup: Option<u64>,
    /// Live: volume size, a whole number of MiB such as 256MiB or 1GiB.
    #[arg(long, default_value = "256MiB", value_parser = parse_bytes)]
    pub live_size: u64,
    /// Live: volume size in MiB (deprecated: use --live-size 256MiB).
    #[arg(long, hide = true, conflicts_with = "live_size")]
    pub live_size_mib: Option<u64>,
    /// Live: fast tier (and nbdkit cache) sizes, percent of the volume (list)
    /// [default: 4,16; --quick: 8].
    #[arg(long)]
    pub live_fast: Option<String>,
}

/// A shared trace and the paper's workload it stands in for.
pub(crate) struct Workload {
    name: &'static str,
    rel: &'static str,
    format: &'static str,
    paper: &'static str,
    in_quick: bool,
}

const WORKLOADS: [Workload; 5] = [
    Workload {
        name: "postmark",
        rel: "disksim/ssd-postmark-aligned2.trace",
        format: "disksim",
        paper: "Postmark (Fig. 4a)",
        in_quick: true,
    },
    Workload {
        name: "oltp",
        rel: "arc/OLTP.lis.zst",
        format: "arc-lis",
        paper: "TPC-C (Fig. 5a): ARC OLTP as stand-in",
        in_quick: true,
    },
    Workload {
        name: "p3",
        rel: "arc/P3.lis.zst",
        format: "arc-lis",
        paper: "TPC-H (Fig. 6a): ARC P3 (read-only, small random) as stand-in",
        in_quick: true,
    },
    Workload {
        name: "iozone",
        rel: "disksim/ssd-iozone-aligned2-100K.trace",
        format: "disksim",
        paper: "IOzone (Fig. 7b)",
        in_quick: false,
    },
    Workload {
        name: "msr",
        rel: "samples/msr-cambridge1-sample.csv",
        format: "msr",
        paper: "none (1,000-request sample: one planning round)",
        in_quick: true,
    },
];

const POLICIES: [&str; 4] = ["oodt", "frequency", "hystor", "raf"];

pub(crate) fn pct(x: f64) -> String {
    format!("{:+.1} %", x * 100.0)
}

/// Runs the reproduction (the live part through `tiercache`, this
/// program's binary) and writes DIR/oodt.md.
pub fn run(a: Args, tiercache: &Path) -> Result<()> {
    let t0 = Instant::now();
    let wanted: Vec<&Workload> = WORKLOADS
        .iter()
        .filter(|w| !a.run.quick || w.in_quick)
        .collect();
    // Checked before anything is written: a wrong --traces is an error.
    let found = if a.no_sim {
        a.run.create_out()?;
        Vec::new()
    } else {
        let rels: Vec<&str> = wanted.iter().map(|w| w.rel).collect();
        a.run.traces_and_out(&rels)?
    };
    let mut md = String::new();
    writeln!(
        md,
        "# OODT (online OS-level data tiering): the paper's claims against our figures\n"
    )?;
    writeln!(
        md,
        "Written by `tiercache reproduce oodt{}`. Paper: Salkhordeh, Asadi, Ebrahimi, \"Operating system level data tiering using online workload characterization\" (J. Supercomputing 2015).\n",
        if a.run.quick { " --quick" } else { "" }
    )?;
    let mut claims: Vec<[String; 4]> = Vec::new();
    if !a.no_sim {
        simulated::simulated(&a, &wanted, &found, &mut md, &mut claims)?;
    }
    let mut live_md = String::new();
    if !a.no_live {
        live::live(&a, tiercache, &mut live_md, &mut claims)?;
    }
    let mut out = md;
    writeln!(out, "## Claims\n")?;
    writeln!(out, "| Paper claim | Our figure | Agrees? | Why not |")?;
    writeln!(out, "|---|---|---|---|")?;
    for c in &claims {
        writeln!(out, "| {} | {} | {} | {} |", c[0], c[1], c[2], c[3])?;
    }
    out.push('\n');
    out.push_str(&live_md);
    writeln!(out, "\nRun time: {:.0} s.", t0.elapsed().as_secs_f64())?;
    let p = a.run.out.join("oodt.md");
    write(&p, &out)?;
    eprintln!(
        "wrote {} ({:.0} s)",
        p.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The claim's verdict for a reduction `ours` where the paper reports `paper`
/// (both fractions of the reference's time).
pub(crate) fn verdict(ours: f64, paper: f64) -> &'static str {
    if ours >= paper / 2.0 {
        "yes"
    } else if ours > 0.005 {
        "direction only"
    } else {
        "**no**"
    }
}
