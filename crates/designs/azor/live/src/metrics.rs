//! The SSD cache's `/metrics` (`serve --metrics`), mapped from its `stats`
//! JSON (see [`crate::design::stats_json`]) plus the device latency
//! histograms `stats` only summarises:
//!
//! | metric | from `stats` |
//! |---|---|
//! | `tiercache_hits_total{op="read",class="metadata"}` | `metadata_hits` |
//! | `tiercache_hits_total{op="read",class="data"}` | `read_hits - metadata_hits` |
//! | `tiercache_hits_total{op="write",class="unclassified"}` | `write_hits` |
//! | `tiercache_misses_total{...}` | the same with `*_misses` |
//! | `tiercache_dirty_lines`, `tiercache_dirty_target_lines` | `dirty_lines`, `dirty_target_lines` |
//! | `tiercache_dirty_target_ratio` | `policy.dirty_target` |
//! | `tiercache_cleaned_lines_total{path}` | `live.{idle,pressure,forced}_cleaned_lines`; `paced` is the rest of `live.cleaned_lines` |
//! | `tiercache_bypasses_total{reason="admission"}` | `admission_rejects` |
//! | `tiercache_evictions_total{victim="clean"\|"dirty"}` | `evictions - dirty_evictions`, `dirty_evictions` |
//! | `tiercache_device_errors_total{device}` | `live.cache_errors`, `live.backing_errors` |
//! | `tiercache_device_latency_seconds{device}` | the live cache's device latency histograms |
//! | `tiercache_what_if_hit_ratio{scale,method="minisim"\|"lru"}` | `what_if.sizes[].hit_ratio`, `lru_hit_ratio` |
//! | `tiercache_what_if_memory_bytes` | `what_if.memory_bytes` |
//! | `tiercache_backing_connected`, `tiercache_backing_state{state}`, `tiercache_backing_{reconnects,timeouts}_total` | `backing` (see `tiercache_runtime::remote`) |
//!
//! Reads are classified (metadata or data) only with `serve --fs-classify
//! auto`; otherwise every read is `data`. Writes are not classified.

use serde_json::Value;
use tiercache_azor_policy::Dev;
use tiercache_runtime::MetricSet;

use crate::live::LiveCache;

fn n(v: &Value, ptr: &str) -> u64 {
    v.pointer(ptr).and_then(Value::as_u64).unwrap_or(0)
}

/// Fill `m` from `stats` (this scrape's `stats` answer) and `cache`.
pub fn fill(cache: &LiveCache, stats: &Value, m: &mut MetricSet) {
    hits_and_misses(stats, m);
    what_if(stats, m);
    dirty_and_cleaning(stats, m);
    let p = &stats["policy"];
    let s = |k: &str| p[k].as_str().unwrap_or("?").to_string();
    let (wp, ev, ad) = (s("write_policy"), s("eviction"), s("admission"));
    m.gauge(
        "policy_info",
        "The policy in force (always 1): write policy, eviction, admission.",
        &[("write_policy", &wp), ("eviction", &ev), ("admission", &ad)],
        1.0,
    );
    m.gauge(
        "degraded",
        "1 when the cache device is failing and new data is not cached.",
        &[],
        (stats["status"] != "ok") as u8 as f64,
    );
    m.gauge_at(
        "slots",
        "Cache lines the cache device holds.",
        &[],
        stats,
        "/slots",
    );
    m.gauge_at(
        "occupied_lines",
        "Cache lines holding data.",
        &[],
        stats,
        "/occupied_lines",
    );
    m.counter_at(
        "fills",
        "Lines that received fill data (read misses, write allocations).",
        &[],
        stats,
        "/fills",
    );
    m.counter_at(
        "writebacks",
        "Lines whose dirty data was written to the backing device.",
        &[],
        stats,
        "/writebacks",
    );
    m.counter(
        "bypasses",
        "Allocations refused, by reason (admission: the admission policy, a sequential stream, or a failing cache device).",
        &[("reason", "admission")],
        n(stats, "/admission_rejects"),
    );
    let (ev, dev) = (n(stats, "/evictions"), n(stats, "/dirty_evictions"));
    let help = "Lines evicted to make room, by the victim's state.";
    m.counter(
        "evictions",
        help,
        &[("victim", "clean")],
        ev.saturating_sub(dev),
    );
    m.counter("evictions", help, &[("victim", "dirty")], dev);
    let help = "Device I/O errors, by device.";
    m.counter(
        "device_errors",
        help,
        &[("device", "cache")],
        n(stats, "/live/cache_errors"),
    );
    m.counter(
        "device_errors",
        help,
        &[("device", "backing")],
        n(stats, "/live/backing_errors"),
    );
    let help = "Latency of the I/O the cache issues to each device, in seconds.";
    m.histogram(
        "device_latency_seconds",
        help,
        &[("device", "cache")],
        cache.stats.device_histogram(Dev::Cache),
    );
    m.histogram(
        "device_latency_seconds",
        help,
        &[("device", "backing")],
        cache.stats.device_histogram(Dev::Backing),
    );
    m.histogram(
        "metadata_commit_duration_seconds",
        "Latency of metadata log commits, in seconds.",
        &[],
        cache.stats.commit_histogram(),
    );
    m.gauge(
        "recovery_seconds",
        "Time the last open took to recover the metadata, in seconds.",
        &[],
        stats["live"]["recovery_ms"].as_f64().unwrap_or(0.0) / 1000.0,
    );
}

/// The hit ratio at other sizes (`stats`' `what_if`), while it is on.
fn what_if(stats: &Value, m: &mut MetricSet) {
    let w = &stats["what_if"];
    let Some(sizes) = w["sizes"].as_array() else {
        return;
    };
    for r in sizes {
        let scale = r["scale"].as_f64().unwrap_or(0.0).to_string();
        for (method, key) in [("minisim", "hit_ratio"), ("lru", "lru_hit_ratio")] {
            if let Some(h) = r[key].as_f64() {
                m.gauge(
                    "what_if_hit_ratio",
                    "Estimated hit ratio of this cache at SCALE times its size: its own policy (minisim) or LRU (SHARDS).",
                    &[("scale", &scale), ("method", method)],
                    h,
                );
            }
        }
    }
    m.gauge_at(
        "what_if_memory_bytes",
        "Memory of the what-if estimates (SHARDS sample and miniature caches).",
        &[],
        stats,
        "/what_if/memory_bytes",
    );
}

fn hits_and_misses(stats: &Value, m: &mut MetricSet) {
    let (rh, rm) = (n(stats, "/read_hits"), n(stats, "/read_misses"));
    let (mh, mm) = (n(stats, "/metadata_hits"), n(stats, "/metadata_misses"));
    for (name, help, read, meta, write) in [
        (
            "hits",
            "Cache line accesses whose data was all cached, by operation and class.",
            rh,
            mh,
            n(stats, "/write_hits"),
        ),
        (
            "misses",
            "Cache line accesses that needed the backing device, by operation and class.",
            rm,
            mm,
            n(stats, "/write_misses"),
        ),
    ] {
        m.counter(name, help, &[("op", "read"), ("class", "metadata")], meta);
        m.counter(
            name,
            help,
            &[("op", "read"), ("class", "data")],
            read.saturating_sub(meta),
        );
        m.counter(
            name,
            help,
            &[("op", "write"), ("class", "unclassified")],
            write,
        );
    }
}

fn dirty_and_cleaning(stats: &Value, m: &mut MetricSet) {
    m.gauge_at(
        "dirty_lines",
        "Cache lines holding data the backing device lacks.",
        &[],
        stats,
        "/dirty_lines",
    );
    m.gauge_at(
        "dirty_target_lines",
        "Dirty lines above which write-back cleaning runs.",
        &[],
        stats,
        "/dirty_target_lines",
    );
    m.gauge_at(
        "dirty_target_ratio",
        "The dirty target as a share of the lines.",
        &[],
        stats,
        "/policy/dirty_target",
    );
    let l = |k: &str| n(stats, &format!("/live/{k}"));
    let (idle, pressure, forced) = (
        l("idle_cleaned_lines"),
        l("pressure_cleaned_lines"),
        l("forced_cleaned_lines"),
    );
    let paced = l("cleaned_lines").saturating_sub(idle + pressure + forced);
    let help = "Dirty lines written back, by path: paced (the rate controller), idle (full speed with no requests), pressure (after dirty evictions), forced (flush, detach, set).";
    for (path, v) in [
        ("paced", paced),
        ("idle", idle),
        ("pressure", pressure),
        ("forced", forced),
    ] {
        m.counter("cleaned_lines", help, &[("path", path)], v);
    }
    m.gauge_at(
        "cleaning_target_rate_lines_per_second",
        "The rate the write-back cleaning controller asks for now (0 at or below the dirty target).",
        &[],
        stats,
        "/live/cleaning_target_rate_lines_per_s",
    );
}
