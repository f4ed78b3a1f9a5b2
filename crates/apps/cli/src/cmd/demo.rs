//! `tiercache demo`: the whole system on embedded defaults.
//!
//! Creates a backing file and a cache file in a temporary folder, serves the
//! backing file through the HDD model (an emulated slow disk) twice over NBD:
//! once uncached and once behind a write-back tiercache cache of about 12 %
//! of its size, runs the same fio zipfian random-read workload through each,
//! and prints the hit ratio and the speedup. Everything is removed afterwards.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::process::Command;
use tiercache_reproduce::tools::{fio_json, serve_emulated_hdd};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Seconds of fio workload per run.
    #[arg(long, default_value_t = 8)]
    pub seconds: u32,
    /// Size of the emulated disk's data set.
    #[arg(long, default_value = "128MiB")]
    pub data: String,
}

fn fio(uri: &str, seconds: u32, name: &str) -> Result<(f64, f64)> {
    let out = Command::new("fio")
        .args([
            &format!("--name={name}"),
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randread",
            "--bs=4k",
            "--iodepth=16",
            "--random_distribution=zipf:1.2",
            "--time_based",
            &format!("--runtime={seconds}"),
            "--output-format=json",
        ])
        .output();
    let v = fio_json(out)?;
    let r = &v["jobs"][0]["read"];
    Ok((
        r["iops"].as_f64().unwrap_or(0.0),
        r["clat_ns"]["mean"].as_f64().unwrap_or(0.0) / 1000.0,
    ))
}

pub fn run(a: DemoArgs) -> Result<()> {
    if !tiercache_reproduce::tools::present("fio") {
        bail!("fio is not installed: run scripts/setup.sh first");
    }
    let data = tiercache_sim::units::parse_bytes(&a.data).map_err(anyhow::Error::msg)?;
    let dir = tempfile::tempdir()?;
    let backing = dir.path().join("backing.img");
    let cache = dir.path().join("cache.img");
    std::fs::File::create(&backing)?.set_len(data)?;
    println!(
        "tiercache demo: a {} emulated HDD (7200 rpm model, one actuator), a cache of about 12 % of it",
        tiercache_sim::units::format_bytes(data)
    );
    // The size is the device's (format derives it); the builder checks the rest.
    let cfg = tiercache_simulate::PolicySpec::default().config(4096 << 20)?;
    tiercache_azor_live::format_cache(&cache, &backing, &cfg, Some(data / 8 + (8 << 20)), false)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Uncached: the emulated disk alone.
        let (h, uri) = serve_emulated_hdd(&backing, &dir.path().join("hdd.sock")).await?;
        println!("running fio (zipf 1.2 random 4 KiB reads, queue depth 16, {} s) on the uncached disk...", a.seconds);
        let u = tokio::task::spawn_blocking({
            let (uri, s) = (uri.clone(), a.seconds);
            move || fio(&uri, s, "uncached")
        })
        .await??;
        h.shutdown().await;
        // Cached.
        let sock = dir.path().join("tiercache.sock");
        let args = crate::cmd::live::ServeArgs {
            cache: cache.clone(),
            backing: Some(backing.clone()),
            listen: Some(format!("unix:{}", sock.display())),
            export: "tiercache".into(),
            read_only: false,
            control: Some(dir.path().join("ctl.sock")),
            emulate_hdd: true,
            backing_timeout: std::time::Duration::from_secs(30),
            backing_connections: 4,
            backing_queue_depth: tiercache_io::NBD_MAX_IN_FLIGHT as u16,
            direct: false,
            no_cache: false,
            fs_classify: "off".into(),
            io_engine: "auto".into(),
            threads: None,
            insecure_listen: false,
            tls: Default::default(),
            metrics: None,
            limits: Default::default(),
            record: Default::default(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(crate::cmd::live::serve_async(args, Some(tx)));
        let _uri = rx.await.context("server did not start")?;
        let uri = tiercache_nbd::unix_uri(false, &sock);
        println!("running the same fio workload through tiercache...");
        let c = tokio::task::spawn_blocking({
            let (uri, s) = (uri.clone(), a.seconds);
            move || fio(&uri, s, "cached")
        })
        .await??;
        let st = tiercache_runtime::control::request(&dir.path().join("ctl.sock"), "stats").await?;
        let d = tiercache_runtime::control::request(&dir.path().join("ctl.sock"), "detach").await?;
        let _ = server.await;
        println!();
        println!("                     IOPS    mean latency");
        println!("uncached HDD   {:>10.0}   {:>10.1} µs", u.0, u.1);
        println!("tiercache      {:>10.0}   {:>10.1} µs", c.0, c.1);
        println!(
            "hit ratio {:.1} %, speedup {:.2}x (IOPS), cache detached cleanly: {}",
            st["hit_ratio"].as_f64().unwrap_or(0.0) * 100.0,
            if u.0 > 0.0 { c.0 / u.0 } else { 0.0 },
            d["ok"]
        );
        Ok::<(), anyhow::Error>(())
    })?;
    Ok(())
}
