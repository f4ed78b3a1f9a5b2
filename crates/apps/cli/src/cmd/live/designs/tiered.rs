//! The live tiered volume in `format`, `serve` and `stats` (`--mode tier`);
//! the logic is in `tiercache-oodt-live`.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use tiercache_oodt_live::{format_volume, open_volume, Capacity, OpenOptions, VolumeConfig};
use tiercache_sim::units::{format_bytes, parse_bytes};

use super::super::args::{ServeArgs, TierFormatArgs};
use tiercache_oodt_policy::policy::PolicyKind;

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
    let block = match (&a.tier_block, &a.block_size) {
        (Some(b), _) => b.as_str(),
        (None, Some(b)) => {
            eprintln!(
                "tiercache: warning: format --block-size is deprecated; use --tier-block {b}"
            );
            b.as_str()
        }
        (None, None) => tiercache_oodt_live::DEFAULT_TIER_BLOCK,
    };
    let block = parse_bytes(block).map_err(anyhow::Error::msg)?;
    let block = u32::try_from(block).context("block size too large")?;
    let policy: PolicyKind = a.tier_policy.parse().map_err(anyhow::Error::msg)?;
    let cfg = VolumeConfig {
        plan_every: a.plan_every,
        plan_clock: a.plan_clock.parse().map_err(anyhow::Error::msg)?,
        max_moves_per_round: a.moves_per_round,
        migrate_rate: parse_bytes(&a.migrate_rate).map_err(anyhow::Error::msg)?,
        ..VolumeConfig::new(policy)
    };
    let size = size
        .map(parse_bytes)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let capacity: Capacity = a.capacity.parse().map_err(anyhow::Error::msg)?;
    let sb = format_volume(fast, slow, block, &cfg, size, force, capacity)?;
    let slow_slots = match capacity {
        Capacity::Sum => format!(" ({} slots)", sb.layout.slow_slots),
        Capacity::Slow => " (a home per block)".to_string(),
    };
    println!(
        "formatted tiered volume {} ({}): {} ({} bytes) in {} blocks of {}, capacity {capacity}; fast tier {} ({} slots), slow tier {}{slow_slots}; policy {}",
        fast.display(),
        sb.uuid_string(),
        format_bytes(sb.volume_bytes),
        sb.volume_bytes,
        sb.blocks(),
        format_bytes(u64::from(block)),
        fast.display(),
        sb.layout.fast_slots,
        slow.display(),
        policy
    );
    if capacity == Capacity::Slow {
        // The slow tier is the home of every block: the fast tier caches it.
        super::warn_if_larger_than_backing(
            "fast tier",
            sb.layout.fast_slots * u64::from(block),
            "slow tier",
            slow,
        );
    }
    Ok(())
}

/// Print `tiercache stats` of a tiered volume (the control answer `v`).
fn print_stats(v: &serde_json::Value) {
    if let Some(line) = tiercache_runtime::remote::backing_line(&v["backing"]) {
        println!("{line}");
    }
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    println!("status            {}", v["status"].as_str().unwrap_or("?"));
    println!(
        "volume            {} in {} blocks of {}, capacity {}, policy {}",
        format_bytes(v["volume_bytes"].as_u64().unwrap_or(0)),
        v["blocks"],
        format_bytes(v["block_size"].as_u64().unwrap_or(0)),
        v["capacity"].as_str().unwrap_or("?"),
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
    super::print_device_errors(v);
    let r = &v["recovery"];
    println!(
        "recovery          {:.1} ms: {} completed ({} after the switch), {} rolled back",
        f(&r["ms"]),
        r["completed"],
        r["completed_after_switch"],
        r["rolled_back"]
    );
}

/// `tiercache check --cache FAST` on a tiered volume that is not being served.
fn check(fast: &std::path::Path, json: bool) -> Result<()> {
    let r = tiercache_oodt_live::check_volume(fast)?;
    super::CheckOutput {
        design: super::LiveDesign::name(&Tiered),
        device: fast,
        counts: serde_json::json!({
            "capacity": r.capacity,
            "volume_bytes": r.volume_bytes,
            "blocks": r.blocks,
            "fast_slots": r.fast_slots,
            "fast_used": r.fast_used,
        }),
        problems: &r.problems,
        warnings: &[],
        text: r.to_string(),
    }
    .print(json)
}

/// The OODT tiered volume.
pub struct Tiered;

impl super::LiveDesign for Tiered {
    fn name(&self) -> &'static str {
        "oodt"
    }
    fn detect(&self, path: &std::path::Path) -> bool {
        tiercache_oodt_live::is_tiered_volume(path)
    }
    fn validate(&self, a: &ServeArgs) -> Result<()> {
        if a.fs_classify != "off" {
            bail!("--fs-classify is not supported by the tiered volume");
        }
        Ok(())
    }
    fn devices(&self, a: &ServeArgs) -> Result<Vec<(&'static str, PathBuf)>> {
        let slow = match &a.backing {
            Some(b) => b.clone(),
            None => PathBuf::from(
                &tiercache_oodt_live::Superblock::read(&a.cache)?.tiers[1]
                    .identity
                    .path,
            ),
        };
        Ok(vec![("slow tier", slow)])
    }
    fn open(&self, a: &ServeArgs) -> Result<Arc<dyn tiercache_runtime::Design>> {
        let volume = open_volume(&OpenOptions {
            fast: a.cache.clone(),
            slow: a.backing.clone(),
            direct: a.direct,
            emulate_hdd: a.emulate_hdd,
        })?;
        volume.start_background();
        let r = volume.recovery();
        eprintln!(
            "tiercache: opened tiered volume {} ({} and {}{}), recovered in {:.1} ms: checkpoint {}, {} log records, {} migrations completed ({} after their switch), {} rolled back",
            a.cache.display(),
            volume.superblock().tiers[0].identity.path,
            volume.superblock().tiers[1].identity.path,
            if a.emulate_hdd { ", an emulated HDD" } else { "" },
            r.duration.as_secs_f64() * 1000.0,
            r.checkpoint_seq,
            r.log_records,
            r.completed,
            r.completed_after_switch,
            r.rolled_back
        );
        Ok(Arc::new(tiercache_oodt_live::Tiered(volume)))
    }
    fn check(&self, path: &std::path::Path, json: bool) -> Result<()> {
        check(path, json)
    }
    fn print_stats(&self, v: &serde_json::Value) {
        print_stats(v)
    }
}
