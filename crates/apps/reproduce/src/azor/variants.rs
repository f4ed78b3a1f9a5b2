//! The variants of `reproduce azor`'s live part and how each is started
//! and stopped on the one emulated HDD: the HDD alone, the live SSD cache
//! (`tiercache serve`, a child process) in several configurations, and
//! nbdkit's cache filter.

use crate::tools;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What serves one variant.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// The emulated HDD alone.
    Uncached,
    /// The live SSD cache: associativity, write policy, 2LBS on.
    Tier(&'static str, &'static str, bool),
    /// nbdkit's cache filter.
    Peer,
}

/// Every variant of the live part, in run order (the peer gets the fully
/// associative cache's data area, so it comes after `fa-upd`).
pub(super) const VARIANTS: [(&str, Kind); 8] = [
    ("uncached", Kind::Uncached),
    ("dm-upd", Kind::Tier("direct", "write-hdd-upd", false)),
    ("fa-upd", Kind::Tier("full", "write-hdd-upd", false)),
    ("fa-wb", Kind::Tier("full", "write-back", false)),
    ("dm-wb", Kind::Tier("direct", "write-back", false)),
    ("dm-upd-2lbs", Kind::Tier("direct", "write-hdd-upd", true)),
    ("fa-upd-2lbs", Kind::Tier("full", "write-hdd-upd", true)),
    ("nbdkit-cache", Kind::Peer),
];

/// The shared slow device and the cache size every variant gets.
pub(super) struct Env {
    /// The `tiercache` binary that serves the cache variants.
    pub tiercache: std::path::PathBuf,
    pub dir: std::path::PathBuf,
    pub hdd_uri: String,
    pub hdd_sock: std::path::PathBuf,
    pub cache_bytes: u64,
    /// The fully associative cache's data area (the peer's cache size).
    pub peer_bytes: u64,
}

/// A running variant: its NBD URI, a description, and how to stop it.
pub(super) struct Started {
    pub uri: String,
    pub what: String,
    stop: Stop,
}

enum Stop {
    Nothing,
    Tier {
        srv: tools::Proc,
        ctl: std::path::PathBuf,
        cache: std::path::PathBuf,
    },
    Peer(std::process::Child),
}

/// Starts variant `name` on the shared device. 2LBS variants classify the
/// filesystem on the device (`serve --fs-classify auto`) so the metadata
/// level has metadata to prefer.
pub(super) async fn start(name: &str, kind: Kind, env: &mut Env) -> Result<Started> {
    match kind {
        Kind::Uncached => Ok(Started {
            uri: env.hdd_uri.clone(),
            what: "the emulated HDD alone".into(),
            stop: Stop::Nothing,
        }),
        // Waits for the server's socket: off the runtime's async workers.
        Kind::Tier(assoc, wp, twolbs) => {
            tokio::task::block_in_place(|| start_tier(name, assoc, wp, twolbs, env))
        }
        Kind::Peer => start_peer(env).await,
    }
}

/// Formats and serves (`tiercache serve`, a child process) the live SSD
/// cache in front of the emulated HDD.
fn start_tier(name: &str, assoc: &str, wp: &str, twolbs: bool, env: &mut Env) -> Result<Started> {
    let mut spec = super::spec(assoc, "4KiB", wp, if twolbs { "both" } else { "none" });
    if twolbs {
        spec.twolbs_levels = vec!["metadata".into(), "frequency".into()];
    }
    let cfg = spec
        .config(env.cache_bytes)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let cache = env.dir.join(format!("{name}.img"));
    let _ = std::fs::remove_file(&cache);
    let layout = tiercache_azor_live::format_cache(
        &cache,
        Path::new(&env.hdd_uri),
        &cfg,
        Some(env.cache_bytes + (8 << 20)),
        false,
    )
    .with_context(|| format!("formatting the {name} cache"))?;
    if assoc == "full" && !twolbs {
        env.peer_bytes = layout.slots as u64 * 4096;
    }
    let csock = env.dir.join(format!("{name}.sock"));
    let ctl = env.dir.join(format!("{name}.ctl"));
    let _ = std::fs::remove_file(&csock);
    let _ = std::fs::remove_file(&ctl);
    let srv = tools::spawn(
        Command::new(&env.tiercache)
            .arg("serve")
            .arg("--cache")
            .arg(&cache)
            .args(["--backing", &env.hdd_uri])
            .arg("--listen")
            .arg(format!("unix:{}", csock.display()))
            .arg("--control")
            .arg(&ctl)
            .args(["--fs-classify", if twolbs { "auto" } else { "off" }]),
        &csock,
        &env.dir.join(format!("{name}.log")),
    )
    .with_context(|| format!("starting the {name} cache server"))?;
    Ok(Started {
        uri: tiercache_nbd::unix_export_uri(false, "tiercache", &csock),
        what: format!(
            "tiercache {assoc}, {wp}{}, {} lines of 4 KiB",
            if twolbs {
                ", 2LBS (metadata+frequency, --fs-classify auto)"
            } else {
                ""
            },
            layout.slots
        ),
        stop: Stop::Tier { srv, ctl, cache },
    })
}

/// Starts nbdkit's cache filter in front of the emulated HDD, with the
/// fully associative cache's data area as its size.
async fn start_peer(env: &mut Env) -> Result<Started> {
    if !tools::present("nbdkit") {
        bail!("nbdkit is not installed: the peer cache was not measured");
    }
    let psock = env.dir.join("peer.sock");
    let pid = env.dir.join("peer.pid");
    let _ = std::fs::remove_file(&psock);
    let _ = std::fs::remove_file(&pid);
    let cache_tmp = env.dir.join("peer-tmp");
    std::fs::create_dir_all(&cache_tmp)?;
    let peer_bytes = env.peer_bytes;
    let mut child = Command::new("nbdkit")
        .env("TMPDIR", &cache_tmp)
        .args(["-f", "--exit-with-parent", "-U"])
        .arg(&psock)
        .arg("-P")
        .arg(&pid)
        .args(["--filter=cache", "nbd"])
        .arg(format!("socket={}", env.hdd_sock.display()))
        .arg("export=hdd")
        .arg("cache=writeback")
        .arg("cache-on-read=true")
        .arg(format!("cache-max-size={peer_bytes}"))
        .spawn()
        .context("starting nbdkit")?;
    for _ in 0..100 {
        if pid.exists() && psock.exists() {
            return Ok(Started {
                uri: tiercache_nbd::unix_uri(false, &psock),
                what: format!(
                    "nbdkit --filter=cache (writeback, cache-on-read, cache-max-size={peer_bytes})"
                ),
                stop: Stop::Peer(child),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    bail!("nbdkit did not start: the peer was not measured")
}

impl Started {
    /// Stops the variant; the tiercache cache's hit ratio.
    pub(super) async fn stop(self) -> Result<Option<f64>> {
        match self.stop {
            Stop::Nothing => Ok(None),
            Stop::Tier {
                mut srv,
                ctl,
                cache,
            } => {
                let st = tiercache_runtime::control::request(&ctl, "stats").await;
                let _ = tiercache_runtime::control::request(&ctl, "detach").await;
                let exited =
                    tokio::task::spawn_blocking(move || srv.wait_exit(Duration::from_secs(120)))
                        .await?;
                if !exited {
                    bail!("the cache server did not exit within 120 s of detach");
                }
                let _ = std::fs::remove_file(&cache);
                Ok(st?["hit_ratio"].as_f64())
            }
            Stop::Peer(mut child) => {
                let _ = child.kill();
                let _ = child.wait();
                Ok(None)
            }
        }
    }
}
