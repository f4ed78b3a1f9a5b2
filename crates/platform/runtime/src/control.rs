//! The control socket (`CACHE.ctl` unless `--control` says otherwise), the
//! same for every design: one JSON request per connection, one JSON answer.
//!
//! - `{"cmd":"stats"}`: the design's counters, plus `design` and `runtime`;
//! - `{"cmd":"flush"}`: write every dirty block back and commit, while serving:
//!   `{"ok":true,"written_back":N,"dirty_left":0,"unit":"lines"}`;
//! - `{"cmd":"detach"}`: stop accepting requests, answer those in flight,
//!   write everything back and close the metadata clean; `{"ok":true,...}`
//!   only when the backing device holds every acknowledged write, and the
//!   server then exits. On failure `{"ok":false,"error":...}` and the
//!   server exits non-zero, the data kept in the cache;
//! - `{"cmd":"debug"}`: state to diagnose a request that does not complete;
//! - `{"cmd":"set","write_policy":..,"dirty_target":..,"seq_cutoff":..,
//!   "eviction":..}`: change the policy online ([`Design::set_policy`]);
//!   `{"progress":{...}}` lines come before the answer;
//! - `{"cmd":"record","action":"start"|"stop"|"status",...}`: the request
//!   recorder ([`crate::record`]);
//! - a design's own commands.
//!
//! The socket is created mode 0600 (owner only), never replaces a file that
//! is not a socket, reads at most [`MAX_REQUEST`] bytes within
//! [`REQUEST_TIMEOUT`], and survives accept errors (EMFILE) with backoff.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::accept::accept_loop;
use crate::design::Design;

/// Longest control request accepted (bytes, newline included).
pub const MAX_REQUEST: u64 = 64 * 1024;
/// How long a control client has to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Default control socket of a device: `PATH.ctl`.
pub fn default_path(device: &Path) -> PathBuf {
    let mut p = device.as_os_str().to_owned();
    p.push(".ctl");
    p.into()
}

/// Check that the control socket can be created at `path` (nothing there,
/// or a stale socket), before any device is opened.
pub fn check_path(path: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            bail!(
                "control socket {}: a file that is not a socket is there; refusing to replace it (give --control PATH)",
                path.display()
            );
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "control socket {}: a server is answering there already",
                path.display()
            );
        }
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            bail!(
                "control socket {}: directory {} does not exist",
                path.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

/// Bind the control socket mode 0600 (a stale socket there is replaced).
pub fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener> {
    check_path(path)?;
    let _ = std::fs::remove_file(path);
    // The mode is set at creation (umask), so no other user can connect in
    // the moment before the chmod.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
    let l = std::os::unix::net::UnixListener::bind(path);
    rustix::process::umask(old);
    let l = l.with_context(|| format!("binding control socket {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The server's recorder, and whether the design can record.
pub(crate) type Recording = (Arc<crate::Recorder>, bool);

/// A request from the control socket to the lifecycle: detach, answer here.
pub(crate) type DetachRequest = oneshot::Sender<Value>;

/// The running control server.
pub(crate) struct ControlServer {
    pub stop: CancellationToken,
    pub tasks: TaskTracker,
    pub path: PathBuf,
}

impl ControlServer {
    /// Serve `listener` for `design`; detach requests go to `detach`.
    pub fn start(
        listener: std::os::unix::net::UnixListener,
        path: PathBuf,
        design: Arc<dyn Design>,
        runtime_info: Value,
        detach: mpsc::Sender<DetachRequest>,
        recording: Recording,
    ) -> Result<ControlServer> {
        let l = UnixListener::from_std(listener)?;
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let (s, t) = (stop.clone(), tasks.clone());
        let info = Arc::new(runtime_info);
        let rec = Arc::new(recording);
        tasks.spawn(async move {
            accept_loop("control socket", l, s, |stream| {
                let (d, i, tx) = (Arc::clone(&design), Arc::clone(&info), detach.clone());
                let r = Arc::clone(&rec);
                t.spawn(async move {
                    if let Err(e) = handle(stream, d, i, tx, r).await {
                        tracing::debug!("control request failed: {e:#}");
                    }
                });
            })
            .await
        });
        Ok(ControlServer { stop, tasks, path })
    }

    /// Stop accepting, give running requests `grace` to answer, remove the socket.
    pub async fn stop(self, grace: Duration) {
        self.stop.cancel();
        self.tasks.close();
        let _ = tokio::time::timeout(grace, self.tasks.wait()).await;
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Read one request line of at most [`MAX_REQUEST`] bytes.
async fn read_request(r: tokio::net::unix::OwnedReadHalf) -> std::result::Result<Value, String> {
    let mut line = String::new();
    let mut limited = BufReader::new(r.take(MAX_REQUEST));
    match tokio::time::timeout(REQUEST_TIMEOUT, limited.read_line(&mut line)).await {
        Err(_) => return Err(format!("no request within {} s", REQUEST_TIMEOUT.as_secs())),
        Ok(Err(e)) => return Err(format!("reading the request: {e}")),
        Ok(Ok(_)) => {}
    }
    if !line.ends_with('\n') && line.len() as u64 >= MAX_REQUEST {
        return Err(format!("request longer than {MAX_REQUEST} bytes"));
    }
    serde_json::from_str(line.trim()).map_err(|e| format!("request is not JSON ({e})"))
}

async fn handle(
    s: UnixStream,
    design: Arc<dyn Design>,
    info: Arc<Value>,
    detach: mpsc::Sender<DetachRequest>,
    rec: Arc<Recording>,
) -> Result<()> {
    let (r, mut w) = s.into_split();
    let answer = match read_request(r).await {
        Err(e) => json!({"ok": false, "error": e}),
        Ok(req) if req["cmd"] == "set" => set(&req, &design, &mut w).await?,
        // Stopping syncs the files: off the async workers.
        Ok(req) if req["cmd"] == "record" => {
            tokio::task::spawn_blocking(move || rec.0.control(&req, rec.1))
                .await
                .unwrap_or_else(|e| json!({"ok": false, "error": e.to_string()}))
        }
        Ok(req) if req["cmd"] == "stats" => {
            let mut v = answer(&req, &design, &info, &detach).await;
            if let Some(o) = v.as_object_mut() {
                o.insert("recording".into(), rec.0.status());
            }
            v
        }
        Ok(req) => answer(&req, &design, &info, &detach).await,
    };
    w.write_all(format!("{answer}\n").as_bytes()).await?;
    Ok(())
}

const COMMANDS: &str = "stats, flush, detach, debug, set, record";

/// `{"cmd":"set",...}`: change the policy online. Progress goes to the
/// client as `{"progress":{...}}` lines while the change runs; the answer
/// is the last line.
async fn set(
    req: &Value,
    design: &Arc<dyn Design>,
    w: &mut tokio::net::unix::OwnedWriteHalf,
) -> Result<Value> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let report = move |v: Value| {
        let _ = tx.send(json!({ "progress": v }));
    };
    let work = design.set_policy(req, &report);
    tokio::pin!(work);
    let answer = loop {
        tokio::select! {
            a = &mut work => break a,
            Some(p) = rx.recv() => {
                // A client that went away does not stop the change.
                let _ = w.write_all(format!("{p}\n").as_bytes()).await;
            }
        }
    };
    while let Ok(p) = rx.try_recv() {
        let _ = w.write_all(format!("{p}\n").as_bytes()).await;
    }
    Ok(answer)
}

async fn answer(
    req: &Value,
    design: &Arc<dyn Design>,
    info: &Value,
    detach: &mpsc::Sender<DetachRequest>,
) -> Value {
    let cmd = req["cmd"].as_str().unwrap_or("");
    match cmd {
        "stats" => {
            let mut v = design.stats().await;
            if let Some(o) = v.as_object_mut() {
                o.insert("design".into(), json!(design.name()));
                o.insert("runtime".into(), info.clone());
            }
            v
        }
        "debug" => design.debug().await,
        "flush" => match design.write_back().await {
            Ok(wb) => {
                let mut v = serde_json::to_value(&wb).unwrap_or_default();
                v["ok"] = json!(wb.dirty_left == 0);
                if wb.dirty_left > 0 {
                    v["error"] = json!(format!("{} {} still dirty", wb.dirty_left, wb.unit));
                }
                v
            }
            Err(e) => json!({"ok": false, "error": e.message}),
        },
        "detach" => {
            if let Some(why) = design.detach_refusal() {
                return json!({"ok": false, "error": why});
            }
            let (tx, rx) = oneshot::channel();
            if detach.send(tx).await.is_err() {
                return json!({"ok": false, "error": "the server is already stopping"});
            }
            rx.await.unwrap_or_else(
                |_| json!({"ok": false, "error": "the server stopped before detaching"}),
            )
        }
        "panic" if std::env::var_os(crate::panic::TEST_PANIC_ENV).is_some() => {
            panic!(
                "panic requested on the control socket ({} is set)",
                crate::panic::TEST_PANIC_ENV
            )
        }
        other => match design.command(other, req).await {
            Some(v) => v,
            None => json!({
                "ok": false,
                "error": format!("unknown command '{other}' (allowed: {COMMANDS})")
            }),
        },
    }
}

/// Send `{"cmd": cmd}` to the server at `path` and return its answer.
pub async fn request(path: &Path, cmd: &str) -> Result<Value> {
    request_value(path, &json!({ "cmd": cmd })).await
}

/// Send one JSON request and return the last answer line; lines before it
/// that carry `progress` (from `set`) go to `progress`.
pub async fn request_with_progress(
    path: &Path,
    req: &Value,
    mut progress: impl FnMut(&Value),
) -> Result<Value> {
    let mut s = connect(path).await?;
    s.write_all(format!("{req}\n").as_bytes()).await?;
    let mut lines = BufReader::new(s).lines();
    while let Some(line) = lines.next_line().await? {
        let v: Value = serde_json::from_str(line.trim())?;
        match v.get("progress") {
            Some(p) => progress(p),
            None => return Ok(v),
        }
    }
    bail!("the server closed the control connection without an answer")
}

async fn connect(path: &Path) -> Result<UnixStream> {
    UnixStream::connect(path).await.with_context(|| {
        format!(
            "connecting to control socket {} (is tiercache serve running?)",
            path.display()
        )
    })
}

/// Send one JSON request to the server at `path` and return its answer.
pub async fn request_value(path: &Path, req: &Value) -> Result<Value> {
    let mut s = connect(path).await?;
    s.write_all(format!("{req}\n").as_bytes()).await?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).await?;
    if line.trim().is_empty() {
        bail!("the server closed the control connection without an answer");
    }
    Ok(serde_json::from_str(line.trim())?)
}
