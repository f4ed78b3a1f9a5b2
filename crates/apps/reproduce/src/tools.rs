//! The programs the live experiments run: tool discovery, child processes
//! stopped on drop, fio's JSON report, and the emulated slow disk.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_io::{BlockDev, EmulatedHdd, FileDev, FileDevOptions};

/// Whether `name --version` runs and succeeds (the tool is installed).
pub fn present(name: &str) -> bool {
    Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Writes a report file, naming it in the error.
pub fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A child process stopped (SIGTERM, then SIGKILL after 30 s) when dropped.
pub struct Proc(pub Child);

impl Proc {
    /// Waits up to `limit` for the process to exit by itself (after a
    /// `detach`, say); true if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(Some(_)) = self.0.try_wait() {
            return;
        }
        let pid = self.0.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        if !self.wait_exit(Duration::from_secs(30)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `cmd` with its output in `log` and waits until it listens on the
/// Unix socket `sock` (at most 60 s); an error with the log if it exits first.
pub fn spawn(cmd: &mut Command, sock: &Path, log: &Path) -> Result<Proc> {
    let logf = std::fs::File::create(log)?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let mut p = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !sock.exists() {
        if let Ok(Some(st)) = p.0.try_wait() {
            bail!(
                "{:?} exited ({st}) before listening: {}",
                cmd.get_program(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{:?} did not listen on {} within 60 s",
                cmd.get_program(),
                sock.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(p)
}

/// fio's JSON report from its finished run (`--output-format=json`); fio may
/// print notices before the document.
pub fn fio_json(out: std::io::Result<std::process::Output>) -> Result<serde_json::Value> {
    let out = out.context("running fio (install it with scripts/setup.sh)")?;
    if !out.status.success() {
        bail!("fio failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text
        .find("\n{")
        .map(|i| &text[i + 1..])
        .or_else(|| text.strip_prefix('{').map(|_| &text[..]))
        .unwrap_or(&text);
    serde_json::from_str(json).with_context(|| {
        format!(
            "fio JSON output: {}",
            text.chars().take(200).collect::<String>()
        )
    })
}

/// Serves `backing` through the HDD model (the default profile's 7200 rpm
/// disk, one actuator) as export `hdd` of an in-process NBD server on the
/// Unix socket `sock`: the one emulated slow disk of `demo` and of
/// `reproduce azor`'s live part. Returns the server and the export's URI.
pub async fn serve_emulated_hdd(
    backing: &Path,
    sock: &Path,
) -> Result<(tiercache_nbd::ServerHandle, String)> {
    let dev: Arc<dyn BlockDev> = Arc::new(
        FileDev::open(backing, FileDevOptions::default())
            .with_context(|| format!("opening {}", backing.display()))?,
    );
    let hdd: Arc<dyn tiercache_nbd::Backend> =
        Arc::new(tiercache_azor_live::passthrough::PassThrough {
            dev: Arc::new(EmulatedHdd::default_disk(dev).map_err(|e| anyhow::anyhow!("{e}"))?),
        });
    let server = tiercache_nbd::Server::new([("hdd", hdd)]).map_err(|e| anyhow::anyhow!("{e}"))?;
    let handle = server
        .serve_unix(sock)
        .await
        .with_context(|| format!("serving the emulated HDD on {}", sock.display()))?;
    Ok((handle, tiercache_nbd::unix_export_uri(false, "hdd", sock)))
}
