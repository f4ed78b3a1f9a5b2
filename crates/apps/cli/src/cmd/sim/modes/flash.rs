//! `tiercache sim --mode ssd|ssc|ssc-v`: FlashTier flash devices. The cache
//! size is the flash capacity (Table IV geometry, plane size scaled); the
//! write policy picks the manager: write-back or write-through, FlashTier's
//! over `ssc`/`ssc-v`, the native (host map + LRU) one over `ssd`. The JSON
//! adds an `ftl` object (write amplification, erases, wear, copies, silent
//! evictions, merges), `device_memory_bytes` and `host_memory_bytes`.

use crate::cmd::sim::args::SimArgs;
use anyhow::{bail, Context, Result};
use tiercache_flash::{
    run as simulate, DeviceConfig, DeviceKind, FlashReport, FlashSimConfig, ManagerKind,
};
use tiercache_sim::units::{parse_bytes, parse_size, SizeSpec};
use tiercache_trace::{Format, ReadOptions};

/// Run `tiercache sim` in a flash mode.
pub fn run(a: &SimArgs) -> Result<()> {
    let kind: DeviceKind = a.mode.parse().map_err(anyhow::Error::msg)?;
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
    for l in &a.line_size {
        let b = parse_bytes(l.trim()).map_err(anyhow::Error::msg)?;
        if b != 4096 {
            bail!("--line-size {l}: flash modes cache 4 KiB flash pages (allowed: 4KiB)");
        }
    }
    let mut rows: Vec<(String, String, FlashReport)> = Vec::new();
    for size in &a.cache_size {
        let spec = parse_size(size.trim()).map_err(anyhow::Error::msg)?;
        let bytes = match spec {
            SizeSpec::Percent(_) => {
                let r = tiercache_trace::open(&a.trace, format, &ropts)?;
                let st = tiercache_trace::stats::trace_stats(r, 4096)?;
                spec.bytes(4096, st.footprint_bytes)
            }
            _ => spec.bytes(4096, 0),
        };
        for wp in &a.write_policy {
            let manager: ManagerKind = wp.trim().parse().map_err(anyhow::Error::msg)?;
            let cfg = FlashSimConfig {
                device: DeviceConfig::new(kind, bytes)
                    .with_context(|| format!("flash capacity {size}"))?,
                manager,
                dirty_target: a.dirty_target,
                warmup_requests: 0,
            };
            let mut rec = tiercache_trace::open(&a.trace, format, &ropts)?;
            let mut report = simulate(rec.by_ref(), &cfg)?;
            report.skipped_records = rec.skipped();
            rows.push((size.trim().to_string(), wp.trim().to_string(), report));
        }
    }
    if a.json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|(_, _, r)| {
                let mut v = serde_json::to_value(r).expect("report serializes");
                v["trace"] = serde_json::Value::String(a.trace.display().to_string());
                v
            })
            .collect();
        if v.len() == 1 {
            println!("{}", serde_json::to_string_pretty(&v[0])?);
        } else {
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        return Ok(());
    }
    println!("trace {}", a.trace.display());
    for (size, wp, r) in &rows {
        println!(
            "{} {} flash {size} ({} blocks), {wp}: {} block accesses, hit ratio {:.2} %, miss rate {:.2} %",
            r.mode,
            r.ftl_kind,
            r.flash_blocks,
            r.block_accesses,
            r.hit_ratio * 100.0,
            r.miss_rate * 100.0
        );
        let f = &r.ftl;
        println!(
            "  write amplification {:.3} ({:.3} with mapping log/checkpoints), erases {}, max wear difference {}, GC copies {}, silent evictions {}",
            f.write_amplification,
            f.write_amplification_with_metadata,
            f.erases,
            f.max_wear_difference,
            f.gc_page_copies,
            f.silent_evictions
        );
        println!(
            "  merges: {} full, {} partial, {} switch; GC time {:.2} s",
            f.full_merges, f.partial_merges, f.switch_merges, f.gc_time_s
        );
        println!(
            "  memory: device {} B ({:.2} B/block), host {} B ({:.2} B/block); sparse map {:.2} B/block vs dense over the disk range {:.2} B/block",
            r.device_memory_bytes,
            r.device_bytes_per_block,
            r.host_memory_bytes,
            r.host_bytes_per_block,
            r.map_comparison.sparse_bytes_per_block,
            r.map_comparison.dense_disk_range_bytes_per_block
        );
        if let Some(p) = &r.persistence {
            println!(
                "  durability: {} log records, {} sync and {} group commits, {} log pages, {} checkpoints ({} pages); recovery estimate {:.1} ms",
                p.log_records,
                p.sync_commits,
                p.group_commits,
                p.log_pages,
                p.checkpoints,
                p.checkpoint_pages,
                p.recovery_ms
            );
        }
    }
    Ok(())
}
