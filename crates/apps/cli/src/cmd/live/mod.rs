//! The live device commands: `format`, `serve`, `stats`, `flush`, `detach`,
//! `check`, for every design. Which design a device holds is decided by the
//! registry in [`designs`]; the runtime (`tiercache-runtime`) serves it.

pub mod args;
pub mod ctl;
pub mod designs;
pub mod record;
pub mod resize;

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tiercache_runtime::{Access, Claims, ListenSpec, Prepared, ServeConfig};

pub use args::{CheckArgs, CtlArgs, FormatArgs, ServeArgs, SetArgs, StatsArgs};

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

/// `tiercache format`: claim every named device that exists (a device in
/// use is refused), format, and remove a cache file this command created if
/// formatting fails.
pub fn format(mut a: FormatArgs) -> Result<()> {
    if let Some(name) = &a.design {
        let d = tiercache_simulate::design::design(name).map_err(anyhow::Error::msg)?;
        a.tier.mode = d.format_mode.into();
        a.ls.layout = d.format_layout.into();
    }
    let mut named: Vec<(&str, &Path)> = [
        ("cache device", a.cache.as_deref()),
        ("backing device", a.backing.as_deref()),
        ("RO-SSD", a.tica.ro_ssd.as_deref()),
        ("WO-SSD", a.tica.wo_ssd.as_deref()),
    ]
    .into_iter()
    .filter_map(|(r, p)| p.map(|p| (r, p)))
    .collect();
    for (i, t) in a.tier.tiers.iter().flatten().enumerate() {
        named.push((if i == 0 { "fast tier" } else { "slow tier" }, t.as_path()));
    }
    let created: Vec<PathBuf> = named
        .iter()
        .filter(|(_, p)| !p.exists())
        .map(|(_, p)| p.to_path_buf())
        .collect();
    let existing: Vec<(&str, &Path)> = named.into_iter().filter(|(_, p)| p.exists()).collect();
    let _claims = Claims::acquire(existing.iter().copied(), Access::Exclusive)?;
    // The device that holds the data must pass the checks `serve` makes
    // when it opens it, before anything is written or created.
    for (role, p) in &existing {
        if matches!(*role, "backing device" | "slow tier") {
            tiercache_io::open_device(p, false, role)?;
        }
    }
    let r = format_design(&a);
    if r.is_err() {
        for p in created.iter().filter(|p| p.exists()) {
            let _ = std::fs::remove_file(p);
        }
    } else {
        for p in &created {
            warn_if_larger_than_free_space(p);
        }
    }
    r
}

/// Say so when a file `format` created (sparse, of the declared `--size`)
/// is larger than what its file system can still give it: writes to the
/// cache then fail with ENOSPC once the file system fills.
fn warn_if_larger_than_free_space(file: &Path) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::metadata(file) else {
        return;
    };
    if !md.is_file() {
        return;
    }
    let Ok(c) = std::ffi::CString::new(file.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a NUL-terminated path and a zeroed statvfs to fill.
    let mut v: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut v) } != 0 {
        return;
    }
    let free = (v.f_bavail as u64).saturating_mul(v.f_frsize as u64);
    // The space the file holds already is its own.
    let room = free.saturating_add(md.blocks().saturating_mul(512));
    if md.len() > room {
        eprintln!(
            "tiercache: warning: {} is {} but its file system has only {} free: \
             writes to it will fail once the file system is full",
            file.display(),
            tiercache_sim::units::format_bytes(md.len()),
            tiercache_sim::units::format_bytes(free)
        );
    }
}

fn format_design(a: &FormatArgs) -> Result<()> {
    if a.max_size.is_some() && !matches!(a.tier.mode.as_str(), "cache" | "tica") {
        bail!("--max-size applies to the SSD cache (--design azor), the log-structured cache (--design flashtier) and the three-level cache (--design tica) only");
    }
    if let Some(r) = designs::log_structured::format(a) {
        return r;
    }
    if let Some(r) = designs::tica::format(
        &a.tier.mode,
        &a.tica,
        a.backing.as_deref(),
        a.size.as_deref(),
        a.max_size.as_deref(),
        a.force,
    ) {
        return r;
    }
    if let Some(r) = designs::tiered::format(&a.tier, a.size.as_deref(), a.force) {
        return r;
    }
    designs::ssd_cache::format(a)
}

pub fn serve(a: ServeArgs) -> Result<()> {
    runtime_with(a.threads)?.block_on(serve_async(a, None))
}

/// Serve until SIGINT/SIGTERM or `detach`. `ready` gets the NBD URI once
/// listening. Every option is checked, every device claimed and both
/// sockets bound before the design is opened (so a mistake never leaves a
/// cache marked open).
pub async fn serve_async(
    a: ServeArgs,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    let listen = match &a.listen {
        Some(l) => ListenSpec::parse(l)?,
        None => tiercache_runtime::listen::from_systemd()
            .unwrap_or_else(|| ListenSpec::Tcp(tiercache_nbd::DEFAULT_TCP_ADDR.into())),
    };
    let tls = a.tls.load()?;
    tiercache_io::set_nbd_defaults(tiercache_io::NbdOptions {
        connections: a.backing_connections as usize,
        timeout: a.backing_timeout,
        max_in_flight: a.backing_queue_depth as usize,
    });
    listen.check_exposure(a.insecure_listen, a.tls.required())?;
    let cfg = ServeConfig {
        export: a.export.clone(),
        read_only: a.read_only,
        limits: a.limits.limits()?,
        tls,
    };
    if a.no_cache {
        return serve_uncached(a, listen, cfg, ready).await;
    }
    if !a.cache.exists() {
        bail!(
            "cache device {} does not exist (run tiercache format first)",
            a.cache.display()
        );
    }
    let design = designs::detect(&a.cache);
    design.validate(&a)?;
    let mut claims = Claims::acquire(
        [(design_role(design), a.cache.as_path())],
        Access::Exclusive,
    )?;
    for (role, p) in design.devices(&a)? {
        // A device that is not there is the design's to explain (its open
        // says what it expected there); every device it opens is claimed.
        if p.exists() {
            claims.add(role, &p, Access::Exclusive)?;
        }
    }
    let control = a
        .control
        .clone()
        .unwrap_or_else(|| tiercache_runtime::control::default_path(&a.cache));
    let record = a.record.spec()?;
    let prepared = Prepared::bind(&listen, &control)?
        .with_metrics(a.metrics.as_deref())?
        .with_recording(record)?;
    let opened = match design.open(&a) {
        Ok(d) => d,
        Err(e) => {
            prepared.abandon();
            return Err(e);
        }
    };
    let ended = tiercache_runtime::serve(opened, prepared, &cfg, ready).await;
    drop(claims);
    ended.map(|_| ())
}

/// The role of the device `serve --cache` names, per design.
fn design_role(d: &dyn designs::LiveDesign) -> &'static str {
    match d.name() {
        "oodt" => "fast tier",
        "tica" => "SSD",
        _ => "cache device",
    }
}

/// `serve --no-cache`: the backing device alone (with the same HDD emulation), the
/// uncached baseline that benchmarks compare the cache against.
async fn serve_uncached(
    a: ServeArgs,
    listen: ListenSpec,
    cfg: ServeConfig,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    let backing = match &a.backing {
        Some(b) => b.clone(),
        None => designs::ssd_cache::recorded_backing(&a.cache)?,
    };
    let _claim = Claims::acquire([("backing device", backing.as_path())], Access::Exclusive)?;
    let bound = listen.bind()?;
    let fo = tiercache_io::FileDevOptions {
        direct: a.direct,
        ..Default::default()
    };
    let mut dev: Arc<dyn tiercache_io::BlockDev> =
        if backing.to_str().is_some_and(tiercache_io::is_nbd_uri) {
            tiercache_io::open_device(&backing, a.direct, "backing device")?
        } else {
            Arc::new(
                tiercache_io::FileDev::open(&backing, fo)
                    .with_context(|| format!("opening {}", backing.display()))?,
            )
        };
    if a.emulate_hdd {
        dev = Arc::new(
            tiercache_io::EmulatedHdd::default_disk(dev).map_err(|e| anyhow::anyhow!("{e}"))?,
        );
    }
    let export: Arc<dyn tiercache_nbd::Backend> =
        Arc::new(tiercache_azor_live::passthrough::PassThrough { dev });
    let server =
        tiercache_nbd::Server::with_tls([(cfg.export.clone(), export)], cfg.limits, cfg.tls)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    let listening = bound.serve(&server)?;
    let uri = listening.uri.clone();
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
    listening.shutdown().await;
    Ok(())
}

/// `tiercache stats|flush|detach`: ask the running server.
pub fn ctl(cmd: &str, a: CtlArgs) -> Result<()> {
    let v = runtime()?.block_on(tiercache_runtime::control::request(&a.socket(), cmd))?;
    let failed = v.get("ok") == Some(&serde_json::Value::Bool(false));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else if !failed {
        match cmd {
            "stats" => match v["design"].as_str().and_then(designs::by_name) {
                Some(d) => d.print_stats(&v),
                None => println!("{}", serde_json::to_string_pretty(&v)?),
            },
            "flush" => println!(
                "flushed: {} {} written back, {} dirty",
                v["written_back"],
                unit(&v),
                v["dirty_left"]
            ),
            "detach" => println!(
                "detached: {} {} written back; {} holds every acknowledged write; the cache is emptied (its next serve starts cold)",
                v["written_back"],
                unit(&v),
                v["backing"].as_str().unwrap_or("the backing device")
            ),
            _ => println!("{}", serde_json::to_string_pretty(&v)?),
        }
    }
    if failed {
        bail!(
            "{cmd} failed: {}",
            v["error"].as_str().unwrap_or("no reason given")
        );
    }
    Ok(())
}

/// `tiercache set`: send the changes, print progress lines, then the result.
pub fn set(a: SetArgs) -> Result<()> {
    let mut req = serde_json::json!({"cmd": "set"});
    if let Some(p) = &a.write_policy {
        req["write_policy"] = p.as_str().into();
    }
    if let Some(t) = &a.dirty_target {
        req["dirty_target"] = tiercache_sim::units::parse_fraction(t)
            .map_err(|e| anyhow::anyhow!("--dirty-target: {e}"))?
            .into();
    }
    if let Some(c) = &a.seq_cutoff {
        let b = tiercache_sim::units::parse_bytes(c)
            .map_err(|e| anyhow::anyhow!("--seq-cutoff {c}: {e}"))?;
        req["seq_cutoff"] = b.into();
    }
    if let Some(e) = &a.eviction {
        req["eviction"] = e.as_str().into();
    }
    if let Some(w) = &a.what_if {
        req["what_if"] = w.as_str().into();
    }
    if req.as_object().is_some_and(|o| o.len() == 1) {
        bail!("nothing to change: give --write-policy, --dirty-target, --seq-cutoff, --eviction or --what-if");
    }
    let json = a.ctl.json;
    let v = runtime()?.block_on(tiercache_runtime::control::request_with_progress(
        &a.ctl.socket(),
        &req,
        |p| {
            if !json {
                eprintln!(
                    "tiercache: {}",
                    p["message"].as_str().unwrap_or(&p.to_string())
                );
            }
        },
    ))?;
    if v["ok"] != serde_json::Value::Bool(true) {
        if json {
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        bail!(
            "set refused: {}",
            v["error"].as_str().unwrap_or("no reason given")
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{}", v["message"].as_str().unwrap_or("policy changed"));
    }
    Ok(())
}

/// `tiercache stats [--watch [SECONDS]]`.
pub fn stats(a: StatsArgs) -> Result<()> {
    let Some(every) = a.watch else {
        return ctl("stats", a.ctl);
    };
    if !(every.is_finite() && every >= 0.1) {
        bail!("--watch {every}: give an interval of at least 0.1 seconds");
    }
    let rt = runtime()?;
    let sock = a.ctl.socket();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut last: Option<(std::time::Instant, serde_json::Value)> = None;
    loop {
        let v = match rt.block_on(tiercache_runtime::control::request(&sock, "stats")) {
            Ok(v) => v,
            Err(e) if last.is_some() => {
                println!();
                eprintln!("tiercache: the server stopped ({e:#})");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let now = std::time::Instant::now();
        if a.ctl.json {
            println!("{}", serde_json::to_string(&v)?);
        } else {
            let line = watch_line(&v, last.as_ref().map(|(t, p)| (now - *t, p)));
            if tty {
                print!("\r\x1b[2K{line}");
                std::io::Write::flush(&mut std::io::stdout())?;
            } else {
                println!("{line}");
            }
        }
        last = Some((now, v));
        std::thread::sleep(std::time::Duration::from_secs_f64(every));
    }
}

/// One compact `stats --watch` line; rates from the previous answer.
fn watch_line(
    v: &serde_json::Value,
    prev: Option<(std::time::Duration, &serde_json::Value)>,
) -> String {
    let n = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or(0);
    let accesses = |v: &serde_json::Value| n(v, "hits") + n(v, "misses");
    let dirty = |v: &serde_json::Value| {
        ["dirty_lines", "dirty_blocks", "dirty_pages"]
            .iter()
            .find_map(|k| v[*k].as_u64())
            .unwrap_or(0)
    };
    let rate = match prev {
        Some((dt, p)) if dt.as_secs_f64() > 0.0 => {
            format!(
                "{:>8.0}/s",
                accesses(v).saturating_sub(accesses(p)) as f64 / dt.as_secs_f64()
            )
        }
        _ => format!("{:>10}", "-"),
    };
    let slots = n(v, "slots").max(1);
    let l = &v["live"];
    format!(
        "{} hit {:>6.2} %  accesses {rate}  dirty {:>5.1} %  cleaned {}  p99 {} µs",
        v["design"].as_str().unwrap_or("?"),
        v["hit_ratio"].as_f64().unwrap_or(0.0) * 100.0,
        dirty(v) as f64 * 100.0 / slots as f64,
        l["cleaned_lines"].as_u64().unwrap_or(0),
        l["cache_latency"]["p99_us"]
            .as_f64()
            .map_or("-".to_string(), |x| format!("{x:.0}")),
    )
}

fn unit(v: &serde_json::Value) -> &str {
    v["unit"].as_str().unwrap_or("blocks")
}

/// `tiercache check`: verify the metadata of a device that is not in use.
pub fn check(a: CheckArgs) -> Result<()> {
    let cache = match (a.cache, a.cache_opt) {
        (_, Some(c)) => c,
        (Some(c), None) => {
            eprintln!(
                "tiercache: warning: `check CACHE` is deprecated; use `check --cache {}`",
                c.display()
            );
            c
        }
        (None, None) => bail!("--cache is required"),
    };
    if !cache.exists() {
        bail!("{} does not exist", cache.display());
    }
    let _claim = Claims::acquire([("cache device", cache.as_path())], Access::Shared)?;
    designs::detect(&cache).check(&cache, a.json)
}
