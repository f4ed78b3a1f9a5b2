//! `tiercache sim --mode tier`: OODT online data tiering (and its baselines)
//! on a two-tier volume, the fast tier an SSD model and the capacity tier an
//! HDD model. `--tier-policy` and `--fast-tier-size` take comma-separated
//! lists; several values run every combination.

use crate::cmd::sim::args::SimArgs;
use anyhow::{bail, Context, Result};
use tiercache_model::Profile;
use tiercache_sim::units::{parse_bytes, parse_size, SizeSpec};
use tiercache_tiering::policy::{PolicyConfig, PolicyKind};
use tiercache_tiering::sim::{Replay, TierReport, TierSimConfig};
use tiercache_trace::{Format, ReadOptions};

pub fn run(a: &SimArgs) -> Result<()> {
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
    let policies = a
        .tier_policy
        .split(',')
        .map(|p| p.parse::<PolicyKind>().map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    let Some(fast) = &a.fast_tier_size else {
        bail!("--mode tier needs --fast-tier-size (SIZE such as 1GiB, a number of tier blocks, or a percentage of the footprint such as 5%)");
    };
    let sizes = fast
        .split(',')
        .map(|s| parse_size(s.trim()).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    let tier_block = parse_bytes(&a.tier_block).map_err(anyhow::Error::msg)?;
    let tier_block = u32::try_from(tier_block)
        .ok()
        .filter(|b| (4096..=4 << 20).contains(b) && b.is_power_of_two())
        .with_context(|| {
            format!(
                "--tier-block {} (allowed: a power of two from 4KiB to 4MiB)",
                a.tier_block
            )
        })?;
    let profile = match &a.profile {
        Some(p) => Profile::load(p).with_context(|| format!("device profile {}", p.display()))?,
        None => Profile::default(),
    };
    let open = || tiercache_trace::open(&a.trace, format, &ropts);
    let stats = tiercache_trace::trace_stats(open()?, tier_block)?;
    let replay = match crate::cmd::sim::args::replay_choice(a, || Ok(stats.duration_ns > 0))? {
        None => Replay::Open,
        Some(queue_depth) => Replay::Closed { queue_depth },
    };
    let capacity_sum = match a.capacity.as_str() {
        "sum" => true,
        "slow" => false,
        c => bail!("--capacity '{c}' is not understood (allowed: sum, slow)"),
    };
    let base = |policy: PolicyKind, fast_tier_bytes: u64| TierSimConfig {
        policy,
        policy_cfg: PolicyConfig::default(),
        block_bytes: tier_block,
        fast_tier_bytes,
        volume_bytes: stats.max_end,
        planner: TierSimConfig::default_planner(fast_tier_bytes / u64::from(tier_block)),
        profile: profile.clone(),
        replay,
        capacity_sum,
    };
    let baseline = if a.no_baseline {
        None
    } else {
        Some(tiercache_tiering::sim::run(
            open()?,
            &base(PolicyKind::Frequency, 0),
        )?)
    };
    let mut rows = Vec::new();
    for &size in &sizes {
        let bytes = size.bytes(u64::from(tier_block), stats.footprint_bytes);
        for &p in &policies {
            let r = tiercache_tiering::sim::run(open()?, &base(p, bytes))?;
            rows.push((size, r));
        }
    }
    let json_row = |size: &SizeSpec, r: &TierReport| -> Result<serde_json::Value> {
        let mut v = serde_json::to_value(r)?;
        v["trace"] = a.trace.display().to_string().into();
        v["fast_tier_size"] = size.to_string().into();
        if let Some(b) = &baseline {
            v["baseline"] = serde_json::json!({
                "mean_response_us": b.mean_response_us,
                "p50_response_us": b.p50_response_us,
                "p99_response_us": b.p99_response_us,
            });
            v["speedup"] = (b.mean_response_us / r.mean_response_us.max(1e-9)).into();
        }
        Ok(v)
    };
    if a.json {
        let v = rows
            .iter()
            .map(|(s, r)| json_row(s, r))
            .collect::<Result<Vec<_>>>()?;
        let out = if v.len() == 1 {
            serde_json::to_string_pretty(&v[0])?
        } else {
            serde_json::to_string_pretty(&v)?
        };
        println!("{out}");
        return Ok(());
    }
    println!("trace {}, capacity {}", a.trace.display(), a.capacity);
    if let Some(b) = &baseline {
        println!(
            "HDD only: mean {:.1} µs, p99 {:.1} µs",
            b.mean_response_us, b.p99_response_us
        );
    }
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10} {:>12} {:>8}",
        "fast",
        "policy",
        "mean µs",
        "p50 µs",
        "p99 µs",
        "blocks%",
        "hits%",
        "migrated",
        "migr. bytes",
        "B/block"
    );
    for (s, r) in &rows {
        println!(
            "{:>8} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>8.2} {:>8.2} {:>10} {:>12} {:>8.2}",
            s.to_string(),
            r.policy,
            r.mean_response_us,
            r.p50_response_us,
            r.p99_response_us,
            r.fast_tier_block_share * 100.0,
            r.fast_tier_access_share * 100.0,
            r.migrations,
            r.migrated_bytes,
            r.metadata_bytes_per_block
        );
    }
    Ok(())
}
