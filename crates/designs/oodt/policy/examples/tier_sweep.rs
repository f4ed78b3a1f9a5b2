//! Planner-parameter sweep used to pick the defaults of `tiercache sim --mode
//! tier` (closed loop, queue depth 1).
//! Usage: tier_sweep TRACE FORMAT ID_BLOCK_BYTES PERCENTS EVERY BUDGET_DIV
//! e.g. `tier_sweep postmark.trace disksim 512 2,4,8,16 1000 8`.

use tiercache_model::Profile;
use tiercache_oodt_policy::policy::{PolicyConfig, PolicyKind};
use tiercache_oodt_policy::sim::{run, Replay, TierSimConfig};
use tiercache_trace::{Format, ReadOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 7 {
        return Err(
            "usage: tier_sweep TRACE FORMAT ID_BLOCK_BYTES PERCENTS EVERY BUDGET_DIV".into(),
        );
    }
    let path = std::path::Path::new(&a[1]);
    let format: Format = a[2].parse().map_err(|e| format!("{e}"))?;
    let ropts = ReadOptions {
        block_size: a[3].parse()?,
        ..ReadOptions::default()
    };
    let every: u64 = a[5].parse()?;
    let div: u64 = a[6].parse()?;
    let open = || tiercache_trace::open(path, Some(format), &ropts);
    let st = tiercache_trace::trace_stats(open()?, 4096)?;
    let cfg = |p, fast: u64| TierSimConfig {
        policy: p,
        policy_cfg: PolicyConfig::default(),
        block_bytes: 4096,
        fast_tier_bytes: fast,
        volume_bytes: st.max_end,
        planner: tiercache_oodt_policy::planner::PlannerConfig {
            every_requests: every,
            idle_ns: None,
            max_moves_per_round: ((fast / 4096) / div).max(1) as usize,
        },
        profile: Profile::default(),
        replay: Replay::Closed { queue_depth: 1 },
        capacity_sum: false,
    };
    let hdd = run(open()?, &cfg(PolicyKind::Frequency, 0))?;
    println!("hdd-only mean {:.1}", hdd.mean_response_us);
    for pct in a[4].split(',') {
        let pct: f64 = pct.parse()?;
        let fast = ((st.footprint_bytes as f64 * pct / 100.0) as u64 / 4096) * 4096;
        for p in PolicyKind::ALL {
            let r = run(open()?, &cfg(p, fast))?;
            println!(
                "{pct:>5}% {:>10} mean {:>9.1} p99 {:>9.1} hits {:>6.2}% migr {:>8}",
                r.policy,
                r.mean_response_us,
                r.p99_response_us,
                r.fast_tier_access_share * 100.0,
                r.migrations
            );
        }
    }
    Ok(())
}
