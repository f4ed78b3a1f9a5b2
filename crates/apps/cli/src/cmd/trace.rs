//! `tiercache trace`: statistics, format conversion, and the compressibility
//! of an image.

use crate::progress::Progress;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use tiercache_sim::units::{format_bytes, parse_bytes};
use tiercache_trace::{Format, ReadOptions};

#[derive(Subcommand, Debug)]
pub enum TraceCmd {
    /// Requests, read/write mix, footprint, request sizes, sequentiality, metadata share.
    #[command(after_help = "Examples:\n  \
tiercache trace stats ../shared/traces/samples/msr-cambridge1-sample.csv\n  \
tiercache trace stats ../shared/traces/arc/OLTP.lis.zst --line-size 512B --json")]
    Stats(StatsArgs),
    /// Convert a trace to native (compact binary, fastest to replay), blockid or msr.
    #[command(after_help = "Examples:\n  \
tiercache trace convert ../shared/traces/samples/msr-cambridge1-sample.csv -o msr.tct\n  \
tiercache trace stats msr.tct")]
    Convert(ConvertArgs),
    /// How the compressed log-structured layout would store an image's
    /// blocks: stored sizes in 512-byte units, ratio, effective capacity,
    /// codec speed; `--out` writes a model for `sim --compress`.
    #[command(after_help = "Examples:\n  \
tiercache trace compressibility disk.img\n  \
tiercache trace compressibility /usr/src/linux --codec zstd:3 --json\n  \
tiercache trace compressibility pgdata.img --out pg.json\n  \
tiercache sim --trace t.csv --mode ssc --ftl log --cache-size 64MiB --compress lz4 --compressibility pg.json")]
    Compressibility(crate::cmd::compressibility::CompressibilityArgs),
}

/// How to read the input trace.
#[derive(Args, Debug)]
pub struct Input {
    /// Trace file (compressed .gz/.xz/.zst/.bz2 are read transparently).
    pub trace: PathBuf,
    /// Input format [default: detected].
    #[arg(long)]
    pub format: Option<String>,
    /// Count and skip malformed lines instead of stopping.
    #[arg(long)]
    pub skip_bad: bool,
    /// Bytes per block id for blockid, cloudphysics and arc-lis traces.
    #[arg(long, default_value = tiercache_simulate::DEFAULT_TRACE_BLOCK)]
    pub block_size: String,
    /// Only this volume/LUN/disk of a multi-volume trace.
    #[arg(long)]
    pub volume: Option<String>,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub input: Input,
    /// Block size for the footprint (unique blocks).
    #[arg(long, default_value = "4KiB")]
    pub line_size: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub input: Input,
    /// Output file (`--output` is the old spelling, still accepted).
    #[arg(short = 'o', long = "out", alias = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Output format: native, blockid, msr.
    #[arg(long, default_value = "native")]
    pub to: String,
}

fn open(i: &Input) -> Result<tiercache_trace::TraceReader> {
    let format = i
        .format
        .as_deref()
        .map(|f| f.parse::<Format>())
        .transpose()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let bs = parse_bytes(&i.block_size).map_err(anyhow::Error::msg)?;
    let opts = ReadOptions {
        skip_bad: i.skip_bad,
        block_size: u32::try_from(bs).context("--block-size too large")?,
        volume: i.volume.clone(),
    };
    Ok(tiercache_trace::open(&i.trace, format, &opts)?)
}

pub fn run(cmd: TraceCmd) -> Result<()> {
    match cmd {
        TraceCmd::Stats(a) => {
            let line = u32::try_from(parse_bytes(&a.line_size).map_err(anyhow::Error::msg)?)
                .context("--line-size too large")?;
            let r = open(&a.input)?;
            let format = r.format();
            let detected = a.input.format.is_none();
            let mut bar = Progress::new("reading", None);
            let mut n = 0u64;
            let counted = r.inspect(|_| {
                n += 1;
                if n & 0xffff == 0 {
                    bar.set(n);
                }
            });
            let st = tiercache_trace::stats::trace_stats(counted, line)?;
            bar.finish();
            if a.json {
                let mut v = serde_json::to_value(&st)?;
                if let serde_json::Value::Object(m) = &mut v {
                    let mut o = serde_json::Map::new();
                    o.insert("trace".into(), a.input.trace.display().to_string().into());
                    o.insert("format".into(), format.to_string().into());
                    o.append(m);
                    v = serde_json::Value::Object(o);
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                let total = st.requests.max(1) as f64;
                println!("trace {}", a.input.trace.display());
                println!(
                    "  format            {:>14}   ({})",
                    format.to_string(),
                    if detected {
                        "detected; --format to override"
                    } else {
                        "given"
                    }
                );
                println!("  requests          {:>14}", st.requests);
                println!(
                    "  reads / writes    {:>14}   {:.1} % / {:.1} % (trims {}, flushes {})",
                    format!("{} / {}", st.reads, st.writes),
                    st.reads as f64 * 100.0 / total,
                    st.writes as f64 * 100.0 / total,
                    st.trims,
                    st.flushes
                );
                println!("  bytes read        {:>14}", format_bytes(st.bytes_read));
                println!("  bytes written     {:>14}", format_bytes(st.bytes_written));
                println!(
                    "  footprint         {:>14}   {} unique blocks of {}",
                    format_bytes(st.footprint_bytes),
                    st.unique_blocks,
                    format_bytes(line as u64)
                );
                println!(
                    "  mean request      {:>14}",
                    format_bytes(st.mean_request_bytes.round() as u64)
                );
                println!(
                    "  sequential        {:>13.1} %",
                    st.sequential_fraction * 100.0
                );
                println!("  metadata share    {:>13.1} %", st.metadata_share * 100.0);
                println!(
                    "  duration          {:>12.3} s",
                    st.duration_ns as f64 / 1e9
                );
                println!("  request sizes:");
                for b in &st.size_histogram {
                    if b.count > 0 {
                        println!(
                            "    >= {:>10}  {:>12}  {:5.1} %",
                            format_bytes(b.min_bytes),
                            b.count,
                            b.count as f64 * 100.0 / total
                        );
                    }
                }
            }
        }
        TraceCmd::Compressibility(a) => crate::cmd::compressibility::run(a)?,
        TraceCmd::Convert(a) => {
            let to: Format = a.to.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
            let r = open(&a.input)?;
            let bs = u32::try_from(parse_bytes(&a.input.block_size).map_err(anyhow::Error::msg)?)
                .context("--block-size")?;
            let n = tiercache_trace::convert::convert(r, &a.output, to, bs)?;
            eprintln!("wrote {n} records to {}", a.output.display());
        }
    }
    Ok(())
}
