//! The SSD cache (Azor, in-place layout) in the live commands; the logic is
//! in `tiercache-azor-live`.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tiercache_azor_live::{open_cache, OpenOptions};
use tiercache_azor_policy::CacheConfig;
use tiercache_sim::units::{format_bytes, parse_bytes};

use super::super::args::{FormatArgs, PolicyArgs, ServeArgs};

/// The SSD cache.
pub struct SsdCache;

/// The configuration `format` writes, by the builder `sim` and Python share.
pub fn config(p: &PolicyArgs) -> Result<CacheConfig> {
    let spec = p.single()?;
    let line = tiercache_simulate::policy::parse_line_size(&spec.line_size)?;
    // A placeholder large enough for any associativity: format derives the real size from the device.
    Ok(spec.config((line as u64) << 20)?)
}

/// `tiercache format` of an SSD cache (`--mode cache --layout in-place`).
pub fn format(a: &FormatArgs) -> Result<()> {
    let (Some(cache), Some(backing)) = (&a.cache, &a.backing) else {
        bail!("format needs --cache and --backing (or --mode tier --tiers FAST,SLOW)");
    };
    let cfg = config(&a.policy)?;
    let size = a
        .size
        .as_deref()
        .map(parse_bytes)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let max_size = a
        .max_size
        .as_deref()
        .map(parse_bytes)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--max-size: {e}"))?;
    let layout =
        tiercache_azor_live::format_cache_reserving(cache, backing, &cfg, size, a.force, max_size)?;
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
    if max_size.is_some_and(|m| m > layout.dev_size) {
        println!(
            "metadata made for up to {} lines ({} of cache): `tiercache resize` can grow it that far",
            layout.max_slots(),
            format_bytes(layout.max_slots() as u64 * cfg.line_bytes as u64)
        );
    }
    super::warn_if_larger_than_backing(
        "cache",
        layout.slots as u64 * cfg.line_bytes as u64,
        "backing device",
        backing,
    );
    Ok(())
}

/// The I/O engine `--io-engine` names (checked before anything is opened).
fn io_engine(name: &str) -> Result<Option<Arc<dyn tiercache_io::Engine>>> {
    Ok(match name {
        "auto" => Some(tiercache_io::auto_engine(256, 4)?),
        "uring" => Some(Arc::new(
            tiercache_io::UringEngine::new(256, 4).context("io_uring engine")?,
        )),
        "pool" => Some(Arc::new(tiercache_io::PoolEngine::new(8, 256)?)),
        "blocking" => None,
        x => bail!("--io-engine '{x}' is not understood (allowed: auto, uring, pool, blocking)"),
    })
}

/// The backing device recorded in the cache's superblock.
pub fn recorded_backing(cache: &Path) -> Result<PathBuf> {
    let f = std::fs::File::open(cache).with_context(|| format!("opening {}", cache.display()))?;
    let sb = tiercache_store::Superblock::read(&f)
        .with_context(|| {
            format!(
                "{} is not a tiercache cache (run tiercache format first)",
                cache.display()
            )
        })?
        .newest;
    Ok(PathBuf::from(&sb.backing.path))
}

/// `tiercache check` of a device with `tiercache-store` metadata (an SSD
/// cache, or either SSD of a TICA pair), reported as `design`.
pub fn check_store(design: &'static str, path: &Path, json: bool) -> Result<()> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let r = tiercache_store::check(&f)?;
    super::CheckOutput {
        design,
        device: path,
        counts: serde_json::json!({
            "mapped_slots": r.mapped_slots,
            "dirty_slots": r.dirty_slots,
            "dirty_sub_blocks": r.dirty_sub_blocks,
            "state": r.state(),
        }),
        problems: &r.problems,
        warnings: &r.warnings,
        text: r.to_string(),
    }
    .print(json)
}

impl super::LiveDesign for SsdCache {
    fn name(&self) -> &'static str {
        "azor"
    }
    fn detect(&self, path: &Path) -> bool {
        std::fs::File::open(path)
            .ok()
            .is_some_and(|f| tiercache_store::Superblock::read(&f).is_ok())
    }
    fn validate(&self, a: &ServeArgs) -> Result<()> {
        if !matches!(a.io_engine.as_str(), "auto" | "uring" | "pool" | "blocking") {
            bail!(
                "--io-engine '{}' is not understood (allowed: auto, uring, pool, blocking)",
                a.io_engine
            );
        }
        if !matches!(a.fs_classify.as_str(), "auto" | "off") {
            bail!(
                "--fs-classify '{}' is not understood (allowed: auto, off)",
                a.fs_classify
            );
        }
        Ok(())
    }
    fn devices(&self, a: &ServeArgs) -> Result<Vec<(&'static str, PathBuf)>> {
        let backing = match &a.backing {
            Some(b) => b.clone(),
            None => recorded_backing(&a.cache)?,
        };
        Ok(vec![("backing device", backing)])
    }
    fn open(&self, a: &ServeArgs) -> Result<Arc<dyn tiercache_runtime::Design>> {
        let engine = io_engine(&a.io_engine)?;
        let opened = open_cache(&OpenOptions {
            cache: a.cache.clone(),
            backing: a.backing.clone(),
            emulate_hdd: a.emulate_hdd,
            direct: a.direct,
        })?;
        let cache = opened.cache;
        cache.start_background();
        if let Some(e) = engine {
            cache.set_io_engine(e);
        }
        if a.fs_classify == "auto" {
            cache.enable_classification();
        }
        eprintln!(
            "tiercache: opened {} (backing {}{}), recovered in {:.1} ms: {}",
            a.cache.display(),
            opened.backing_path.display(),
            if a.emulate_hdd { ", emulated HDD" } else { "" },
            opened.recovery.duration.as_secs_f64() * 1000.0,
            opened.recovery
        );
        Ok(Arc::new(tiercache_azor_live::design::SsdCache {
            cache,
            backing: opened.backing_path,
        }))
    }
    fn check(&self, path: &Path, json: bool) -> Result<()> {
        check_store(self.name(), path, json)
    }
    fn print_stats(&self, v: &serde_json::Value) {
        let l = &v["live"];
        println!("status            {}", v["status"].as_str().unwrap_or("?"));
        let p = &v["policy"];
        let slots = v["slots"].as_u64().unwrap_or(0).max(1);
        let dirty = v["dirty_lines"].as_u64().unwrap_or(0);
        println!(
            "policy            {} lines of {}, {}, {}, {}, admission {}, dirty target {:.0} % ({} lines)",
            v["slots"],
            format_bytes(p["line_size"].as_u64().unwrap_or(0)),
            p["assoc"].as_str().unwrap_or("?"),
            p["eviction"].as_str().unwrap_or("?"),
            p["write_policy"].as_str().unwrap_or("?"),
            p["admission"].as_str().unwrap_or("?"),
            p["dirty_target"].as_f64().unwrap_or(0.0) * 100.0,
            v["dirty_target_lines"]
        );
        println!(
            "occupancy         {:.1} % ({} of {} lines), dirty {:.1} % ({} lines)",
            v["occupancy"].as_f64().unwrap_or(0.0) * 100.0,
            v["occupied_lines"],
            v["slots"],
            dirty as f64 * 100.0 / slots as f64,
            dirty
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
        print_what_if(&v["what_if"]);
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
        super::print_device_errors(v);
        if let Some(line) = tiercache_runtime::remote::backing_line(&v["backing"]) {
            println!("{line}");
        }
        let dirtied = l["recovery_dirtied_lines"].as_u64().unwrap_or(0);
        if dirtied > 0 {
            println!(
                "recovery          {:.1} ms after an unclean shutdown: {dirtied} lines made dirty (written back by the cleaner)",
                l["recovery_ms"].as_f64().unwrap_or(0.0)
            );
        } else {
            println!(
                "recovery          {:.1} ms",
                l["recovery_ms"].as_f64().unwrap_or(0.0)
            );
        }
        if let Some(why) = v["cold_start"].as_str() {
            println!("started cold      {why}");
        }
    }
}

/// `stats`' what-if lines: "hit ratio if this cache were 2x: ...".
fn print_what_if(w: &serde_json::Value) {
    let Some(sizes) = w["sizes"].as_array() else {
        println!("what-if           off (tiercache set --what-if on)");
        return;
    };
    let pct = |x: &serde_json::Value| {
        x.as_f64()
            .map_or("-".to_string(), |h| format!("{:.1} %", h * 100.0))
    };
    let row = |key: &str| -> String {
        sizes
            .iter()
            .filter(|r| r["scale"] != 1.0)
            .map(|r| format!("{}x: {}", r["scale"].as_f64().unwrap_or(0.0), pct(&r[key])))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "what-if           hit ratio if this cache were {} ({}, estimated on {} requests)",
        row("hit_ratio"),
        w["eviction"].as_str().unwrap_or("?"),
        w["requests"]
    );
    println!("                  with LRU: {}", row("lru_hit_ratio"));
}
