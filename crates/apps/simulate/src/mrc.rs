//! `tiercache mrc`: the miss-ratio curve of a trace at many cache sizes in
//! one pass: exact LRU stack distances, SHARDS sampling (both from
//! `tiercache-mrc`), or miniature simulations of any eviction policy of the
//! SSD cache on a spatially sampled trace, run by the same engine and loop
//! as `sim` ([`tiercache_sim::run`]), one scaled-down cache per size.
//!
//! Accesses are counted as `sim` counts them: one per cache line a read or
//! write touches (a request over three lines is three accesses), so
//! `hit_ratio`, `read_hit_ratio` and `write_hit_ratio` are `sim`'s.

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use std::path::PathBuf;
use tiercache_azor_policy::IoKind;
use tiercache_mrc::{Curve, Kind, Piece, Sampling, Shards, StackDistance};
use tiercache_sim::units::{format_bytes, parse_bytes, parse_size};
use tiercache_sim::{Replay, SimOptions};
use tiercache_trace::{Format, ReadOptions, Record};

use crate::policy::{defaults as d, parse_line_size, PolicySpec};

/// Sampling rate of `--method shards` and `--method minisim` without
/// `--rate` or `--sample-size`.
pub const DEFAULT_RATE: f64 = 0.01;
/// Sizes of `--sizes auto`: this many, spaced evenly on a log scale from
/// [`AUTO_SMALLEST`] of the working set to all of it.
pub const AUTO_POINTS: usize = 24;
/// Smallest share of the working set `--sizes auto` asks for.
pub const AUTO_SMALLEST: f64 = 0.001;
/// The largest sub-block: a line of at most this is one sub-block, the
/// condition under which `--method exact` is `sim`'s LRU.
const SUB_BLOCK_MAX: u32 = 4096;

/// Options of `tiercache mrc`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "SIZE takes units (512B, 4KiB, 10GiB); a number of cache lines is written 1000lines; \
a percentage is a share of the working set (distinct lines x line size).\n\n\
Methods: exact (LRU only: Mattson stack distances in one pass, the hits of `sim --no-timing` at every \
size when every write covers whole lines; memory about 70 bytes per distinct line), shards (LRU only: \
SHARDS sampling at --rate, or of at most --sample-size lines in fixed memory), minisim (any --policy: \
one cache of size x rate per size, simulated by sim's engine on the lines sampled at --rate).\n\n\
Examples:\n  tiercache mrc --trace ../shared/traces/arc/OLTP.lis.zst --line-size 512B\n  \
tiercache mrc --trace ../shared/traces/cloudphysics/w106.trace.xz --method shards --sample-size 8192 --json\n  \
tiercache mrc --trace ../shared/traces/arc/P3.lis.zst --method minisim --policy s3fifo --rate 0.05 --out p3.svg"
)]
pub struct MrcArgs {
    /// Trace file (compressed .gz/.xz/.zst/.bz2 are read transparently). A
    /// recording rotated by `serve --record FILE --record-max` is one trace:
    /// --trace FILE reads FILE.N, ..., FILE.1, then FILE (FILE.1 alone: that file).
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace format: as `sim --format` [default: detected].
    #[arg(long)]
    pub format: Option<String>,
    /// Eviction policy of the SSD cache: lru, fifo, arc, s3fifo (exact and
    /// shards: lru only).
    #[arg(long, default_value = d::EVICTION)]
    pub policy: String,
    /// exact, shards or minisim [default: exact for lru, minisim otherwise].
    #[arg(long)]
    pub method: Option<String>,
    /// Share of the lines sampled (shards, minisim), e.g. 0.01 or 1% [default: 0.01].
    #[arg(long, value_parser = tiercache_sim::units::parse_fraction, conflicts_with = "sample_size")]
    pub rate: Option<f64>,
    /// Shards: sample at most this many lines (fixed memory; the rate falls as the sample fills).
    #[arg(long)]
    pub sample_size: Option<usize>,
    /// Shards, minisim: which lines are drawn: each seed draws another random
    /// sample of the same rate (0 is the sample `serve`'s what-if draws); runs
    /// with several seeds show how much the curve depends on the draw.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Cache sizes (list): SIZE, a number of lines (1000lines), a percentage of the working
    /// set, or `auto` (24 sizes from 0.1 % of the working set to all of it).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub sizes: Vec<String>,
    /// Cache line size: a power of two from 512B to 1MiB (exact: at most 4KiB).
    #[arg(long, default_value = d::LINE_SIZE)]
    pub line_size: String,
    /// Bytes per block id for blockid, cloudphysics and arc-lis traces.
    #[arg(long, default_value = "512B")]
    pub block_size: String,
    /// Only this volume/LUN/disk of a multi-volume trace.
    #[arg(long)]
    pub volume: Option<String>,
    /// Count and skip malformed trace lines instead of stopping.
    #[arg(long)]
    pub skip_bad: bool,
    /// Print JSON: an array with one object per size.
    #[arg(long)]
    pub json: bool,
    /// Also draw the curve as an SVG figure to this file.
    #[arg(long, value_name = "FIG.svg")]
    pub out: Option<PathBuf>,
    /// Minisim: parallel simulations [default: number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
}

impl MrcArgs {
    /// The options with their defaults, for a trace (Python builds on it).
    pub fn new(trace: PathBuf) -> Self {
        MrcArgs {
            trace,
            format: None,
            policy: d::EVICTION.into(),
            method: None,
            rate: None,
            sample_size: None,
            seed: 0,
            sizes: vec!["auto".into()],
            line_size: d::LINE_SIZE.into(),
            block_size: "512B".into(),
            volume: None,
            skip_bad: false,
            json: false,
            out: None,
            jobs: None,
        }
    }
}

/// How the curve is computed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    Exact,
    Shards(Sampling),
    Minisim(f64),
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Exact => "exact",
            Method::Shards(_) => "shards",
            Method::Minisim(_) => "minisim",
        }
    }
}

/// The result: one JSON row per size (in the order asked) and the text report.
#[derive(Debug, Clone)]
pub struct MrcOutput {
    pub rows: Vec<Value>,
    pub text: String,
}

/// The lines a record touches, as `sim`'s engine splits it.
fn lines(r: &Record, shift: u32) -> impl Iterator<Item = Piece> {
    let sub = (1u64 << shift).min(u64::from(SUB_BLOCK_MAX));
    tiercache_mrc::pieces(r.offset, u64::from(r.len), shift, sub)
}

fn kind(k: IoKind) -> Option<Kind> {
    match k {
        IoKind::Read => Some(Kind::Read),
        IoKind::Write => Some(Kind::Write),
        _ => None,
    }
}

/// Choose the method from `--method`, `--policy`, `--rate`, `--sample-size`.
fn method(a: &MrcArgs) -> Result<Method> {
    let lru = a.policy.trim() == "lru";
    let m = a
        .method
        .as_deref()
        .map(str::trim)
        .unwrap_or(if lru { "exact" } else { "minisim" });
    let rate = a.rate.unwrap_or(DEFAULT_RATE);
    if !(rate > 0.0 && rate <= 1.0) {
        bail!("--rate {rate}: allowed: above 0, at most 1");
    }
    let m = match m {
        "exact" | "shards" if !lru => bail!(
            "--method {m} computes LRU only (stack distances); --policy {} needs --method minisim",
            a.policy
        ),
        "exact" => {
            if a.rate.is_some() || a.sample_size.is_some() || a.seed != 0 {
                bail!("--method exact samples nothing: drop --rate/--sample-size/--seed, or use --method shards");
            }
            Method::Exact
        }
        "shards" => Method::Shards(match a.sample_size {
            Some(0) => bail!("--sample-size 0 (allowed: 1 or more lines)"),
            Some(n) => Sampling::Size { max_lines: n },
            None => Sampling::Rate(rate),
        }),
        "minisim" => {
            if a.sample_size.is_some() {
                bail!("--sample-size applies to --method shards; minisim samples at --rate");
            }
            Method::Minisim(rate)
        }
        x => bail!("--method {x}: unknown (allowed: exact, shards, minisim)"),
    };
    Ok(m)
}

/// The sizes in lines: `--sizes` resolved against the line and the working
/// set (in lines), each at least one line.
fn sizes(specs: &[String], line: u64, ws_lines: u64) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    for s in specs {
        let s = s.trim();
        if s == "auto" {
            let ws = ws_lines.max(1) as f64;
            let lo = (ws * AUTO_SMALLEST).max(1.0);
            for i in 0..AUTO_POINTS {
                let f = i as f64 / (AUTO_POINTS - 1) as f64;
                let v = (lo * (ws / lo).powf(f)).round() as u64;
                if out.last() != Some(&v) {
                    out.push(v.max(1));
                }
            }
            continue;
        }
        let spec = parse_size(s).map_err(|e| anyhow::anyhow!("--sizes: {e}"))?;
        let bytes = spec.bytes(line, ws_lines * line);
        if bytes < line {
            bail!("--sizes {s}: smaller than one line of {line} B");
        }
        out.push(bytes / line);
    }
    out.dedup();
    Ok(out)
}

/// Run `tiercache mrc`.
pub fn run(a: &MrcArgs) -> Result<MrcOutput> {
    let m = method(a)?;
    let line = parse_line_size(&a.line_size)?;
    if !line.is_power_of_two() || !(512..=1 << 20).contains(&line) {
        bail!(
            "--line-size {}: allowed: a power of two from 512B to 1MiB",
            a.line_size
        );
    }
    if m == Method::Exact && line > SUB_BLOCK_MAX {
        bail!(
            "--method exact: a line of {} holds several sub-blocks, whose validity sim tracks apart; \
             use --line-size 4KiB or less, or --method minisim --rate 1",
            a.line_size
        );
    }
    let format = match &a.format {
        Some(f) => Some(f.parse::<Format>().map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let block_size =
        parse_bytes(&a.block_size).map_err(|e| anyhow::anyhow!("--block-size: {e}"))?;
    let ropts = ReadOptions {
        skip_bad: a.skip_bad,
        block_size: u32::try_from(block_size).context("--block-size too large")?,
        volume: a.volume.clone(),
    };
    if !a.trace.exists() {
        bail!("trace {} does not exist", a.trace.display());
    }
    let reader = tiercache_trace::open(&a.trace, format, &ropts)?;
    let shift = line.trailing_zeros();
    let (points, ws_lines, accesses, memory, rate) = match m {
        Method::Exact | Method::Shards(_) => {
            let mut exact = StackDistance::new();
            let mut curve = Curve::exact();
            let mut shards = match m {
                Method::Shards(s) => Some(Shards::with_seed(s, a.seed)),
                _ => None,
            };
            let mut n = [0u64; 2];
            for r in reader {
                let r = r?;
                let k = kind(r.kind);
                for p in lines(&r, shift) {
                    let l = p.line;
                    // A write miss that covers no whole sub-block is not kept.
                    let unkept = r.kind == IoKind::Write && !p.keeps;
                    match (k, &mut shards) {
                        (Some(k), None) if unkept && !exact.contains(l) => {
                            n[k as usize] += 1;
                            exact.miss_unkept();
                            curve.add(k, None, 1.0);
                        }
                        (Some(k), None) => {
                            n[k as usize] += 1;
                            curve.add(k, exact.access(l), 1.0);
                        }
                        (Some(k), Some(s)) => {
                            n[k as usize] += 1;
                            if unkept {
                                s.access_unkept(l, k);
                            } else {
                                s.access(l, k);
                            }
                        }
                        // A trim frees the lines it covers whole (sim invalidates those).
                        (None, None) if r.kind == IoKind::Trim && p.whole => {
                            exact.remove(l);
                        }
                        (None, Some(s)) if r.kind == IoKind::Trim && p.whole => s.remove(l),
                        _ => {}
                    }
                }
            }
            let (curve, memory, rate, ws) = match &shards {
                Some(s) => (
                    s.curve(),
                    s.memory_bytes() as u64,
                    Some(s.rate()),
                    s.working_set_lines(),
                ),
                None => {
                    let mem = (exact.memory_bytes() + curve.memory_bytes()) as u64;
                    (curve, mem, None, exact.lines() as u64)
                }
            };
            let sz = sizes(&a.sizes, line as u64, ws)?;
            let pts: Vec<Point> = curve
                .points(&sz)
                .into_iter()
                .map(|p| Point {
                    lines: p.lines,
                    hit_ratio: p.hit_ratio(),
                    read_hit_ratio: p.read_hit_ratio(),
                    write_hit_ratio: p.write_hit_ratio(),
                    hits: (p.hits[0] + p.hits[1]).max(0.0).round() as u64,
                })
                .collect();
            (pts, ws, n, memory, rate)
        }
        Method::Minisim(rate) => minisim(a, reader, line, rate)?,
    };
    let total = accesses[0] + accesses[1];
    let rows: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "trace": a.trace.display().to_string(),
                "policy": a.policy.trim(),
                "method": m.name(),
                "cache_lines": p.lines,
                "cache_size_bytes": p.lines * line as u64,
                "line_size": line,
                "hit_ratio": p.hit_ratio,
                "read_hit_ratio": p.read_hit_ratio,
                "write_hit_ratio": p.write_hit_ratio,
                "hits": p.hits,
                "block_accesses": total,
                "read_accesses": accesses[0],
                "write_accesses": accesses[1],
                "working_set_lines": ws_lines,
                "working_set_bytes": ws_lines * line as u64,
                "sampling_rate": rate,
                "memory_bytes": memory,
            })
        })
        .collect();
    let mut text = format!(
        "trace {}\n  {} {}, {} line accesses ({} reads, {} writes) of {} B lines\n  working set {} lines ({}){}\n  memory {}\n",
        a.trace.display(),
        a.policy.trim(),
        match (m, rate) {
            (Method::Exact, _) => "exact".to_string(),
            (_, Some(r)) => format!("{}, sampling rate {:.4}", m.name(), r),
            _ => m.name().to_string(),
        },
        total,
        accesses[0],
        accesses[1],
        line,
        ws_lines,
        format_bytes(ws_lines * line as u64),
        if m == Method::Exact { "" } else { " (estimated)" },
        format_bytes(memory),
    );
    text.push_str(&format!(
        "{:>12} {:>12} {:>9} {:>9} {:>9}\n",
        "cache", "lines", "hit %", "read %", "write %"
    ));
    for p in &points {
        text.push_str(&format!(
            "{:>12} {:>12} {:>9.3} {:>9.3} {:>9.3}\n",
            format_bytes(p.lines * line as u64),
            p.lines,
            p.hit_ratio * 100.0,
            p.read_hit_ratio * 100.0,
            p.write_hit_ratio * 100.0
        ));
    }
    Ok(MrcOutput { rows, text })
}

/// The curve at one size.
struct Point {
    lines: u64,
    hit_ratio: f64,
    read_hit_ratio: f64,
    write_hit_ratio: f64,
    /// Hits (estimated, in the whole trace's units, for sampled methods).
    hits: u64,
}

type Measured = (Vec<Point>, u64, [u64; 2], u64, Option<f64>);

/// Miniature simulation: the accesses to the sampled lines, each a request
/// of its own piece of one line, through `sim`'s engine with caches of
/// size x rate lines.
fn minisim(
    a: &MrcArgs,
    reader: tiercache_trace::TraceReader,
    line: u32,
    rate: f64,
) -> Result<Measured> {
    let shift = line.trailing_zeros();
    let mut sample = Vec::new();
    let mut n = [0u64; 2];
    let mut seen = rustc_hash::FxHashSet::default();
    for r in reader {
        let r = r?;
        let k = kind(r.kind);
        let end = r.end();
        for p in lines(&r, shift) {
            let l = p.line;
            if let Some(k) = k {
                n[k as usize] += 1;
            }
            if !tiercache_mrc::sampled_seeded(l, rate, a.seed) {
                continue;
            }
            seen.insert(l);
            let start = (l << shift).max(r.offset);
            let stop = ((l + 1) << shift).min(end);
            sample.push(Record {
                offset: start,
                len: (stop - start) as u32,
                ..r
            });
        }
    }
    let ws = (seen.len() as f64 / rate).round() as u64;
    let sz = sizes(&a.sizes, line as u64, ws)?;
    let spec = PolicySpec {
        line_size: a.line_size.clone(),
        eviction: a.policy.trim().to_string(),
        ..PolicySpec::default()
    };
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, sz.len().max(1));
    let run_one = |lines: u64| -> Result<Point> {
        let mini = ((lines as f64 * rate).round() as u64).max(1);
        let cfg = spec
            .config(mini * line as u64)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut o = SimOptions::new(cfg);
        o.timing = false;
        o.baseline = false;
        o.replay = Replay::Closed { queue_depth: 1 };
        let it = || Ok(sample.iter().cloned().map(Ok));
        let r = tiercache_sim::run(it()?, it, &o, &mut |_| {})?;
        Ok(Point {
            lines,
            hit_ratio: r.hit_ratio,
            read_hit_ratio: r.read_hit_ratio,
            write_hit_ratio: r.write_hit_ratio,
            hits: (r.hit_ratio * (n[0] + n[1]) as f64).round() as u64,
        })
    };
    let points = crate::parallel_map(sz.len(), jobs, |i| run_one(sz[i]))
        .into_iter()
        .collect::<Result<Vec<Point>>>()?;
    let memory = (sample.capacity() * std::mem::size_of::<Record>() + seen.capacity() * 9) as u64;
    Ok((points, ws, n, memory, Some(rate)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_touches_each_line_once_and_whole_lines_are_told() {
        let r = Record {
            time_ns: 0,
            offset: 4096 + 512,
            len: 8192,
            kind: IoKind::Write,
            class: None,
        };
        let v: Vec<(u64, bool, bool)> = lines(&r, 12).map(|p| (p.line, p.whole, p.keeps)).collect();
        assert_eq!(v, [(1, false, false), (2, true, true), (3, false, false)]);
        // 64 KiB lines of 4 KiB sub-blocks: 4.5 KiB..12.5 KiB covers one whole sub-block.
        let v: Vec<(u64, bool, bool)> = lines(&r, 16).map(|p| (p.line, p.whole, p.keeps)).collect();
        assert_eq!(v, [(0, false, true)]);
    }

    #[test]
    fn auto_sizes_rise_from_a_thousandth_to_the_working_set() {
        let s = sizes(&["auto".into()], 4096, 100_000).unwrap();
        assert_eq!(s.len(), AUTO_POINTS);
        assert_eq!((s[0], *s.last().unwrap()), (100, 100_000));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            sizes(&["50%".into(), "8KiB".into(), "3lines".into()], 4096, 10).unwrap(),
            [5, 2, 3]
        );
    }
}
