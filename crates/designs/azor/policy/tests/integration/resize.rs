//! `Engine::resized`: a fully associative cache keeps its lines (those of
//! the slots that remain), its eviction order and its counters; a
//! set-associative one starts again empty with its counters, once every
//! line is clean; dirty slots past the new end are refused.

use tiercache_azor_policy::admission::AdmissionConfig;
use tiercache_azor_policy::eviction::EvictionKind;
use tiercache_azor_policy::{Assoc, CacheConfig, Class, Engine, IoKind, Request, WritePolicy};

const L: u64 = 4096;

fn cfg(lines: u64, assoc: Assoc) -> CacheConfig {
    CacheConfig {
        cache_bytes: lines * L,
        line_bytes: L as u32,
        sub_block_bytes: 4096,
        assoc,
        eviction: EvictionKind::Lru,
        write_policy: WritePolicy::WriteBack,
        write_allocate: true,
        admission: AdmissionConfig::default(),
        dirty_target: 1.0,
        cleaning: Default::default(),
    }
}

fn io(e: &mut Engine, id: u64, kind: IoKind, line: u64) {
    let mut out = Vec::new();
    e.submit(
        &Request {
            id,
            kind,
            offset: line * L,
            len: L,
            class: Class::Data,
            fua: false,
        },
        &mut out,
    );
    e.check_invariants();
}

fn cached(e: &Engine, line: u64) -> bool {
    e.mapping().lookup(line).is_some()
}

#[test]
fn growing_keeps_every_line_and_the_lru_order() {
    let mut e = Engine::new(cfg(8, Assoc::Full)).unwrap();
    e.set_synchronous(true);
    for line in 0..8 {
        io(&mut e, line + 1, IoKind::Read, line);
    }
    io(&mut e, 100, IoKind::Read, 0); // line 0 is now the most recent
    let requests = e.stats().requests;
    let mut g = e.resized(16).unwrap();
    assert_eq!(g.geometry().slots, 16);
    assert_eq!(g.stats().requests, requests, "counters carry over");
    assert!((0..8).all(|l| cached(&g, l)));
    // Eight new slots take eight new lines without evicting any.
    for line in 8..16 {
        io(&mut g, 200 + line, IoKind::Read, line);
    }
    assert!((0..16).all(|l| cached(&g, l)));
    // The next miss evicts the least recent line: 1 (0 was read again).
    io(&mut g, 300, IoKind::Read, 99);
    assert!(!cached(&g, 1) && cached(&g, 0));
}

#[test]
fn shrinking_drops_the_lines_past_the_end_once_they_are_clean() {
    let mut e = Engine::new(cfg(8, Assoc::Full)).unwrap();
    e.set_synchronous(true);
    for line in 0..8 {
        io(&mut e, line + 1, IoKind::Write, line);
    }
    let Err(e2) = e.resized(4) else {
        panic!("a shrink over dirty slots was not refused")
    };
    assert!(e2.contains("still dirty"), "{e2}");
    // Clean everything (the driver writes back before it shrinks).
    let mut ops = Vec::new();
    e.clean(usize::MAX, true, &mut ops);
    for op in &ops {
        let mut more = Vec::new();
        e.complete(op, &mut more);
    }
    assert_eq!(e.dirty_lines(), 0);
    let s = e.resized(4).unwrap();
    s.check_invariants();
    assert_eq!(s.geometry().slots, 4);
    let kept = (0..8).filter(|l| cached(&s, *l)).count();
    assert_eq!(kept, 4);
}

#[test]
fn a_set_associative_cache_starts_again_empty_once_every_line_is_clean() {
    let mut e = Engine::new(cfg(16, Assoc::Ways(4))).unwrap();
    e.set_synchronous(true);
    for line in 0..8 {
        io(&mut e, line + 1, IoKind::Write, line);
    }
    // A dirty line anywhere is refused: the sets change, nothing is kept.
    let Err(err) = e.resized(32) else {
        panic!("a 4-way cache with dirty lines was resized")
    };
    assert!(err.contains("still dirty"), "{err}");
    let mut ops = Vec::new();
    e.clean(usize::MAX, true, &mut ops);
    for op in &ops {
        let mut more = Vec::new();
        e.complete(op, &mut more);
    }
    let requests = e.stats().requests;
    for slots in [32, 8] {
        let g = e.resized(slots).unwrap();
        g.check_invariants();
        assert_eq!(g.geometry().slots, slots);
        assert_eq!(g.geometry().ways, 4);
        assert_eq!(g.stats().requests, requests, "counters carry over");
        assert!((0..8).all(|l| !cached(&g, l)), "every line dropped");
    }
    // The resized cache works: 16 lines fill a 32-slot 4-way cache's sets.
    let mut g = e.resized(32).unwrap();
    for line in 0..16 {
        io(&mut g, 100 + line, IoKind::Read, line);
    }
    assert!((0..16).all(|l| cached(&g, l)));
}
