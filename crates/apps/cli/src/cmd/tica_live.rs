//! The live three-level (TICA) cache in `format`, `serve` and `stats`
//! (`--mode tica`); the logic is in `tiercache-three-level`.

use anyhow::{bail, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use tiercache_sim::units::{format_bytes, parse_bytes};
use tiercache_three_level as three;

/// `format` options of a three-level cache.
#[derive(Args, Debug, Clone)]
pub struct TicaFormatArgs {
    /// Three-level cache (--mode tica): the read-optimized SSD (file or block device).
    #[arg(long)]
    pub ro_ssd: Option<PathBuf>,
    /// Three-level cache: the write-optimized SSD (file or block device).
    #[arg(long)]
    pub wo_ssd: Option<PathBuf>,
    /// Three-level cache: size of the DRAM level (e.g. 64MiB).
    #[arg(long)]
    pub dram_size: Option<String>,
    /// Three-level cache: TICA policy: adaptive, ef or wed.
    #[arg(long, default_value = "adaptive")]
    pub tica_policy: String,
}

/// `tiercache format --mode tica`; `None` for any other mode.
pub fn format(
    mode: &str,
    a: &TicaFormatArgs,
    backing: Option<&Path>,
    size: Option<&str>,
    force: bool,
) -> Option<Result<()>> {
    if mode != "tica" {
        if a.ro_ssd.is_some() || a.wo_ssd.is_some() || a.dram_size.is_some() {
            return Some(Err(anyhow::anyhow!(
                "--ro-ssd, --wo-ssd and --dram-size need --mode tica"
            )));
        }
        return None;
    }
    Some(format_tica(a, backing, size, force))
}

fn format_tica(
    a: &TicaFormatArgs,
    backing: Option<&Path>,
    size: Option<&str>,
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
    };
    let r = three::format(&o)?;
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
    Ok(())
}

/// Whether `serve --cache PATH` names an SSD of a three-level cache.
pub fn is_tica(cache: &Path) -> bool {
    three::detect(cache).is_some()
}

/// `tiercache serve` on a three-level cache.
pub async fn serve(
    a: super::live::ServeArgs,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    if a.emulate_hdd || a.no_cache || a.fs_classify != "off" {
        bail!("--emulate-hdd, --no-cache and --fs-classify are not supported by the three-level cache");
    }
    let o = three::ServeOptions {
        ssd: a.cache.clone(),
        backing: a.backing.clone(),
        listen: a.listen.clone(),
        export: a.export.clone(),
        read_only: a.read_only,
        control: a.control.clone(),
        direct: a.direct,
    };
    three::serve(o, ready).await
}

/// Print `tiercache stats` of a three-level cache (the control answer `v`).
pub fn print_stats(v: &serde_json::Value) {
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
    let r = &v["recovery"];
    println!(
        "recovery          {:.1} ms, clean shutdown {}, {} WO-SSD / {} RO-SSD pages, {} written back",
        f(&r["duration_ms"]),
        r["clean_shutdown"],
        r["wo_pages"],
        r["ro_pages"],
        r["written_back"]
    );
}
