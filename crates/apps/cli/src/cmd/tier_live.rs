//! The live tiered volume in `format`, `serve` and `stats` (`--mode tier`);
//! the logic is in `tiercache-tiered-volume`.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use tiercache_sim::units::{format_bytes, parse_bytes};
use tiercache_tiered_volume::{
    control, format_volume, open_volume, OpenOptions, TierExport, VolumeConfig,
};
use tiercache_tiering::policy::PolicyKind;

/// `format` options of a tiered volume.
#[derive(Args, Debug, Clone)]
pub struct TierFormatArgs {
    /// What to format: cache (the SSD cache: --cache, --backing; --layout
    /// log-structured for the FlashTier-style store), tier (a tiered volume:
    /// --tiers) or tica (a three-level cache: --ro-ssd, --wo-ssd, --backing,
    /// --dram-size).
    #[arg(long, default_value = "cache")]
    pub mode: String,
    /// Tiered volume: FAST,SLOW (files or block devices). The volume is the
    /// slow tier's size and starts with its contents; metadata goes on FAST.
    #[arg(long, value_delimiter = ',')]
    pub tiers: Option<Vec<PathBuf>>,
    /// Tiered volume: block size, a power of two from 4KiB to 4MiB.
    #[arg(long, default_value = "1MiB")]
    pub block_size: String,
    /// Tiered volume: placement policy: oodt, frequency, hystor, raf.
    #[arg(long, default_value = "oodt")]
    pub tier_policy: String,
    /// Tiered volume: run the planner every N requests (and when idle).
    #[arg(long, default_value_t = 1000)]
    pub plan_every: u64,
    /// Tiered volume: most bytes migrated per second.
    #[arg(long, default_value = "64MiB")]
    pub migrate_rate: String,
}

/// `tiercache format --mode tier`; `None` when formatting a cache.
pub fn format(a: &TierFormatArgs, size: Option<&str>, force: bool) -> Option<Result<()>> {
    match (a.mode.as_str(), &a.tiers) {
        ("cache", None) => None,
        ("cache", Some(_)) => Some(Err(anyhow::anyhow!(
            "--tiers needs --mode tier (--mode cache formats a cache with --cache and --backing)"
        ))),
        ("tier", t) => Some(format_tiered(a, t.as_deref(), size, force)),
        (m, _) => Some(Err(anyhow::anyhow!(
            "--mode '{m}' is not understood (allowed: cache, tier, tica)"
        ))),
    }
}

fn format_tiered(
    a: &TierFormatArgs,
    tiers: Option<&[PathBuf]>,
    size: Option<&str>,
    force: bool,
) -> Result<()> {
    let Some([fast, slow]) = tiers else {
        bail!("--mode tier needs --tiers FAST,SLOW (exactly two paths)");
    };
    let block = parse_bytes(&a.block_size).map_err(anyhow::Error::msg)?;
    let block = u32::try_from(block).context("block size too large")?;
    let policy: PolicyKind = a.tier_policy.parse().map_err(anyhow::Error::msg)?;
    let cfg = VolumeConfig {
        plan_every: a.plan_every,
        migrate_rate: parse_bytes(&a.migrate_rate).map_err(anyhow::Error::msg)?,
        ..VolumeConfig::new(policy)
    };
    let size = size
        .map(parse_bytes)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let sb = format_volume(fast, slow, block, &cfg, size, force)?;
    println!(
        "formatted tiered volume {} ({}): {} in {} blocks of {}; fast tier {} ({} slots), slow tier {}; policy {}",
        fast.display(),
        sb.uuid_string(),
        format_bytes(sb.volume_bytes),
        sb.blocks(),
        format_bytes(u64::from(block)),
        fast.display(),
        sb.layout.fast_slots,
        slow.display(),
        policy
    );
    Ok(())
}

/// Whether `serve --cache PATH` names the fast tier of a tiered volume.
pub fn is_tiered(a: &super::live::ServeArgs) -> bool {
    tiercache_tiered_volume::is_tiered_volume(&a.cache)
}

/// `tiercache serve` on a tiered volume, until SIGINT/SIGTERM. Honours
/// `--backing` (the slow tier, if it moved), `--listen`, `--export`,
/// `--read-only`, `--control`, `--direct` and `--emulate-hdd` (on the slow
/// tier); data I/O runs on tokio's blocking pool.
pub async fn serve(
    a: super::live::ServeArgs,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    let volume = open_volume(&OpenOptions {
        fast: a.cache.clone(),
        slow: a.backing.clone(),
        direct: a.direct,
        emulate_hdd: a.emulate_hdd,
    })?;
    volume.start_background();
    let r = volume.recovery();
    eprintln!(
        "tiercache: opened tiered volume {} ({} and {}), recovered in {:.1} ms: checkpoint {}, {} log records, {} migrations completed ({} after their switch), {} rolled back",
        a.cache.display(),
        volume.superblock().tiers[0].identity.path,
        volume.superblock().tiers[1].identity.path,
        r.duration.as_secs_f64() * 1000.0,
        r.checkpoint_seq,
        r.log_records,
        r.completed,
        r.completed_after_switch,
        r.rolled_back
    );
    let export: Arc<dyn tiercache_nbd::Backend> = Arc::new(TierExport {
        volume: Arc::clone(&volume),
        read_only: a.read_only,
    });
    let server = tiercache_nbd::Server::new([(a.export.clone(), export)])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let handle = super::live::listen(server, &a.listen).await?;
    let uri = handle.uri();
    eprintln!("tiercache: serving export '{}' at {uri}", a.export);
    let ctl = a
        .control
        .clone()
        .unwrap_or_else(|| tiercache_server::control::default_path(&a.cache));
    let stop = Arc::new(tokio::sync::Notify::new());
    let ctl_task = {
        let (v, s) = (Arc::clone(&volume), Arc::clone(&stop));
        tokio::spawn(async move { control::serve(&ctl, v, s).await })
    };
    if let Some(r) = ready {
        let _ = r.send(uri);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    handle.shutdown().await;
    stop.notify_waiters();
    let _ = ctl_task.await;
    let v = Arc::clone(&volume);
    tokio::task::spawn_blocking(move || v.shutdown()).await??;
    eprintln!("tiercache: clean shutdown (mapping checkpoint written)");
    Ok(())
}

/// Print `tiercache stats` of a tiered volume (the control answer `v`).
pub fn print_stats(v: &serde_json::Value) {
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    println!("status            {}", v["status"].as_str().unwrap_or("?"));
    println!(
        "volume            {} in {} blocks of {}, policy {}",
        format_bytes(v["volume_bytes"].as_u64().unwrap_or(0)),
        v["blocks"],
        format_bytes(v["block_size"].as_u64().unwrap_or(0)),
        v["policy"]["policy"].as_str().unwrap_or("?")
    );
    for t in v["tiers"].as_array().into_iter().flatten() {
        println!(
            "tier {}            {:.1} % occupied ({} of {} slots), hits {} reads / {} writes ({} / {})",
            t["tier"],
            f(&t["occupancy"]) * 100.0,
            t["used_slots"],
            t["slots"],
            t["read_hits"],
            t["write_hits"],
            format_bytes(t["read_bytes"].as_u64().unwrap_or(0)),
            format_bytes(t["write_bytes"].as_u64().unwrap_or(0)),
        );
    }
    println!(
        "migrations        {} done ({} up, {} down), {} in flight, {} migrated, {} planner rounds",
        v["migrations"],
        v["promotions"],
        v["demotions"],
        v["migrations_in_flight"],
        format_bytes(v["migrated_bytes"].as_u64().unwrap_or(0)),
        v["planner_rounds"]
    );
    let r = &v["recovery"];
    println!(
        "recovery          {:.1} ms: {} completed ({} after the switch), {} rolled back",
        f(&r["ms"]),
        r["completed"],
        r["completed_after_switch"],
        r["rolled_back"]
    );
}

/// `tiercache check FAST` on a tiered volume that is not being served.
pub fn check(fast: &std::path::Path, json: bool) -> Result<()> {
    let r = tiercache_tiered_volume::check_volume(fast)?;
    if json {
        println!(
            "{}",
            serde_json::json!({"ok": r.problems.is_empty(), "report": r.to_string()})
        );
    } else {
        println!("{r}");
    }
    if !r.problems.is_empty() {
        bail!("{} has metadata problems", fast.display());
    }
    Ok(())
}
