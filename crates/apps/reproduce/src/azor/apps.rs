//! The application workloads of `reproduce azor`'s live part: PostMark and
//! pgbench (PostgreSQL) on ext4 and XFS, through each variant of the live
//! part. There is no kernel NBD client here, so each variant's export is
//! turned into a block device the way a user without one would: `nbdfuse`
//! exposes it as a file under a FUSE mount, `losetup --direct-io=on` puts a
//! loop device on that file, and the filesystem is made and mounted on the
//! loop device. Every variant starts from a fresh `mkfs` through its own
//! cache, on the same emulated HDD.

use super::variants::{self, Env, Kind};
use super::workloads::{in_path, pg_bin, pgbench, postmark, Mounted};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// One application run through one variant.
#[derive(Clone, Debug)]
pub struct AppRow {
    pub fs: &'static str,
    pub app: &'static str,
    pub variant: &'static str,
    pub what: String,
    /// PostMark: transactions per second of wall time (creation, the
    /// transactions and deletion); pgbench: TPS.
    pub rate: f64,
    pub wall_s: f64,
    pub hit_ratio: Option<f64>,
    /// The filesystem checked clean (`e2fsck -fn`, `xfs_repair -n`) after
    /// unmounting, read through the same cache.
    pub fsck_clean: bool,
}

/// The results of the application workloads.
pub struct AppResults {
    pub rows: Vec<AppRow>,
    pub notes: Vec<String>,
    /// Runs through tiercache that failed (the others went on): the
    /// reproduction then fails after writing its report.
    pub failed: Vec<String>,
    pub postmark: (u32, u32),
    pub pgbench: (u32, u32),
}

/// The smallest device `mkfs.xfs` formats (it refuses "Filesystem must be
/// larger than 300MB" below this).
const XFS_MIN_BYTES: u64 = 300 << 20;

/// The filesystems of the full run (the quick run makes ext4 only).
const FILESYSTEMS: [&str; 2] = ["ext4", "xfs"];

/// The variants of the application runs: the quick run compares the HDD
/// alone with fully associative write-hdd-upd and write-back; the full run
/// adds direct-mapped, 2LBS and the peer.
fn variants(quick: bool) -> Vec<(&'static str, Kind)> {
    let want: &[&str] = if quick {
        &["uncached", "fa-upd", "fa-wb"]
    } else {
        &[
            "uncached",
            "dm-upd",
            "fa-upd",
            "fa-wb",
            "dm-upd-2lbs",
            "fa-upd-2lbs",
            "nbdkit-cache",
        ]
    };
    variants::VARIANTS
        .iter()
        .filter(|(n, _)| want.contains(n))
        .copied()
        .collect()
}

/// Tools the application runs need, or why they cannot run.
fn missing_tools(fs: &str, app: &str) -> Option<String> {
    let mut need = vec!["nbdfuse", "losetup", "fusermount3", "mount", "umount"];
    need.extend(match fs {
        "ext4" => ["mkfs.ext4", "e2fsck"],
        _ => ["mkfs.xfs", "xfs_repair"],
    });
    if app == "postmark" {
        need.push("postmark");
    } else {
        need.push("runuser");
    }
    let absent: Vec<&str> = need.into_iter().filter(|t| !in_path(t)).collect();
    if !absent.is_empty() {
        return Some(format!(
            "{app} on {fs} not run: {} not installed (scripts/setup.sh installs them)",
            absent.join(", ")
        ));
    }
    if app == "pgbench" && pg_bin().is_none() {
        return Some("pgbench not run: PostgreSQL (initdb, pg_ctl, pgbench) is not installed (scripts/setup.sh installs it)".into());
    }
    if !Path::new("/dev/fuse").exists() || !Path::new("/dev/loop-control").exists() {
        return Some(format!(
            "{app} on {fs} not run: /dev/fuse or /dev/loop-control is missing"
        ));
    }
    None
}

/// Runs every application workload through every variant.
pub(super) async fn run(
    a: &super::Args,
    env: &mut Env,
    data_bytes: u64,
    out: &Path,
) -> Result<AppResults> {
    let quick = a.run.quick;
    let pm = (
        a.postmark_files.unwrap_or(if quick { 40 } else { 100 }),
        a.postmark_transactions
            .unwrap_or(if quick { 80 } else { 200 }),
    );
    let pgb = (
        a.pgbench_scale
            .unwrap_or(((data_bytes >> 20) / 60).clamp(1, 20) as u32),
        a.pgbench_seconds.unwrap_or(60),
    );
    let mut res = AppResults {
        rows: Vec::new(),
        notes: Vec::new(),
        failed: Vec::new(),
        postmark: pm,
        pgbench: pgb,
    };
    for (fs, app) in plan(a) {
        if let Some(m) = missing_tools(fs, app) {
            eprintln!("reproduce azor: {m}");
            res.notes.push(m);
            continue;
        }
        if fs == "xfs" && data_bytes < XFS_MIN_BYTES {
            let m = format!(
                "{app} on xfs skipped: mkfs.xfs needs a device of at least 300 MiB and --live-data is {} MiB",
                data_bytes >> 20
            );
            eprintln!("reproduce azor: {m}");
            res.notes.push(m);
            continue;
        }
        for (name, kind) in variants(quick) {
            run_one(&mut res, env, fs, app, name, kind).await?;
        }
    }
    write_csv(&res, out)?;
    Ok(res)
}

/// The (filesystem, application) pairs to run, as `--apps` and `--quick` say.
fn plan(a: &super::Args) -> Vec<(&'static str, &'static str)> {
    let quick = a.run.quick;
    let fss: &[&'static str] = if quick {
        &FILESYSTEMS[..1]
    } else {
        &FILESYSTEMS
    };
    let apps: Vec<&'static str> = match &a.apps {
        Some(v) => ["postmark", "pgbench"]
            .into_iter()
            .filter(|x| v.iter().any(|y| y == x))
            .collect(),
        None if quick => vec!["postmark"],
        None => vec!["postmark", "pgbench"],
    };
    apps.iter()
        .flat_map(|&app| fss.iter().map(move |&fs| (fs, app)))
        .collect()
}

/// One application run through one variant: a row, or a note (and a
/// failure, through tiercache) if it failed.
async fn run_one(
    res: &mut AppResults,
    env: &mut Env,
    fs: &'static str,
    app: &'static str,
    name: &'static str,
    kind: Kind,
) -> Result<()> {
    let (pm, pgb) = (res.postmark, res.pgbench);
    eprintln!("reproduce azor: live: {app} on {fs} through {name}...");
    let v = match variants::start(name, kind, env).await {
        Ok(v) => v,
        Err(e) if matches!(kind, Kind::Peer) => {
            res.notes.push(format!("{e:#}"));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let work = env.dir.join(format!("app-{fs}-{app}-{name}"));
    std::fs::create_dir_all(&work)?;
    // PostgreSQL runs as postgres: it must reach the mount point.
    for d in [&env.dir, &work] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
    }
    let uri = v.uri.clone();
    let t = Instant::now();
    let r = tokio::task::spawn_blocking(move || -> Result<(f64, bool)> {
        let mut m = Mounted::new(&uri, &work, fs)?;
        let rate = match app {
            "postmark" => postmark(&m, &work, pm.0, pm.1)?,
            _ => pgbench(&mut m, pgb.0, pgb.1)?,
        };
        let clean = m.unmount_and_fsck(fs)?;
        drop(m);
        let _ = std::fs::remove_dir_all(&work);
        Ok((rate, clean))
    })
    .await?;
    let what = v.what.clone();
    let hit_ratio = v.stop().await?;
    // One failed run does not throw away the others: noted, and a
    // failure through tiercache fails the whole reproduction at the end.
    let (rate, fsck_clean) = match r {
        Ok(x) => x,
        Err(e) => {
            let m = format!("{app} on {fs} through {name} failed: {e:#}");
            eprintln!("reproduce azor: {m}");
            res.notes.push(m.clone());
            if !matches!(kind, Kind::Peer) {
                res.failed.push(m);
            }
            return Ok(());
        }
    };
    res.rows.push(AppRow {
        fs,
        app,
        variant: name,
        what,
        rate,
        wall_s: t.elapsed().as_secs_f64(),
        hit_ratio,
        fsck_clean,
    });
    Ok(())
}

/// azor-apps.csv: one line per run.
fn write_csv(res: &AppResults, out: &Path) -> Result<()> {
    let mut csv = String::from("fs,app,variant,rate,unit,speedup,wall_s,hit_ratio,fsck_clean\n");
    for r in &res.rows {
        let _ = writeln!(
            csv,
            "{},{},{},{:.2},{},{:.3},{:.1},{},{}",
            r.fs,
            r.app,
            r.variant,
            r.rate,
            unit(r.app),
            res.speedup(r),
            r.wall_s,
            r.hit_ratio.map_or(String::new(), |h| format!("{h:.4}")),
            r.fsck_clean
        );
    }
    std::fs::write(out.join("azor-apps.csv"), csv)
        .with_context(|| format!("writing {}", out.join("azor-apps.csv").display()))?;
    Ok(())
}

fn unit(app: &str) -> &'static str {
    if app == "postmark" {
        "transactions/s"
    } else {
        "TPS"
    }
}

impl AppResults {
    fn rate(&self, fs: &str, app: &str, variant: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.fs == fs && r.app == app && r.variant == variant)
            .map(|r| r.rate)
    }

    /// Rate over the uncached run of the same filesystem and application.
    fn speedup(&self, r: &AppRow) -> f64 {
        match self.rate(r.fs, r.app, "uncached") {
            Some(b) if b > 0.0 => r.rate / b,
            _ => f64::NAN,
        }
    }

    /// `a` over `b` in percent, on one filesystem and application.
    pub fn gain(&self, fs: &str, app: &str, a: &str, b: &str) -> Option<f64> {
        match (self.rate(fs, app, a), self.rate(fs, app, b)) {
            (Some(x), Some(y)) if y > 0.0 => Some((x / y - 1.0) * 100.0),
            _ => None,
        }
    }

    /// The best tiercache variant's speedup over the HDD alone.
    pub fn best(&self, fs: &str, app: &str) -> Option<(&'static str, f64)> {
        self.rows
            .iter()
            .filter(|r| {
                r.fs == fs && r.app == app && r.variant != "uncached" && r.variant != "nbdkit-cache"
            })
            .map(|r| (r.variant, self.speedup(r)))
            .filter(|(_, s)| s.is_finite())
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The application section of azor.md.
    pub fn markdown(&self, md: &mut String) {
        self.method_markdown(md);
        self.rows_markdown(md);
        self.claims_markdown(md);
        self.comparisons_markdown(md);
        self.notes_markdown(md);
    }

    /// How the application runs were made.
    fn method_markdown(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "## Live part: applications on ext4 and XFS through the live cache\n"
        );
        let _ = writeln!(
            md,
            "Each variant's NBD export (the same emulated HDD behind every one, as above) is made a block \
             device with `nbdfuse` (a file under a FUSE mount) and `losetup --direct-io=on`; the filesystem \
             is made fresh through the variant (`mkfs.ext4 -b 4096 -E lazy_itable_init=0,lazy_journal_init=0,nodiscard`, \
             `mkfs.xfs -K`) and mounted `-o sync` (every write reaches the device before the call returns, as a \
             mail server's fsync per message; without it PostMark's short-lived files never leave the page \
             cache). PostMark: {} files of 4-64 KiB in 10 folders, {} transactions, rate = transactions per \
             second of the whole run including `sync`. pgbench: a fresh PostgreSQL cluster on the mount \
             (shared_buffers 32 MB), `pgbench -i -s {}`, then `pgbench -c 4 -j 2 -T {}` (TPC-B-like), TPS as \
             pgbench reports it. After each run the filesystem is unmounted and checked read-only through \
             the same cache (`e2fsck -fn`, `xfs_repair -n`). Reads are mostly served by the host's page \
             cache (24 GiB of memory), so the device sees mostly writes and the cold reads of each run.\n",
            self.postmark.0, self.postmark.1, self.pgbench.0, self.pgbench.1
        );
    }

    /// One row per run.
    fn rows_markdown(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "| fs | application | variant | configuration | rate | speedup | hit % | fsck | wall s |\n|---|---|---|---|---|---|---|---|---|"
        );
        for r in &self.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.1} {} | {:.2}x | {} | {} | {:.0} |",
                r.fs,
                r.app,
                r.variant,
                r.what,
                r.rate,
                unit(r.app),
                self.speedup(r),
                r.hit_ratio
                    .map_or("-".into(), |h| format!("{:.1}", h * 100.0)),
                if r.fsck_clean { "clean" } else { "ERRORS" },
                r.wall_s
            );
        }
        md.push('\n');
    }

    /// The thesis's application claims beside ours.
    fn claims_markdown(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "| Thesis claim | Ours | Agrees? | Why not |\n|---|---|---|---|"
        );
        let mut line = |claim: &str,
                        app: &str,
                        thesis: f64,
                        f: &dyn Fn(&str) -> Option<(String, f64)>| {
            let got: Vec<(String, f64)> = FILESYSTEMS
                .iter()
                .filter_map(|fs| f(fs).map(|(s, v)| (format!("{fs}: {s}"), v)))
                .collect();
            if got.is_empty() {
                let _ = writeln!(md, "| {claim} | not measured | - | {app} or the variants it needs were not in this run (`--quick` runs fewer) |");
                return;
            }
            let agree = got
                .iter()
                .all(|(_, v)| *v > 0.0 && (*v - thesis).abs() <= thesis.abs() * 0.5);
            let dir = got.iter().all(|(_, v)| *v > 0.0);
            let _ = writeln!(
                md,
                "| {claim} | {} | {} | {} |",
                got.iter()
                    .map(|g| g.0.clone())
                    .collect::<Vec<_>>()
                    .join("; "),
                if agree {
                    "yes"
                } else if dir {
                    "direction yes"
                } else {
                    "no"
                },
                if agree {
                    "-"
                } else {
                    "see the notes below the table"
                }
            );
        };
        line(
            "PostMark: SSD caching up to 1.72x",
            "PostMark",
            72.0,
            &|fs| {
                self.best(fs, "postmark")
                    .map(|(v, s)| (format!("{s:.2}x ({v})"), (s - 1.0) * 100.0))
            },
        );
        line("2LBS adds +28 % on PostMark", "PostMark", 28.0, &|fs| {
            self.gain(fs, "postmark", "fa-upd-2lbs", "fa-upd")
                .map(|g| (format!("{g:+.0} % (FA, write-hdd-upd)"), g))
        });
        line("Hammerora (TPC-C OLTP): +55 %", "pgbench", 55.0, &|fs| {
            self.best(fs, "pgbench").map(|(v, s)| {
                (
                    format!("{:+.0} % ({v})", (s - 1.0) * 100.0),
                    (s - 1.0) * 100.0,
                )
            })
        });
        line("2LBS adds +34 % on Hammerora", "pgbench", 34.0, &|fs| {
            self.gain(fs, "pgbench", "fa-upd-2lbs", "fa-upd")
                .map(|g| (format!("{g:+.0} % (FA, write-hdd-upd)"), g))
        });
        md.push('\n');
    }

    /// Each pair of variants compared, per filesystem and application.
    fn comparisons_markdown(&self, md: &mut String) {
        let mut cmp = Vec::new();
        for fs in FILESYSTEMS {
            for app in ["postmark", "pgbench"] {
                for (label, x, y) in [
                    (
                        "tiercache write-hdd-upd (FA) over the HDD alone",
                        "fa-upd",
                        "uncached",
                    ),
                    (
                        "fully associative over direct-mapped (write-hdd-upd)",
                        "fa-upd",
                        "dm-upd",
                    ),
                    ("write-hdd-upd over write-back (FA)", "fa-upd", "fa-wb"),
                    ("2LBS on over off (FA)", "fa-upd-2lbs", "fa-upd"),
                    ("2LBS on over off (DM)", "dm-upd-2lbs", "dm-upd"),
                    (
                        "tiercache write-back (FA) over nbdkit's cache filter",
                        "fa-wb",
                        "nbdkit-cache",
                    ),
                ] {
                    if let Some(g) = self.gain(fs, app, x, y) {
                        cmp.push(format!("{app} on {fs}: {label}: {g:+.0} %"));
                    }
                }
            }
        }
        for c in cmp {
            let _ = writeln!(md, "- {c}");
        }
        md.push('\n');
    }

    /// Why the figures differ from the thesis, and the run's notes.
    fn notes_markdown(&self, md: &mut String) {
        let _ = writeln!(
            md,
            "Notes: the thesis ran PostMark and Hammerora on a 12-disk RAID-0 behind four X25-E SSDs with \
             data sets far larger than memory, so its reads reached the disks; here one emulated 7200 rpm \
             disk and a host page cache larger than the data set leave the cache mostly writes to serve. \
             write-hdd-upd sends every write to the HDD before it completes (as the thesis's policy does), so \
             on a synchronous, write-dominated run it cannot beat the HDD alone by much; write-back (not an Azor \
             policy) and nbdkit's writeback cache can. 2LBS's metadata level (`--fs-classify auto`) finds the \
             filesystem's metadata from its layout and block contents; it changes which blocks are admitted, \
             not how writes complete. Write-back caches write their dirty lines back at `detach`, after the \
             measurement.\n"
        );
        for n in &self.notes {
            let _ = writeln!(md, "- {n}");
        }
    }
}
