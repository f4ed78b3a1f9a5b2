//! The live three-level (TICA) cache in `format`, `serve` and `stats`
//! (`--mode tica`); the logic is in `tiercache-tica-live`.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tiercache_sim::units::{format_bytes, parse_bytes};
use tiercache_tica_live as three;

use super::super::args::{ServeArgs, TicaFormatArgs};

/// `tiercache format --mode tica`; `None` for any other mode.
pub fn format(
    mode: &str,
    a: &TicaFormatArgs,
    backing: Option<&Path>,
    size: Option<&str>,
    max_size: Option<&str>,
    force: bool,
) -> Option<Result<()>> {
    if mode != "tica" {
        if a.ro_ssd.is_some()
            || a.wo_ssd.is_some()
            || a.dram_size.is_some()
            || a.timed_flush != "on"
        {
            return Some(Err(anyhow::anyhow!(
                "--ro-ssd, --wo-ssd, --dram-size and --timed-flush need --mode tica"
            )));
        }
        return None;
    }
    Some(format_tica(a, backing, size, max_size, force))
}

fn format_tica(
    a: &TicaFormatArgs,
    backing: Option<&Path>,
    size: Option<&str>,
    max_size: Option<&str>,
    force: bool,
) -> Result<()> {
    let (Some(ro), Some(wo), Some(backing)) = (&a.ro_ssd, &a.wo_ssd, backing) else {
        bail!("--mode tica needs --ro-ssd PATH --wo-ssd PATH --backing PATH --dram-size SIZE");
    };
    let Some(dram) = &a.dram_size else {
        bail!("--mode tica needs --dram-size SIZE (the DRAM level, e.g. 64MiB)");
    };
    let o = three::FormatOptions {
        ro_ssd: ro.clone(),
        wo_ssd: wo.clone(),
        backing: backing.to_path_buf(),
        dram_bytes: parse_bytes(dram).map_err(anyhow::Error::msg)?,
        policy: a.tica_policy.parse().map_err(anyhow::Error::msg)?,
        create_size: size
            .map(parse_bytes)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        force,
        max_size: max_size
            .map(|m| parse_bytes(m).map_err(|e| anyhow::anyhow!("--max-size {m}: {e}")))
            .transpose()?,
    };
    let timed = match a.timed_flush.as_str() {
        "on" => true,
        "off" => false,
        x => bail!("--timed-flush: '{x}' is not understood (allowed: on, off)"),
    };
    let r = three::format_with_flusher(&o, timed)?;
    println!(
        "formatted three-level cache {}: RO-SSD {} ({} pages), WO-SSD {} ({} pages), DRAM {}, policy {}, for backing {}",
        r.pair,
        ro.display(),
        r.ro_slots,
        wo.display(),
        r.wo_slots,
        format_bytes(o.dram_bytes),
        o.policy,
        backing.display()
    );
    // The policy caches as many pages as the smaller SSD holds.
    let pages = u64::from(r.ro_slots.min(r.wo_slots));
    super::warn_if_larger_than_backing("cache", pages * three::PAGE, "backing device", backing);
    Ok(())
}

/// Print `tiercache stats` of a three-level cache (the control answer `v`).
fn print_stats(v: &serde_json::Value) {
    if let Some(line) = tiercache_runtime::remote::backing_line(&v["backing"]) {
        println!("{line}");
    }
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let p = &v["policy"];
    println!("status            {}", v["status"].as_str().unwrap_or("?"));
    println!(
        "policy            tica-{} (now {}), DRAM {} pages, SSDs {} pages",
        p["tica_policy"].as_str().unwrap_or("?"),
        p["current_mode"].as_str().unwrap_or("?"),
        p["dram_pages"],
        p["ssd_pages"]
    );
    println!(
        "hit ratio         {:.2} % of {} page reads: DRAM {}, RO-SSD {}, WO-SSD {}, misses {}",
        f(&v["hit_ratio"]) * 100.0,
        v["read_pages"],
        v["dram_hits"],
        v["ro_ssd_hits"],
        v["wo_ssd_hits"],
        v["misses"]
    );
    for (name, key) in [("RO-SSD", "ro_ssd"), ("WO-SSD", "wo_ssd")] {
        let d = &v[key];
        println!(
            "{name}            {} of {} pages ({} dirty), {} page writes, {} page reads",
            d["used_pages"], d["slots"], d["dirty_pages"], d["page_writes"], d["page_reads"]
        );
    }
    println!(
        "DRAM              {} read pages, {} dirty pages (write partition {})",
        v["dram"]["read_pages"], v["dram"]["write_pages"], v["dram"]["write_cap"]
    );
    println!(
        "backing           {} page reads, {} page writes ({} writebacks)",
        v["backing_reads"], v["backing_writes"], v["writebacks"]
    );
    super::print_device_errors(v);
    let r = &v["recovery"];
    println!(
        "recovery          {:.1} ms, clean shutdown {}, {} WO-SSD / {} RO-SSD pages, {} written back",
        f(&r["duration_ms"]),
        r["clean_shutdown"],
        r["wo_pages"],
        r["ro_pages"],
        r["written_back"]
    );
    if let Some(why) = r["cold_start"].as_str() {
        println!("started cold      {why}");
    }
}

/// The TICA three-level cache.
pub struct Tica;

impl super::LiveDesign for Tica {
    fn name(&self) -> &'static str {
        "tica"
    }
    fn detect(&self, path: &Path) -> bool {
        three::detect(path).is_some()
    }
    fn validate(&self, a: &ServeArgs) -> Result<()> {
        if a.fs_classify != "off" {
            bail!("--fs-classify is not supported by the three-level cache");
        }
        Ok(())
    }
    fn devices(&self, a: &ServeArgs) -> Result<Vec<(&'static str, PathBuf)>> {
        let f = std::fs::File::open(&a.cache)?;
        let Some((sb, info)) = three::pair::read_info(&f) else {
            bail!(
                "{} is not an SSD of a three-level (TICA) cache",
                a.cache.display()
            );
        };
        let me = std::fs::canonicalize(&a.cache)?;
        let mut v = Vec::new();
        for (role, r) in [
            ("RO-SSD", three::Role::RoSsd),
            ("WO-SSD", three::Role::WoSsd),
        ] {
            let p = info.path_of(r);
            if std::fs::canonicalize(&p).ok().as_ref() != Some(&me) {
                v.push((role, p));
            }
        }
        v.push((
            "backing device",
            a.backing
                .clone()
                .unwrap_or_else(|| PathBuf::from(&sb.backing.path)),
        ));
        Ok(v)
    }
    fn open(&self, a: &ServeArgs) -> Result<Arc<dyn tiercache_runtime::Design>> {
        let cache = three::open(&three::OpenOptions {
            ssd: a.cache.clone(),
            backing: a.backing.clone(),
            direct: a.direct,
            emulate_hdd: a.emulate_hdd,
        })?;
        cache.start_background();
        let info = cache.info();
        let r = cache.stats_json();
        eprintln!(
            "tiercache: opened three-level cache: RO-SSD {}, WO-SSD {}, DRAM {} pages, policy {} (backing {}{}); \
             recovered in {:.1} ms: clean shutdown {}, {} WO-SSD / {} RO-SSD pages, {} written back",
            info.ro_ssd,
            info.wo_ssd,
            r["policy"]["dram_pages"],
            info.tica_policy,
            cache.backing_path().display(),
            if a.emulate_hdd { ", emulated HDD" } else { "" },
            r["recovery"]["duration_ms"].as_f64().unwrap_or(0.0),
            r["recovery"]["clean_shutdown"],
            r["recovery"]["wo_pages"],
            r["recovery"]["ro_pages"],
            r["recovery"]["written_back"]
        );
        Ok(Arc::new(three::Tica::with_threads(
            cache,
            tiercache_runtime::SyncWorkers::default_threads(),
        )?))
    }
    fn check(&self, path: &Path, json: bool) -> Result<()> {
        // Each SSD of the pair keeps its own `tiercache-store` metadata.
        super::ssd_cache::check_store(self.name(), path, json)
    }
    fn print_stats(&self, v: &serde_json::Value) {
        print_stats(v)
    }
}
