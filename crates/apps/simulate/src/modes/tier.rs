//! `tiercache sim --mode tier`: OODT online data tiering (and its baselines)
//! on a two-tier volume, the fast tier an SSD model and the capacity tier an
//! HDD model. `--tier-policy` and `--fast-tier-size` take comma-separated
//! lists; several values run every combination.

use super::{bad, json_row, trace_input, ModeOutput};
use crate::args::SimArgs;
use anyhow::{Context, Result};
use std::fmt::Write;
use tiercache_model::Profile;
use tiercache_oodt_policy::planner::PlanClock;
use tiercache_oodt_policy::policy::{PolicyConfig, PolicyKind};
use tiercache_oodt_policy::sim::{Replay, TierReport, TierSimConfig};
use tiercache_sim::units::{parse_bytes, parse_size, SizeSpec};

/// Run `tiercache sim --mode tier`.
pub fn run(a: &SimArgs) -> Result<ModeOutput> {
    let (format, ropts) = trace_input(a)?;
    let policies = a
        .tier_policy
        .split(',')
        .map(|p| p.parse::<PolicyKind>().map_err(|e| bad("tier_policy", e)))
        .collect::<Result<Vec<_>>>()?;
    let Some(fast) = &a.fast_tier_size else {
        return Err(bad("fast_tier_size", "required by --mode tier (a SIZE such as 1GiB, a number of tier blocks, or a percentage of the footprint such as 5%)"));
    };
    let sizes = fast
        .split(',')
        .map(|s| parse_size(s.trim()).map_err(|e| bad("fast_tier_size", e)))
        .collect::<Result<Vec<_>>>()?;
    let tier_block = parse_bytes(&a.tier_block).map_err(|e| bad("tier_block", e))?;
    let tier_block = u32::try_from(tier_block)
        .ok()
        .filter(|b| (4096..=4 << 20).contains(b) && b.is_power_of_two())
        .ok_or_else(|| {
            bad(
                "tier_block",
                format!(
                    "{} not allowed (allowed: a power of two from 4KiB to 4MiB)",
                    a.tier_block
                ),
            )
        })?;
    let profile = match &a.profile {
        Some(p) => Profile::load(p).with_context(|| format!("device profile {}", p.display()))?,
        None => Profile::default(),
    };
    let open = || tiercache_trace::open(&a.trace, format, &ropts);
    let stats = tiercache_trace::trace_stats(open()?, tier_block)?;
    let replay = match crate::args::replay_choice(a, || Ok(stats.duration_ns > 0))? {
        None => Replay::Open,
        Some(queue_depth) => Replay::Closed { queue_depth },
    };
    let capacity_sum = match a.capacity.as_str() {
        "sum" => true,
        "slow" => false,
        c => {
            return Err(bad(
                "capacity",
                format!("'{c}' is not understood (allowed: sum, slow)"),
            ))
        }
    };
    let clock: PlanClock = if a.no_timing {
        PlanClock::Requests
    } else {
        a.plan_clock.parse().map_err(|e| bad("plan_clock", e))?
    };
    if a.plan_every == 0 || a.moves_per_round == Some(0) {
        return Err(bad(
            "plan_every",
            "--plan-every and --moves-per-round must be at least 1",
        ));
    }
    let volume_bytes = match &a.tier_volume_size {
        None => stats.max_end,
        Some(v) => {
            let v = parse_bytes(v).map_err(|e| bad("tier_volume_size", e))?;
            if v < stats.max_end {
                return Err(bad(
                    "tier_volume_size",
                    format!(
                        "{v} B is smaller than the trace's extent of {} B",
                        stats.max_end
                    ),
                ));
            }
            v
        }
    };
    let planner = |fast_tier_bytes: u64| {
        let mut p = TierSimConfig::default_planner(fast_tier_bytes / u64::from(tier_block));
        p.every_requests = a.plan_every;
        if let Some(m) = a.moves_per_round {
            p.max_moves_per_round = m;
        }
        if clock == PlanClock::Requests {
            p.idle_ns = None;
        }
        p
    };
    let base = |policy: PolicyKind, fast_tier_bytes: u64| TierSimConfig {
        policy,
        policy_cfg: PolicyConfig::default(),
        block_bytes: tier_block,
        fast_tier_bytes,
        volume_bytes,
        planner: planner(fast_tier_bytes),
        profile: profile.clone(),
        replay,
        capacity_sum,
    };
    let baseline = if a.no_baseline {
        None
    } else {
        Some(tiercache_oodt_policy::sim::run(
            open()?,
            &base(PolicyKind::Frequency, 0),
        )?)
    };
    let mut rows = Vec::new();
    for &size in &sizes {
        let bytes = tiercache_oodt_policy::sim::usable_fast_tier_bytes(
            size.bytes(u64::from(tier_block), stats.footprint_bytes),
            volume_bytes,
            tier_block,
        );
        for &p in &policies {
            let r = tiercache_oodt_policy::sim::run(open()?, &base(p, bytes))?;
            rows.push((size, r));
        }
    }
    let tier_row = |size: &SizeSpec, r: &TierReport| -> Result<serde_json::Value> {
        let mut v = json_row(&a.trace, r)?;
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
    let json = rows
        .iter()
        .map(|(s, r)| tier_row(s, r))
        .collect::<Result<Vec<_>>>()?;
    Ok(ModeOutput {
        rows: json,
        text: text_report(a, baseline.as_ref(), &rows)?,
    })
}

/// The report printed without `--json`.
fn text_report(
    a: &SimArgs,
    baseline: Option<&TierReport>,
    rows: &[(SizeSpec, TierReport)],
) -> Result<String> {
    let mut out = String::new();
    writeln!(out, "trace {}, capacity {}", a.trace.display(), a.capacity)?;
    if let Some(b) = baseline {
        writeln!(
            out,
            "HDD only: mean {:.1} µs, p99 {:.1} µs",
            b.mean_response_us, b.p99_response_us
        )?;
    }
    writeln!(
        out,
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
    )?;
    for (s, r) in rows {
        writeln!(
            out,
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
        )?;
    }
    Ok(out)
}
