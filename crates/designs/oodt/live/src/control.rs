//! The control socket of a served tiered volume (`FAST.ctl` by default), in
//! the live cache's protocol: one JSON request per connection, one answer.
//! - `{"cmd":"stats"}`: [`TieredVolume::stats_json`];
//! - `{"cmd":"flush"}`: flush every tier, then `{"ok":true}`;
//! - `{"cmd":"debug"}`: the same counters (migrations in flight, locked blocks);
//! - `{"cmd":"detach"}`: refused: a tiered volume needs both tiers.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::volume::TieredVolume;

/// Serve the control socket at `path` until `stop` is notified.
pub async fn serve(
    path: &Path,
    volume: Arc<TieredVolume>,
    stop: Arc<tokio::sync::Notify>,
) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)
        .with_context(|| format!("binding control socket {}", path.display()))?;
    loop {
        let (s, _) = tokio::select! {
            r = l.accept() => r?,
            _ = stop.notified() => break,
        };
        let v = Arc::clone(&volume);
        tokio::spawn(async move {
            let _ = handle(s, v).await;
        });
    }
    let _ = std::fs::remove_file(path);
    Ok(())
}

async fn handle(s: UnixStream, volume: Arc<TieredVolume>) -> anyhow::Result<()> {
    let (r, mut w) = s.into_split();
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).await?;
    let req: Value = serde_json::from_str(line.trim()).unwrap_or(json!({}));
    let answer = match req["cmd"].as_str() {
        Some("stats") | Some("debug") => volume.stats_json(),
        Some("flush") => match volume.flush().await {
            Ok(()) => json!({"ok": true}),
            Err(e) => json!({"ok": false, "error": e.to_string()}),
        },
        Some("detach") => json!({
            "ok": false,
            "error": "a tiered volume cannot be detached: its blocks live on both tiers (stop the server with SIGTERM)"
        }),
        _ => json!({"ok": false, "error": "unknown command (allowed: stats, flush, debug)"}),
    };
    w.write_all(format!("{answer}\n").as_bytes()).await?;
    Ok(())
}
