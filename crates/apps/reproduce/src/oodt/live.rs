//! The live part of `reproduce oodt`: the tiered volume (`format --mode
//! tier`, `serve --emulate-hdd`) under fio zipf through the nbd engine,
//! against the emulated HDD alone and nbdkit's cache filter in front of it.

use super::{pct, verdict, Args};
use crate::tools::{self, spawn, write};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The live part's options, resolved.
struct Opts {
    /// Seconds of each measured fio run.
    runtime: u64,
    /// Seconds of the warm-up run before each.
    warmup: u64,
    /// Fast-tier (and nbdkit cache) sizes, percent of the volume.
    fasts: Vec<f64>,
    /// The volume's size in bytes.
    size: u64,
}

/// One measured variant: its name, fast-tier percent, fio's figures, notes.
type LiveRow = (String, f64, Fio, String);

/// One tiered run's migrations (warm-up, run) and fast-tier read share.
type TierStat = (f64, u64, u64, f64);

fn options(a: &Args) -> Result<Opts> {
    let runtime = a.live_runtime.unwrap_or(if a.run.quick { 15 } else { 60 });
    let warmup = a.live_warmup.unwrap_or(if a.run.quick { 10 } else { 30 });
    let fasts: Vec<f64> = a
        .live_fast
        .clone()
        .unwrap_or_else(|| if a.run.quick { "8" } else { "4,16" }.into())
        .split(',')
        .map(|s| s.trim().trim_end_matches('%').parse::<f64>())
        .collect::<Result<_, _>>()
        .context("--live-fast: percentages such as 4,16")?;
    if fasts.iter().any(|p| !(*p > 0.0 && *p < 100.0)) {
        bail!("--live-fast: percentages above 0 and below 100");
    }
    if let Some(m) = a.live_size_mib {
        eprintln!("tiercache: warning: --live-size-mib is deprecated; use --live-size {m}MiB");
    }
    let size = a.live_size_mib.map_or(a.live_size, |m| m << 20);
    if size == 0 || !size.is_multiple_of(1 << 20) {
        bail!("--live-size: a whole number of MiB, at least 1MiB");
    }
    Ok(Opts {
        runtime,
        warmup,
        fasts,
        size,
    })
}

/// The live part: writes its section into `md`, live.csv into the output
/// folder, and its verdicts into `claims`.
pub(super) fn live(
    a: &Args,
    tiercache: &Path,
    md: &mut String,
    claims: &mut Vec<[String; 4]>,
) -> Result<()> {
    writeln!(md, "## Live part\n")?;
    if !tools::present("fio") {
        eprintln!("skipping the live part: fio not found");
        writeln!(
            md,
            "Skipped: fio not found (install fio with its nbd engine).\n"
        )?;
        return Ok(());
    }
    let o = options(a)?;
    let tmp = tempfile::Builder::new()
        .prefix("tiercache-oodt-")
        .tempdir()?;
    let d = tmp.path();
    let (runtime, warmup, size) = (o.runtime, o.warmup, o.size);
    let size_mib = size >> 20;
    writeln!(
        md,
        "Workload: fio, nbd engine, 4 KiB random 70/30 read/write, zipf 1.2 offsets over a {} MiB volume, iodepth 32, one connection; a {warmup} s warm-up run (the tiered volume migrates meanwhile), then the measured {runtime} s run. \
The slow device: a sparse {} MiB file behind tiercache's HDD emulation (the default profile's 7200 rpm model applied as delay). \
The variants: (1) **HDD only**: `tiercache serve --no-cache --backing hdd.img --emulate-hdd`; (2) **tiered**: `tiercache format --mode tier --tiers fast.img,hdd.img --size F` then `serve --emulate-hdd` (OODT policy, the slow tier delayed by the same model, the fast tier a file in {}); \
(3) **nbdkit cache**: `nbdkit --filter=cache nbd socket=<(1)'s socket> cache-max-size=F cache=writeback`, i.e. nbdkit's cache in front of variant (1)'s export, the same emulated disk. Each variant starts from a fresh zero-filled image.\n",
        size_mib,
        size_mib,
        d.display()
    )?;
    let mut rows = hdd_and_peer(tiercache, d, &o, md)?;
    let mut tier_stats = Vec::new();
    for &p in &o.fasts {
        let (row, stat) = tiered(tiercache, d, &o, p)?;
        rows.push(row);
        tier_stats.push(stat);
    }
    let base = live_table(a, &rows, md)?;
    live_claims(&rows, &tier_stats, base, claims);
    Ok(())
}

/// A fresh zero-filled sparse image of the volume's size in `d`.
fn fresh_hdd(d: &Path, size: u64, tag: &str) -> Result<PathBuf> {
    let p = d.join(format!("{tag}-hdd.img"));
    std::fs::File::create(&p)?.set_len(size)?;
    Ok(p)
}

/// (1) The emulated HDD alone, and (3) nbdkit's cache filter in front of it.
fn hdd_and_peer(exe: &Path, d: &Path, o: &Opts, md: &mut String) -> Result<Vec<LiveRow>> {
    let (runtime, warmup, size) = (o.runtime, o.warmup, o.size);
    let mut rows = Vec::new();
    let hdd = fresh_hdd(d, size, "base")?;
    let sock = d.join("hdd.sock");
    let _srv = spawn(
        Command::new(exe).args([
            "serve",
            "--cache",
            &d.join("none").to_string_lossy(),
            "--no-cache",
            "--backing",
            &hdd.to_string_lossy(),
            "--emulate-hdd",
            "--listen",
            &format!("unix:{}", sock.display()),
        ]),
        &sock,
        &d.join("hdd.log"),
    )?;
    eprintln!("live: HDD only ({warmup} s warm-up, {runtime} s)");
    fio(&sock, "warm", warmup, size)?;
    let f = fio(&sock, "hdd-only", runtime, size)?;
    rows.push(("HDD only".into(), 0.0, f, String::new()));
    if tools::present("nbdkit") {
        for &p in &o.fasts {
            let ns = d.join(format!("nk{p}.sock"));
            let mib = ((size as f64 * p / 100.0) as u64 >> 20).max(1);
            eprintln!("live: nbdkit cache {mib} MiB");
            let _nk = spawn(
                Command::new("nbdkit").args([
                    "-f",
                    "-U",
                    &ns.to_string_lossy(),
                    "--filter=cache",
                    "nbd",
                    &format!("socket={}", sock.display()),
                    &format!("cache-max-size={mib}M"),
                    "cache=writeback",
                ]),
                &ns,
                &d.join(format!("nk{p}.log")),
            )?;
            fio(&ns, "warm", warmup, size)?;
            let f = fio(&ns, "nbdkit-cache", runtime, size)?;
            rows.push((
                format!("nbdkit cache filter {mib} MiB"),
                p,
                f,
                String::new(),
            ));
        }
    } else {
        eprintln!("live: nbdkit not found: the nbdkit cache peer is skipped");
        writeln!(md, "nbdkit not found: the nbdkit cache peer is skipped.\n")?;
    }
    Ok(rows)
}

/// (2) The tiered volume with a fast tier of `p` % of the volume.
fn tiered(exe: &Path, d: &Path, o: &Opts, p: f64) -> Result<(LiveRow, TierStat)> {
    let (runtime, warmup, size) = (o.runtime, o.warmup, o.size);
    let hdd = fresh_hdd(d, size, &format!("tier{p}"))?;
    let fast = d.join(format!("tier{p}-fast.img"));
    // Room for the volume's metadata (mapping, log) beside the data blocks.
    let fast_bytes = (size as f64 * p / 100.0) as u64 + (4 << 20);
    let st = Command::new(exe)
        .args([
            "format",
            "--mode",
            "tier",
            "--tiers",
            &format!("{},{}", fast.display(), hdd.display()),
            "--size",
            &fast_bytes.to_string(),
        ])
        .output()?;
    if !st.status.success() {
        bail!(
            "tiercache format --mode tier failed: {}",
            String::from_utf8_lossy(&st.stderr)
        );
    }
    let sock = d.join(format!("tier{p}.sock"));
    let srv = spawn(
        Command::new(exe).args([
            "serve",
            "--cache",
            &fast.to_string_lossy(),
            "--emulate-hdd",
            "--listen",
            &format!("unix:{}", sock.display()),
        ]),
        &sock,
        &d.join(format!("tier{p}.log")),
    )?;
    eprintln!("live: tiered volume, fast tier {p} %");
    let stats = || -> Result<Value> {
        let o = Command::new(exe)
            .args(["stats", "--json", "--cache", &fast.to_string_lossy()])
            .output()?;
        if !o.status.success() {
            bail!(
                "tiercache stats failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        Ok(serde_json::from_slice(&o.stdout)?)
    };
    fio(&sock, "warm", warmup, size)?;
    let s0 = stats()?;
    let f = fio(&sock, "tiered", runtime, size)?;
    let s1 = stats()?;
    drop(srv);
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or(0);
    let th = |v: &Value, t: usize| v["tiers"][t]["read_hits"].as_u64().unwrap_or(0);
    let fast_reads = th(&s1, 0) - th(&s0, 0);
    let slow_reads = th(&s1, 1) - th(&s0, 1);
    let share = fast_reads as f64 / (fast_reads + slow_reads).max(1) as f64;
    let info = format!(
        "migrations {} during warm-up; {} during the run; {:.1} % of reads from the fast tier in the run",
        n(&s0, "migrations"),
        n(&s1, "migrations") - n(&s0, "migrations"),
        share * 100.0
    );
    let stat = (
        p,
        n(&s0, "migrations"),
        n(&s1, "migrations") - n(&s0, "migrations"),
        share,
    );
    Ok((
        (format!("tiered (OODT), fast tier {p} %"), p, f, info),
        stat,
    ))
}

/// The live table (Markdown and live.csv); returns the HDD-only IOPS.
fn live_table(a: &Args, rows: &[LiveRow], md: &mut String) -> Result<f64> {
    writeln!(
        md,
        "| variant | IOPS | mean latency µs | read p99 µs | vs HDD only | notes |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    let mut csv = String::from(
        "variant,fast_percent,iops,mean_latency_us,read_p99_us,speedup_vs_hdd_only,notes\n",
    );
    let base = rows[0].2.iops;
    for (name, p, f, info) in rows {
        writeln!(
            md,
            "| {name} | {:.0} | {:.0} | {:.0} | {:.2}x | {info} |",
            f.iops,
            f.mean_lat_us,
            f.read_p99_us,
            f.iops / base.max(1e-9)
        )?;
        writeln!(
            csv,
            // No field holds a comma: plain CSV.
            "{name},{p},{:.1},{:.1},{:.1},{:.4},{info}",
            f.iops,
            f.mean_lat_us,
            f.read_p99_us,
            f.iops / base.max(1e-9)
        )?;
    }
    md.push('\n');
    write(&a.run.out.join("live.csv"), &csv)?;
    Ok(base)
}

/// The live claims: the tiered volume against the HDD alone (and nbdkit).
fn live_claims(
    rows: &[LiveRow],
    tier_stats: &[TierStat],
    base: f64,
    claims: &mut Vec<[String; 4]>,
) {
    for (p, warm_m, run_m, share) in tier_stats {
        let t = rows
            .iter()
            .find(|r| r.0.starts_with("tiered") && r.1 == *p)
            .map(|r| r.2)
            .unwrap_or_default();
        let cut = 1.0 - base / t.iops.max(1e-9);
        let nk = rows
            .iter()
            .find(|r| r.0.starts_with("nbdkit") && r.1 == *p)
            .map(|r| r.2.iops);
        let v = verdict(cut, 0.41);
        claims.push([
            format!("Live: a fast tier of a few % cuts execution time vs pure HDD by 41-72 % (Figs. 4a-8c), with few migrations; here {p} % of the volume"),
            format!("tiered {:.0} IOPS vs HDD only {:.0}: {} time per I/O; {warm_m} + {run_m} migrations; {:.1} % of reads from the fast tier{}", t.iops, base, pct(-cut), share * 100.0,
                nk.map_or(String::new(), |n| format!("; nbdkit cache filter (same size) {n:.0} IOPS"))),
            v.into(),
            if v == "yes" { String::new() } else { "fio's first touches and 30 % writes of cold blocks go to the emulated HDD before any migration; the live planner migrates in rounds, and migrations use the same emulated HDD as the requests".into() },
        ]);
    }
}

/// What one fio run measured.
#[derive(Debug, Clone, Copy, Default)]
struct Fio {
    iops: f64,
    mean_lat_us: f64,
    read_p99_us: f64,
}

fn fio(sock: &Path, name: &str, runtime: u64, size: u64) -> Result<Fio> {
    let uri = tiercache_nbd::unix_uri(false, sock);
    let out = Command::new("fio")
        .args([
            &format!("--name={name}"),
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randrw",
            "--rwmixread=70",
            "--random_distribution=zipf:1.2",
            "--bs=4k",
            "--iodepth=32",
            &format!("--size={size}"),
            "--time_based",
            &format!("--runtime={runtime}"),
            "--randrepeat=0",
            "--output-format=json",
        ])
        .output()
        .context("running fio")?;
    if !out.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let start = text.find('{').context("fio printed no JSON")?;
    let v: Value = serde_json::from_str(&text[start..]).context("parsing fio's JSON")?;
    let j = &v["jobs"][0];
    let mut iops = 0.0;
    let mut lat = 0.0;
    for side in ["read", "write"] {
        let s = &j[side];
        let i = s["iops"].as_f64().unwrap_or(0.0);
        iops += i;
        lat += s["lat_ns"]["mean"].as_f64().unwrap_or(0.0) * i;
    }
    Ok(Fio {
        iops,
        mean_lat_us: lat / iops.max(1e-9) / 1000.0,
        read_p99_us: j["read"]["clat_ns"]["percentile"]["99.000000"]
            .as_f64()
            .unwrap_or(f64::NAN)
            / 1000.0,
    })
}
