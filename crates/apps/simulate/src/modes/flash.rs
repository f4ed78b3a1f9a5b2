//! `tiercache sim --mode ssd|ssc|ssc-v`: FlashTier flash devices. The cache
//! size is the flash capacity (Table IV geometry, plane size scaled); the
//! write policy picks the manager: write-back or write-through, FlashTier's
//! over `ssc`/`ssc-v`, the native (host map + LRU) one over `ssd`. The JSON
//! adds an `ftl` object (write amplification, erases, wear, copies, silent
//! evictions, merges), `device_memory_bytes` and `host_memory_bytes`.

use super::{bad, json_row, trace_input, ModeOutput};
use crate::args::SimArgs;
use anyhow::{Context, Result};
use std::fmt::Write;
use tiercache_flashtier_policy::logsim::{self, LogSimConfig, LogSimReport};
use tiercache_flashtier_policy::{
    run as simulate, DeviceConfig, DeviceKind, FlashReport, FlashSimConfig, FtlKind, GcPolicy,
    ManagerKind,
};
use tiercache_sim::units::{parse_bytes, parse_size, SizeSpec};

/// Run `tiercache sim` in a flash mode.
pub fn run(a: &SimArgs) -> Result<ModeOutput> {
    let kind: DeviceKind = a.mode.parse().map_err(|e| bad("mode", e))?;
    if a.ftl != "log" {
        crate::modes::no_compress(a)?;
    }
    if a.ftl == "log" {
        if kind != DeviceKind::Ssc {
            return Err(bad(
                "ftl",
                format!("log applies to --mode ssc only (--mode {})", a.mode),
            ));
        }
        return run_log(a);
    }
    let ftl: FtlKind = a
        .ftl
        .parse()
        .map_err(|e| bad("ftl", format!("{e}, or log with --mode ssc")))?;
    let (format, ropts) = trace_input(a)?;
    if a.cache_size.is_empty() {
        return Err(bad(
            "cache_size",
            format!("required by --mode {} (the flash capacity: a SIZE such as 64MiB, or a percentage of the footprint such as 10%)", a.mode),
        ));
    }
    for l in &a.policy.line_size {
        let b = parse_bytes(l.trim()).map_err(|e| bad("line_size", e))?;
        if b != 4096 {
            return Err(bad(
                "line_size",
                format!("{l}: flash modes cache 4 KiB flash pages (allowed: 4KiB)"),
            ));
        }
    }
    let mut rows: Vec<(String, String, FlashReport)> = Vec::new();
    for size in &a.cache_size {
        let spec = parse_size(size.trim()).map_err(|e| bad("cache_size", e))?;
        let bytes = match spec {
            SizeSpec::Percent(_) => {
                let r = tiercache_trace::open(&a.trace, format, &ropts)?;
                let st = tiercache_trace::stats::trace_stats(r, 4096)?;
                spec.bytes(4096, st.footprint_bytes)
            }
            _ => spec.bytes(4096, 0),
        };
        for wp in &a.policy.write_policy {
            let manager: ManagerKind = wp.trim().parse().map_err(|e| bad("write_policy", e))?;
            let mut device =
                DeviceConfig::new(kind, bytes).with_context(|| format!("flash capacity {size}"))?;
            device.ftl = ftl;
            let cfg = FlashSimConfig {
                device,
                manager,
                dirty_target: a.policy.dirty_target,
                warmup_requests: 0,
            };
            let mut rec = tiercache_trace::open(&a.trace, format, &ropts)?;
            let mut report = simulate(rec.by_ref(), &cfg)?;
            report.skipped_records = rec.skipped();
            rows.push((size.trim().to_string(), wp.trim().to_string(), report));
        }
    }
    let json = rows
        .iter()
        .map(|(_, _, r)| json_row(&a.trace, r))
        .collect::<Result<Vec<_>>>()?;
    Ok(ModeOutput {
        rows: json,
        text: text_report(a, &rows)?,
    })
}

/// `--mode ssc --ftl log`: the live log-structured store's policy
/// (`tiercache_flashtier_policy::logsim`), one row per cache size and write policy.
fn run_log(a: &SimArgs) -> Result<ModeOutput> {
    let (format, ropts) = trace_input(a)?;
    if a.cache_size.is_empty() {
        return Err(bad(
            "cache_size",
            "required by --ftl log (the data area: segments x segment size, e.g. 64MiB)",
        ));
    }
    let seg_bytes = parse_bytes(a.segment_size.trim()).map_err(|e| bad("segment_size", e))?;
    tiercache_flashtier_policy::logstore::data_blocks(seg_bytes)
        .map_err(|e| bad("segment_size", e))?;
    let victim: GcPolicy = a.victim.trim().parse().map_err(|e| bad("victim", e))?;
    let compress = crate::compress::settings(a)?;
    let mut rows: Vec<(String, LogSimReport)> = Vec::new();
    for size in &a.cache_size {
        let spec = parse_size(size.trim()).map_err(|e| bad("cache_size", e))?;
        let bytes = match spec {
            SizeSpec::Percent(_) => {
                let r = tiercache_trace::open(&a.trace, format, &ropts)?;
                let st = tiercache_trace::stats::trace_stats(r, 4096)?;
                spec.bytes(4096, st.footprint_bytes)
            }
            _ => spec.bytes(4096, 0),
        };
        let segments = u32::try_from(bytes / seg_bytes)
            .map_err(|_| bad("cache_size", format!("{size}: too many segments")))?;
        for wp in &a.policy.write_policy {
            let manager: ManagerKind = wp.trim().parse().map_err(|e| bad("write_policy", e))?;
            let cfg = LogSimConfig {
                segments,
                seg_bytes,
                manager,
                dirty_target: a.policy.dirty_target,
                victim,
                compress: compress.clone(),
            };
            let mut rec = tiercache_trace::open(&a.trace, format, &ropts)?;
            let mut report = logsim::run(rec.by_ref(), &cfg)
                .map_err(|e| bad("cache_size", format!("{size}: {e}")))?;
            report.skipped_records = rec.skipped();
            rows.push((size.trim().to_string(), report));
        }
    }
    let json = rows
        .iter()
        .map(|(_, r)| json_row(&a.trace, r))
        .collect::<Result<Vec<_>>>()?;
    let mut text = String::new();
    writeln!(text, "trace {}", a.trace.display())?;
    for (size, r) in &rows {
        let c = &r.counters;
        writeln!(
            text,
            "ssc log {size} ({} segments of {} slots), {}, victim {}: {} requests, hit ratio {:.2} %",
            r.segments,
            r.data_blocks,
            r.write_policy,
            r.victim,
            r.requests,
            r.hit_ratio * 100.0
        )?;
        writeln!(
            text,
            "  appended {} blocks ({} fills), silent evictions {}, dirty moved {}, written back {} (+{} by segment cleaning), segments cleaned {}",
            c.appended_blocks,
            c.fills,
            c.silent_evictions,
            c.moved_dirty,
            c.written_back,
            c.cleaning_written_back,
            c.segments_cleaned
        )?;
        if let Some(z) = &r.compression {
            writeln!(
                text,
                "  compressed {} (model {}: mean {:.2} units of 512 B): effective capacity {:.2}x ({:.0} blocks vs {} uncompressed), held {:.2}x at the end, stored ratio {:.2}",
                z.codec,
                z.model,
                z.mean_units,
                z.capacity_factor,
                z.capacity_blocks,
                z.plain_slots,
                z.held_factor,
                z.ratio
            )?;
            writeln!(
                text,
                "  CPU model: {} compressions x {} us + {} decompressions x {} us = {:.3} s, {:.2} us per request",
                z.compressions,
                z.compress_us_per_block,
                z.decompressions,
                z.decompress_us_per_block,
                z.cpu_seconds,
                z.cpu_us_per_request
            )?;
        }
    }
    Ok(ModeOutput { rows: json, text })
}

/// The report printed without `--json`.
fn text_report(a: &SimArgs, rows: &[(String, String, FlashReport)]) -> Result<String> {
    let mut out = String::new();
    writeln!(out, "trace {}", a.trace.display())?;
    for (size, wp, r) in rows {
        writeln!(
            out,
            "{} {} flash {size} ({} blocks), {wp}: {} block accesses, hit ratio {:.2} %, miss rate {:.2} %",
            r.mode,
            r.ftl_kind,
            r.flash_blocks,
            r.block_accesses,
            r.hit_ratio * 100.0,
            r.miss_rate * 100.0
        )?;
        let f = &r.ftl;
        writeln!(
            out,
            "  write amplification {:.3} ({:.3} with mapping log/checkpoints), erases {}, max wear difference {}, GC copies {}, silent evictions {}",
            f.write_amplification,
            f.write_amplification_with_metadata,
            f.erases,
            f.max_wear_difference,
            f.gc_page_copies,
            f.silent_evictions
        )?;
        writeln!(
            out,
            "  merges: {} full, {} partial, {} switch; GC time {:.2} s",
            f.full_merges, f.partial_merges, f.switch_merges, f.gc_time_s
        )?;
        writeln!(
            out,
            "  memory: device {} B ({:.2} B/block), host {} B ({:.2} B/block); sparse map {:.2} B/block vs dense over the disk range {:.2} B/block",
            r.device_memory_bytes,
            r.device_bytes_per_block,
            r.host_memory_bytes,
            r.host_bytes_per_block,
            r.map_comparison.sparse_bytes_per_block,
            r.map_comparison.dense_disk_range_bytes_per_block
        )?;
        if let Some(p) = &r.persistence {
            writeln!(
            out,
                "  durability: {} log records, {} sync and {} group commits, {} log pages, {} checkpoints ({} pages); recovery estimate {:.1} ms",
                p.log_records,
                p.sync_commits,
                p.group_commits,
                p.log_pages,
                p.checkpoints,
                p.checkpoint_pages,
                p.recovery_ms
            )?;
        }
    }
    Ok(out)
}
