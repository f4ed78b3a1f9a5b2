//! `tiercache sim`: replay a trace through one cache configuration, or a sweep
//! over comma-separated values of the policy and size options.

pub use tiercache_simulate::{replay_choice, SimArgs};

use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use std::path::Path;
use tiercache_azor_policy::CacheConfig;
use tiercache_model::Profile;
use tiercache_sim::units::{parse_bytes, parse_size, SizeSpec};
use tiercache_sim::{Replay, SimOptions, SimReport};
use tiercache_simulate::PolicySpec;
use tiercache_trace::{Format, ReadOptions};

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

pub fn run(mut a: SimArgs) -> Result<()> {
    a.apply_design().map_err(anyhow::Error::msg)?;
    if let Some(dev) = a.like.clone() {
        if let Some(mode) = like_other(&mut a, &dev)? {
            if !matches!(a.mode.as_str(), "cache") && a.mode != mode {
                bail!(
                    "--like {}: the device holds a {} (sim --mode {mode}), not --mode {}",
                    dev.display(),
                    mode_name(mode),
                    a.mode
                );
            }
            a.mode = mode.to_string();
            a.like = None;
        } else if a.mode != "cache" {
            bail!(
                "--like {}: the device holds an SSD cache (sim --mode cache), not --mode {}",
                dev.display(),
                a.mode
            );
        }
    }
    if a.mode != "cache" {
        let out = tiercache_simulate::modes::run(&a)?;
        if a.json {
            println!("{}", out.json());
        } else {
            print!("{}", out.text);
        }
        return Ok(());
    }
    tiercache_simulate::modes::no_compress(&a)?;
    let like = match &a.like {
        Some(dev) => Some(like(dev)?),
        None => None,
    };
    if a.cache_size.is_empty() && like.is_none() {
        bail!("--cache-size is required (a SIZE such as 64MiB, a number of lines such as 1000lines, or a percentage of the footprint such as 10%), or --like CACHE_DEVICE");
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
    let profile = match &a.profile {
        Some(p) => Profile::load(p).with_context(|| format!("device profile {}", p.display()))?,
        None => Profile::default(),
    };
    let points = match like {
        Some(cfg) => vec![Point {
            size: SizeSpec::Bytes(cfg.cache_bytes),
            cfg,
        }],
        None => sweep_points(&a, format, &ropts)?,
    };
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
        baseline: !a.no_baseline,
    };
    let reports = run_points(&a.trace, format, &ropts, &base, &points, a.jobs)?;
    print_results(&a, &reports)
}

fn mode_name(mode: &str) -> &'static str {
    match mode {
        "tica" => "three-level cache",
        "tier" => "tiered volume",
        "ssc" => "log-structured cache",
        _ => "SSD cache",
    }
}

/// `sim --like DEV` of a device that holds a design other than the SSD
/// cache: sets the options of `a` that the explicit `sim` command of that
/// configuration gives (policy and capacity, read from the device's
/// superblock) and returns the mode; `None` for anything else (the SSD
/// cache, or no cache: [`like`] tells).
fn like_other(a: &mut SimArgs, dev: &Path) -> Result<Option<&'static str>> {
    if let Some(info) = tiercache_tica_live::detect(dev) {
        // The policy manages the smaller SSD's slots less a reserve.
        let mut slots = usize::MAX;
        for p in [&info.ro_ssd, &info.wo_ssd] {
            let f = std::fs::File::open(p)
                .with_context(|| format!("--like {}: opening its SSD {p}", dev.display()))?;
            let sb = tiercache_store::Superblock::read(&f)
                .with_context(|| format!("--like {}: reading its SSD {p}", dev.display()))?;
            slots = slots.min(sb.newest.layout.slots as usize);
        }
        let pages = tiercache_tica_live::policy_ssd_pages(slots);
        a.tica_policy = info.tica_policy.clone();
        a.cache_size = vec![format!("{pages}lines")];
        a.dram_size = Some(format!(
            "{}lines",
            info.dram_bytes / tiercache_tica_live::PAGE
        ));
        a.policy.line_size = vec![format!("{}B", tiercache_tica_live::PAGE)];
        return Ok(Some("tica"));
    }
    if tiercache_oodt_live::is_tiered_volume(dev) {
        let sb = tiercache_oodt_live::Superblock::read(dev)
            .with_context(|| format!("--like {}: reading the tiered volume", dev.display()))?;
        let cfg: tiercache_oodt_live::VolumeConfig = serde_json::from_str(&sb.config)
            .with_context(|| format!("--like {}: reading the recorded policy", dev.display()))?;
        let bs = u64::from(sb.block_bytes);
        a.tier_policy = cfg.policy;
        a.fast_tier_size = Some(format!("{}B", sb.layout.fast_slots * bs));
        a.tier_block = format!("{bs}B");
        a.plan_every = cfg.plan_every;
        a.moves_per_round = Some(cfg.max_moves_per_round);
        a.plan_clock = cfg.plan_clock.to_string();
        a.tier_volume_size = Some(format!("{}B", sb.volume_bytes));
        a.capacity = match sb.capacity {
            tiercache_oodt_live::Capacity::Sum => "sum",
            tiercache_oodt_live::Capacity::Slow => "slow",
        }
        .to_string();
        return Ok(Some("tier"));
    }
    if tiercache_flashtier_live::detect(dev) {
        let f = tiercache_io::FileDev::open(dev, tiercache_io::FileDevOptions::default())
            .with_context(|| format!("--like {}: opening", dev.display()))?;
        let Some(sb) = tiercache_flashtier_live::Superblock::read(&f) else {
            bail!(
                "--like {}: the log-structured superblock is unreadable",
                dev.display()
            );
        };
        a.ftl = "log".into();
        a.segment_size = format!("{}B", sb.seg_bytes);
        a.cache_size = vec![format!("{}B", u64::from(sb.nsegs) * sb.seg_bytes)];
        a.policy.write_policy = vec![sb.write_policy.to_string()];
        a.policy.dirty_target = sb.dirty_target;
        a.victim = "cost-benefit".into();
        a.compress = sb.compress.to_string();
        return Ok(Some("ssc"));
    }
    Ok(None)
}

/// The configuration and capacity of the SSD cache formatted on `dev`
/// (`sim --like`): the policy its superblock records, `slots` lines.
fn like(dev: &Path) -> Result<CacheConfig> {
    let f = std::fs::File::open(dev).with_context(|| format!("opening {}", dev.display()))?;
    let sb = match tiercache_store::Superblock::read(&f) {
        Ok(sb) => sb.newest,
        Err(e) => bail!(
            "--like {}: not an SSD cache written by `tiercache format --mode cache --layout in-place` ({e}); \
             sim --like reads an SSD cache, a log-structured cache, a tiered volume or a three-level cache SSD",
            dev.display()
        ),
    };
    let mut cfg: CacheConfig = serde_json::from_str(&sb.policy)
        .with_context(|| format!("--like {}: reading the recorded policy", dev.display()))?;
    cfg.cache_bytes = sb.layout.slots as u64 * sb.layout.line_size as u64;
    cfg.geometry()
        .map_err(|e| anyhow::anyhow!("--like {}: recorded policy: {e}", dev.display()))?;
    Ok(cfg)
}

/// The sweep: the cross product of the list options, each point's
/// configuration built by the shared [`PolicySpec`] builder.
fn sweep_points(a: &SimArgs, format: Option<Format>, ropts: &ReadOptions) -> Result<Vec<Point>> {
    let sizes = parse_list(&a.cache_size, parse_size)?;
    let lines = a
        .policy
        .line_size
        .iter()
        .map(|s| tiercache_simulate::policy::parse_line_size(s).map_err(anyhow::Error::from))
        .collect::<Result<Vec<u32>>>()?;
    // Resolve percentages against the footprint, measured at each line size.
    let mut footprints = std::collections::HashMap::new();
    if sizes.iter().any(|s| matches!(s, SizeSpec::Percent(_))) {
        for &l in &lines {
            let r = tiercache_trace::open(&a.trace, format, ropts)?;
            let st = tiercache_trace::stats::trace_stats(r, l)?;
            footprints.insert(l, st.footprint_bytes);
        }
    }
    let mut points = Vec::new();
    for &size in &sizes {
        for (line_s, &line) in a.policy.line_size.iter().zip(&lines) {
            for assoc in &a.policy.assoc {
                for eviction in &a.policy.eviction {
                    for wp in &a.policy.write_policy {
                        for adm in &a.policy.admission {
                            let fp = footprints.get(&line).copied().unwrap_or(0);
                            let spec = a.policy.with(PolicySpec {
                                line_size: line_s.clone(),
                                assoc: assoc.clone(),
                                eviction: eviction.clone(),
                                write_policy: wp.clone(),
                                admission: adm.clone(),
                                ..PolicySpec::default()
                            });
                            let cfg = spec.config(size.bytes(line as u64, fp)).map_err(|e| {
                                if e.option.is_some() {
                                    anyhow::anyhow!("{e}")
                                } else {
                                    anyhow::anyhow!(
                                        "configuration cache size {size}, line {line} B, {assoc}: {e}"
                                    )
                                }
                            })?;
                            points.push(Point { size, cfg });
                        }
                    }
                }
            }
        }
    }
    Ok(points)
}

/// Print the results (JSON, a table or one report) and write the `--out` files.
fn print_results(a: &SimArgs, reports: &[(SizeSpec, SimReport)]) -> Result<()> {
    let sweep = reports.len() > 1;
    if a.json {
        let v: Vec<serde_json::Value> =
            reports.iter().map(|(_, r)| json_row(&a.trace, r)).collect();
        if sweep {
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!("{}", serde_json::to_string_pretty(&v[0])?);
        }
    } else if sweep {
        print_table(reports);
    } else {
        println!("trace {}", a.trace.display());
        println!("{}", reports[0].1);
    }
    if let Some(out) = &a.out {
        let csv = out.with_extension("csv");
        let svg = out.with_extension("svg");
        write_csv(&csv, &a.trace, reports)?;
        let rows: Vec<serde_json::Value> =
            reports.iter().map(|(_, r)| json_row(&a.trace, r)).collect();
        tiercache_plot::sweep_figure(&rows, None).save(&svg)?;
        eprintln!("wrote {} and {}", csv.display(), svg.display());
    }
    Ok(())
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
    let results = tiercache_simulate::parallel_map(points.len(), jobs, |i| {
        let r = single(&points[i], &mut |_| {});
        bar.lock().expect("bar").inc();
        r
    });
    bar.into_inner().expect("bar").finish();
    let mut out = Vec::new();
    for (p, r) in points.iter().zip(results) {
        out.push((p.size, r?));
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
