//! `tiercache reproduce azor`: the Azor thesis's parameter studies
//! (associativity, cache size, line size with its metadata footprint, write
//! policy, 2LBS levels) simulated on the shared traces, then a live part: a
//! fio zipf workload, then PostMark and pgbench on ext4/XFS (nbdfuse + loop),
//! through the live SSD cache and through nbdkit's cache filter, all over one
//! emulated HDD. Writes DIR/azor.md, one CSV per study
//! and SVG figures.

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;
use tiercache_azor_policy::Engine;
use tiercache_plot::{Figure, Panel, Series};
use tiercache_sim::units::parse_seconds;
use tiercache_sim::{Replay, SimOptions, SimReport};
use tiercache_simulate::PolicySpec;
use tiercache_trace::{Format, ReadOptions};

mod apps;
mod live;
mod report;
mod variants;
mod workloads;

use crate::tools::write;
use report::report;

/// Options.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub run: crate::RunArgs,
    /// Skip the live part (simulation only).
    #[arg(long)]
    pub no_live: bool,
    /// Skip the simulated studies: the live part and the metadata table
    /// only (no traces needed).
    #[arg(long, conflicts_with = "no_live")]
    pub no_sim: bool,
    /// Time of fio per live variant, a duration such as 60s or 2m (a plain
    /// number is seconds) [default: 12s with --quick, else 60s]; 0 skips the
    /// fio runs (the application workloads still run).
    #[arg(long = "live-time", alias = "live-seconds", value_parser = seconds)]
    pub live_seconds: Option<u32>,
    /// Skip the application workloads (PostMark, pgbench on ext4/XFS) of
    /// the live part.
    #[arg(long)]
    pub no_apps: bool,
    /// Which application workloads to run (comma-separated: postmark,
    /// pgbench) [default: postmark with --quick, else both].
    #[arg(long, value_delimiter = ',', value_parser = ["postmark", "pgbench"], conflicts_with = "no_apps")]
    pub apps: Option<Vec<String>>,
    /// PostMark's initial files [default: 40 with --quick, else 100].
    #[arg(long)]
    pub postmark_files: Option<u32>,
    /// PostMark's transactions [default: 80 with --quick, else 200] (the
    /// mount is synchronous: each costs several HDD writes and flushes).
    #[arg(long)]
    pub postmark_transactions: Option<u32>,
    /// pgbench's scale factor (16 MB each) [default: the live data size
    /// over 60 MiB, 1 to 20].
    #[arg(long)]
    pub pgbench_scale: Option<u32>,
    /// Time of each pgbench run, a duration such as 60s (a plain number is
    /// seconds) [default: 60s].
    #[arg(long = "pgbench-time", alias = "pgbench-seconds", value_parser = seconds)]
    pub pgbench_seconds: Option<u32>,
    /// Size of the emulated HDD's data set in the live part [default: 256MiB
    /// with --quick, else 1GiB]; each cache holds an eighth of it.
    #[arg(long)]
    pub live_data: Option<String>,
    /// Parallel simulations [default: number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
}

/// A duration option in whole seconds (`60s`, `2m`, a plain number of seconds).
fn seconds(s: &str) -> Result<u32, String> {
    u32::try_from(parse_seconds(s)?).map_err(|_| format!("'{s}' is too long"))
}

/// A shared trace: short name, path under the traces folder, format, the
/// thesis workload it stands in for, in the quick run or not.
struct TraceDef {
    name: &'static str,
    rel: &'static str,
    format: &'static str,
    analog: &'static str,
    quick: bool,
    /// Bytes per block id (arc-lis): OLTP's one-page requests are read as
    /// 4 KiB database pages, or no 512-B read would ever fill a 4 KiB line.
    block: u32,
}

const TRACES: [TraceDef; 6] = [
    TraceDef {
        name: "postmark",
        rel: "disksim/ssd-postmark-aligned2.trace",
        format: "disksim",
        analog: "PostMark",
        quick: true,
        block: 512,
    },
    TraceDef {
        name: "msr-hm",
        rel: "samples/msr-cambridge1-sample.csv",
        format: "msr",
        analog: "SPECsfs2008 (file server)",
        quick: true,
        block: 512,
    },
    TraceDef {
        name: "cloudphysics",
        rel: "samples/cloudPhysicsIO.vscsi",
        format: "vscsi",
        analog: "SPECsfs2008 (VM server)",
        quick: false,
        block: 512,
    },
    TraceDef {
        name: "oltp",
        rel: "arc/OLTP.lis.zst",
        format: "arc-lis",
        analog: "Hammerora (OLTP)",
        quick: false,
        block: 4096,
    },
    TraceDef {
        name: "p3",
        rel: "arc/P3.lis.zst",
        format: "arc-lis",
        analog: "TPC-H (read-only, scans)",
        quick: false,
        block: 512,
    },
    TraceDef {
        name: "iozone",
        rel: "disksim/ssd-iozone-aligned2-100K.trace",
        format: "disksim",
        analog: "(write-only stress)",
        quick: false,
        block: 512,
    },
];

/// One simulated point of a study.
#[derive(Clone)]
struct Row {
    study: &'static str,
    trace: &'static str,
    /// Cache size as a share of the footprint at 4 KiB lines.
    size_pct: f64,
    spec: PolicySpec,
    /// The 2LBS label: none, metadata, frequency, both.
    twolbs: &'static str,
    report: Option<SimReport>,
    baseline_us: f64,
}

impl Row {
    fn r(&self) -> &SimReport {
        self.report.as_ref().expect("row simulated")
    }
    fn speedup(&self) -> f64 {
        match self.r().mean_response_us {
            Some(m) if m > 0.0 => self.baseline_us / m,
            _ => f64::NAN,
        }
    }
}

fn spec(assoc: &str, line: &str, wp: &str, twolbs: &'static str) -> PolicySpec {
    let mut s = PolicySpec {
        assoc: assoc.into(),
        line_size: line.into(),
        write_policy: wp.into(),
        ..PolicySpec::default()
    };
    match twolbs {
        "none" => {}
        lv => {
            s.admission = "2lbs".into();
            s.twolbs_levels = match lv {
                "both" => vec!["metadata".into(), "frequency".into()],
                x => vec![x.into()],
            };
        }
    }
    s
}

/// The rows of every study for one trace.
fn study_rows(t: &'static str, quick: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let base = 10.0;
    let row = |study, size_pct, spec, twolbs| Row {
        study,
        trace: t,
        size_pct,
        spec,
        twolbs,
        report: None,
        baseline_us: 0.0,
    };
    for a in ["direct", "2-way", "8-way", "full"] {
        rows.push(row(
            "assoc",
            base,
            spec(a, "4KiB", "write-hdd-upd", "none"),
            "none",
        ));
    }
    let sizes: &[f64] = if quick {
        &[5.0, 25.0, 100.0]
    } else {
        &[2.5, 5.0, 10.0, 25.0, 50.0, 100.0]
    };
    for &p in sizes {
        for a in ["direct", "full"] {
            rows.push(row(
                "size",
                p,
                spec(a, "4KiB", "write-hdd-upd", "none"),
                "none",
            ));
        }
    }
    let lines: &[&str] = if quick {
        &["4KiB", "16KiB", "64KiB"]
    } else {
        &["4KiB", "8KiB", "16KiB", "32KiB", "64KiB"]
    };
    for &l in lines {
        for a in ["direct", "full"] {
            rows.push(row(
                "line",
                base,
                spec(a, l, "write-hdd-upd", "none"),
                "none",
            ));
        }
    }
    for wp in [
        "write-back",
        "write-through",
        "write-hdd-upd",
        "write-hdd-inv",
        "read-only",
    ] {
        for a in ["direct", "full"] {
            rows.push(row("write", base, spec(a, "4KiB", wp, "none"), "none"));
        }
    }
    for lv in ["none", "metadata", "frequency", "both"] {
        for a in ["direct", "full"] {
            rows.push(row("2lbs", base, spec(a, "4KiB", "write-hdd-upd", lv), lv));
        }
    }
    rows
}

/// Cache bytes for `pct` % of `footprint`, a whole number of 8-line sets.
fn cache_bytes(pct: f64, footprint: u64, line: u64) -> u64 {
    let b = (footprint as f64 * pct / 100.0) as u64;
    let unit = line * 8;
    (b / unit).max(8) * unit
}

/// Parse a trace format name.
fn fmt(s: &str) -> Result<Format> {
    s.parse::<Format>().map_err(|e| anyhow::anyhow!("{e}"))
}

/// Simulate `rows` of one trace (closed loop, queue depth 1), `jobs` at once.
fn simulate(path: &Path, format: Format, block: u32, rows: &mut [Row], jobs: usize) -> Result<()> {
    let ropts = ReadOptions {
        block_size: block,
        ..ReadOptions::default()
    };
    let open = || tiercache_trace::open(path, Some(format), &ropts);
    let st = tiercache_trace::stats::trace_stats(open()?, 4096)?;
    let footprint = st.footprint_bytes.max(4096);
    let base = SimOptions {
        cache: PolicySpec::default().config(cache_bytes(10.0, footprint, 4096))?,
        timing: true,
        replay: Replay::Closed { queue_depth: 1 },
        profile: tiercache_model::Profile::default(),
        baseline: true,
    };
    // The HDD-only baseline once: it is the same for every configuration.
    let b = tiercache_sim::run(open()?, open, &base, &mut |_| {})?;
    let baseline_us = b
        .baseline
        .as_ref()
        .map(|x| x.mean_response_us)
        .context("baseline missing")?;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let cells: Vec<std::sync::Mutex<&mut Row>> =
        rows.iter_mut().map(std::sync::Mutex::new).collect();
    let err: std::sync::Mutex<Option<anyhow::Error>> = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, cells.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(cell) = cells.get(i) else { break };
                let mut row = cell.lock().expect("row");
                let res = (|| -> Result<SimReport> {
                    let line = u64::from(tiercache_simulate::policy::parse_line_size(
                        &row.spec.line_size,
                    )?);
                    let cfg = row
                        .spec
                        .config(cache_bytes(row.size_pct, footprint, line))
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    let mut o = base.clone();
                    o.cache = cfg;
                    o.baseline = false;
                    Ok(tiercache_sim::run(open()?, open, &o, &mut |_| {})?)
                })();
                match res {
                    Ok(r) => {
                        row.report = Some(r);
                        row.baseline_us = baseline_us;
                    }
                    Err(e) => {
                        err.lock().expect("err").get_or_insert(e);
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = err.into_inner().expect("err") {
        return Err(e);
    }
    Ok(())
}

/// Metadata per GiB of cache (line table and replacement state) for an
/// associativity and line size, from the engine itself.
fn metadata_per_gib(assoc: &str, line: &str) -> Result<f64> {
    let cfg = spec(assoc, line, "write-hdd-upd", "none")
        .config(1 << 30)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let e = Engine::new(cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(e.metadata_bytes_per_gib())
}

const CSV_HEAD: &str = "study,trace,cache_pct,cache_bytes,line_size,assoc,write_policy,twolbs,hit_ratio,read_hit_ratio,mean_response_us,baseline_us,speedup,hdd_ops,ssd_write_ops,metadata_bytes_per_gib";

fn csv_line(r: &Row) -> String {
    let x = r.r();
    format!(
        "{},{},{},{},{},{},{},{},{:.6},{:.6},{:.3},{:.3},{:.4},{},{},{:.0}",
        r.study,
        r.trace,
        r.size_pct,
        x.cache_size_bytes,
        x.line_size,
        x.assoc,
        x.write_policy,
        r.twolbs,
        x.hit_ratio,
        x.read_hit_ratio,
        x.mean_response_us.unwrap_or(f64::NAN),
        r.baseline_us,
        r.speedup(),
        x.hdd_ops,
        x.ssd_write_ops,
        x.metadata_bytes_per_gib
    )
}

/// A figure of `study`: one panel of speedup, x = the study's parameter,
/// one series per trace and associativity.
fn figure(rows: &[Row], study: &str, title: &str, x_label: &str) -> Figure {
    let sel: Vec<&Row> = rows.iter().filter(|r| r.study == study).collect();
    let xkey = |r: &Row| -> String {
        match study {
            "size" => format!("{}%", r.size_pct),
            "line" => format!("{}K", r.r().line_size / 1024),
            "write" => r.r().write_policy.clone(),
            "2lbs" => r.twolbs.to_string(),
            _ => r.r().assoc.clone(),
        }
    };
    let mut ticks: Vec<String> = Vec::new();
    for r in &sel {
        let k = xkey(r);
        if !ticks.contains(&k) {
            ticks.push(k);
        }
    }
    let mut series: Vec<Series> = Vec::new();
    for r in &sel {
        let label = if study == "assoc" {
            r.trace.to_string()
        } else {
            format!("{} {}", r.trace, r.r().assoc)
        };
        let x = ticks.iter().position(|t| *t == xkey(r)).unwrap_or(0) as f64;
        let y = r.speedup();
        if !y.is_finite() {
            continue;
        }
        match series.iter_mut().find(|s| s.label == label) {
            Some(s) => {
                s.x.push(x);
                s.y.push(y);
            }
            None => series.push(Series {
                label,
                x: vec![x],
                y: vec![y],
                ..Default::default()
            }),
        }
    }
    Figure {
        title: title.into(),
        panels: vec![Panel {
            x_label: x_label.into(),
            y_label: "speedup over the HDD alone (x)".into(),
            x_ticks: Some(ticks),
            series,
            ..Default::default()
        }],
    }
}

/// Runs the reproduction: the simulated studies, the metadata table and the
/// live part (through `tiercache`, this program's binary), then writes
/// azor.md and prints it.
pub fn run(a: Args, tiercache: &Path) -> Result<()> {
    let t0 = Instant::now();
    let wanted: Vec<&TraceDef> = TRACES
        .iter()
        .filter(|t| !a.no_sim && (t.quick || !a.run.quick))
        .collect();
    let rels: Vec<&str> = wanted.iter().map(|t| t.rel).collect();
    // Checked before anything is written: a wrong --traces or --live-data is an error.
    if !a.no_live {
        live::data_bytes(&a)?;
    }
    let found = if a.no_sim {
        a.run.create_out()?;
        Vec::new()
    } else {
        a.run.traces_and_out(&rels)?
    };
    let out = &a.run.out;
    let mut notes: Vec<String> = Vec::new();
    if a.no_sim {
        notes.push("simulated studies skipped (--no-sim)".into());
    }
    let rows = simulate_studies(&a, &wanted, &found, &mut notes)?;
    if !a.no_sim {
        write_studies(out, &rows)?;
    }
    let meta_rows = metadata_table(out)?;
    let (live, failed) = live_part(&a, tiercache, &mut notes);
    let secs = t0.elapsed().as_secs_f64();
    let mut md = String::new();
    report(&mut md, &a, &rows, &meta_rows, live.as_ref(), &notes, secs);
    write(&out.join("azor.md"), &md)?;
    print!("{md}");
    eprintln!(
        "reproduce azor: wrote {}/azor.md in {secs:.0} s",
        out.display()
    );
    if let Some(why) = failed {
        anyhow::bail!(
            "the live part did not complete ({why}); {}/azor.md is partial",
            out.display()
        );
    }
    Ok(())
}

/// Every study's rows on each wanted trace found; a missing trace is noted.
fn simulate_studies(
    a: &Args,
    wanted: &[&TraceDef],
    found: &[(&str, std::path::PathBuf)],
    notes: &mut Vec<String>,
) -> Result<Vec<Row>> {
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut rows: Vec<Row> = Vec::new();
    for t in wanted {
        let Some((_, p)) = found.iter().find(|(rel, _)| *rel == t.rel) else {
            let m = format!(
                "skipped {} ({}): {} not found",
                t.name,
                t.analog,
                a.run.traces.join(t.rel).display()
            );
            eprintln!("reproduce azor: {m}");
            notes.push(m);
            continue;
        };
        let mut rs = study_rows(t.name, a.run.quick);
        let ts = Instant::now();
        eprintln!(
            "reproduce azor: simulating {} ({} configurations)...",
            t.name,
            rs.len()
        );
        simulate(p, fmt(t.format)?, t.block, &mut rs, jobs)
            .with_context(|| format!("simulating {}", p.display()))?;
        eprintln!(
            "reproduce azor: {} done in {:.0} s",
            t.name,
            ts.elapsed().as_secs_f64()
        );
        rows.extend(rs);
    }
    Ok(rows)
}

/// The studies: (id, figure title, x axis label).
const STUDIES: [(&str, &str, &str); 5] = [
    (
        "assoc",
        "Associativity (cache 10 % of footprint, write-hdd-upd)",
        "associativity",
    ),
    (
        "size",
        "Cache size (write-hdd-upd)",
        "cache size, % of the 4 KiB footprint",
    ),
    (
        "line",
        "Cache line size (cache 10 %, write-hdd-upd)",
        "line size",
    ),
    ("write", "Write policy (cache 10 %)", "write policy"),
    (
        "2lbs",
        "2LBS levels (cache 10 %, write-hdd-upd)",
        "2LBS levels",
    ),
];

/// One CSV and one figure per study (azor-STUDY.csv, azor-STUDY.svg).
fn write_studies(out: &Path, rows: &[Row]) -> Result<()> {
    for (s, title, xl) in STUDIES {
        let mut c = String::from(CSV_HEAD);
        c.push('\n');
        for r in rows.iter().filter(|r| r.study == s) {
            c.push_str(&csv_line(r));
            c.push('\n');
        }
        write(&out.join(format!("azor-{s}.csv")), &c)?;
        figure(rows, s, title, xl)
            .save(&out.join(format!("azor-{s}.svg")))
            .map_err(|e| anyhow::anyhow!("azor-{s}.svg: {e}"))?;
    }
    Ok(())
}

/// The metadata footprint per GiB of cache by line size (independent of
/// the traces), also written to azor-metadata.csv: (line, direct MB, full MB).
fn metadata_table(out: &Path) -> Result<Vec<(&'static str, f64, f64)>> {
    let lines = ["4KiB", "8KiB", "16KiB", "32KiB", "64KiB"];
    let mut meta = String::from("line_size,direct_mb_per_gib,full_mb_per_gib\n");
    let mut meta_rows = Vec::new();
    for l in lines {
        let dm = metadata_per_gib("direct", l)? / 1048576.0;
        let fa = metadata_per_gib("full", l)? / 1048576.0;
        let _ = writeln!(meta, "{l},{dm:.4},{fa:.4}");
        meta_rows.push((l, dm, fa));
    }
    write(&out.join("azor-metadata.csv"), &meta)?;
    Ok(meta_rows)
}

/// The live part's results, and why it stopped early if it did: a live
/// part that failed midway (a server gone, an interrupt) still gives the
/// report its partial tables, and the run then fails.
fn live_part(
    a: &Args,
    tiercache: &Path,
    notes: &mut Vec<String>,
) -> (Option<live::LiveResults>, Option<String>) {
    if a.no_live {
        notes.push("live part skipped (--no-live)".into());
        return (None, None);
    }
    match live::run(a, &a.run.out, tiercache) {
        Ok(l) => {
            let failed = l.stopped.clone();
            (Some(l), failed)
        }
        Err(e) => {
            let m = format!("live part not run: {e:#}");
            eprintln!("reproduce azor: {m}");
            notes.push(m.clone());
            (None, Some(m))
        }
    }
}
