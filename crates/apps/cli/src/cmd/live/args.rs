//! The options of the live commands (`format`, `serve`, `stats`, `flush`,
//! `detach`, `check`), shared by every design.

use clap::Args;
use std::path::PathBuf;

/// The SSD cache's policy options: one definition with `sim`'s (format
/// takes one value of each list option).
pub use tiercache_simulate::PolicyArgs;

pub use super::ctl::CtlArgs;

/// `tiercache format`: write a new cache on a file or block device.
#[derive(Args, Debug)]
pub struct FormatArgs {
    /// Cache device (file or block device; a file is created with --size).
    #[arg(long, required_unless_present_any = ["tiers", "ro_ssd"])]
    pub cache: Option<PathBuf>,
    /// Backing device the cache will front (file or block device).
    #[arg(long, required_unless_present = "tiers")]
    pub backing: Option<PathBuf>,
    /// Size of a cache file to create (e.g. 1GiB).
    #[arg(long, allow_hyphen_values = true)]
    pub size: Option<String>,
    /// SSD cache, log-structured cache and three-level cache (each SSD):
    /// make their metadata regions for a cache of up to this size
    /// (e.g. 8GiB), so that `tiercache resize` can grow it that far while it
    /// serves [default: the device's size].
    #[arg(long, value_name = "SIZE")]
    pub max_size: Option<String>,
    /// Overwrite an existing tiercache cache or a device holding a filesystem.
    #[arg(long)]
    pub force: bool,
    /// Which design: azor (the SSD cache: --cache, --backing), flashtier (the
    /// log-structured cache: --cache, --backing), oodt (the tiered volume: --tiers)
    /// or tica (the three-level cache: --ro-ssd, --wo-ssd, --backing) [default: azor].
    /// `stats` and `check` report the same name; --mode and --layout are the older
    /// spelling.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["mode", "layout"])]
    pub design: Option<String>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub tier: TierFormatArgs,
    #[command(flatten)]
    pub tica: TicaFormatArgs,
    #[command(flatten)]
    pub ls: LsFormatArgs,
}

/// `format` options of a tiered volume.
#[derive(Args, Debug, Clone)]
pub struct TierFormatArgs {
    /// What to format: cache (the SSD cache: --cache, --backing; --layout
    /// log-structured for the FlashTier-style store), tier (a tiered volume:
    /// --tiers) or tica (a three-level cache: --ro-ssd, --wo-ssd, --backing,
    /// --dram-size).
    #[arg(long, default_value = "cache")]
    pub mode: String,
    /// Tiered volume: FAST,SLOW (files or block devices); metadata goes on
    /// FAST. What the volume holds at first depends on --capacity.
    #[arg(long, value_delimiter = ',')]
    pub tiers: Option<Vec<PathBuf>>,
    /// Tiered volume: sum (default) or slow. sum: the volume is both tiers
    /// minus metadata and one scratch block per tier, each block lives on
    /// exactly one tier and migrations exchange a hot block for a cold one
    /// (OODT's design: the fast tier adds capacity as well as speed); it
    /// starts with SLOW's contents up to its last block, then zeros. slow:
    /// the volume is exactly SLOW's size and contents and every block keeps
    /// a home there (converting an existing disk in place; the fast tier
    /// adds speed only). The default is sum because a new volume gains the
    /// fast tier's capacity and loses nothing of SLOW's data but its last
    /// block; choose slow when the volume must stay exactly the disk.
    #[arg(long, default_value = "sum")]
    pub capacity: String,
    /// Tiered volume: block size, a power of two from 4KiB to 4MiB (as `sim --tier-block`)
    /// [default: 1MiB].
    #[arg(long, allow_hyphen_values = true)]
    pub tier_block: Option<String>,
    /// Deprecated spelling of --tier-block (`--block-size` is the bytes per block id of a
    /// trace in `sim`, `replay` and `trace`): still accepted, with a warning.
    #[arg(
        long,
        allow_hyphen_values = true,
        hide = true,
        conflicts_with = "tier_block"
    )]
    pub block_size: Option<String>,
    /// Tiered volume: placement policy: oodt, frequency, hystor, raf.
    #[arg(long, default_value = "oodt")]
    pub tier_policy: String,
    /// Tiered volume: run the planner every N requests (and, with
    /// --plan-clock wall, when idle).
    #[arg(long, default_value_t = 1000)]
    pub plan_every: u64,
    /// Tiered volume: wall (planning rounds every --plan-every requests and
    /// after 200 ms without requests, run in the background) or requests
    /// (every --plan-every requests only, each round run by the request
    /// that made it due before that request is answered: deterministic, the
    /// rounds of `sim --mode tier --no-timing`).
    #[arg(long, default_value = "wall")]
    pub plan_clock: String,
    /// Tiered volume: at most N block moves per planning round.
    #[arg(long, default_value_t = 64)]
    pub moves_per_round: usize,
    /// Tiered volume: most bytes migrated per second.
    #[arg(long, allow_hyphen_values = true, default_value = "64MiB")]
    pub migrate_rate: String,
}

/// `format` options of a three-level cache.
#[derive(Args, Debug, Clone)]
pub struct TicaFormatArgs {
    /// Three-level cache (--mode tica): the read-optimized SSD (file or block device).
    #[arg(long)]
    pub ro_ssd: Option<PathBuf>,
    /// Three-level cache: the write-optimized SSD (file or block device).
    #[arg(long)]
    pub wo_ssd: Option<PathBuf>,
    /// Three-level cache: size of the DRAM level (e.g. 64MiB).
    #[arg(long, allow_hyphen_values = true)]
    pub dram_size: Option<String>,
    /// Three-level cache: TICA policy: adaptive, ef or wed.
    #[arg(long, default_value = "adaptive")]
    pub tica_policy: String,
    /// Three-level cache: the DRAM flusher's time-driven part (a 10 ms tick
    /// with no request flushes up to 32 pages), on or off. Each request
    /// flushes up to 4 pages either way; off, every flush follows the
    /// request sequence alone, as in `sim --mode tica --no-timing`.
    #[arg(long, default_value = "on")]
    pub timed_flush: String,
}

/// `format` options of the cache layout.
#[derive(Args, Debug, Clone)]
pub struct LsFormatArgs {
    /// Cache layout: in-place (slots rewritten in place) or log-structured
    /// (FlashTier's design: segments written sequentially, a unified sparse
    /// map, cleaning that drops clean data and moves only dirty data).
    #[arg(long, default_value = "in-place")]
    pub layout: String,
    /// Log-structured layout: segment size (erase-block sized), 64KiB to 64MiB.
    #[arg(long, allow_hyphen_values = true, default_value = "1MiB")]
    pub segment_size: String,
    /// Log-structured layout: compress cached blocks (lz4, zstd, zstd:LEVEL
    /// or off): variable-size records with a checksum, up to 4 times more
    /// blocks in the same device when the data compresses.
    #[arg(long, default_value = "off")]
    pub compress: String,
}
/// `tiercache serve`: export a cache over NBD.
#[derive(Args, Debug)]
#[command(after_help = "\
Every option is checked, every device locked (a device in use is refused with
'in use by pid N') and both sockets bound before the cache is opened.
On SIGTERM, SIGINT or `tiercache detach` the server stops accepting, answers
the requests in flight (clients that stall are cut off after
--shutdown-grace), then shuts down clean or detaches. The control socket
(CACHE.ctl, mode 0600) answers stats, flush, detach and debug.

Examples:
  tiercache serve --cache cache.img --listen unix:/tmp/tiercache.sock
  tiercache serve --cache cache.img --listen tcp:127.0.0.1:10809 --max-connections 16
  tiercache serve --cache cache.img --listen unix:/tmp/t.sock --shutdown-grace 30s --io-timeout 1m
  tiercache serve --cache cache.img --listen tcp:0.0.0.0:10809 --tls=require --tls-certificates /etc/tiercache/tls
  tiercache serve --cache cache.img --listen unix:/tmp/t.sock --metrics 127.0.0.1:9500
      (then: curl -s http://127.0.0.1:9500/metrics)")]
pub struct ServeArgs {
    /// Cache device written by `tiercache format`.
    #[arg(long)]
    pub cache: PathBuf,
    /// Backing device [default: the one recorded at format time].
    #[arg(long)]
    pub backing: Option<PathBuf>,
    /// Where to listen: unix:PATH, tcp:HOST:PORT (loopback, or any address
    /// with --tls=require; plain NBD has no authentication) or fd:N (an
    /// inherited listening socket).
    /// [default: the socket systemd passes (socket activation, LISTEN_FDS),
    /// else tcp:127.0.0.1:10809]
    #[arg(long)]
    pub listen: Option<String>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (e.g.
    /// 127.0.0.1:9500): hits and misses, dirty lines, cleaning, bypasses,
    /// evictions, device errors, request and device latency histograms. The
    /// endpoint is read-only (counters, no data), so any address is
    /// allowed; bind it to a management interface where that matters.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<String>,
    /// Allow --listen on a TCP address other machines can reach, without
    /// --tls=require: anyone who reaches it can read and write the device.
    #[arg(long)]
    pub insecure_listen: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Export name (the empty default name is answered too).
    #[arg(long, default_value = "tiercache")]
    pub export: String,
    /// Refuse writes.
    #[arg(long)]
    pub read_only: bool,
    /// Control socket [default: CACHE.ctl].
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Delay backing I/O by the HDD model: an emulated slow disk, for demos and benchmarks.
    #[arg(long)]
    pub emulate_hdd: bool,
    /// With an NBD backing device (nbd://HOST[:PORT]/EXPORT,
    /// nbd+unix:///EXPORT?socket=PATH): how long a request waits for an
    /// unreachable server (reconnecting with backoff) before it fails with
    /// EIO. Cached data stays readable and writable meanwhile.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub backing_timeout: std::time::Duration,
    /// With an NBD backing device: most connections to open when the server
    /// advertises multi-conn (one otherwise).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub backing_connections: u16,
    /// With an NBD backing device: most requests in flight to it at once
    /// (misses, write-backs), on all its connections together.
    #[arg(long, value_name = "N", default_value_t = tiercache_io::NBD_MAX_IN_FLIGHT as u16,
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub backing_queue_depth: u16,
    /// Open devices with O_DIRECT where they allow it.
    #[arg(long)]
    pub direct: bool,
    /// Serve the backing device alone, without the cache (a baseline for benchmarks).
    #[arg(long, hide = true)]
    pub no_cache: bool,
    /// Classify requests by the ext4 or XFS filesystem on the device (metadata,
    /// journal, data) for metadata-first admission and per-class stats: auto
    /// (detect and classify) or off. Experimental, hence off by default.
    #[arg(long, default_value = "off")]
    pub fs_classify: String,
    /// I/O engine for data: uring (io_uring, with O_DIRECT where the device allows
    /// it under --direct), pool (pread/pwrite thread pool), blocking (tokio's
    /// blocking pool), or auto (io_uring if the kernel allows, else pool).
    #[arg(long, default_value = "auto")]
    pub io_engine: String,
    /// Threads that run requests (the I/O engine has its own) [default: one
    /// fewer than the CPUs, at least 1: a CPU is left for the client and the
    /// kernel's I/O work, and fewer threads switch less].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub record: super::record::RecordArgs,
}

/// TLS options of `serve`, with nbdkit's names and certificate layout.
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// TLS: off (STARTTLS refused), on (each client chooses TLS or plain
    /// text) or require (plain-text clients are refused).
    #[arg(long, value_enum, default_value_t = TlsChoice::Off, value_name = "MODE")]
    pub tls: TlsChoice,
    /// Directory with server-cert.pem, server-key.pem and ca-cert.pem
    /// (nbdkit's layout; ca-cert.pem is needed with --tls-verify-peer).
    #[arg(long, value_name = "DIR")]
    pub tls_certificates: Option<PathBuf>,
    /// Admit only clients that present a certificate signed by ca-cert.pem.
    #[arg(long)]
    pub tls_verify_peer: bool,
}

/// `serve --tls` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsChoice {
    #[default]
    Off,
    On,
    Require,
}

impl TlsArgs {
    /// Load and check the certificates (before anything is opened); None when TLS is off.
    pub fn load(&self) -> anyhow::Result<Option<tiercache_nbd::Tls>> {
        let mode = match self.tls {
            TlsChoice::Off => {
                if self.tls_certificates.is_some() || self.tls_verify_peer {
                    anyhow::bail!(
                        "--tls-certificates and --tls-verify-peer need --tls=on or --tls=require"
                    );
                }
                return Ok(None);
            }
            TlsChoice::On => tiercache_nbd::TlsMode::On,
            TlsChoice::Require => tiercache_nbd::TlsMode::Require,
        };
        let Some(dir) = &self.tls_certificates else {
            anyhow::bail!(
                "--tls={} needs --tls-certificates DIR, a directory with server-cert.pem, \
                 server-key.pem and (for --tls-verify-peer) ca-cert.pem",
                if mode == tiercache_nbd::TlsMode::On {
                    "on"
                } else {
                    "require"
                }
            );
        };
        let tls = tiercache_nbd::Tls::from_dir(dir, mode, self.tls_verify_peer)
            .map_err(|e| anyhow::anyhow!("--tls-certificates: {e}"))?;
        Ok(Some(tls))
    }

    /// Every client must use TLS.
    pub fn required(&self) -> bool {
        self.tls == TlsChoice::Require
    }
}

/// `tiercache set`: change the policy of a running cache.
#[derive(Args, Debug)]
#[command(after_help = "\
The change applies to the running cache and is recorded in its superblock,
so a restart keeps it. Leaving write-back (for write-through, write-hdd-upd,
write-hdd-inv/write-around or read-only) first writes every dirty line back,
printing progress; requests keep being served meanwhile, and wait only for
the moment of the switch. A change the design cannot make online is refused
with the reason (the SSD cache cannot change its eviction policy online; the
other designs change nothing online).

Examples:
  tiercache set --cache cache.img --write-policy write-through
  tiercache set --cache cache.img --dirty-target 10%
  tiercache set --cache cache.img --write-policy write-back --json")]
pub struct SetArgs {
    #[command(flatten)]
    pub ctl: CtlArgs,
    /// New write policy: write-back, write-through, write-hdd-upd,
    /// write-hdd-inv (write-around), read-only.
    #[arg(long)]
    pub write_policy: Option<String>,
    /// New dirty target: a percentage (10%) or a share (0.1) of the lines.
    #[arg(long, value_name = "PCT")]
    pub dirty_target: Option<String>,
    /// New sequential cutoff (e.g. 8MiB; the cache's admission must be seq-cutoff).
    #[arg(long, allow_hyphen_values = true, value_name = "SIZE")]
    pub seq_cutoff: Option<String>,
    /// New eviction policy (refused by every design while serving; shown
    /// so the refusal can say why).
    #[arg(long)]
    pub eviction: Option<String>,
    /// The SSD cache's estimates of its hit ratio at other sizes (`stats`,
    /// `what_if`): on, off (frees their memory) or reset (forget what was seen).
    #[arg(long, value_name = "on|off|reset", value_parser = ["on", "off", "reset"])]
    pub what_if: Option<String>,
}

/// `tiercache stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub ctl: CtlArgs,
    /// Keep watching: one compact line (hit ratio, accesses/s, dirty %,
    /// cleaning) every SECONDS [default: 1], updated in place on a terminal,
    /// one line per interval otherwise; until Ctrl-C or the server stops.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "1")]
    pub watch: Option<f64>,
}

/// `tiercache check`: verify the metadata of a cache that is not in use.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Deprecated spelling of --cache (`check CACHE`): still accepted, with a warning.
    #[arg(
        value_name = "CACHE",
        required_unless_present = "cache_opt",
        hide = true
    )]
    pub cache: Option<PathBuf>,
    /// Cache device (file or block device), as every command takes it.
    #[arg(long = "cache", value_name = "PATH", conflicts_with = "cache")]
    pub cache_opt: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Limits of the NBD server (see the README, "Limits"), with the defaults
/// QEMU and nbdkit settled on after their CVEs.
#[derive(Args, Debug, Clone)]
pub struct LimitArgs {
    /// Most client connections at once (handshaking or serving); more are closed at once.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_connections: u32,
    /// A client must finish the NBD handshake within this time (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: std::time::Duration,
    /// A client stalled this long in a write payload, or not reading its replies, is cut off.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub io_timeout: std::time::Duration,
    /// Close a connection with no request for this long [default: never; 0 also means never].
    #[arg(long, value_parser = parse_duration)]
    pub idle_timeout: Option<std::time::Duration>,
    /// Most request payload bytes held in memory across all connections (back-pressure beyond it).
    #[arg(long, default_value = "256MiB")]
    pub max_in_flight: String,
    /// On SIGTERM or detach, how long clients get to read the replies of requests in flight.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub shutdown_grace: std::time::Duration,
}

impl Default for LimitArgs {
    /// The same defaults as the command line's.
    fn default() -> Self {
        LimitArgs {
            max_connections: 100,
            handshake_timeout: std::time::Duration::from_secs(10),
            io_timeout: std::time::Duration::from_secs(30),
            idle_timeout: None,
            max_in_flight: "256MiB".into(),
            shutdown_grace: std::time::Duration::from_secs(10),
        }
    }
}

impl LimitArgs {
    /// The NBD server limits these options give.
    pub fn limits(&self) -> anyhow::Result<tiercache_nbd::Limits> {
        let total = tiercache_sim::units::parse_bytes(&self.max_in_flight)
            .map_err(|e| anyhow::anyhow!("--max-in-flight: {e}"))?;
        let d = tiercache_nbd::Limits::default();
        if total < d.max_payload as u64 {
            anyhow::bail!(
                "--max-in-flight {}: must be at least the largest request, {} MiB",
                self.max_in_flight,
                d.max_payload >> 20
            );
        }
        let total = usize::try_from(total)
            .ok()
            .filter(|t| *t <= tokio::sync::Semaphore::MAX_PERMITS)
            .ok_or_else(|| {
                anyhow::anyhow!("--max-in-flight {} is too large", self.max_in_flight)
            })?;
        Ok(tiercache_nbd::Limits {
            max_connections: self.max_connections as usize,
            handshake_timeout: self.handshake_timeout,
            io_timeout: self.io_timeout,
            idle_timeout: self.idle_timeout.filter(|d| !d.is_zero()),
            max_total_in_flight_bytes: total,
            max_in_flight_bytes: d.max_in_flight_bytes.min(total),
            shutdown_grace: self.shutdown_grace,
            ..d
        })
    }
}

pub use tiercache_sim::units::parse_duration;
