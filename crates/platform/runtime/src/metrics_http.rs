//! The HTTP endpoint of `serve --metrics ADDR:PORT`: `GET /metrics`.
//!
//! A minimal HTTP/1.1 handler on tokio rather than hyper: the endpoint has
//! one resource, one method and no request body, and answers every request
//! with `Connection: close` (Prometheus scrapes that way without trouble).
//! hyper 1.x plus hyper-util would add about fifteen crates and their
//! build time to every binary for that. What a server needs is kept: the
//! request head is bounded ([`MAX_HEAD`]) and must arrive within
//! [`HEAD_TIMEOUT`], at most [`MAX_CLIENTS`] scrapes run at once (more get
//! 503), and accept errors (EMFILE) are retried with backoff.
//!
//! Any address may be given, also one other machines reach (Prometheus
//! usually scrapes from another host): the endpoint is read-only and shows
//! counters, device paths and the export name, never data. Bind it to a
//! management interface or firewall it where that matters.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::accept::accept_loop;
use crate::design::Design;
use crate::metrics::RequestMetrics;

/// Longest request head accepted (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// Time a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Scrapes answered at once.
pub const MAX_CLIENTS: usize = 16;
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Parse `HOST:PORT` (or `tcp:HOST:PORT`) and bind it, before any device is opened.
pub fn bind(spec: &str) -> Result<(std::net::TcpListener, SocketAddr)> {
    let a = spec.strip_prefix("tcp:").unwrap_or(spec);
    let addrs: Vec<SocketAddr> = a
        .to_socket_addrs()
        .with_context(|| format!("--metrics '{spec}': expected HOST:PORT, e.g. 127.0.0.1:9500"))?
        .collect();
    let Some(first) = addrs.first() else {
        bail!("--metrics '{spec}': the address resolves to nothing");
    };
    let l = std::net::TcpListener::bind(&addrs[..])
        .with_context(|| format!("--metrics {spec}: binding {first}"))?;
    l.set_nonblocking(true)?;
    let local = l.local_addr()?;
    Ok((l, local))
}

/// The running metrics endpoint.
pub(crate) struct MetricsServer {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl MetricsServer {
    /// Serve `/metrics` of `design` on `listener`.
    pub fn start(
        listener: std::net::TcpListener,
        design: Arc<dyn Design>,
        req: Arc<RequestMetrics>,
        export: String,
    ) -> Result<MetricsServer> {
        let l = TcpListener::from_std(listener)?;
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let (s, t) = (stop.clone(), tasks.clone());
        let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
        let ctx = Arc::new((design, req, export));
        tasks.spawn(async move {
            accept_loop("metrics", l, s, |stream| {
                let permit = Arc::clone(&slots).try_acquire_owned().ok();
                let ctx = Arc::clone(&ctx);
                t.spawn(async move {
                    let busy = permit.is_none();
                    if let Err(e) = handle(stream, &ctx.0, &ctx.1, &ctx.2, busy).await {
                        tracing::debug!("metrics request failed: {e:#}");
                    }
                    drop(permit);
                });
            })
            .await
        });
        Ok(MetricsServer { stop, tasks })
    }

    /// Stop accepting; give running scrapes `grace` to finish.
    pub async fn stop(self, grace: Duration) {
        self.stop.cancel();
        self.tasks.close();
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
    }
}

/// Read the request head: up to the blank line, at most [`MAX_HEAD`] bytes.
async fn read_head(s: &mut TcpStream) -> std::result::Result<String, &'static str> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n") {
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        if buf.len() >= MAX_HEAD {
            return Err("431 Request Header Fields Too Large");
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(""),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn handle(
    mut s: TcpStream,
    design: &Arc<dyn Design>,
    req: &RequestMetrics,
    export: &str,
    busy: bool,
) -> Result<()> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut s)).await {
        Err(_) => Err("408 Request Timeout"),
        Ok(r) => r,
    };
    let (status, body, ctype) = match head {
        Err("") => return Ok(()),
        Err(status) => (status, format!("{status}\n"), "text/plain; charset=utf-8"),
        Ok(_) if busy => (
            "503 Service Unavailable",
            "too many scrapes at once\n".into(),
            "text/plain; charset=utf-8",
        ),
        Ok(h) => route(&h, design, req, export).await,
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::time::timeout(WRITE_TIMEOUT, async {
        s.write_all(reply.as_bytes()).await?;
        s.shutdown().await
    })
    .await
    .context("writing the answer timed out")??;
    Ok(())
}

/// Answer one request: `GET /metrics` (a query string is ignored).
async fn route(
    head: &str,
    design: &Arc<dyn Design>,
    req: &RequestMetrics,
    export: &str,
) -> (&'static str, String, &'static str) {
    let text = "text/plain; charset=utf-8";
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => ("200 OK", render(&**design, req, export).await, CONTENT_TYPE),
        (_, "/metrics") => (
            "405 Method Not Allowed",
            "only GET is allowed\n".into(),
            text,
        ),
        _ => (
            "404 Not Found",
            "tiercache serves its metrics at /metrics\n".into(),
            text,
        ),
    }
}

/// Render `/metrics` for `design` now: its `stats`, its [`Design::metrics`]
/// mapping, and the runtime's request metrics.
pub async fn render(
    design: &dyn Design,
    req: &crate::metrics::RequestMetrics,
    export: &str,
) -> String {
    let stats = design.stats().await;
    let mut set = crate::metrics::MetricSet::default();
    set.gauge(
        "info",
        "The served design and export (always 1).",
        &[("design", design.name()), ("export", export)],
        1.0,
    );
    set.gauge(
        "uptime_seconds",
        "Seconds since the server started serving.",
        &[],
        req.started.elapsed().as_secs_f64(),
    );
    design.metrics(&stats, &mut set);
    if stats["backing"].is_object() {
        crate::remote::backing_metrics(&stats["backing"], &mut set);
    }
    let mut reg = prometheus_client::registry::Registry::default();
    reg.register(
        "tiercache_request_duration_seconds",
        "NBD request latency by operation, from the request's arrival at the export adapter to its answer",
        req.latency.clone(),
    );
    reg.register(
        "tiercache_request_errors",
        "NBD requests answered with an error, by operation",
        req.errors.clone(),
    );
    reg.register_collector(Box::new(set));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &reg) {
        tracing::warn!("encoding metrics failed: {e}");
    }
    out
}
