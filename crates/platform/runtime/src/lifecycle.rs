//! Serve a design until SIGINT, SIGTERM or `detach`, and stop in an order
//! that never lies: stop accepting connections and requests, let the
//! requests in flight finish (clients that stall are cut off after the
//! grace), and only then detach (write everything back, close clean) or
//! shut down (close clean, dirty data kept). `detach` reports success only
//! when the backing device holds every acknowledged write.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, Signal, SignalKind};

use anyhow::{Context, Result};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::control::ControlServer;
use crate::design::{Design, WriteBack};
use crate::export::Export;
use crate::listen::{Bound, ListenSpec};

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The export name (the empty default name is answered too).
    pub export: String,
    /// Refuse writes, trims and zeroes.
    pub read_only: bool,
    /// NBD server limits (connections, timeouts, bytes in flight, shutdown grace).
    pub limits: tiercache_nbd::Limits,
    /// TLS (`NBD_OPT_STARTTLS`); None refuses it.
    pub tls: Option<tiercache_nbd::Tls>,
}

/// The sockets, bound before the design is opened.
pub struct Prepared {
    nbd: Bound,
    control: std::os::unix::net::UnixListener,
    control_path: PathBuf,
    metrics: Option<(std::net::TcpListener, std::net::SocketAddr)>,
    /// `serve --record`: recording starts before the first request.
    record: Option<crate::RecordSpec>,
    /// SIGTERM and SIGINT, caught from the moment the sockets exist: a
    /// client may connect (and a supervisor stop the server) while the
    /// design is still opening, and such a stop must end in a clean shutdown
    /// once serving starts, not kill the process mid-recovery.
    signals: (Signal, Signal),
}

fn catch_signals() -> Result<(Signal, Signal)> {
    let term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok((term, int))
}

impl Prepared {
    /// Bind the NBD listener and the control socket. Nothing is opened yet,
    /// so a bad or busy address leaves no device touched.
    pub fn bind(listen: &ListenSpec, control: &std::path::Path) -> Result<Prepared> {
        crate::control::check_path(control)?;
        let signals = catch_signals()?;
        let nbd = listen.bind()?;
        let ctl = match crate::control::bind(control) {
            Ok(c) => c,
            Err(e) => {
                nbd.abandon();
                return Err(e);
            }
        };
        Ok(Prepared {
            nbd,
            control: ctl,
            control_path: control.to_path_buf(),
            metrics: None,
            record: None,
            signals,
        })
    }

    /// Also bind the metrics endpoint (`serve --metrics HOST:PORT`), still
    /// before any device is opened; on failure the other sockets are removed.
    pub fn with_metrics(mut self, spec: Option<&str>) -> Result<Prepared> {
        let Some(spec) = spec else {
            return Ok(self);
        };
        match crate::metrics_http::bind(spec) {
            Ok(m) => {
                self.metrics = Some(m);
                Ok(self)
            }
            Err(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    /// Also record from the first request (`serve --record`); the file is
    /// checked now, before any device is opened.
    pub fn with_recording(mut self, spec: Option<crate::RecordSpec>) -> Result<Prepared> {
        if let Some(s) = &spec {
            if let Err(e) = s.check() {
                self.abandon();
                return Err(e);
            }
        }
        self.record = spec;
        Ok(self)
    }

    /// Give up (the design failed to open): remove the socket files.
    pub fn abandon(self) {
        self.nbd.abandon();
        let _ = std::fs::remove_file(&self.control_path);
    }
}

/// How serving ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Detached: the backing device holds every acknowledged write.
    Detached(WriteBack),
    /// Stopped by a signal, closed clean (dirty data stays in the cache).
    Stopped(&'static str),
}

enum Why {
    Signal(&'static str),
    Detach(oneshot::Sender<serde_json::Value>),
}

/// How long running control requests get to answer when the server stops.
const CONTROL_GRACE: Duration = Duration::from_secs(5);

/// Serve `design` on the prepared sockets until a signal or `detach`.
/// `ready` gets the NBD URI once the server accepts connections.
pub async fn serve(
    design: Arc<dyn Design>,
    prepared: Prepared,
    cfg: &ServeConfig,
    ready: Option<oneshot::Sender<String>>,
) -> Result<Ended> {
    let req_metrics = prepared
        .metrics
        .as_ref()
        .map(|_| Arc::new(crate::metrics::RequestMetrics::default()));
    let export: Arc<dyn tiercache_nbd::Backend> = Arc::new(Export {
        design: Arc::clone(&design),
        read_only: cfg.read_only,
        metrics: req_metrics.clone(),
    });
    let server = tiercache_nbd::Server::with_tls(
        [(cfg.export.clone(), export)],
        cfg.limits,
        cfg.tls.clone(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let recorder = Arc::new(crate::Recorder::default());
    let can_record = design.attach_recorder(Arc::clone(&recorder));
    if let Some(spec) = prepared.record.clone() {
        let started = match can_record {
            true => recorder.start(spec).map(|_| ()),
            false => Err(anyhow::anyhow!(
                "--record: the {} design cannot record its requests (azor, oodt and tica can)",
                design.name()
            )),
        };
        if let Err(e) = started {
            let _ = design.shutdown().await;
            prepared.abandon();
            return Err(e);
        }
    }
    let listening = prepared.nbd.serve(&server)?;
    let uri = listening.uri.clone();
    let started = Instant::now();
    let metrics_url = prepared
        .metrics
        .as_ref()
        .map(|(_, a)| format!("http://{a}/metrics"));
    let info = json!({
        "listen": uri,
        "metrics": metrics_url,
        "export": cfg.export,
        "read_only": cfg.read_only,
        "pid": std::process::id(),
        "limits": limits_json(&cfg.limits),
        "tls": tls_json(cfg.tls.as_ref()),
    });
    let (dtx, mut drx) = mpsc::channel(1);
    let ctl = ControlServer::start(
        prepared.control,
        prepared.control_path.clone(),
        Arc::clone(&design),
        info,
        dtx,
        (Arc::clone(&recorder), can_record),
    )?;
    let metrics = start_metrics(prepared.metrics, req_metrics, &design, &cfg.export)?;
    let (mut term, mut int) = prepared.signals;
    tracing::info!(
        "serving {} export '{}' at {uri} (control socket {})",
        design.name(),
        cfg.export,
        prepared.control_path.display()
    );
    eprintln!("tiercache: serving export '{}' at {uri}", cfg.export);
    if let Some(r) = ready {
        let _ = r.send(uri.clone());
    }
    crate::notify::notify(&format!(
        "READY=1\nSTATUS=serving {} export '{}' at {uri}",
        design.name(),
        cfg.export
    ));
    let why = tokio::select! {
        _ = int.recv() => Why::Signal("SIGINT"),
        _ = term.recv() => Why::Signal("SIGTERM"),
        Some(tx) = drx.recv() => Why::Detach(tx),
    };
    // Later detach requests are refused at once ("already stopping").
    drop(drx);
    let what = match &why {
        Why::Signal(s) => s.to_string(),
        Why::Detach(_) => "detach".to_string(),
    };
    tracing::info!(
        "{what}: no new connections or requests; answering those in flight (grace {} s)",
        cfg.limits.shutdown_grace.as_secs()
    );
    crate::notify::notify(&format!("STOPPING=1\nSTATUS=stopping ({what})"));
    listening.shutdown().await;
    if let Some(m) = metrics {
        m.stop(CONTROL_GRACE).await;
    }
    if recorder.is_on() {
        if let Err(e) = recorder.stop() {
            eprintln!("tiercache: warning: {e:#}");
        }
    }
    let r = match why {
        Why::Signal(s) => {
            let r = design.shutdown().await;
            ctl.stop(CONTROL_GRACE).await;
            r.map_err(|e| anyhow::anyhow!("clean shutdown failed: {e}"))?;
            eprintln!(
                "tiercache: {s}: clean shutdown after {:.1} s of service",
                started.elapsed().as_secs_f64()
            );
            Ended::Stopped(s)
        }
        Why::Detach(tx) => finish_detach(&*design, tx, ctl).await?,
    };
    Ok(r)
}

/// Start the metrics endpoint, if `serve --metrics` bound one.
fn start_metrics(
    bound: Option<(std::net::TcpListener, std::net::SocketAddr)>,
    req: Option<Arc<crate::metrics::RequestMetrics>>,
    design: &Arc<dyn Design>,
    export: &str,
) -> Result<Option<crate::metrics_http::MetricsServer>> {
    let (Some((l, addr)), Some(m)) = (bound, req) else {
        return Ok(None);
    };
    let s = crate::metrics_http::MetricsServer::start(l, Arc::clone(design), m, export.into())?;
    eprintln!("tiercache: metrics at http://{addr}/metrics");
    Ok(Some(s))
}

/// Detach with no request in flight, answer the control client, stop it.
async fn finish_detach(
    design: &dyn Design,
    tx: oneshot::Sender<serde_json::Value>,
    ctl: ControlServer,
) -> Result<Ended> {
    let failure = match design.detach().await {
        Ok(wb) if wb.dirty_left == 0 => {
            let mut v = serde_json::to_value(&wb).unwrap_or_default();
            v["ok"] = json!(true);
            v["backing"] = json!(design.backing_path().display().to_string());
            let _ = tx.send(v);
            ctl.stop(CONTROL_GRACE).await;
            eprintln!(
                "tiercache: detached: {} written back; {} holds every acknowledged write; the cache is emptied (its next serve starts cold)",
                plural(wb.written_back, wb.unit),
                design.backing_path().display()
            );
            return Ok(Ended::Detached(wb));
        }
        Ok(wb) => format!(
            "{} still dirty after writing back {}",
            plural(wb.dirty_left, wb.unit),
            wb.written_back
        ),
        Err(e) => e.message,
    };
    // Keep what is left safe: close the metadata clean with the dirty data in the cache.
    let kept = match design.shutdown().await {
        Ok(()) => "the dirty data is kept in the cache device, which is closed clean; serve it again to retry".to_string(),
        Err(e) => format!("closing the cache also failed ({e}); the next start recovers as after a crash"),
    };
    // The answer's error is the cause: the client says which command failed.
    let msg = format!("{failure}; {kept}");
    let _ = tx.send(json!({"ok": false, "error": msg}));
    ctl.stop(CONTROL_GRACE).await;
    anyhow::bail!("detach failed: {msg}")
}

fn plural(n: u64, unit: &str) -> String {
    format!("{n} {unit}")
}

/// The TLS mode in force, for `stats`.
fn tls_json(tls: Option<&tiercache_nbd::Tls>) -> serde_json::Value {
    match tls {
        None => json!({"mode": "off"}),
        Some(t) => json!({
            "mode": match t.mode() {
                tiercache_nbd::TlsMode::On => "on",
                tiercache_nbd::TlsMode::Require => "require",
            },
            "verify_peer": t.verifies_peer(),
        }),
    }
}

/// The limits in force, for `stats`.
fn limits_json(l: &tiercache_nbd::Limits) -> serde_json::Value {
    json!({
        "max_connections": l.max_connections,
        "handshake_timeout_s": l.handshake_timeout.as_secs_f64(),
        "io_timeout_s": l.io_timeout.as_secs_f64(),
        "idle_timeout_s": l.idle_timeout.map(|d| d.as_secs_f64()),
        "max_in_flight_bytes": l.max_total_in_flight_bytes,
        "max_in_flight_bytes_per_connection": l.max_in_flight_bytes,
        "shutdown_grace_s": l.shutdown_grace.as_secs_f64(),
    })
}
