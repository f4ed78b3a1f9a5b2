//! The options of `tiercache sim` and the choices made from them, shared by
//! the cache simulation (`super`) and the other designs' modes (`super::modes`).

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

use crate::policy_args::PolicyArgs;

/// Options of `tiercache sim`. Options marked "list" take comma-separated
/// values; several values make a sweep over their cross product.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "SIZE takes units (512B, 4KiB, 10GiB, 1.5GB), a number of cache lines (1000lines) or a \
percentage; a bare number is refused (it is bytes in `format --size`). A percentage is a share of the trace's footprint (unique blocks x line size).\n\n\
Examples:\n  tiercache sim --trace ../shared/traces/arc/OLTP.lis.zst --cache-size 1000lines --line-size 512B --eviction lru,arc\n  \
tiercache sim --trace ../shared/traces/disksim/ssd-postmark-aligned2.trace --format disksim --cache-size 1%,5%,10% --no-timing --json\n  \
tiercache sim --trace ../shared/traces/arc/OLTP.lis.zst --cache-size 1000lines,5000lines --line-size 512B --no-timing --out oltp\n  \
tiercache sim --trace ../shared/traces/samples/msr-cambridge1-sample.csv --mode tier --fast-tier-size 8%\n  \
tiercache sim --trace ../shared/traces/samples/msr-cambridge1-sample.csv --mode tica --cache-size 10% --dram-size 1%"
)]
pub struct SimArgs {
    /// Trace file (compressed .gz/.xz/.zst/.bz2 are read transparently). A
    /// recording rotated by `serve --record FILE --record-max` is one trace:
    /// --trace FILE reads FILE.N, ..., FILE.1, then FILE (FILE.1 alone: that file).
    #[arg(long)]
    pub trace: PathBuf,
    /// What to simulate: cache (Azor SSD cache), ssd|ssc|ssc-v (FlashTier flash devices),
    /// tier (OODT tiering), tica|ucache|srac (three-level caches).
    #[arg(long, default_value = "cache")]
    pub mode: String,
    /// Which design, by the name `format --design` and `stats` use: azor (--mode cache),
    /// flashtier (--mode ssc --ftl log: the live log-structured cache's policy), oodt
    /// (--mode tier) or tica (--mode tica). --mode is the finer-grained choice (it also
    /// has the flash devices ssd, ssc, ssc-v and the three-level caches ucache, srac).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["mode", "ftl"])]
    pub design: Option<String>,
    /// Tiering: placement policy: oodt, frequency, hystor, raf.
    #[arg(long, default_value = "oodt")]
    pub tier_policy: String,
    /// Tiering: fast tier size (SIZE, blocks as 100lines, or percentage of the footprint).
    #[arg(long)]
    pub fast_tier_size: Option<String>,
    /// Tiering: capacity rule, as `format --capacity`: sum (default: every
    /// block on exactly one tier, moves are exchanges) or slow (homes on the
    /// slow tier).
    #[arg(long, default_value = "sum")]
    pub capacity: String,
    /// Tiering: data block size (4KiB to 4MiB).
    #[arg(long, default_value = "4KiB")]
    pub tier_block: String,
    /// Tiering: run the planner every N requests (as `format --plan-every`).
    #[arg(long, default_value_t = 1000)]
    pub plan_every: u64,
    /// Tiering: at most N block moves per planning round [default: 1/8 of
    /// the fast tier's blocks, at least 32, at most 4096].
    #[arg(long)]
    pub moves_per_round: Option<usize>,
    /// Tiering: wall (rounds every --plan-every requests and after 100 ms of
    /// idle devices, in the trace's time) or requests (every --plan-every
    /// requests only, as `format --plan-clock requests`); --no-timing
    /// implies requests.
    #[arg(long, default_value = "wall")]
    pub plan_clock: String,
    /// Tiering: volume size [default: the trace's extent]; requests must fall
    /// inside it. With --capacity sum it decides which blocks start on the
    /// fast tier (the volume's last ones).
    #[arg(long)]
    pub tier_volume_size: Option<String>,
    /// Flash modes: translation layer: hybrid (FAST-like, the paper's), page
    /// (page-mapped, the paper's prototype "SSC-P"), page-log (page-mapped
    /// with the paper's Section 4.3 log/data split: a 7 % (ssc) or up to 20 %
    /// (ssc-v) log collected by copying, silent eviction of data blocks only;
    /// ssd as page), or, with --mode ssc, log: the live log-structured store's
    /// policy (segments of --segment-size; --cache-size is the data area,
    /// `stats --json` segments.total x segments.bytes of a formatted store).
    #[arg(long, default_value = "hybrid")]
    pub ftl: String,
    /// --ftl log: segment size, as `format --segment-size`.
    #[arg(long, default_value = "1MiB")]
    pub segment_size: String,
    /// --ftl log: segment cleaning's victim rule: cost-benefit or greedy.
    #[arg(long, default_value = "cost-benefit")]
    pub victim: String,
    /// --ftl log: simulate the compressed layout (`format --layout
    /// log-structured --compress`): lz4, zstd, zstd:LEVEL (1-22), or off.
    /// No trace reader carries payload bytes, so each block's stored size
    /// comes from --compressibility; sim --mode cache does not compress.
    #[arg(long, default_value = "off")]
    pub compress: String,
    /// --compress: the stored sizes of blocks: a model file written by
    /// `tiercache trace compressibility IMAGE --out FILE` (its CPU costs
    /// become the defaults of --compress-us and --decompress-us), or a
    /// distribution UNITS:FRACTION,... over 1-8 units of 512 bytes (8 =
    /// stored raw), fractions summing to 1 [default: 1:0.004,2:0.08,3:0.2,4:0.36,5:0.29,6:0.063,7:0.003,
    /// about a kernel source tree under lz4]. A block's size is drawn from it by a hash of
    /// its number: the same block always has the same size.
    #[arg(long, value_name = "FILE|DIST")]
    pub compressibility: Option<String>,
    /// --compress: CPU microseconds to compress one 4 KiB block [default:
    /// the model file's measurement, else lz4 6, zstd 20].
    #[arg(long)]
    pub compress_us: Option<f64>,
    /// --compress: CPU microseconds to decompress one 4 KiB block [default:
    /// the model file's measurement, else lz4 1.5, zstd 5].
    #[arg(long)]
    pub decompress_us: Option<f64>,
    /// TICA: policy: ef, wed, adaptive.
    #[arg(long, default_value = "adaptive")]
    pub tica_policy: String,
    /// TICA, uCache, S-RAC: DRAM level size (SIZE, pages as 100lines, or percentage of the footprint).
    #[arg(long)]
    pub dram_size: Option<String>,
    /// Trace format: msr, arc-lis, disksim, blkparse, fiu, tencent, systor, cloudphysics, vscsi, blockid, native [default: detected].
    #[arg(long)]
    pub format: Option<String>,
    /// Cache size (list): SIZE, lines (1000lines), or percentage of the footprint
    /// (required for --mode cache and the flash and three-level modes).
    #[arg(long, value_delimiter = ',')]
    pub cache_size: Vec<String>,
    /// The SSD cache's policy options (lists sweep).
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Simulate the device `tiercache format` wrote, with the policy and
    /// capacity its superblock records (the policy and size options are
    /// then refused): an SSD cache (--mode cache, `slots` lines), a
    /// log-structured cache (--mode ssc --ftl log: segments, write policy,
    /// dirty target), a tiered volume (--mode tier: policy, fast tier,
    /// block size, capacity rule) or either SSD of a three-level cache
    /// (--mode tica: policy, SSD pages, DRAM level).
    #[arg(long, value_name = "DEVICE", conflicts_with_all = [
        "cache_size", "line_size", "sub_block", "assoc", "eviction", "write_policy",
        "no_write_allocate", "admission", "seq_cutoff", "nhit_threshold", "nhit_trigger",
        "twolbs_levels", "twolbs_window", "dirty_target", "clean_rate", "timed_cleaning",
        "tier_policy", "fast_tier_size", "capacity", "tier_block", "plan_every",
        "moves_per_round", "plan_clock", "tier_volume_size", "ftl", "segment_size",
        "victim", "tica_policy", "dram_size", "compress",
    ])]
    pub like: Option<PathBuf>,
    /// Compute cache behaviour only, without the timing model (fastest): no response
    /// times, utilizations, `baseline` or `speedup`. Every count (hits, fills, hdd_ops,
    /// ssd_write_ops ...) is the same as with timing. The flash modes have no timing
    /// model (accepted, no effect). --mode tica: each request's DRAM flushes complete
    /// before the next request and no idle tick flushes (the live cache's rule with
    /// `format --timed-flush off`); timing figures are still computed. --mode tier:
    /// planning rounds every --plan-every requests only (--plan-clock requests, the
    /// live volume's rule with `format --plan-clock requests`); timing figures are
    /// still computed.
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
    #[arg(long, default_value = DEFAULT_TRACE_BLOCK)]
    pub block_size: String,
    /// Only this volume/LUN/disk of a multi-volume trace.
    #[arg(long)]
    pub volume: Option<String>,
    /// Print JSON: one object, or an array for a sweep.
    #[arg(long)]
    pub json: bool,
    /// Also write the results as PREFIX.csv and a figure as PREFIX.svg (nothing is written
    /// without it).
    #[arg(short = 'o', long, value_name = "PREFIX")]
    pub out: Option<PathBuf>,
    /// Parallel runs in a sweep [default: number of CPUs].
    #[arg(long)]
    pub jobs: Option<usize>,
}

/// Queue depth of closed-loop replay without `--queue-depth`: `sim` and
/// `replay` alike, so a replay is comparable to its simulation as given.
pub const DEFAULT_QUEUE_DEPTH: u32 = 1;

/// `--block-size` of traces that count in block ids (blockid, cloudphysics,
/// arc-lis): bytes per id, for every command that reads a trace.
pub const DEFAULT_TRACE_BLOCK: &str = "512B";

impl SimArgs {
    /// Turn `--design NAME` into the `--mode` (and `--ftl`) it stands for.
    pub fn apply_design(&mut self) -> Result<(), String> {
        if let Some(name) = self.design.take() {
            let d = crate::design::design(&name)?;
            self.mode = d.sim_mode.into();
            if let Some(ftl) = d.sim_ftl {
                self.ftl = ftl.into();
            }
        }
        Ok(())
    }
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
    let q = a.queue_depth.unwrap_or(DEFAULT_QUEUE_DEPTH);
    if q == 0 {
        bail!("--queue-depth 0 (allowed: 1 or more)");
    }
    Ok(Some(q))
}
