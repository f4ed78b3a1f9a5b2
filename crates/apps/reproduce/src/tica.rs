//! `tiercache reproduce tica`: Figs. 11-14 (and 16) of the TICA paper on the
//! shared traces: TICA-A, TICA-EF and TICA-WED against uCache and S-RAC,
//! with DRAM at 1 % and each SSD at 10 % of the working set.

use anyhow::{Context, Result};
use std::path::PathBuf;
use tiercache_sim::units::{parse_bytes, parse_fraction, SizeSpec};
use tiercache_tica_policy::models::{benefit, Figures};
use tiercache_tica_policy::sim::{Replay, SimConfig};
use tiercache_tica_policy::{Arch, LevelsReport, Policy};
use tiercache_trace::{Format, ReadOptions};

use tiercache_simulate::modes::tica::{load_profile, pages, TraceInput};

/// Options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of the shared traces.
    #[arg(long, default_value = "../shared/traces")]
    pub traces: PathBuf,
    /// Page size.
    #[arg(long, default_value = "4KiB")]
    pub page_size: String,
    /// DRAM size, a share of the working set: a percentage such as 1% or a
    /// share such as 0.01.
    #[arg(long, default_value = "1%", value_parser = parse_fraction)]
    pub dram_share: f64,
    /// Size of each SSD, a share of the working set (10% or 0.1).
    #[arg(long, default_value = "10%", value_parser = parse_fraction)]
    pub ssd_share: f64,
    /// DRAM size, percent of the working set (deprecated: use --dram-share 1%).
    #[arg(long, hide = true, conflicts_with = "dram_share")]
    pub dram_percent: Option<f64>,
    /// Size of each SSD, percent of the working set (deprecated: use --ssd-share 10%).
    #[arg(long, hide = true, conflicts_with = "ssd_share")]
    pub ssd_percent: Option<f64>,
    /// Three-level device profile (TOML) [default: Table I devices].
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Replay at the traces' timestamps (open loop) instead of closed loop
    /// at queue depth 1. The shared traces oversubscribe the modelled HDD,
    /// so open replay measures queue growth more than the caches.
    #[arg(long)]
    pub open: bool,
    /// Print every report as JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// The shared traces with writes: (relative path, format).
const WORKLOADS: [(&str, Format); 5] = [
    ("disksim/ssd-postmark-aligned2.trace", Format::Disksim),
    ("disksim/ssd-iozone-aligned2-100K.trace", Format::Disksim),
    ("samples/msr-cambridge1-sample.csv", Format::Msr),
    ("samples/cloud_storage-sample.bz2", Format::Tencent),
    ("samples/cloudPhysicsIO.vscsi", Format::Vscsi),
];

const ARCHS: [Arch; 5] = [
    Arch::UCache,
    Arch::Srac,
    Arch::Tica(Policy::Ef),
    Arch::Tica(Policy::Wed),
    Arch::Tica(Policy::Adaptive),
];

/// The DRAM and SSD sizes in percent of the working set, from the share
/// options or their deprecated percent spellings.
fn shares(a: &Args) -> Result<(f64, f64)> {
    let pick = |share: f64, old: Option<f64>, name: &str| -> Result<f64> {
        let Some(p) = old else {
            return Ok(share * 100.0);
        };
        eprintln!("tiercache: warning: --{name}-percent is deprecated; use --{name}-share {p}%");
        if !(p > 0.0 && p <= 100.0) {
            anyhow::bail!("--{name}-percent {p} (allowed: above 0 up to 100)");
        }
        Ok(p)
    };
    let dram = pick(a.dram_share, a.dram_percent, "dram")?;
    let ssd = pick(a.ssd_share, a.ssd_percent, "ssd")?;
    if dram <= 0.0 || ssd <= 0.0 {
        anyhow::bail!("--dram-share and --ssd-share must be above 0%");
    }
    Ok((dram, ssd))
}

/// Runs every architecture on every shared trace found and prints the
/// figures' tables (or `--json`).
pub fn run(a: Args) -> Result<()> {
    let page = u32::try_from(parse_bytes(&a.page_size).map_err(anyhow::Error::msg)?)
        .context("--page-size too large")?;
    let profile = match &a.profile {
        Some(p) => Some(load_profile(p)?),
        None => None,
    };
    let (dram_percent, ssd_percent) = shares(&a)?;
    let rels: Vec<&str> = WORKLOADS.iter().map(|(r, _)| *r).collect();
    let found = super::find_traces(&a.traces, &rels)?;
    let all = simulate(
        &a,
        &found,
        page,
        profile.as_ref(),
        dram_percent,
        ssd_percent,
    )?;
    if a.json {
        let v: Vec<serde_json::Value> = all
            .iter()
            .map(|(t, rows)| serde_json::json!({ "trace": t, "runs": rows }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_tables(&all);
    Ok(())
}

/// Each trace's runs, one per architecture, in `ARCHS` order.
type Runs = Vec<(String, Vec<LevelsReport>)>;

/// Every architecture on each trace of `found`.
fn simulate(
    a: &Args,
    found: &[(&str, PathBuf)],
    page: u32,
    profile: Option<&tiercache_tica_policy::LevelsProfile>,
    dram_percent: f64,
    ssd_percent: f64,
) -> Result<Runs> {
    let mut all: Runs = Vec::new();
    for (rel, format) in WORKLOADS {
        let Some((_, path)) = found.iter().find(|(r, _)| *r == rel) else {
            continue;
        };
        let path = path.clone();
        let input = TraceInput {
            path: path.clone(),
            format: Some(format),
            ropts: ReadOptions::default(),
        };
        let (footprint, timed) = input.footprint(page)?;
        let dram = pages(SizeSpec::Percent(dram_percent), page, footprint).max(2);
        let ssd = pages(SizeSpec::Percent(ssd_percent), page, footprint).max(1);
        let mut rows = Vec::new();
        for arch in ARCHS {
            let mut cfg = SimConfig::new(arch, dram, ssd);
            cfg.page_bytes = page;
            cfg.replay = if a.open && timed {
                Replay::Open
            } else {
                Replay::Closed
            };
            if let Some(p) = profile {
                cfg.profile = p.clone();
            }
            tracing::info!("{}: {}", rel, arch.name());
            rows.push(input.run(&cfg)?);
        }
        all.push((rel.to_string(), rows));
    }
    Ok(all)
}

/// The figures' tables, each normalized to uCache, and Fig. 16's benefit.
fn print_tables(all: &Runs) {
    type Metric = (&'static str, fn(&LevelsReport) -> f64);
    let metrics: [Metric; 7] = [
        ("Fig. 11: response time (normalized to uCache)", |r| {
            r.mean_response_us
        }),
        ("Fig. 12: energy (normalized to uCache)", |r| {
            r.energy_joules
        }),
        ("Fig. 13: SSD writes (normalized to uCache)", |r| {
            r.ssd_writes as f64
        }),
        ("Fig. 14: read hit ratio (normalized to uCache)", |r| {
            r.hit_ratio
        }),
        ("Hardware cost (normalized to uCache)", |r| r.cost_usd),
        ("Unreliability, 1 year (normalized to uCache)", |r| {
            r.unreliability
        }),
        ("Absolute: mean response time, µs", |r| r.mean_response_us),
    ];
    for (i, (title, f)) in metrics.iter().enumerate() {
        println!("\n{title}");
        header();
        for (t, rows) in all {
            let base = f(&rows[0]);
            let cells: Vec<f64> = rows
                .iter()
                .map(|r| {
                    if i == metrics.len() - 1 {
                        f(r)
                    } else if base > 0.0 {
                        f(r) / base
                    } else {
                        f64::NAN
                    }
                })
                .collect();
            line(t, &cells);
        }
    }
    println!("\nFig. 16: benefit (1/response x 1/SSD writes x 1/cost x 1/energy, each normalized to the best)");
    header();
    for (t, rows) in all {
        let figs: Vec<Figures> = rows
            .iter()
            .map(|r| Figures {
                mean_response_us: r.mean_response_us,
                // Endurance as Fig. 13 counts it: fewer SSD writes is better.
                lifetime_years: 1.0 / (r.ssd_writes.max(1) as f64),
                cost_usd: r.cost_usd,
                energy_joules: r.energy_joules,
            })
            .collect();
        line(t, &benefit(&figs));
    }
}

fn header() {
    print!("{:<40}", "trace");
    for a in ARCHS {
        print!(" {:>9}", a.name());
    }
    println!();
}

fn line(trace: &str, cells: &[f64]) {
    let name = trace.rsplit('/').next().unwrap_or(trace);
    print!("{name:<40}");
    for c in cells {
        print!(" {c:>9.3}");
    }
    println!();
}
