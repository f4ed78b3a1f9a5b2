//! The live what-if state stays within its stated memory bound
//! (`whatif::MEMORY_BOUND`) over 10 M requests: measured by a counting
//! allocator (the peak of the bytes allocated and not yet freed), and as
//! the state reports it (`memory_bytes`, shown by `stats`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use tiercache_azor_live::whatif::{WhatIf, MEMORY_BOUND};
use tiercache_azor_policy::{CacheConfig, Class, IoKind, Request};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn ten_million_requests_stay_within_the_bound() {
    // A 4 GiB cache of 4 KiB lines, ARC, 8-way; requests over 64 GiB: a
    // hot tenth of the lines takes half the requests.
    let cfg = CacheConfig {
        cache_bytes: 4 << 30,
        eviction: "arc".parse().unwrap(),
        assoc: "8-way".parse().unwrap(),
        ..CacheConfig::default()
    };
    let slots = cfg.cache_bytes / 4096;
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let mut w = WhatIf::new(&cfg, slots);
    let lines = 16u64 << 20;
    let mut x = 7u64;
    let mut reported_max = 0;
    for i in 0..10_000_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = x >> 20;
        let line = if r.is_multiple_of(2) {
            r % (lines / 10)
        } else {
            r % lines
        };
        let kind = if (x >> 8).is_multiple_of(4) {
            IoKind::Write
        } else {
            IoKind::Read
        };
        w.observe(&Request {
            id: i,
            kind,
            offset: line * 4096,
            len: 4096 << ((x >> 4) % 3),
            class: Class::Data,
            fua: false,
        });
        if i % 1_000_000 == 0 {
            reported_max = reported_max.max(w.memory_bytes());
        }
    }
    let v = w.json();
    let reported = w.memory_bytes().max(reported_max);
    let peak = PEAK.load(Ordering::Relaxed) - before;
    eprintln!("what-if after 10 M requests: reported {reported} B, measured peak {peak} B, bound {MEMORY_BOUND} B");
    assert!(reported <= MEMORY_BOUND, "reported {reported} B: {v:#}");
    assert!(peak <= MEMORY_BOUND, "measured peak {peak} B");
    // The report is the memory, not a guess far below it.
    assert!(
        reported * 2 >= peak,
        "reported {reported} B, measured {peak} B"
    );
    assert_eq!(v["requests"], 10_000_000u64);
    assert!(
        v["sizes"][4]["hit_ratio"].as_f64().unwrap() > v["sizes"][0]["hit_ratio"].as_f64().unwrap()
    );
}
