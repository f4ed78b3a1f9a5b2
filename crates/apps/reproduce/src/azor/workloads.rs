//! The filesystem workloads of the live part, on a variant's export made a
//! block device without a kernel NBD client (nbdfuse, a loop device, mkfs
//! and mount): PostMark and pgbench, and the tools they need.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(super) fn in_path(t: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .any(|d| d.join(t).is_file())
    })
}

/// PostgreSQL's server binaries (Debian keeps them per version).
pub(super) fn pg_bin() -> Option<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("pg_ctl").is_file() && b.join("pgbench").is_file())
        .collect();
    v.sort_by_key(|p| {
        p.parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    v.pop()
}

fn output(c: &mut Command) -> Result<Output> {
    let prog = format!("{:?}", c.get_program());
    c.stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {prog}"))
}

fn check(c: &mut Command) -> Result<String> {
    let what = format!("{c:?}");
    let o = output(c)?;
    if !o.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A filesystem on a variant's export: nbdfuse, loop device, mount.
pub(super) struct Mounted {
    fusedir: PathBuf,
    mnt: PathBuf,
    dev: Option<String>,
    fuse: Option<Child>,
    mounted: bool,
    pg: Option<(PathBuf, PathBuf)>,
}

impl Mounted {
    pub(super) fn new(uri: &str, work: &Path, fs: &str) -> Result<Mounted> {
        let fusedir = work.join("fuse");
        let mnt = work.join("mnt");
        std::fs::create_dir_all(&fusedir)?;
        std::fs::create_dir_all(&mnt)?;
        let pidfile = work.join("nbdfuse.pid");
        let _ = std::fs::remove_file(&pidfile);
        let fuse = Command::new("nbdfuse")
            .arg("-P")
            .arg(&pidfile)
            .arg(&fusedir)
            .arg(uri)
            .stdin(Stdio::null())
            .spawn()
            .context("starting nbdfuse")?;
        let mut m = Mounted {
            fusedir,
            mnt,
            dev: None,
            fuse: Some(fuse),
            mounted: false,
            pg: None,
        };
        let image = m.fusedir.join("nbd");
        let t0 = Instant::now();
        while !(pidfile.exists() && image.exists()) {
            if let Some(st) = m.fuse.as_mut().and_then(|f| f.try_wait().ok().flatten()) {
                bail!("nbdfuse exited ({st}): FUSE is not usable here");
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("nbdfuse did not expose {uri} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Direct I/O on the loop device keeps a second page cache (of the
        // FUSE file) out of the way; fall back where FUSE refuses it.
        let lo = output(
            Command::new("losetup")
                .args(["-f", "--show", "--direct-io=on"])
                .arg(&image),
        )?;
        let lo = if lo.status.success() {
            lo
        } else {
            output(Command::new("losetup").args(["-f", "--show"]).arg(&image))?
        };
        if !lo.status.success() {
            bail!("losetup failed: {}", String::from_utf8_lossy(&lo.stderr));
        }
        let dev = String::from_utf8_lossy(&lo.stdout).trim().to_string();
        m.dev = Some(dev.clone());
        // Full inode tables and journal at mkfs (no lazy init writing in the
        // background during the measurement), no discard.
        match fs {
            "ext4" => check(Command::new("mkfs.ext4").args([
                "-q",
                "-F",
                "-b",
                "4096",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0,nodiscard",
                &dev,
            ]))?,
            _ => check(Command::new("mkfs.xfs").args(["-q", "-f", "-K", &dev]))?,
        };
        // Synchronous writes, as a mail server's fsync per message: without
        // them PostMark's short-lived files never leave the page cache.
        check(
            Command::new("mount")
                .args(["-o", "sync"])
                .arg(&dev)
                .arg(&m.mnt),
        )?;
        m.mounted = true;
        Ok(m)
    }

    /// Unmounts and checks the filesystem read-only; true when clean.
    pub(super) fn unmount_and_fsck(&mut self, fs: &str) -> Result<bool> {
        self.stop_pg();
        if self.mounted {
            // A process that just exited may hold the mount a moment longer.
            let mut tries = 0;
            while let Err(e) = check(Command::new("umount").arg(&self.mnt)) {
                tries += 1;
                if tries == 10 {
                    return Err(e);
                }
                std::thread::sleep(std::time::Duration::from_secs(2));
            }
            self.mounted = false;
        }
        let dev = self.dev.clone().context("no loop device")?;
        let o = match fs {
            "ext4" => output(Command::new("e2fsck").args(["-fn", &dev]))?,
            _ => output(Command::new("xfs_repair").args(["-n", &dev]))?,
        };
        Ok(o.status.success())
    }

    fn stop_pg(&mut self) {
        if let Some((bin, data)) = self.pg.take() {
            let _ = output(
                Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(bin.join("pg_ctl"))
                    .arg("-D")
                    .arg(&data)
                    // The shutdown checkpoint goes through the cache to
                    // the emulated HDD: pg_ctl's default 60 s wait is too
                    // short for some variants (umount then found it busy).
                    .args(["-m", "fast", "-w", "-t", "600", "stop"]),
            );
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.stop_pg();
        if self.mounted {
            let _ = output(Command::new("umount").arg(&self.mnt));
        }
        if let Some(d) = &self.dev {
            let _ = output(Command::new("losetup").args(["-d", d]));
        }
        let _ = output(Command::new("fusermount3").arg("-u").arg(&self.fusedir));
        if let Some(mut f) = self.fuse.take() {
            for _ in 0..100 {
                if f.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = f.kill();
            let _ = f.wait();
        }
    }
}

/// PostMark: `files` initial files of 4-64 KiB in 10 folders, then
/// `transactions`; the rate is transactions per second of the whole run.
pub(super) fn postmark(m: &Mounted, work: &Path, files: u32, transactions: u32) -> Result<f64> {
    let dir = m.mnt.join("postmark");
    std::fs::create_dir_all(&dir)?;
    let cfg = work.join("postmark.cfg");
    std::fs::write(
        &cfg,
        format!(
            "set location {}\nset number {files}\nset transactions {transactions}\n\
             set size 4096 65536\nset subdirectories 10\nset seed 42\nrun\nquit\n",
            dir.display()
        ),
    )?;
    let t = Instant::now();
    let out = check(Command::new("postmark").arg(&cfg))?;
    check(&mut Command::new("sync"))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.contains("seconds of transactions") {
        bail!("PostMark printed no result: {out}");
    }
    Ok(transactions as f64 / secs)
}

/// pgbench on a fresh PostgreSQL cluster on the mount: `pgbench -i -s
/// scale`, then `pgbench -T seconds -c 4 -j 2`; its TPS.
pub(super) fn pgbench(m: &mut Mounted, scale: u32, seconds: u32) -> Result<f64> {
    let bin = pg_bin().context("PostgreSQL is not installed")?;
    let data = m.mnt.join("pgdata");
    let sockdir = m.mnt.join("pgsock");
    for d in [&data, &sockdir] {
        std::fs::create_dir_all(d)?;
        check(Command::new("chown").arg("postgres:postgres").arg(d))?;
    }
    let pg = |c: &str| {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(bin.join(c));
        cmd
    };
    check(
        pg("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "--no-sync", "-U", "postgres"]),
    )?;
    let port = "5439";
    m.pg = Some((bin.clone(), data.clone()));
    check(
        pg("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-w", "-t", "300", "-l"])
            // In a folder postgres owns: the mount point is root's.
            .arg(sockdir.join("pg.log"))
            .arg("-o")
            .arg(format!(
        "-p {port} -k {} -c listen_addresses='' -c shared_buffers=32MB -c max_wal_size=256MB",
        sockdir.display()
    ))
            .arg("start"),
    )?;
    let host = sockdir.display().to_string();
    check(pg("pgbench").args([
        "-h",
        &host,
        "-p",
        port,
        "-q",
        "-i",
        "-s",
        &scale.to_string(),
        "postgres",
    ]))?;
    let out = check(pg("pgbench").args([
        "-h",
        &host,
        "-p",
        port,
        "-c",
        "4",
        "-j",
        "2",
        "-T",
        &seconds.to_string(),
        "postgres",
    ]))?;
    m.stop_pg();
    out.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("tps = ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|x| x.parse::<f64>().ok())
        })
        .with_context(|| format!("pgbench printed no TPS: {out}"))
}
