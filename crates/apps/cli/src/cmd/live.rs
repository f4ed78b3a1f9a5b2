//! The live device: `format`, `serve`, `stats`, `flush`, `detach`, `check`.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tiercache_core::admission::{AdmissionConfig, AdmissionKind};
use tiercache_core::eviction::EvictionKind;
use tiercache_core::{Assoc, CacheConfig, WritePolicy};
use tiercache_server::{backend::Export, control, open_cache, OpenOptions};
use tiercache_sim::units::{format_bytes, parse_bytes};

/// Policy options, spelled as in `tiercache sim` (one value each).
#[derive(Args, Debug, Clone)]
pub struct PolicyArgs {
    /// Cache line size: a power of two from 4KiB to 1MiB.
    #[arg(long, default_value = "4KiB")]
    pub line_size: String,
    /// Valid/dirty granularity inside a line [default: the smaller of 4KiB and the line size].
    #[arg(long)]
    pub sub_block: Option<String>,
    /// Associativity: direct, N-way (e.g. 8-way), full.
    #[arg(long, default_value = "full")]
    pub assoc: String,
    /// Eviction policy: lru, fifo, arc, s3fifo.
    #[arg(long, default_value = "lru")]
    pub eviction: String,
    /// Write policy: write-back, write-through, write-hdd-upd, write-hdd-inv, read-only.
    #[arg(long, default_value = "write-back")]
    pub write_policy: String,
    /// Do not allocate lines on write misses.
    #[arg(long)]
    pub no_write_allocate: bool,
    /// Admission policy: always, seq-cutoff, nhit, 2lbs.
    #[arg(long, default_value = "always")]
    pub admission: String,
    /// Sequential cutoff threshold.
    #[arg(long, default_value = "4MiB")]
    pub seq_cutoff: String,
    /// n-hit threshold.
    #[arg(long, default_value_t = 3)]
    pub nhit_threshold: u32,
    /// 2LBS levels: metadata, frequency, or both (comma-separated).
    #[arg(
        long = "2lbs-levels",
        value_delimiter = ',',
        default_value = "metadata,frequency"
    )]
    pub twolbs_levels: Vec<String>,
    /// Write-back: share of lines that may be dirty before cleaning speeds up (0.0-1.0).
    #[arg(long, default_value_t = 0.2)]
    pub dirty_target: f64,
}

impl PolicyArgs {
    pub fn config(&self) -> Result<CacheConfig> {
        let (lv_meta, lv_freq) = super::sim::parse_2lbs_levels(&self.twolbs_levels)?;
        let line = parse_bytes(&self.line_size).map_err(anyhow::Error::msg)?;
        let line = u32::try_from(line).context("line size too large")?;
        let sub = match &self.sub_block {
            Some(s) => u32::try_from(parse_bytes(s).map_err(anyhow::Error::msg)?)
                .context("sub-block too large")?,
            None => line.min(4096),
        };
        let cfg = CacheConfig {
            // A placeholder large enough for any associativity: format derives the real size from the device.
            cache_bytes: (line as u64) << 20,
            line_bytes: line,
            sub_block_bytes: sub,
            assoc: self.assoc.parse::<Assoc>().map_err(anyhow::Error::msg)?,
            eviction: self
                .eviction
                .parse::<EvictionKind>()
                .map_err(anyhow::Error::msg)?,
            write_policy: self
                .write_policy
                .parse::<WritePolicy>()
                .map_err(anyhow::Error::msg)?,
            write_allocate: !self.no_write_allocate,
            admission: AdmissionConfig {
                kind: self
                    .admission
                    .parse::<AdmissionKind>()
                    .map_err(anyhow::Error::msg)?,
                seq_cutoff_bytes: parse_bytes(&self.seq_cutoff).map_err(anyhow::Error::msg)?,
                nhit_threshold: self.nhit_threshold,
                twolbs_metadata: lv_meta,
                twolbs_frequency: lv_freq,
                ..AdmissionConfig::default()
            },
            dirty_target: self.dirty_target,
        };
        cfg.geometry().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(cfg)
    }
}

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
    #[arg(long)]
    pub size: Option<String>,
    /// Overwrite an existing tiercache cache or a device holding a filesystem.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub tier: super::tier_live::TierFormatArgs,
    #[command(flatten)]
    pub tica: super::tica_live::TicaFormatArgs,
    #[command(flatten)]
    pub ls: super::ls_live::LsFormatArgs,
}

pub fn format(a: FormatArgs) -> Result<()> {
    if let Some(r) = super::ls_live::format(&a) {
        return r;
    }
    let backing = a.backing.as_deref();
    if let Some(r) =
        super::tica_live::format(&a.tier.mode, &a.tica, backing, a.size.as_deref(), a.force)
    {
        return r;
    }
    if let Some(r) = super::tier_live::format(&a.tier, a.size.as_deref(), a.force) {
        return r;
    }
    let (Some(cache), Some(backing)) = (&a.cache, &a.backing) else {
        bail!("format needs --cache and --backing (or --mode tier --tiers FAST,SLOW)");
    };
    let cfg = a.policy.config()?;
    let size = a
        .size
        .as_deref()
        .map(parse_bytes)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let layout = tiercache_server::format_cache(cache, backing, &cfg, size, a.force)?;
    println!(
        "formatted {}: {} lines of {} ({} of cache), {} {} {} admission {}, for backing {}",
        cache.display(),
        layout.slots,
        format_bytes(cfg.line_bytes as u64),
        format_bytes(layout.slots as u64 * cfg.line_bytes as u64),
        cfg.assoc,
        cfg.eviction,
        cfg.write_policy,
        cfg.admission.kind,
        backing.display()
    );
    Ok(())
}

/// `tiercache serve`: export a cache over NBD.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Cache device written by `tiercache format`.
    #[arg(long)]
    pub cache: PathBuf,
    /// Backing device [default: the one recorded at format time].
    #[arg(long)]
    pub backing: Option<PathBuf>,
    /// Where to listen: unix:PATH or tcp:HOST:PORT (loopback unless told otherwise).
    #[arg(long, default_value = "tcp:127.0.0.1:10809")]
    pub listen: String,
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
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    runtime_with(None)
}

fn runtime_with(threads: Option<u16>) -> Result<tokio::runtime::Runtime> {
    let n = match threads {
        Some(n) => n as usize,
        None => std::thread::available_parallelism()
            .map(|c| c.get().saturating_sub(1))
            .unwrap_or(1)
            .max(1),
    };
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(n)
        .enable_all()
        .build()?)
}

pub fn serve(a: ServeArgs) -> Result<()> {
    runtime_with(a.threads)?.block_on(serve_async(a, None))
}

/// Serve until SIGINT/SIGTERM or `detach`. `ready` gets the NBD URI once listening.
pub async fn serve_async(
    a: ServeArgs,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    if a.no_cache {
        return serve_uncached(a, ready).await;
    }
    if super::tica_live::is_tica(&a.cache) {
        return super::tica_live::serve(a, ready).await;
    }
    if super::ls_live::is_log_structured(&a.cache) {
        return super::ls_live::serve(a, ready).await;
    }
    if super::tier_live::is_tiered(&a) {
        return super::tier_live::serve(a, ready).await;
    }
    let opened = open_cache(&OpenOptions {
        cache: a.cache.clone(),
        backing: a.backing.clone(),
        emulate_hdd: a.emulate_hdd,
        direct: a.direct,
    })?;
    let cache = opened.cache;
    cache.start_background();
    let engine: Option<Arc<dyn tiercache_io::Engine>> = match a.io_engine.as_str() {
        "auto" => Some(tiercache_io::auto_engine(256, 4)?),
        "uring" => Some(Arc::new(
            tiercache_io::UringEngine::new(256, 4).context("io_uring engine")?,
        )),
        "pool" => Some(Arc::new(tiercache_io::PoolEngine::new(8, 256)?)),
        "blocking" => None,
        x => bail!("--io-engine '{x}' is not understood (allowed: auto, uring, pool, blocking)"),
    };
    if let Some(e) = engine {
        cache.set_io_engine(e);
    }
    match a.fs_classify.as_str() {
        "auto" => cache.enable_classification(),
        "off" => {}
        x => bail!("--fs-classify '{x}' is not understood (allowed: auto, off)"),
    }
    eprintln!(
        "tiercache: opened {} (backing {}{}), recovered in {:.1} ms: {}",
        a.cache.display(),
        opened.backing_path.display(),
        if a.emulate_hdd { ", emulated HDD" } else { "" },
        opened.recovery.duration.as_secs_f64() * 1000.0,
        opened.recovery
    );
    let export: Arc<dyn tiercache_nbd::Backend> = Arc::new(Export {
        cache: Arc::clone(&cache),
        read_only: a.read_only,
    });
    let server = tiercache_nbd::Server::new([(a.export.clone(), export)])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let handle = listen(server, &a.listen).await?;
    let uri = handle.uri();
    eprintln!("tiercache: serving export '{}' at {uri}", a.export);
    let ctl = a
        .control
        .clone()
        .unwrap_or_else(|| control::default_path(&a.cache));
    let stop = Arc::new(tokio::sync::Notify::new());
    let ctl_task = {
        let (c, s, p) = (Arc::clone(&cache), Arc::clone(&stop), ctl.clone());
        tokio::spawn(async move { control::serve(&p, c, s).await })
    };
    if let Some(r) = ready {
        let _ = r.send(uri);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let detached = tokio::select! {
        _ = tokio::signal::ctrl_c() => false,
        _ = term.recv() => false,
        _ = stop.notified() => true,
    };
    handle.shutdown().await;
    stop.notify_waiters();
    let _ = ctl_task.await;
    if detached {
        eprintln!(
            "tiercache: detached; {} holds all data",
            opened.backing_path.display()
        );
    } else {
        cache
            .shutdown()
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.0))?;
        eprintln!("tiercache: clean shutdown (checkpoint written)");
    }
    Ok(())
}

/// Start listening where `--listen` says.
pub(crate) async fn listen(
    server: tiercache_nbd::Server,
    listen: &str,
) -> Result<tiercache_nbd::ServerHandle> {
    Ok(if let Some(p) = listen.strip_prefix("unix:") {
        server
            .serve_unix(p)
            .await
            .with_context(|| format!("listening on {p}"))?
    } else if let Some(addr) = listen.strip_prefix("tcp:") {
        server
            .serve_tcp(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?
    } else {
        bail!("--listen '{listen}' is not understood (allowed: unix:PATH or tcp:HOST:PORT)");
    })
}

/// `serve --no-cache`: the backing device alone (with the same HDD emulation), the
/// uncached baseline that benchmarks compare the cache against.
async fn serve_uncached(
    a: ServeArgs,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    let backing = match &a.backing {
        Some(b) => b.clone(),
        None => {
            let f = std::fs::File::open(&a.cache)
                .with_context(|| format!("opening {}", a.cache.display()))?;
            let sb = tiercache_store::Superblock::read(&f)
                .with_context(|| format!("{} is not a tiercache cache", a.cache.display()))?
                .newest;
            PathBuf::from(&sb.backing.path)
        }
    };
    let fo = tiercache_io::FileDevOptions {
        direct: a.direct,
        ..Default::default()
    };
    let mut dev: Arc<dyn tiercache_io::BlockDev> = Arc::new(
        tiercache_io::FileDev::open(&backing, fo)
            .with_context(|| format!("opening {}", backing.display()))?,
    );
    if a.emulate_hdd {
        let model = tiercache_model::Profile::default()
            .hdd_model()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        dev = Arc::new(tiercache_io::EmulatedHdd::new(dev, model));
    }
    let export: Arc<dyn tiercache_nbd::Backend> =
        Arc::new(tiercache_server::backend::PassThrough { dev });
    let server = tiercache_nbd::Server::new([(a.export.clone(), export)])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let handle = listen(server, &a.listen).await?;
    let uri = handle.uri();
    eprintln!(
        "tiercache: serving {} WITHOUT cache{} at {uri}",
        backing.display(),
        if a.emulate_hdd { " (emulated HDD)" } else { "" }
    );
    if let Some(r) = ready {
        let _ = r.send(uri);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    handle.shutdown().await;
    Ok(())
}

/// Options of the commands that talk to a running server.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// Cache device of the running server (its control socket is CACHE.ctl).
    #[arg(long, required_unless_present = "control")]
    pub cache: Option<PathBuf>,
    /// Control socket of the running server.
    #[arg(long)]
    pub control: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl CtlArgs {
    fn socket(&self) -> PathBuf {
        self.control.clone().unwrap_or_else(|| {
            control::default_path(self.cache.as_deref().unwrap_or(Path::new("cache")))
        })
    }
}

pub fn ctl(cmd: &str, a: CtlArgs) -> Result<()> {
    let v = runtime()?.block_on(control::request(&a.socket(), cmd))?;
    if v["mode"] == "tica" && cmd == "stats" && !a.json {
        super::tica_live::print_stats(&v);
        return Ok(());
    }
    if v["mode"] == "log-structured" && cmd == "stats" && !a.json {
        super::ls_live::print_stats(&v);
        return Ok(());
    }
    if v["mode"] == "tier" && cmd == "stats" && !a.json {
        super::tier_live::print_stats(&v);
        return Ok(());
    }
    if a.json || cmd != "stats" {
        println!("{}", serde_json::to_string_pretty(&v)?);
        if v.get("ok") == Some(&serde_json::Value::Bool(false)) {
            bail!("{cmd} failed: {}", v["error"]);
        }
        return Ok(());
    }
    let l = &v["live"];
    println!("status            {}", v["status"].as_str().unwrap_or("?"));
    println!("policy            {}", v["policy"]);
    println!(
        "occupancy         {:.1} % ({} of {} lines), dirty {}",
        v["occupancy"].as_f64().unwrap_or(0.0) * 100.0,
        v["occupied_lines"],
        v["slots"],
        v["dirty_lines"]
    );
    println!(
        "hit ratio         {:.2} % (hits {}, misses {})",
        v["hit_ratio"].as_f64().unwrap_or(0.0) * 100.0,
        v["hits"],
        v["misses"]
    );
    println!(
        "reads / writes    {} / {} hits, {} / {} misses",
        v["read_hits"], v["write_hits"], v["read_misses"], v["write_misses"]
    );
    println!(
        "metadata          {} hits, {} misses",
        v["metadata_hits"], v["metadata_misses"]
    );
    println!(
        "cleaning          {} lines written back ({:.1} lines/s on average; now paced at {:.0} lines/s), \
         {} while idle, {} by requests after dirty evictions",
        l["cleaned_lines"],
        l["cleaning_rate_lines_per_s"].as_f64().unwrap_or(0.0),
        l["cleaning_target_rate_lines_per_s"].as_f64().unwrap_or(0.0),
        l["idle_cleaned_lines"],
        l["pressure_cleaned_lines"]
    );
    println!(
        "cache latency     p50 {} µs, p99 {} µs",
        l["cache_latency"]["p50_us"], l["cache_latency"]["p99_us"]
    );
    println!(
        "backing latency   p50 {} µs, p99 {} µs",
        l["backing_latency"]["p50_us"], l["backing_latency"]["p99_us"]
    );
    println!(
        "errors            cache {}, backing {}",
        l["cache_errors"], l["backing_errors"]
    );
    println!(
        "recovery          {:.1} ms, {} lines made dirty (unclean shutdown of a write-back cache)",
        l["recovery_ms"].as_f64().unwrap_or(0.0),
        l["recovery_dirtied_lines"].as_u64().unwrap_or(0)
    );
    Ok(())
}

/// `tiercache check`: verify the metadata of a cache that is not in use.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Cache device (or give it with --cache, as the other commands take it).
    #[arg(value_name = "CACHE", required_unless_present = "cache_opt")]
    pub cache: Option<PathBuf>,
    /// Cache device.
    #[arg(long = "cache", value_name = "PATH", conflicts_with = "cache")]
    pub cache_opt: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `check` looks at.
struct CheckOf {
    cache: PathBuf,
    json: bool,
}

pub fn check(a: CheckArgs) -> Result<()> {
    let cache = a.cache.or(a.cache_opt).expect("clap requires one of them");
    let a = CheckOf {
        cache,
        json: a.json,
    };
    if tiercache_tiered_volume::is_tiered_volume(&a.cache) {
        return super::tier_live::check(&a.cache, a.json);
    }
    if super::ls_live::is_log_structured(&a.cache) {
        return super::ls_live::check(&a.cache, a.json);
    }
    let f =
        std::fs::File::open(&a.cache).with_context(|| format!("opening {}", a.cache.display()))?;
    let r = tiercache_store::check(&f)?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({"ok": r.is_ok(), "report": r.to_string()})
        );
    } else {
        println!("{r}");
    }
    if !r.is_ok() {
        bail!("{} has metadata problems", a.cache.display());
    }
    Ok(())
}
