//! `tiercache sim --mode tica|ucache|srac`: three-level DRAM / RO-SSD /
//! WO-SSD caches (TICA) and their mirrored-SSD baselines.

use super::{bad, json_row, trace_input, ModeOutput};
use crate::args::SimArgs;
use anyhow::{bail, Context, Result};
use std::fmt::Write;
use std::path::Path;
use tiercache_sim::units::{format_bytes, parse_bytes, parse_size, SizeSpec};
use tiercache_tica_policy::sim::{Replay, SimConfig};
use tiercache_tica_policy::{Arch, LevelsProfile, LevelsReport, Policy};
use tiercache_trace::{Format, ReadOptions};

/// Trace access shared by `sim` and `reproduce tica`.
pub struct TraceInput {
    pub path: std::path::PathBuf,
    pub format: Option<Format>,
    pub ropts: ReadOptions,
}

impl TraceInput {
    /// Footprint in bytes at `page` granularity and whether the trace has
    /// timestamps.
    pub fn footprint(&self, page: u32) -> Result<(u64, bool)> {
        let r = tiercache_trace::open(&self.path, self.format, &self.ropts)?;
        let st = tiercache_trace::stats::trace_stats(r, page)?;
        Ok((st.footprint_bytes, st.duration_ns > 0))
    }

    /// Run one architecture.
    pub fn run(&self, cfg: &SimConfig) -> Result<LevelsReport> {
        let r = tiercache_trace::open(&self.path, self.format, &self.ropts)?;
        tiercache_tica_policy::run(r, cfg)
            .with_context(|| format!("simulating {} on {}", cfg.arch.name(), self.path.display()))
    }
}

/// Pages of `spec` at `page` bytes against `footprint` bytes.
pub fn pages(spec: SizeSpec, page: u32, footprint: u64) -> u64 {
    spec.bytes(u64::from(page), footprint) / u64::from(page)
}

/// Run `tiercache sim` in a three-level mode.
pub fn run(a: &SimArgs) -> Result<ModeOutput> {
    let arch = match a.mode.as_str() {
        "tica" => Arch::Tica(
            a.tica_policy
                .parse::<Policy>()
                .map_err(|e| bad("tica_policy", e))?,
        ),
        "ucache" => Arch::UCache,
        "srac" => Arch::Srac,
        m => bail!("mode '{m}' is not a three-level mode (allowed: tica, ucache, srac)"),
    };
    let (format, ropts) = trace_input(a)?;
    let input = TraceInput {
        path: a.trace.clone(),
        format,
        ropts,
    };
    let [cache] = a.cache_size.as_slice() else {
        return Err(bad(
            "cache_size",
            format!(
                "--mode {} takes one cache size (the size of each SSD), got {}",
                a.mode,
                a.cache_size.len()
            ),
        ));
    };
    let [line] = a.policy.line_size.as_slice() else {
        return Err(bad(
            "line_size",
            format!("--mode {} takes one line size (the page size)", a.mode),
        ));
    };
    let page = parse_bytes(line).map_err(|e| bad("line_size", e))?;
    let page = u32::try_from(page)
        .ok()
        .filter(|p| p.is_power_of_two() && (512..=1 << 20).contains(p))
        .ok_or_else(|| {
            bad(
                "line_size",
                format!("page size {line} not allowed (a power of two from 512B to 1MiB)"),
            )
        })?;
    let ssd = parse_size(cache).map_err(|e| bad("cache_size", e))?;
    let dram =
        parse_size(a.dram_size.as_deref().unwrap_or("1%")).map_err(|e| bad("dram_size", e))?;
    let (footprint, timed) = input.footprint(page)?;
    let replay = match crate::args::replay_choice(a, || Ok(timed))? {
        None => Replay::Open,
        Some(1) => Replay::Closed,
        Some(q) => bail!(
            "--queue-depth {q}: --mode {} replays closed loop at queue depth 1 only",
            a.mode
        ),
    };
    let mut cfg = SimConfig::new(
        arch,
        pages(dram, page, footprint).max(2),
        pages(ssd, page, footprint).max(1),
    );
    cfg.page_bytes = page;
    cfg.replay = replay;
    if a.no_timing {
        // The live cache's rule at queue depth 1: each request's flushes
        // complete before the next request, no time-driven flushing.
        cfg.sync_flushes = true;
        cfg.flush.timed = false;
    }
    if let Some(p) = &a.profile {
        cfg.profile = load_profile(p)?;
    }
    let r = input.run(&cfg)?;
    Ok(ModeOutput {
        rows: vec![json_row(&a.trace, &r)?],
        text: text_report(&a.trace, &r)?,
    })
}

/// A three-level device profile (TOML; see `tiercache_tica_policy::LevelsProfile`).
pub fn load_profile(p: &Path) -> Result<LevelsProfile> {
    let s =
        std::fs::read_to_string(p).with_context(|| format!("reading profile {}", p.display()))?;
    LevelsProfile::from_toml_str(&s).map_err(anyhow::Error::msg)
}

/// The report printed without `--json`.
fn text_report(trace: &Path, r: &LevelsReport) -> Result<String> {
    let mut out = String::new();
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    let pct = |v: f64| format!("{:.2} %", v * 100.0);
    writeln!(out, "trace {}", trace.display())?;
    writeln!(
        out,
        "{}: DRAM {}, SSDs {} each, pages of {}, {} requests",
        r.mode,
        format_bytes(r.dram_bytes),
        format_bytes(r.ssd_bytes),
        format_bytes(u64::from(r.page_bytes)),
        r.requests
    )?;
    writeln!(
        out,
        "read hit ratio {} (DRAM {}, RO-SSD {}, WO-SSD {}); WED share {}",
        pct(r.hit_ratio),
        pct(r.dram_hit_ratio),
        pct(r.ro_ssd_hit_ratio),
        pct(r.wo_ssd_hit_ratio),
        pct(r.wed_share)
    )?;
    writeln!(
        out,
        "SSD page writes {} (RO-SSD {}, WO-SSD {}); HDD reads {} writes {}",
        r.ssd_writes, r.ro_ssd_writes, r.wo_ssd_writes, r.hdd_reads, r.hdd_writes
    )?;
    writeln!(
        out,
        "response mean {:.1} µs, p99 {:.1} µs; elapsed {:.3} s",
        r.mean_response_us, r.p99_response_us, r.elapsed_s
    )?;
    writeln!(
        out,
        "energy {:.3} J, cost ${:.4}, unreliability {:.3e} over {} h (alpha {:.2})",
        r.energy_joules, r.cost_usd, r.unreliability, r.mission_hours, r.alpha
    )?;
    writeln!(
        out,
        "lifetime (years): RO-SSD {}, WO-SSD {}",
        opt(r.ro_ssd_lifetime_years),
        opt(r.wo_ssd_lifetime_years)
    )?;
    Ok(out)
}
