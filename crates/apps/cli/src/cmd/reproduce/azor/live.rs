//! The live part of `reproduce azor`: one emulated HDD (a sparse file behind
//! the HDD model, served by an in-process NBD server on a Unix socket) is the
//! backing device of every variant: fio alone on it (uncached), the live SSD
//! cache in several configurations (`format`/`serve` with the HDD's NBD URI as
//! the backing device) and nbdkit's cache filter (its `nbd` plugin on the same
//! socket). Each variant runs the same fio zipf workload (same seed).

use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tiercache_io::{BlockDev, EmulatedHdd, FileDev, FileDevOptions};

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
    let v = crate::cmd::demo::fio_json(out)?;
    let j = &v["jobs"][0];
    let f = |op: &str, k: &str| j[op][k].as_f64().unwrap_or(0.0);
    Ok(Fio {
        read_iops: f("read", "iops"),
        write_iops: f("write", "iops"),
        read_mean_us: j["read"]["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        write_mean_us: j["write"]["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
    })
}

fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok()
}

/// The tiercache variants: name, associativity, write policy, 2LBS on.
const CACHED: [(&str, &str, &str, bool); 6] = [
    ("dm-upd", "direct", "write-hdd-upd", false),
    ("fa-upd", "full", "write-hdd-upd", false),
    ("fa-wb", "full", "write-back", false),
    ("dm-wb", "direct", "write-back", false),
    ("dm-upd-2lbs", "direct", "write-hdd-upd", true),
    ("fa-upd-2lbs", "full", "write-hdd-upd", true),
];

pub fn run(a: &super::Args, _out: &Path) -> Result<LiveResults> {
    if !have("fio") {
        bail!("fio is not installed (scripts/setup.sh installs it)");
    }
    let seconds = a.live_seconds.unwrap_or(if a.quick { 12 } else { 60 });
    let data = tiercache_sim::units::parse_bytes(a.live_data.as_deref().unwrap_or(if a.quick {
        "256MiB"
    } else {
        "1GiB"
    }))
    .map_err(anyhow::Error::msg)?;
    if data < (16 << 20) {
        bail!("--live-data must be at least 16MiB");
    }
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
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // The one slow device: the backing file behind the HDD model.
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&backing, FileDevOptions::default())?);
        let model = tiercache_model::Profile::default()
            .hdd_model()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let hdd: Arc<dyn tiercache_nbd::Backend> = Arc::new(tiercache_server::passthrough::PassThrough {
            dev: Arc::new(EmulatedHdd::new(dev, model)),
        });
        let sock = dir.path().join("hdd.sock");
        let server = tiercache_nbd::Server::new([("hdd", hdd)]).map_err(|e| anyhow::anyhow!("{e}"))?;
        let hdd_server = server.serve_unix(&sock).await?;
        let hdd_uri = format!("nbd+unix:///hdd?socket={}", sock.display());

        eprintln!("reproduce azor: live: uncached ({seconds} s of fio)...");
        let t = std::time::Instant::now();
        let f = tokio::task::spawn_blocking({
            let u = hdd_uri.clone();
            move || fio(&u, seconds)
        })
        .await??;
        res.variants.push(Variant {
            name: "uncached",
            what: "fio on the emulated HDD alone".into(),
            fio: f,
            hit_ratio: None,
            secs: t.elapsed().as_secs_f64(),
        });

        for (name, assoc, wp, twolbs) in CACHED {
            eprintln!("reproduce azor: live: {name}...");
            let t = std::time::Instant::now();
            let mut spec = super::spec(assoc, "4KiB", wp, if twolbs { "both" } else { "none" });
            if twolbs {
                spec.twolbs_levels = vec!["metadata".into(), "frequency".into()];
            }
            let cfg = spec.config(cache_bytes).map_err(|e| anyhow::anyhow!("{e}"))?;
            let cache = dir.path().join(format!("{name}.img"));
            let layout = tiercache_server::format_cache(
                &cache,
                Path::new(&hdd_uri),
                &cfg,
                Some(cache_bytes + (8 << 20)),
                false,
            )
            .with_context(|| format!("formatting the {name} cache"))?;
            let csock = dir.path().join(format!("{name}.sock"));
            let ctl = dir.path().join(format!("{name}.ctl"));
            let args = crate::cmd::live::ServeArgs {
                cache: cache.clone(),
                backing: Some(hdd_uri.clone().into()),
                listen: Some(format!("unix:{}", csock.display())),
                export: "tiercache".into(),
                read_only: false,
                control: Some(ctl.clone()),
                emulate_hdd: false,
                backing_timeout: Duration::from_secs(30),
                backing_connections: 4,
                direct: false,
                no_cache: false,
                fs_classify: "off".into(),
                io_engine: "auto".into(),
                threads: None,
                insecure_listen: false,
                tls: Default::default(),
                metrics: None,
                limits: Default::default(),
            };
            let (tx, rx) = tokio::sync::oneshot::channel();
            let srv = tokio::spawn(crate::cmd::live::serve_async(args, Some(tx)));
            if rx.await.is_err() {
                let e = srv.await;
                bail!("the {name} cache server did not start: {e:?}");
            }
            let uri = format!("nbd+unix:///tiercache?socket={}", csock.display());
            let f = tokio::task::spawn_blocking(move || fio(&uri, seconds)).await??;
            let st = tiercache_runtime::control::request(&ctl, "stats").await?;
            let _ = tiercache_runtime::control::request(&ctl, "detach").await?;
            srv.await??;
            let _ = std::fs::remove_file(&cache);
            if name == "fa-upd" {
                // The peer gets exactly the fully associative cache's data area.
                res.cache_bytes = layout.slots as u64 * 4096;
            }
            res.variants.push(Variant {
                name,
                what: format!(
                    "tiercache {assoc}, {wp}{}, {} lines of 4 KiB",
                    if twolbs { ", 2LBS (metadata+frequency)" } else { "" },
                    layout.slots
                ),
                fio: f,
                hit_ratio: st["hit_ratio"].as_f64(),
                secs: t.elapsed().as_secs_f64(),
            });
        }

        if have("nbdkit") {
            eprintln!("reproduce azor: live: peer (nbdkit cache filter)...");
            let t = std::time::Instant::now();
            let psock = dir.path().join("peer.sock");
            let pid = dir.path().join("peer.pid");
            let cache_tmp = dir.path().join("peer-tmp");
            std::fs::create_dir_all(&cache_tmp)?;
            let peer_bytes = res.cache_bytes;
            let mut child = Command::new("nbdkit")
                .env("TMPDIR", &cache_tmp)
                .args(["-f", "--exit-with-parent", "-U"])
                .arg(&psock)
                .arg("-P")
                .arg(&pid)
                .args(["--filter=cache", "nbd"])
                .arg(format!("socket={}", sock.display()))
                .arg("export=hdd")
                .arg("cache=writeback")
                .arg("cache-on-read=true")
                .arg(format!("cache-max-size={peer_bytes}"))
                .spawn()
                .context("starting nbdkit")?;
            let mut up = false;
            for _ in 0..100 {
                if pid.exists() && psock.exists() {
                    up = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if up {
                let uri = format!("nbd+unix:///?socket={}", psock.display());
                let f = tokio::task::spawn_blocking(move || fio(&uri, seconds)).await?;
                let _ = child.kill();
                let _ = child.wait();
                res.variants.push(Variant {
                    name: "nbdkit-cache",
                    what: format!(
                        "nbdkit --filter=cache (writeback, cache-on-read, cache-max-size={peer_bytes})"
                    ),
                    fio: f?,
                    hit_ratio: None,
                    secs: t.elapsed().as_secs_f64(),
                });
            } else {
                let _ = child.kill();
                let _ = child.wait();
                res.notes.push("nbdkit did not start: the peer was not measured".into());
            }
        } else {
            res.notes
                .push("nbdkit is not installed: the peer cache was not measured".into());
        }
        hdd_server.shutdown().await;
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(res)
}

impl LiveResults {
    /// The live section of azor.md.
    pub fn markdown(&self, md: &mut String) {
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
        let _ = writeln!(
            md,
            "Notes: IOPS are fio's over the whole run from a cold cache, so they include warm-up. Write-back \
             caches write their dirty lines back at `detach`, after fio's measurement. The peer's cache \
             filter keeps its cache in a temporary file (on the same filesystem as the tiercache cache files) \
             and its writes stay in it until a flush (`cache=writeback`). The raw device carries no filesystem, \
             so 2LBS's metadata level has nothing to prefer; only its frequency level acts.\n"
        );
        for n in &self.notes {
            let _ = writeln!(md, "- {n}");
        }
    }
}
