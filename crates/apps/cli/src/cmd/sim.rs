//! `tiercache sim`: replay a trace through one cache configuration, or a sweep
//! over comma-separated values of the policy and size options.

use crate::plot;
use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use tiercache_core::admission::{AdmissionConfig, AdmissionKind};
use tiercache_core::eviction::EvictionKind;
use tiercache_core::{Assoc, CacheConfig, WritePolicy};
use tiercache_model::Profile;
use tiercache_sim::units::{parse_bytes, parse_size, SizeSpec};
use tiercache_sim::{Replay, SimOptions, SimReport};
use tiercache_trace::{Format, ReadOptions};

/// Options of `tiercache sim`. Options marked "list" take comma-separated
/// values; several values make a sweep over their cross product.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "SIZE takes units (512B, 4KiB, 10GiB, 1.5GB); a plain integer is a number of cache lines; \
a percentage is a share of the trace's footprint (unique blocks x line size).\n\n\
Examples:\n  tiercache sim --trace ../shared/traces/arc/OLTP.lis.zst --cache-size 1000 --line-size 512B --eviction lru,arc\n  \
tiercache sim --trace ../shared/traces/disksim/ssd-postmark-aligned2.trace --format disksim --cache-size 1%,5%,10% --no-timing --json\n  \
tiercache sim --trace ../shared/traces/arc/OLTP.lis.zst --cache-size 1000,5000 --line-size 512B --no-timing --out oltp\n  \
tiercache sim --trace ../shared/traces/samples/msr-cambridge1-sample.csv --mode tier --fast-tier-size 8%\n  \
tiercache sim --trace ../shared/traces/samples/msr-cambridge1-sample.csv --mode tica --cache-size 10% --dram-size 1%"
)]
pub struct SimArgs {
    /// Trace file (compressed .gz/.xz/.zst/.bz2 are read transparently).
    #[arg(long)]
    pub trace: PathBuf,
    /// What to simulate: cache (Azor SSD cache), ssd|ssc|ssc-v (FlashTier flash devices),
    /// tier (OODT tiering), tica|ucache|srac (three-level caches).
    #[arg(long, default_value = "cache")]
    pub mode: String,
    /// Tiering: placement policy: oodt, frequency, hystor, raf.
    #[arg(long, default_value = "oodt")]
    pub tier_policy: String,
    /// Tiering: fast tier size (SIZE or percentage of the footprint).
    #[arg(long)]
    pub fast_tier_size: Option<String>,
    /// Tiering: data block size (4KiB to 4MiB).
    #[arg(long, default_value = "4KiB")]
    pub tier_block: String,
    /// TICA: policy: ef, wed, adaptive.
    #[arg(long, default_value = "adaptive")]
    pub tica_policy: String,
    /// TICA, uCache, S-RAC: DRAM level size (SIZE or percentage of the footprint).
    #[arg(long)]
    pub dram_size: Option<String>,
    /// Trace format: msr, arc-lis, disksim, blkparse, fiu, tencent, systor, cloudphysics, vscsi, blockid, native [default: detected].
    #[arg(long)]
    pub format: Option<String>,
    /// Cache size (list): SIZE, number of lines, or percentage of the footprint
    /// (required for --mode cache and the flash and three-level modes).
    #[arg(long, value_delimiter = ',')]
    pub cache_size: Vec<String>,
    /// Cache line size (list): a power of two from 512B to 1MiB.
    #[arg(long, value_delimiter = ',', default_value = "4KiB")]
    pub line_size: Vec<String>,
    /// Valid/dirty granularity inside a line [default: the smaller of 4KiB and the line size].
    #[arg(long)]
    pub sub_block: Option<String>,
    /// Associativity (list): direct, N-way (e.g. 8-way), full.
    #[arg(long, value_delimiter = ',', default_value = "full")]
    pub assoc: Vec<String>,
    /// Eviction policy (list): lru, fifo, arc, s3fifo.
    #[arg(long, value_delimiter = ',', default_value = "lru")]
    pub eviction: Vec<String>,
    /// Write policy (list): write-back, write-through (Azor write-hdd-ssd), write-hdd-upd, write-hdd-inv (write-around), read-only.
    #[arg(long, value_delimiter = ',', default_value = "write-back")]
    pub write_policy: Vec<String>,
    /// Do not allocate lines on write misses (write-back and write-through).
    #[arg(long)]
    pub no_write_allocate: bool,
    /// Admission policy (list): always, seq-cutoff, nhit, 2lbs.
    #[arg(long, value_delimiter = ',', default_value = "always")]
    pub admission: Vec<String>,
    /// Sequential cutoff: bypass a stream once it has run this far.
    #[arg(long, default_value = "4MiB")]
    pub seq_cutoff: String,
    /// n-hit: admit a line on its n-th access.
    #[arg(long, default_value_t = 3)]
    pub nhit_threshold: u32,
    /// n-hit: filter only once the cache is this full (0.0-1.0).
    #[arg(long, default_value_t = 0.8)]
    pub nhit_trigger: f64,
    /// 2LBS levels: metadata, frequency, or both (comma-separated).
    #[arg(
        long = "2lbs-levels",
        value_delimiter = ',',
        default_value = "metadata,frequency"
    )]
    pub twolbs_levels: Vec<String>,
    /// 2LBS: halve access counts every this many line accesses (0: never).
    #[arg(long = "2lbs-window", default_value_t = 0)]
    pub twolbs_window: u64,
    /// Write-back: share of lines that may be dirty before cleaning runs (0.0-1.0).
    #[arg(long, default_value_t = 0.2)]
    pub dirty_target: f64,
    /// Dirty lines the background cleaner writes back per request.
    #[arg(long, default_value_t = 2)]
    pub clean_rate: usize,
    /// Compute cache behaviour only, without the timing model (fastest): no response
    /// times, utilizations, `baseline` or `speedup`. Every count (hits, fills, hdd_ops,
    /// ssd_write_ops ...) is the same as with timing.
    #[arg(long)]
    pub no_timing: bool,
    /// Replay: open (at trace timestamps) or closed (as fast as possible at --queue-depth) [default: open when the trace has timestamps].
    #[arg(long)]
    pub replay: Option<String>,
    /// Requests in flight for closed-loop replay [default: 1]; implies --replay closed, and is
    /// an error with --replay open, where the trace's timestamps set the load.
    #[arg(long)]
    pub queue_depth: Option<u32>,
    /// Device profile (TOML) with HDD, SSD and DRAM parameters [default: the papers' devices].
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// Skip the HDD-only baseline replay (no `baseline`/`speedup`).
    #[arg(long)]
    pub no_baseline: bool,
    /// Count and skip malformed trace lines instead of stopping.
    #[arg(long)]
    pub skip_bad: bool,
    /// Bytes per block id for blockid, cloudphysics and arc-lis traces.
    #[arg(long, default_value = "512B")]
    pub block_size: String,
    /// Only this volume/LUN/disk of a multi-volume trace.
    #[arg(long)]
    pub volume: Option<String>,
    /// Print JSON: one object, or an array for a sweep.
    #[arg(long)]
    pub json: bool,
    /// Also write the results as PREFIX.csv and a figure as PREFIX.svg (nothing is written
    /// without it).
    #[arg(long, value_name = "PREFIX")]
    pub out: Option<PathBuf>,
    /// Parallel runs in a sweep [default: number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
}

fn parse_list<T>(vals: &[String], f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>> {
    vals.iter()
        .map(|v| f(v.trim()).map_err(anyhow::Error::msg))
        .collect()
}

/// One configuration of a sweep, with its labels.
#[derive(Clone)]
struct Point {
    size: SizeSpec,
    cfg: CacheConfig,
}

pub fn run(a: SimArgs) -> Result<()> {
    if a.mode != "cache" {
        return crate::cmd::modes::run(&a);
    }
    if a.cache_size.is_empty() {
        bail!("--cache-size is required (a SIZE such as 64MiB, a number of lines, or a percentage of the footprint such as 10%)");
    }
    let format = match &a.format {
        Some(f) => Some(f.parse::<Format>().map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let block_size = parse_bytes(&a.block_size).map_err(anyhow::Error::msg)?;
    let ropts = ReadOptions {
        skip_bad: a.skip_bad,
        block_size: u32::try_from(block_size).context("--block-size too large")?,
        volume: a.volume.clone(),
    };
    if !a.trace.exists() {
        bail!("trace {} does not exist", a.trace.display());
    }
    let sizes = parse_list(&a.cache_size, parse_size)?;
    let lines = parse_list(&a.line_size, |s| {
        parse_bytes(s).and_then(|b| {
            u32::try_from(b).map_err(|_| format!("line size {s} too large (allowed: 512B to 1MiB)"))
        })
    })?;
    let assocs = parse_list(&a.assoc, |s| s.parse::<Assoc>())?;
    let evictions = parse_list(&a.eviction, |s| s.parse::<EvictionKind>())?;
    let wps = parse_list(&a.write_policy, |s| s.parse::<WritePolicy>())?;
    let adms = parse_list(&a.admission, |s| s.parse::<AdmissionKind>())?;
    let seq_cutoff = parse_bytes(&a.seq_cutoff).map_err(anyhow::Error::msg)?;
    let (lv_meta, lv_freq) = parse_2lbs_levels(&a.twolbs_levels)?;
    let sub_block = a
        .sub_block
        .as_deref()
        .map(parse_bytes)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let profile = match &a.profile {
        Some(p) => Profile::load(p).with_context(|| format!("device profile {}", p.display()))?,
        None => Profile::default(),
    };
    // Resolve percentages against the footprint, measured at each line size.
    let mut footprints = std::collections::HashMap::new();
    if sizes.iter().any(|s| matches!(s, SizeSpec::Percent(_))) {
        for &l in &lines {
            let r = tiercache_trace::open(&a.trace, format, &ropts)?;
            let st = tiercache_trace::stats::trace_stats(r, l)?;
            footprints.insert(l, st.footprint_bytes);
        }
    }
    let mut points = Vec::new();
    for &size in &sizes {
        for &line in &lines {
            for &assoc in &assocs {
                for &eviction in &evictions {
                    for &wp in &wps {
                        for &adm in &adms {
                            let fp = footprints.get(&line).copied().unwrap_or(0);
                            let cfg = CacheConfig {
                                cache_bytes: size.bytes(line as u64, fp),
                                line_bytes: line,
                                sub_block_bytes: match sub_block {
                                    Some(s) => u32::try_from(s).unwrap_or(u32::MAX),
                                    None => line.min(4096),
                                },
                                assoc,
                                eviction,
                                write_policy: wp,
                                write_allocate: !a.no_write_allocate,
                                admission: AdmissionConfig {
                                    kind: adm,
                                    seq_cutoff_bytes: seq_cutoff,
                                    nhit_threshold: a.nhit_threshold,
                                    nhit_trigger: a.nhit_trigger,
                                    twolbs_metadata: lv_meta,
                                    twolbs_frequency: lv_freq,
                                    twolbs_window: a.twolbs_window,
                                },
                                dirty_target: a.dirty_target,
                            };
                            cfg.geometry().map_err(|e| {
                                anyhow::anyhow!(
                                    "configuration cache size {size}, line {line} B, {assoc}: {e}"
                                )
                            })?;
                            points.push(Point { size, cfg });
                        }
                    }
                }
            }
        }
    }
    let replay = match replay_choice(&a, || {
        // Open loop when the trace carries timestamps.
        let mut r = tiercache_trace::open(&a.trace, format, &ropts)?;
        Ok(r.by_ref()
            .take(1000)
            .filter_map(|x| x.ok())
            .any(|x| x.time_ns > 0))
    })? {
        None => Replay::Open,
        Some(queue_depth) => Replay::Closed { queue_depth },
    };
    let base = SimOptions {
        cache: CacheConfig::default(),
        timing: !a.no_timing,
        replay,
        profile,
        clean_per_request: a.clean_rate,
        baseline: !a.no_baseline,
    };
    let sweep = points.len() > 1;
    let reports = run_points(&a.trace, format, &ropts, &base, &points, a.jobs)?;
    if a.json {
        let v: Vec<serde_json::Value> =
            reports.iter().map(|(_, r)| json_row(&a.trace, r)).collect();
        if sweep {
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!("{}", serde_json::to_string_pretty(&v[0])?);
        }
    } else if sweep {
        print_table(&reports);
    } else {
        println!("trace {}", a.trace.display());
        println!("{}", reports[0].1);
    }
    if let Some(out) = &a.out {
        let csv = out.with_extension("csv");
        let svg = out.with_extension("svg");
        write_csv(&csv, &a.trace, &reports)?;
        plot::sweep_svg(&svg, &a.trace, &reports)?;
        eprintln!("wrote {} and {}", csv.display(), svg.display());
    }
    Ok(())
}

/// `--replay` and `--queue-depth`: `None` for open-loop replay, else the
/// queue depth of closed-loop replay. Without `--replay`, replay is open when
/// `timed()` says the trace has timestamps. `--queue-depth` with open-loop
/// replay is refused rather than silently ignored.
pub fn replay_choice(a: &SimArgs, timed: impl FnOnce() -> Result<bool>) -> Result<Option<u32>> {
    let open = match a.replay.as_deref() {
        Some("open") => true,
        Some("closed") => false,
        Some(x) => bail!("unknown replay mode '{x}' (allowed: open, closed)"),
        None => a.queue_depth.is_none() && timed()?,
    };
    if open {
        if let Some(q) = a.queue_depth {
            bail!("--queue-depth {q} applies to closed-loop replay only; drop it or pass --replay closed");
        }
        return Ok(None);
    }
    let q = a.queue_depth.unwrap_or(1);
    if q == 0 {
        bail!("--queue-depth 0 (allowed: 1 or more)");
    }
    Ok(Some(q))
}

fn json_row(trace: &Path, r: &SimReport) -> serde_json::Value {
    let mut v = serde_json::to_value(r).expect("report serializes");
    v["trace"] = serde_json::Value::String(trace.display().to_string());
    v
}

fn run_points(
    trace: &Path,
    format: Option<Format>,
    ropts: &ReadOptions,
    base: &SimOptions,
    points: &[Point],
    jobs: Option<usize>,
) -> Result<Vec<(SizeSpec, SimReport)>> {
    let jobs = jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, points.len());
    let open = || tiercache_trace::open(trace, format, ropts);
    let single = |p: &Point, progress: &mut dyn FnMut(u64)| -> Result<SimReport> {
        let mut o = base.clone();
        o.cache = p.cfg.clone();
        let rec = open()?;
        let r = tiercache_sim::run(rec, open, &o, progress)?;
        Ok(r)
    };
    if points.len() == 1 {
        let mut bar = Progress::new("simulating", None);
        let r = single(&points[0], &mut |n| bar.set(n))?;
        bar.finish();
        return Ok(vec![(points[0].size, r)]);
    }
    let bar = std::sync::Mutex::new(Progress::new("sweep", Some(points.len() as u64)));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<Result<SimReport>>>> =
        std::sync::Mutex::new((0..points.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= points.len() {
                    break;
                }
                let r = single(&points[i], &mut |_| {});
                results.lock().expect("results")[i] = Some(r);
                bar.lock().expect("bar").inc();
            });
        }
    });
    bar.into_inner().expect("bar").finish();
    let mut out = Vec::new();
    for (i, r) in results
        .into_inner()
        .expect("results")
        .into_iter()
        .enumerate()
    {
        out.push((points[i].size, r.expect("every point ran")?));
    }
    Ok(out)
}

fn print_table(reports: &[(SizeSpec, SimReport)]) {
    println!(
        "{:>10} {:>9} {:>7} {:>7} {:>14} {:>8} {:>9} {:>12} {:>12} {:>8}",
        "cache",
        "line",
        "assoc",
        "evict",
        "write",
        "admit",
        "hit %",
        "mean µs",
        "p99 µs",
        "speedup"
    );
    for (size, r) in reports {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        println!(
            "{:>10} {:>9} {:>7} {:>7} {:>14} {:>8} {:>9.3} {:>12} {:>12} {:>8}",
            size.to_string(),
            r.line_size,
            r.assoc,
            r.eviction,
            r.write_policy,
            r.admission,
            r.hit_ratio * 100.0,
            f(r.mean_response_us),
            f(r.p99_response_us),
            r.speedup.map_or("-".into(), |s| format!("{s:.2}x"))
        );
    }
}

/// Fields of the `baseline` object, flattened as `baseline_FIELD` in the CSV
/// (and in the Python DataFrame; see docs/results.md).
pub const BASELINE_FIELDS: [&str; 4] = [
    "mean_response_us",
    "p50_response_us",
    "p99_response_us",
    "hdd_utilization",
];

/// The sweep CSV: `cache_size` as given, then the `--json` fields in their
/// order, `baseline` flattened in place (docs/results.md lists every column).
fn write_csv(path: &Path, trace: &Path, reports: &[(SizeSpec, SimReport)]) -> Result<()> {
    let mut s = String::new();
    let rows: Vec<serde_json::Value> = reports.iter().map(|(_, r)| json_row(trace, r)).collect();
    let mut cols: Vec<String> = vec!["cache_size".into()];
    if let Some(serde_json::Value::Object(m)) = rows.first() {
        for k in m.keys() {
            if k == "baseline" {
                cols.extend(BASELINE_FIELDS.iter().map(|b| format!("baseline_{b}")));
            } else {
                cols.push(k.clone());
            }
        }
    }
    s.push_str(&cols.join(","));
    s.push('\n');
    let cell = |v: &serde_json::Value| match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(x) => format!("\"{}\"", x.replace('"', "\"\"")),
        v => v.to_string(),
    };
    for ((size, _), row) in reports.iter().zip(&rows) {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| match c.as_str() {
                "cache_size" => size.to_string(),
                k => match k.strip_prefix("baseline_") {
                    Some(b) if BASELINE_FIELDS.contains(&b) => cell(&row["baseline"][b]),
                    _ => cell(&row[k]),
                },
            })
            .collect();
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    std::fs::write(path, s).with_context(|| format!("writing {}", path.display()))
}

/// `--2lbs-levels`: which of Azor's two selection levels are on, as
/// (metadata first, access frequency).
pub fn parse_2lbs_levels(levels: &[String]) -> Result<(bool, bool)> {
    let (mut lv_meta, mut lv_freq) = (false, false);
    for l in levels {
        match l.trim() {
            "metadata" => lv_meta = true,
            "frequency" => lv_freq = true,
            "both" => (lv_meta, lv_freq) = (true, true),
            x => bail!("unknown 2LBS level '{x}' (allowed: metadata, frequency, both)"),
        }
    }
    Ok((lv_meta, lv_freq))
}
