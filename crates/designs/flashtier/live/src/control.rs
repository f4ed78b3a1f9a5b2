//! The control socket of a running log-structured cache (`CACHE.ctl`, where CACHE
//! is the cache device): one JSON request per connection,
//! `{"cmd":"stats"|"flush"|"detach"}`, one JSON answer, as for the SSD
//! cache (`tiercache stats|flush|detach` talk to either).

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::cache::LogCache;

/// Serve the control socket at `path` until `stop` is notified; `detach`
/// writes everything back, closes the cache and notifies `stop`.
pub async fn serve(
    path: &Path,
    cache: Arc<LogCache>,
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
        let (cache, stop) = (Arc::clone(&cache), Arc::clone(&stop));
        tokio::spawn(async move {
            let _ = handle(s, cache, stop).await;
        });
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

async fn handle(s: UnixStream, cache: Arc<LogCache>, stop: Arc<tokio::sync::Notify>) -> Result<()> {
    let (r, mut w) = s.into_split();
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).await?;
    let req: Value = serde_json::from_str(line.trim()).unwrap_or(json!({}));
    let c = Arc::clone(&cache);
    let answer = match req["cmd"].as_str() {
        Some("stats") => tokio::task::spawn_blocking(move || c.stats_json()).await?,
        Some("flush") => match tokio::task::spawn_blocking(move || c.write_back_all()).await? {
            Ok(n) => json!({"ok": true, "written_back": n}),
            Err(e) => json!({"ok": false, "error": e.0}),
        },
        Some("detach") => {
            let r = tokio::task::spawn_blocking(move || c.shutdown(true)).await?;
            stop.notify_waiters();
            match r {
                Ok(()) => json!({"ok": true}),
                Err(e) => json!({"ok": false, "error": e.0}),
            }
        }
        _ => json!({"ok": false, "error": "unknown command (allowed: stats, flush, detach)"}),
    };
    w.write_all(format!("{answer}\n").as_bytes()).await?;
    Ok(())
}
