//! CPU time per 4 KiB random write of the live cache, without NBD:
//! `cargo run --release -p tiercache-tica-live --example write_cpu -- DIR [WRITES]`.
//! Formats a pair of 128 MiB SSD files over a 64 MiB backing file in DIR
//! (16 MiB of DRAM, the benchmark's sizes), fills and reads every page once,
//! then times WRITES random page writes (process CPU time, all threads).

use std::sync::Arc;
use std::time::Instant;

use tiercache_tica_live::{format, open, FormatOptions, OpenOptions, ThreeLevel, PAGE};
use tiercache_tica_policy::Policy;

/// utime + stime of the process (all threads), from /proc/self/stat.
fn cpu_secs() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn write(c: &ThreeLevel, off: u64, data: &[u8]) {
    match c.write_inline(off, data, false) {
        Some(r) => r.unwrap(),
        None => c.write(off, data, false).unwrap(),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("DIR"));
    let n: u64 = args.next().map_or(300_000, |s| s.parse().unwrap());
    let size = 64u64 << 20;
    let backing = dir.join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(size)
        .unwrap();
    let o = FormatOptions {
        ro_ssd: dir.join("ro.img"),
        wo_ssd: dir.join("wo.img"),
        backing: backing.clone(),
        dram_bytes: 16 << 20,
        policy: Policy::Adaptive,
        create_size: Some(size + (64 << 20)),
        force: true,
        max_size: None,
    };
    format(&o).unwrap();
    let c: Arc<ThreeLevel> = open(&OpenOptions {
        ssd: o.wo_ssd.clone(),
        backing: None,
        direct: false,
        emulate_hdd: false,
    })
    .unwrap();
    c.start_background();
    let page = vec![7u8; PAGE as usize];
    let pages = size / PAGE;
    for p in 0..pages {
        write(&c, p * PAGE, &page);
    }
    c.flush().unwrap();
    for p in 0..pages {
        c.read(p * PAGE, PAGE as usize).unwrap();
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let (c0, t0) = (cpu_secs(), Instant::now());
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        write(&c, (x % pages) * PAGE, &page);
    }
    let (cpu, wall) = (cpu_secs() - c0, t0.elapsed().as_secs_f64());
    println!(
        "{n} writes: {:.2} us CPU/write, {:.2} us wall/write",
        cpu / n as f64 * 1e6,
        wall / n as f64 * 1e6
    );
    c.stop_background();
}
