//! `tiercache serve` on a three-level cache: open (with recovery), export
//! over NBD, answer the control socket, and shut down cleanly on SIGINT or
//! SIGTERM (or after `detach`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::cache::ThreeLevel;
use crate::export::Export;
use crate::open::{open, OpenOptions};

/// What `serve` needs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Either SSD of the pair.
    pub ssd: PathBuf,
    pub backing: Option<PathBuf>,
    /// unix:PATH or tcp:HOST:PORT.
    pub listen: String,
    pub export: String,
    pub read_only: bool,
    /// Control socket [default: SSD.ctl].
    pub control: Option<PathBuf>,
    pub direct: bool,
}

/// The default control socket of a cache opened through `ssd`.
pub fn control_path(ssd: &std::path::Path) -> PathBuf {
    let mut p = ssd.as_os_str().to_owned();
    p.push(".ctl");
    p.into()
}

/// Start listening where `listen` says.
pub async fn listen(
    server: tiercache_nbd::Server,
    listen: &str,
) -> Result<tiercache_nbd::ServerHandle> {
    Ok(if let Some(p) = listen.strip_prefix("unix:") {
        server
            .serve_unix(p)
            .await
            .with_context(|| format!("listening on {p}"))?
    } else if let Some(addr) = listen.strip_prefix("tcp:") {
        server
            .serve_tcp(addr)
            .await
            .with_context(|| format!("listening on {addr}"))?
    } else {
        bail!("--listen '{listen}' is not understood (allowed: unix:PATH or tcp:HOST:PORT)");
    })
}

/// Export `cache` over NBD until SIGINT/SIGTERM or `detach`; `ready` gets
/// the NBD URI once listening. Shuts the cache down cleanly at the end.
pub async fn serve_cache(
    cache: Arc<ThreeLevel>,
    o: &ServeOptions,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    cache.start_background();
    let export: Arc<dyn tiercache_nbd::Backend> = Arc::new(Export {
        cache: Arc::clone(&cache),
        read_only: o.read_only,
    });
    let server = tiercache_nbd::Server::new([(o.export.clone(), export)])
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let handle = listen(server, &o.listen).await?;
    let uri = handle.uri();
    eprintln!("tiercache: serving export '{}' at {uri}", o.export);
    let ctl = o.control.clone().unwrap_or_else(|| control_path(&o.ssd));
    let stop = Arc::new(tokio::sync::Notify::new());
    let ctl_task = {
        let (c, s) = (Arc::clone(&cache), Arc::clone(&stop));
        tokio::spawn(async move { crate::control::serve(&ctl, c, s).await })
    };
    if let Some(r) = ready {
        let _ = r.send(uri);
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let detached = tokio::select! {
        _ = tokio::signal::ctrl_c() => false,
        _ = term.recv() => false,
        _ = stop.notified() => true,
    };
    handle.shutdown().await;
    stop.notify_waiters();
    let _ = ctl_task.await;
    if detached {
        eprintln!(
            "tiercache: detached; {} holds all data",
            cache.backing_path().display()
        );
        return Ok(());
    }
    let c = Arc::clone(&cache);
    tokio::task::spawn_blocking(move || c.shutdown(false))
        .await?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("tiercache: clean shutdown (both SSDs checkpointed)");
    Ok(())
}

/// Open the cache `o.ssd` belongs to and serve it (see [`serve_cache`]).
pub async fn serve(
    o: ServeOptions,
    ready: Option<tokio::sync::oneshot::Sender<String>>,
) -> Result<()> {
    let oo = OpenOptions {
        ssd: o.ssd.clone(),
        backing: o.backing.clone(),
        direct: o.direct,
    };
    let cache = tokio::task::spawn_blocking(move || open(&oo)).await??;
    let info = cache.info();
    let r = cache.stats_json();
    eprintln!(
        "tiercache: opened three-level cache: RO-SSD {}, WO-SSD {}, DRAM {} pages, policy {} (backing {}); \
         recovered in {:.1} ms: {}",
        info.ro_ssd,
        info.wo_ssd,
        r["policy"]["dram_pages"],
        info.tica_policy,
        cache.backing_path().display(),
        r["recovery"]["duration_ms"].as_f64().unwrap_or(0.0),
        r["recovery"]
    );
    serve_cache(cache, &o, ready).await
}
