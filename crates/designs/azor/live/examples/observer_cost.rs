//! CPU time per request of the live observers, on their own: the what-if
//! estimates (`whatif::WhatIf::observe`) and the request recorder
//! (`tiercache_runtime::Recorder::record`, into a file under $TMPDIR), for
//! 4 KiB requests (80 % reads) over 4x the cache, a hot tenth taking half.
//! Time on the CPU of this thread (/proc/thread-self/schedstat), so other
//! load on the machine changes it little. End to end through fio:
//! bench/observer_cost.py.
//!
//! usage: cargo run --release -p tiercache-azor-live --example observer_cost [REQUESTS]

use tiercache_azor_live::whatif::WhatIf;
use tiercache_azor_policy::{CacheConfig, Class, IoKind, Request};

/// ns this thread spent on a CPU.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat")
}

fn requests(slots: u64, n: u64) -> impl Iterator<Item = Request> {
    let lines = slots * 4;
    let mut x = 99u64;
    (0..n).map(move |i| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = x >> 20;
        let line = if r.is_multiple_of(2) {
            r % (lines / 10)
        } else {
            r % lines
        };
        Request {
            id: i,
            kind: if (x >> 8).is_multiple_of(5) {
                IoKind::Write
            } else {
                IoKind::Read
            },
            offset: line * 4096,
            len: 4096,
            class: Class::Data,
            fua: false,
        }
    })
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(2_000_000, |s| s.parse().expect("REQUESTS"));
    println!("| observer | cache | ns of CPU per request |");
    println!("|---|---|---|");
    for (cache, eviction) in [(64u64 << 20, "lru"), (64 << 20, "arc"), (4 << 30, "arc")] {
        let cfg = CacheConfig {
            cache_bytes: cache,
            eviction: eviction.parse().unwrap(),
            ..CacheConfig::default()
        };
        let slots = cache / 4096;
        let mut w = WhatIf::new(&cfg, slots);
        let reqs: Vec<Request> = requests(slots, n).collect();
        let t = cpu_ns();
        for r in &reqs {
            w.observe(r);
        }
        let ns = (cpu_ns() - t) as f64 / n as f64;
        println!("| what-if | {} MiB, {eviction} | {ns:.0} |", cache >> 20);
    }
    let dir = tempfile::tempdir().unwrap();
    let rec = tiercache_runtime::Recorder::default();
    rec.start(tiercache_runtime::RecordSpec {
        path: dir.path().join("cost.trace"),
        max_bytes: 1 << 30,
        keep: 1,
    })
    .unwrap();
    let reqs: Vec<Request> = requests(16384, n).collect();
    let t = cpu_ns();
    for r in &reqs {
        rec.record(r.kind, r.offset, r.len, Some(r.class));
    }
    let ns = (cpu_ns() - t) as f64 / n as f64;
    rec.stop().unwrap();
    println!("| recorder | any | {ns:.0} |");
}
