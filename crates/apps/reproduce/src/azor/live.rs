//! The live part of `reproduce azor`: one emulated HDD (a sparse file behind
//! the HDD model, served by an in-process NBD server on a Unix socket) is the
//! backing device of every variant: fio alone on it (uncached), the live SSD
//! cache in several configurations (`format`/`serve` with the HDD's NBD URI as
//! the backing device) and nbdkit's cache filter (its `nbd` plugin on the same
//! socket). Each variant runs the same fio zipf workload (same seed).

use super::variants::{start, Env, Kind, VARIANTS};
use crate::tools;
use anyhow::{bail, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

/// fio's figures for one variant.
#[derive(Clone, Debug, Default)]
pub struct Fio {
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_mean_us: f64,
    pub write_mean_us: f64,
}

impl Fio {
    fn iops(&self) -> f64 {
        self.read_iops + self.write_iops
    }
}

/// One live variant's result.
pub struct Variant {
    pub name: &'static str,
    pub what: String,
    pub fio: Fio,
    pub hit_ratio: Option<f64>,
    pub secs: f64,
}

/// The results of the live part.
pub struct LiveResults {
    pub data_bytes: u64,
    pub cache_bytes: u64,
    pub seconds: u32,
    pub variants: Vec<Variant>,
    pub notes: Vec<String>,
    /// The application workloads on ext4/XFS (`None` with --no-apps).
    pub apps: Option<super::apps::AppResults>,
    /// Why the application workloads stopped before their end, if they did.
    pub stopped: Option<String>,
}

/// The fio job every variant runs.
fn fio_args(uri: &str, seconds: u32) -> Vec<String> {
    [
        "--name=azor",
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--rw=randrw",
        "--rwmixread=80",
        "--bs=4k",
        "--iodepth=4",
        "--random_distribution=zipf:1.1",
        "--randrepeat=1",
        "--randseed=42",
        "--time_based",
        &format!("--runtime={seconds}"),
        "--output-format=json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn fio(uri: &str, seconds: u32) -> Result<Fio> {
    let out = Command::new("fio").args(fio_args(uri, seconds)).output();
    let v = tools::fio_json(out)?;
    let j = &v["jobs"][0];
    let f = |op: &str, k: &str| j[op][k].as_f64().unwrap_or(0.0);
    Ok(Fio {
        read_iops: f("read", "iops"),
        write_iops: f("write", "iops"),
        read_mean_us: j["read"]["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        write_mean_us: j["write"]["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
    })
}

/// The emulated HDD's size (`--live-data`), checked: `run` checks it again,
/// the caller first, before anything is written.
pub fn data_bytes(a: &super::Args) -> Result<u64> {
    let data =
        tiercache_sim::units::parse_bytes(a.live_data.as_deref().unwrap_or(if a.run.quick {
            "256MiB"
        } else {
            "1GiB"
        }))
        .map_err(|e| anyhow::anyhow!("--live-data: {e}"))?;
    if data < (16 << 20) {
        bail!("--live-data must be at least 16MiB");
    }
    Ok(data)
}

pub fn run(a: &super::Args, out: &Path, tiercache: &Path) -> Result<LiveResults> {
    if !tools::present("fio") {
        bail!("fio is not installed (scripts/setup.sh installs it)");
    }
    let quick = a.run.quick;
    let seconds = a.live_seconds.unwrap_or(if quick { 12 } else { 60 });
    let data = data_bytes(a)?;
    let cache_bytes = data / 8;
    let dir = tempfile::Builder::new().prefix("azor-live").tempdir()?;
    let backing = dir.path().join("hdd.img");
    std::fs::File::create(&backing)?.set_len(data)?;
    let mut res = LiveResults {
        data_bytes: data,
        cache_bytes,
        seconds,
        variants: Vec::new(),
        notes: Vec::new(),
        apps: None,
        stopped: None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // The one slow device: the backing file behind the HDD model.
        let sock = dir.path().join("hdd.sock");
        let (hdd_server, hdd_uri) = tools::serve_emulated_hdd(&backing, &sock).await?;
        let mut env = Env {
            tiercache: tiercache.to_path_buf(),
            dir: dir.path().to_path_buf(),
            hdd_uri,
            hdd_sock: sock,
            cache_bytes,
            peer_bytes: cache_bytes,
        };
        let r = async {
            if a.live_seconds != Some(0) {
                for (name, kind) in VARIANTS {
                    eprintln!("reproduce azor: live: fio on {name} ({seconds} s)...");
                    let t = std::time::Instant::now();
                    let v = match start(name, kind, &mut env).await {
                        Ok(v) => v,
                        Err(e) if matches!(kind, Kind::Peer) => {
                            res.notes.push(format!("{e:#}"));
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    let uri = v.uri.clone();
                    let f = tokio::task::spawn_blocking(move || fio(&uri, seconds)).await?;
                    let what = v.what.clone();
                    let hit_ratio = v.stop().await?;
                    res.variants.push(Variant {
                        name,
                        what,
                        fio: f?,
                        hit_ratio,
                        secs: t.elapsed().as_secs_f64(),
                    });
                }
                res.cache_bytes = env.peer_bytes;
            }
            if !a.no_apps {
                match super::apps::run(a, &mut env, data, out).await {
                    Ok(r) => {
                        if !r.failed.is_empty() {
                            res.stopped = Some(r.failed.join("; "));
                        }
                        res.apps = Some(r)
                    }
                    Err(e) => {
                        let m = format!("application workloads stopped: {e:#}");
                        eprintln!("reproduce azor: {m}");
                        res.notes.push(m.clone());
                        res.stopped = Some(m);
                    }
                }
            }
            Ok::<(), anyhow::Error>(())
        }
        .await;
        hdd_server.shutdown().await;
        r
    })?;
    Ok(res)
}

impl LiveResults {
    /// The live section of azor.md.
    pub fn markdown(&self, md: &mut String) {
        if !self.variants.is_empty() {
            self.fio_markdown(md);
        }
        if let Some(a) = &self.apps {
            a.markdown(md);
        }
        for n in &self.notes {
            let _ = writeln!(md, "- {n}");
        }
        md.push('\n');
    }

    fn fio_markdown(&self, md: &mut String) {
        let mib = |b: u64| b >> 20;
        let _ = writeln!(
            md,
            "## Live part: fio zipf through the live cache and the peer\n"
        );
        let _ = writeln!(
            md,
            "**Same slow device for every variant:** one sparse {} MiB file behind the HDD model \
             (`EmulatedHdd`, the default profile's 7200 rpm disk, one actuator) is exported once, by an \
             in-process NBD server on a Unix socket (export `hdd`). The uncached run points fio at that socket; \
             each tiercache variant is formatted and served with that socket's URI as its backing device \
             (`format`/`serve --backing nbd+unix:///hdd?socket=...`, no `--emulate-hdd`: the delay is the shared \
             device's); the peer is `nbdkit --filter=cache nbd socket=... export=hdd` on the same socket. \
             Every cache holds {} MiB (tiercache: its data area, the line count shown; nbdkit: `cache-max-size` set to the \
             fully associative cache's data area), starts cold, and the fio job is the same \
             (`--ioengine=nbd --rw=randrw --rwmixread=80 --bs=4k --iodepth=4 --random_distribution=zipf:1.1 \
             --randseed=42`, {} s).\n",
            mib(self.data_bytes),
            mib(self.cache_bytes),
            self.seconds
        );
        let base = self
            .variants
            .iter()
            .find(|v| v.name == "uncached")
            .map_or(0.0, |v| v.fio.iops());
        let _ = writeln!(
            md,
            "| variant | configuration | IOPS | speedup | read mean µs | write mean µs | hit % | wall s |\n|---|---|---|---|---|---|---|---|"
        );
        for v in &self.variants {
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.2}x | {:.0} | {:.0} | {} | {:.0} |",
                v.name,
                v.what,
                v.fio.iops(),
                if base > 0.0 {
                    v.fio.iops() / base
                } else {
                    f64::NAN
                },
                v.fio.read_mean_us,
                v.fio.write_mean_us,
                v.hit_ratio
                    .map_or("-".into(), |h| format!("{:.1}", h * 100.0)),
                v.secs
            );
        }
        md.push('\n');
        self.comparisons_markdown(md);
        let _ = writeln!(
            md,
            "Notes: IOPS are fio's over the whole run from a cold cache, so they include warm-up. Write-back \
             caches write their dirty lines back at `detach`, after fio's measurement. The peer's cache \
             filter keeps its cache in a temporary file (on the same filesystem as the tiercache cache files) \
             and its writes stay in it until a flush (`cache=writeback`). The raw device carries no filesystem, \
             so 2LBS's metadata level has nothing to prefer; only its frequency level acts.\n"
        );
    }

    /// Each pair of variants compared (IOPS).
    fn comparisons_markdown(&self, md: &mut String) {
        let g = |n: &str| {
            self.variants
                .iter()
                .find(|v| v.name == n)
                .map(|v| v.fio.iops())
        };
        let mut cmp = Vec::new();
        let mut ratio = |label: &str, a: &str, b: &str| {
            if let (Some(x), Some(y)) = (g(a), g(b)) {
                if y > 0.0 {
                    cmp.push(format!("{label}: {:+.0} %", (x / y - 1.0) * 100.0));
                }
            }
        };
        ratio(
            "fully associative over direct-mapped (write-hdd-upd)",
            "fa-upd",
            "dm-upd",
        );
        ratio(
            "write-hdd-upd over write-back (fully associative)",
            "fa-upd",
            "fa-wb",
        );
        ratio(
            "write-hdd-upd over write-back (direct-mapped)",
            "dm-upd",
            "dm-wb",
        );
        ratio("2LBS on over off (direct-mapped)", "dm-upd-2lbs", "dm-upd");
        ratio(
            "2LBS on over off (fully associative)",
            "fa-upd-2lbs",
            "fa-upd",
        );
        ratio(
            "best tiercache (fa-wb) over nbdkit's cache filter",
            "fa-wb",
            "nbdkit-cache",
        );
        ratio(
            "tiercache fa-upd over nbdkit's cache filter",
            "fa-upd",
            "nbdkit-cache",
        );
        for c in cmp {
            let _ = writeln!(md, "- {c}");
        }
        md.push('\n');
    }
}
