//! The live log-structured cache in `format` (`--layout log-structured`),
//! `serve` and `stats`; the logic is in `tiercache-flashtier-live`.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::super::args::{FormatArgs, ServeArgs};
use tiercache_flashtier_live as ls;
use tiercache_sim::units::{format_bytes, parse_bytes};

/// `tiercache format --layout log-structured`; `None` for the in-place layout.
pub fn format(a: &FormatArgs) -> Option<Result<()>> {
    match a.ls.layout.as_str() {
        "in-place" if a.ls.compress != "off" => Some(Err(anyhow::anyhow!(
            "--compress needs --layout log-structured (compressed blocks are variable-size records in its log)"
        ))),
        "in-place" => None,
        "log-structured" => Some(format_ls(a)),
        x => Some(Err(anyhow::anyhow!(
            "--layout '{x}' is not understood (allowed: in-place, log-structured)"
        ))),
    }
}

fn format_ls(a: &FormatArgs) -> Result<()> {
    let compress: ls::Codec = a.ls.compress.parse().map_err(anyhow::Error::msg)?;
    let (Some(cache), Some(backing)) = (&a.cache, &a.backing) else {
        bail!("--layout log-structured needs --cache PATH and --backing PATH");
    };
    if a.tier.mode != "cache" {
        bail!("--layout log-structured formats a cache (--mode cache)");
    }
    // The in-place layout's policy options have no meaning here: the store
    // caches 4 KiB blocks in a unified map and evicts by segment cleaning.
    // Refuse them rather than ignore them silently.
    let p = a.policy.single()?;
    let ignored = [
        (
            "--line-size",
            p.line_size != "4KiB" && p.line_size != "4096B",
        ),
        ("--sub-block", p.sub_block.is_some()),
        ("--assoc", p.assoc != "full"),
        ("--eviction", p.eviction != "lru"),
        ("--no-write-allocate", p.no_write_allocate),
        ("--admission", p.admission != "always"),
    ];
    let given: Vec<&str> = ignored
        .iter()
        .filter(|(_, g)| *g)
        .map(|(n, _)| *n)
        .collect();
    if !given.is_empty() {
        bail!(
            "--layout log-structured does not take {} (it caches 4 KiB blocks in one sparse map and \
             evicts by segment cleaning; it takes --write-policy write-back|write-through, \
             --dirty-target, --segment-size and --compress)",
            given.join(", ")
        );
    }
    let o = ls::FormatOptions {
        cache: cache.clone(),
        backing: backing.clone(),
        create_size: a
            .size
            .as_deref()
            .map(parse_bytes)
            .transpose()
            .map_err(anyhow::Error::msg)?,
        write_policy: a
            .policy
            .single()?
            .write_policy
            .parse()
            .map_err(anyhow::Error::msg)?,
        dirty_target: a.policy.dirty_target,
        seg_bytes: parse_bytes(&a.ls.segment_size).map_err(anyhow::Error::msg)?,
        force: a.force,
        compress,
        max_size: a
            .max_size
            .as_deref()
            .map(parse_bytes)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--max-size: {e}"))?,
    };
    let sb = ls::format(&o)?;
    let data = u64::from(sb.nsegs) * u64::from(sb.geometry().phys_blocks()) * ls::BLOCK;
    if sb.compress.is_on() {
        println!(
            "formatted compressed log-structured cache {}: {} segments of {} ({} of data area, up to {} blocks of 4 KiB when they compress, {}), {}, for backing {}",
            cache.display(),
            sb.nsegs,
            format_bytes(sb.seg_bytes),
            format_bytes(data),
            sb.slots(),
            sb.compress,
            sb.write_policy,
            backing.display()
        );
    } else {
        println!(
            "formatted log-structured cache {}: {} segments of {} ({} blocks of 4 KiB, {} of cache), {}, for backing {}",
            cache.display(),
            sb.nsegs,
            format_bytes(sb.seg_bytes),
            sb.slots(),
            format_bytes(sb.slots() * ls::BLOCK),
            sb.write_policy,
            backing.display()
        );
    }
    if sb.max_nsegs() > sb.nsegs {
        println!(
            "tiercache resize can grow it to {} segments (a cache device of {})",
            sb.max_nsegs(),
            format_bytes(sb.device_bytes(sb.max_nsegs()))
        );
    }
    super::warn_if_larger_than_backing("cache", data, "backing device", backing);
    Ok(())
}

/// Print `tiercache stats` of a log-structured cache (the control answer `v`).
fn print_stats(v: &serde_json::Value) {
    if let Some(line) = tiercache_runtime::remote::backing_line(&v["backing"]) {
        println!("{line}");
    }
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let (s, c, m, r) = (&v["segments"], &v["cleaning"], &v["map"], &v["recovery"]);
    println!("status            {}", v["status"].as_str().unwrap_or("?"));
    println!(
        "layout            log-structured, {}, {} segments of {} KiB",
        v["write_policy"].as_str().unwrap_or("?"),
        s["total"],
        s["bytes"].as_u64().unwrap_or(0) / 1024
    );
    println!(
        "occupancy         {:.1} % ({} of {} blocks), dirty {}",
        f(&v["occupancy"]) * 100.0,
        v["mapped_blocks"],
        v["slots"],
        v["dirty_blocks"]
    );
    println!(
        "hit ratio         {:.2} % (hits {}, misses {}; reads {} / {}, writes {} / {})",
        f(&v["hit_ratio"]) * 100.0,
        v["hits"],
        v["misses"],
        v["read_hits"],
        v["read_misses"],
        v["write_hits"],
        v["write_misses"]
    );
    println!(
        "segments          {} free, {} open, {} sealed; {} opened",
        s["free"], s["open"], s["sealed"], s["opened"]
    );
    println!(
        "cleaning          {} segments: {} silent evictions, {} dirty blocks moved, {} written back; {} written back at the dirty target",
        c["segments_cleaned"],
        c["silent_evictions"],
        c["moved_dirty_blocks"],
        c["cleaning_written_back"],
        c["written_back"]
    );
    let z = &v["compression"];
    if z["codec"].as_str().is_some_and(|c| c != "off") {
        println!(
            "compression       {}: ratio {:.2} ({} cached in {}); {} blocks stored compressed, {} raw, {} checksum errors",
            z["codec"].as_str().unwrap_or("?"),
            f(&z["ratio"]),
            format_bytes(z["cached_bytes"].as_u64().unwrap_or(0)),
            format_bytes(z["cached_stored_bytes"].as_u64().unwrap_or(0)),
            z["stored_compressed_blocks"],
            z["stored_raw_blocks"],
            z["checksum_errors"]
        );
    }
    println!(
        "map               {:.2} B per cached block ({:.2} B per block when full, {} B entries)",
        f(&m["bytes_per_cached_block"]),
        f(&m["bytes_per_block_full"]),
        m["entry_bytes"]
    );
    super::print_device_errors(v);
    println!(
        "recovery          {:.1} ms, clean shutdown {}, {} blocks ({} dirty), {} segments replayed",
        f(&r["ms"]),
        r["clean_shutdown"],
        r["mapped_blocks"],
        r["dirty_blocks"],
        r["replayed_segments"]
    );
    if let Some(why) = r["cold_start"].as_str() {
        println!("started cold      {why}");
    }
}

/// `tiercache check` on a stopped log-structured cache.
fn check(cache: &Path, json: bool) -> Result<()> {
    let r = ls::check(cache)?;
    super::CheckOutput {
        design: super::LiveDesign::name(&LogStructured),
        device: cache,
        counts: serde_json::json!({
            "mapped_blocks": r.mapped_blocks,
            "dirty_blocks": r.dirty_blocks,
            "clean_shutdown": r.clean_shutdown,
            "detached": r.detached,
            "state": match (r.clean_shutdown, r.detached) {
                (true, true) => "detached",
                (true, false) => "clean shutdown",
                (false, _) => "open or crashed",
            },
        }),
        problems: &r.problems,
        warnings: &[],
        text: r.to_string(),
    }
    .print(json)
}

/// The log-structured cache (FlashTier's design on a commodity SSD).
pub struct LogStructured;

impl super::LiveDesign for LogStructured {
    fn name(&self) -> &'static str {
        "flashtier"
    }
    fn detect(&self, path: &Path) -> bool {
        ls::detect(path)
    }
    fn validate(&self, a: &ServeArgs) -> Result<()> {
        if a.fs_classify != "off" {
            bail!("--fs-classify is not supported by the log-structured cache");
        }
        Ok(())
    }
    fn devices(&self, a: &ServeArgs) -> Result<Vec<(&'static str, PathBuf)>> {
        let backing = match &a.backing {
            Some(b) => b.clone(),
            None => {
                let dev = tiercache_io::FileDev::open(&a.cache, Default::default())?;
                let Some(sb) = ls::Superblock::read(&dev) else {
                    bail!("{} holds no log-structured cache", a.cache.display());
                };
                PathBuf::from(&sb.backing_path)
            }
        };
        Ok(vec![("backing device", backing)])
    }
    fn open(&self, a: &ServeArgs) -> Result<Arc<dyn tiercache_runtime::Design>> {
        let cache = ls::open(&ls::OpenOptions {
            cache: a.cache.clone(),
            backing: a.backing.clone(),
            direct: a.direct,
            emulate_hdd: a.emulate_hdd,
        })?;
        let r = cache.recovery();
        eprintln!(
            "tiercache: opened log-structured {} cache {} (backing {}{}); recovered in {:.1} ms: {} blocks mapped ({} dirty), \
             {} from the checkpoint, {} segments replayed, {} clean blocks dropped, clean shutdown {}",
            cache.write_policy(),
            a.cache.display(),
            cache.backing_path().display(),
            if a.emulate_hdd { ", emulated HDD" } else { "" },
            r.duration.as_secs_f64() * 1000.0,
            r.mapped_blocks,
            r.dirty_blocks,
            r.checkpoint_entries,
            r.replayed_segments,
            r.dropped_clean,
            r.clean_shutdown
        );
        cache.set_fast_path(ls::cache::fast_path_wanted());
        if ls::LogCache::cleaner_wanted() {
            cache.start_cleaner()?;
        }
        Ok(Arc::new(ls::LogStructured::with_threads(
            cache,
            tiercache_runtime::SyncWorkers::default_threads(),
        )?))
    }
    fn check(&self, path: &Path, json: bool) -> Result<()> {
        check(path, json)
    }
    fn print_stats(&self, v: &serde_json::Value) {
        print_stats(v)
    }
}
