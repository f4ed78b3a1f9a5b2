//! The same libCacheSim exactness, end to end through the policy core:
//! `Engine` with a fully associative cache of 512-byte lines, read-only
//! workload, admission "always", each trace request submitted as one
//! multi-line read. Its hit ratio (hits / line accesses) must equal
//! libCacheSim's to 1e-4, as the policies alone do in `libcachesim.rs`.
//!
//! P2 (12.7 M line accesses, multi-line requests) is checked at its smallest
//! cache size only, to keep the run short; `libcachesim.rs` covers the rest.

mod common;

use common::{records, reference, trace_dir, Entry, LINE};
use std::collections::BTreeMap;
use tiercache_azor_policy::eviction::EvictionKind;
use tiercache_azor_policy::{Assoc, CacheConfig, Class, Engine, IoKind, Request};

fn engine_hit_ratio(kind: EvictionKind, lines: u32, trace: &[(u64, u64)]) -> f64 {
    let cfg = CacheConfig {
        cache_bytes: u64::from(lines) * LINE,
        line_bytes: LINE as u32,
        sub_block_bytes: LINE as u32,
        assoc: Assoc::Full,
        eviction: kind,
        ..CacheConfig::default()
    };
    let mut engine = Engine::new(cfg).expect("valid configuration");
    assert_eq!(engine.geometry().ways, lines);
    engine.set_synchronous(true);
    let mut ops = Vec::new();
    for (i, &(offset, len)) in trace.iter().enumerate() {
        let req = Request {
            id: i as u64 + 1,
            kind: IoKind::Read,
            offset,
            len,
            class: Class::Data,
            fua: false,
        };
        ops.clear();
        engine.submit(&req, &mut ops);
    }
    engine.stats().hit_ratio()
}

#[test]
fn engine_hit_ratios_match_libcachesim() {
    let Some(dir) = trace_dir() else { return };
    let reference = reference();
    let mut by_trace: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for e in &reference.results {
        by_trace.entry(&e.trace_path).or_default().push(e);
    }
    let mut failures = Vec::new();
    for (rel, entries) in by_trace {
        let path = dir.join(rel);
        if !path.exists() {
            eprintln!("SKIPPED: {} not found", path.display());
            continue;
        }
        let trace = records(&path);
        let first_size = entries[0].cache_size_objects;
        for e in entries {
            if e.trace == "P2" && e.cache_size_objects != first_size {
                continue;
            }
            let kind: EvictionKind = e.policy.parse().unwrap();
            let ours = engine_hit_ratio(kind, e.cache_size_objects, &trace);
            let ok = (ours - e.hit_ratio).abs() <= 1e-4;
            println!(
                "{:5} {:7} {:8}: engine {:.6} libCacheSim {:.6} {}",
                e.trace,
                e.policy,
                e.cache_size_objects,
                ours,
                e.hit_ratio,
                if ok { "ok" } else { "MISMATCH" }
            );
            if !ok {
                failures.push(format!(
                    "{} {} {}: {ours:.6} vs {:.6}",
                    e.trace, e.policy, e.cache_size_objects, e.hit_ratio
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "engine hit ratios differ from libCacheSim:\n{}",
        failures.join("\n")
    );
}
