//! The control channel: a Unix socket next to the cache (`CACHE.ctl` unless
//! `--control` says otherwise). One JSON request per connection, one JSON
//! answer:
//! - `{"cmd":"stats"}` → counters of the core and of the live cache;
//! - `{"cmd":"flush"}` → writes back every dirty line and commits, then `{"ok":true}`;
//! - `{"cmd":"detach"}` → flush, checkpoint, then the server exits, leaving a
//!   backing device that is complete without tiercache;
//! - `{"cmd":"debug"}` → the ops in flight, what each waits for (its
//!   dependencies, a slot barrier, the log, I/O) and the log's barriers, to
//!   diagnose a request that does not complete.

use crate::live::LiveCache;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Default control socket of a cache device.
pub fn default_path(cache: &Path) -> std::path::PathBuf {
    let mut p = cache.as_os_str().to_owned();
    p.push(".ctl");
    p.into()
}

/// Statistics of the core and the live cache as JSON.
pub fn stats_json(cache: &LiveCache) -> Value {
    let (core, dirty, used, slots, degraded, cfg, target) = {
        let c = cache.core.lock().expect("core");
        let e = &c.engine;
        (
            e.stats().clone(),
            e.dirty_lines(),
            e.mapping().used(),
            e.geometry().slots,
            e.is_degraded(),
            e.config().clone(),
            e.dirty_target_lines(),
        )
    };
    let live = cache.stats.snapshot();
    json!({
        "status": if degraded { "degraded: cache device failing, not caching new data" } else { "ok" },
        "policy": {
            "line_size": cfg.line_bytes, "assoc": cfg.assoc.to_string(), "eviction": cfg.eviction.to_string(),
            "write_policy": cfg.write_policy.to_string(), "admission": cfg.admission.kind.to_string(),
            "dirty_target": cfg.dirty_target,
        },
        "dirty_target_lines": target,
        "filesystem": cache.filesystem(),
        "slots": slots,
        "occupied_lines": used,
        "occupancy": used as f64 / slots as f64,
        "dirty_lines": dirty,
        "hits": core.hits, "misses": core.misses(), "hit_ratio": core.hit_ratio(),
        "read_hits": core.read_hits, "read_misses": core.read_accesses - core.read_hits,
        "write_hits": core.write_hits, "write_misses": core.write_accesses - core.write_hits,
        "metadata_hits": core.metadata_hits, "metadata_misses": core.metadata_accesses - core.metadata_hits,
        "data_hits": core.read_hits - core.metadata_hits.min(core.read_hits),
        "fills": core.fills, "evictions": core.evictions, "dirty_evictions": core.dirty_evictions,
        "writebacks": core.writebacks,
        "admission_rejects": core.admission_rejects,
        "live": live,
    })
}

/// Serve the control socket until `stop` is notified. `detach` notifies it too.
pub async fn serve(
    path: &Path,
    cache: Arc<LiveCache>,
    stop: Arc<tokio::sync::Notify>,
) -> Result<()> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)
        .with_context(|| format!("binding control socket {}", path.display()))?;
    loop {
        let (s, _) = tokio::select! {
            r = l.accept() => r?,
            _ = stop.notified() => break,
        };
        let cache = Arc::clone(&cache);
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let _ = handle(s, cache, stop).await;
        });
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

async fn handle(
    s: UnixStream,
    cache: Arc<LiveCache>,
    stop: Arc<tokio::sync::Notify>,
) -> Result<()> {
    let (r, mut w) = s.into_split();
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).await?;
    let req: Value = serde_json::from_str(line.trim()).unwrap_or(json!({}));
    let answer = match req["cmd"].as_str() {
        Some("stats") => stats_json(&cache),
        Some("debug") => cache.debug_state(),
        Some("flush") => match cache.flush_all().await {
            Ok(()) => json!({"ok": true}),
            Err(e) => json!({"ok": false, "error": e.0}),
        },
        Some("detach") => match cache.flush_all().await {
            Ok(()) => {
                let r = cache.shutdown().await;
                stop.notify_waiters();
                match r {
                    Ok(()) => json!({"ok": true}),
                    Err(e) => json!({"ok": false, "error": e.0}),
                }
            }
            Err(e) => json!({"ok": false, "error": e.0}),
        },
        _ => {
            json!({"ok": false, "error": "unknown command (allowed: stats, flush, detach, debug)"})
        }
    };
    w.write_all(format!("{answer}\n").as_bytes()).await?;
    Ok(())
}

/// Send one command to a running server and return its answer.
pub async fn request(path: &Path, cmd: &str) -> Result<Value> {
    let mut s = UnixStream::connect(path).await.with_context(|| {
        format!(
            "connecting to {} (is tiercache serve running?)",
            path.display()
        )
    })?;
    s.write_all(format!("{}\n", json!({"cmd": cmd})).as_bytes())
        .await?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).await?;
    Ok(serde_json::from_str(line.trim())?)
}
