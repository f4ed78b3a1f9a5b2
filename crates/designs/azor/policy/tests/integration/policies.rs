//! Hand-checked cases for associativity, write policies, admission, partial
//! lines and sequential cutoff. Each expected value is worked out in the
//! comment above it.

use tiercache_azor_policy::admission::{AdmissionConfig, AdmissionKind};
use tiercache_azor_policy::eviction::EvictionKind;
use tiercache_azor_policy::{
    Assoc, CacheConfig, Class, Dev, Engine, IoKind, Op, Purpose, Request, WritePolicy,
};

const L: u64 = 4096;

fn cfg(lines: u64, assoc: Assoc, wp: WritePolicy) -> CacheConfig {
    CacheConfig {
        cache_bytes: lines * L,
        line_bytes: L as u32,
        sub_block_bytes: 4096,
        assoc,
        eviction: EvictionKind::Lru,
        write_policy: wp,
        write_allocate: true,
        admission: AdmissionConfig::default(),
        dirty_target: 1.0,
        cleaning: Default::default(),
    }
}

struct T {
    e: Engine,
    id: u64,
}

impl T {
    fn new(c: CacheConfig) -> T {
        let mut e = Engine::new(c).unwrap();
        e.set_synchronous(true);
        T { e, id: 0 }
    }
    fn io(&mut self, kind: IoKind, offset: u64, len: u64, class: Class) -> Vec<Op> {
        self.id += 1;
        let mut out = Vec::new();
        self.e.submit(
            &Request {
                id: self.id,
                kind,
                offset,
                len,
                class,
                fua: false,
            },
            &mut out,
        );
        self.e.check_invariants();
        out
    }
    fn read(&mut self, line: u64) -> Vec<Op> {
        self.io(IoKind::Read, line * L, L, Class::Data)
    }
    fn read_meta(&mut self, line: u64) -> Vec<Op> {
        self.io(IoKind::Read, line * L, L, Class::Metadata)
    }
    fn write(&mut self, line: u64) -> Vec<Op> {
        self.io(IoKind::Write, line * L, L, Class::Data)
    }
    fn hit(&mut self, line: u64) -> bool {
        let h = self.e.stats().hits;
        self.read(line);
        self.e.stats().hits > h
    }
    fn cached(&self, line: u64) -> bool {
        self.e.mapping().lookup(line).is_some()
    }
}

fn purposes(ops: &[Op]) -> Vec<(Dev, IoKind, Purpose)> {
    let mut v: Vec<_> = ops.iter().map(|o| (o.dev, o.kind, o.purpose)).collect();
    v.sort_by_key(|x| format!("{x:?}"));
    v
}

#[test]
fn direct_mapped_conflicts_on_line_modulo_slots() {
    // 4 slots: lines 1 and 5 map to slot 1 and evict each other; line 2 is independent.
    let mut t = T::new(cfg(4, Assoc::Direct, WritePolicy::WriteThrough));
    t.read(1);
    t.read(2);
    t.read(5);
    assert!(!t.cached(1) && t.cached(5) && t.cached(2));
    assert_eq!(t.e.mapping().lookup(5), Some(1));
    assert!(!t.hit(1)); // conflict miss although the cache has free slots
    assert!(t.hit(2));
    assert_eq!(t.e.stats().evictions, 2);
}

#[test]
fn set_associative_evicts_lru_within_the_set_only() {
    // 8 lines, 2-way: 4 sets; lines 0, 4, 8 share set 0.
    let mut t = T::new(cfg(8, Assoc::Ways(2), WritePolicy::WriteThrough));
    t.read(0);
    t.read(4);
    t.read(0); // 4 is now LRU in set 0
    t.read(8); // evicts 4
    assert!(t.cached(0) && t.cached(8) && !t.cached(4));
    // Set 1 is untouched and still has room for two lines.
    t.read(1);
    t.read(5);
    assert!(t.cached(1) && t.cached(5) && t.cached(0) && t.cached(8));
}

#[test]
fn fully_associative_uses_every_slot_before_evicting() {
    // Lines 1 and 5 would conflict when direct-mapped; fully associative keeps both.
    let mut t = T::new(cfg(4, Assoc::Full, WritePolicy::WriteThrough));
    for l in [1, 5, 9, 13] {
        t.read(l);
    }
    assert_eq!(t.e.stats().evictions, 0);
    assert!(t.hit(1)); // 1 becomes MRU; LRU is 5
    t.read(17);
    assert!(!t.cached(5) && t.cached(1) && t.cached(17));
}

#[test]
fn read_miss_fills_asynchronously_and_hit_reads_cache() {
    let mut t = T::new(cfg(4, Assoc::Full, WritePolicy::WriteBack));
    let ops = t.read(3);
    // Miss: a foreground backing read and a background fill.
    let fg: Vec<_> = ops.iter().filter(|o| o.foreground).collect();
    let bg: Vec<_> = ops.iter().filter(|o| !o.foreground).collect();
    assert_eq!(fg.len(), 1);
    assert_eq!(
        (fg[0].dev, fg[0].purpose, fg[0].offset),
        (Dev::Backing, Purpose::ReadMiss, 3 * L)
    );
    assert_eq!(bg.len(), 1);
    assert_eq!(
        (bg[0].dev, bg[0].purpose, bg[0].len),
        (Dev::Cache, Purpose::Fill, L)
    );
    let ops = t.read(3);
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Cache, IoKind::Read, Purpose::ReadHit)]
    );
}

#[test]
fn small_read_miss_fills_its_whole_sub_block() {
    let mut t = T::new(cfg(4, Assoc::Full, WritePolicy::WriteBack));
    // 512 B at 0 of line 0 (4 KiB line, 4 KiB sub-block): the backing read
    // covers the whole sub-block, 0..4096, into the read's buffer (which
    // spans 0..4096), and the fill writes those 4096 bytes to the slot.
    let req = Request {
        id: 100,
        kind: IoKind::Read,
        offset: 512,
        len: 512,
        class: Class::Data,
        fua: false,
    };
    assert_eq!(t.e.buffer_span(&req), (0, L));
    let ops = t.io(IoKind::Read, 0, 512, Class::Data);
    let slot = t.e.mapping().lookup(0).unwrap() as u64;
    let got: Vec<_> = ops
        .iter()
        .map(|o| (o.dev, o.purpose, o.offset, o.len, o.buf_off, o.foreground))
        .collect();
    assert_eq!(
        got,
        vec![
            (Dev::Backing, Purpose::ReadMiss, 0, L, 0, true),
            (Dev::Cache, Purpose::Fill, slot * L, L, 0, false),
        ]
    );
    // 512 B at 512 and at 1024: hits, each one cache read of its 512 bytes,
    // landing at its offset in the read's buffer (which starts at 0).
    for off in [512, 1024] {
        let ops = t.io(IoKind::Read, off, 512, Class::Data);
        let got: Vec<_> = ops
            .iter()
            .map(|o| (o.dev, o.purpose, o.offset, o.len, o.buf_off))
            .collect();
        assert_eq!(
            got,
            vec![(Dev::Cache, Purpose::ReadHit, slot * L + off, 512, off)]
        );
    }
    // 1 miss, 2 hits out of 3 accesses; one fill; 4096 bytes read from the HDD.
    let s = t.e.stats();
    assert_eq!((s.read_accesses, s.read_hits, s.fills), (3, 2, 1));
    assert_eq!(s.hdd_read_bytes, L);
}

#[test]
fn small_read_miss_reads_only_its_sub_blocks_of_a_long_line() {
    // 16 KiB lines of four 4 KiB sub-blocks.
    let mut c = cfg(4, Assoc::Full, WritePolicy::WriteBack);
    c.line_bytes = 16384;
    c.cache_bytes = 4 * 16384;
    let mut t = T::new(c);
    // 1 KiB at 7680 (straddling sub-blocks 1 and 2): one backing read of
    // 4096..12288 (both whole), one fill of the same 8 KiB; the buffer spans
    // 4096..12288, so the client's bytes are at 3584.
    let ops = t.io(IoKind::Read, 7680, 1024, Class::Data);
    let slot = t.e.mapping().lookup(0).unwrap() as u64;
    let got: Vec<_> = ops
        .iter()
        .map(|o| (o.dev, o.purpose, o.offset, o.len, o.buf_off))
        .collect();
    assert_eq!(
        got,
        vec![
            (Dev::Backing, Purpose::ReadMiss, 4096, 8192, 0),
            (Dev::Cache, Purpose::Fill, slot * 16384 + 4096, 8192, 0),
        ]
    );
    // Sub-block 0 was not read: 512 B at 0 misses and fills sub-block 0 alone;
    // 512 B at 11000 (sub-block 2) hits.
    let h = t.e.stats().read_hits;
    let ops = t.io(IoKind::Read, 0, 512, Class::Data);
    assert!(ops
        .iter()
        .any(|o| o.dev == Dev::Backing && (o.offset, o.len) == (0, 4096)));
    t.io(IoKind::Read, 11000, 512, Class::Data);
    assert_eq!(t.e.stats().read_hits, h + 1);
}

#[test]
fn small_read_miss_not_admitted_reads_only_the_request() {
    // Sequential cutoff at 4 KiB: the stream has run 8192 bytes after the
    // second of two contiguous 4 KiB reads, 8704 after the 512 B read that
    // follows: past the cutoff, it bypasses the cache and reads only its
    // own bytes.
    let mut c = cfg(4, Assoc::Full, WritePolicy::WriteBack);
    c.admission = AdmissionConfig {
        kind: AdmissionKind::SeqCutoff,
        seq_cutoff_bytes: 4096,
        ..Default::default()
    };
    let mut t = T::new(c);
    t.io(IoKind::Read, 0, 4096, Class::Data);
    t.io(IoKind::Read, 4096, 4096, Class::Data);
    let ops = t.io(IoKind::Read, 8192, 512, Class::Data);
    assert!(!t.cached(2));
    let got: Vec<_> = ops.iter().map(|o| (o.dev, o.offset, o.len)).collect();
    assert_eq!(got, vec![(Dev::Backing, 8192, 512)]);
}

#[test]
fn write_back_writes_cache_only_and_cleans_later() {
    let mut t = T::new(cfg(2, Assoc::Full, WritePolicy::WriteBack));
    let ops = t.write(7);
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Cache, IoKind::Write, Purpose::WriteCache)]
    );
    assert_eq!(t.e.dirty_lines(), 1);
    // Evicting the dirty line writes it back first: fill two more lines.
    t.read(1);
    let ops = t.read(2); // evicts 7 (LRU), which is dirty
    let p = purposes(&ops);
    assert!(p.contains(&(Dev::Cache, IoKind::Read, Purpose::WritebackRead)));
    assert!(p.contains(&(Dev::Backing, IoKind::Write, Purpose::WritebackWrite)));
    assert_eq!(t.e.stats().writebacks, 1);
    assert_eq!(t.e.dirty_lines(), 0);
}

#[test]
fn write_through_writes_both_and_acks_on_backing() {
    let mut t = T::new(cfg(4, Assoc::Full, WritePolicy::WriteThrough));
    let ops = t.write(7);
    // write-hdd-ssd: backing write (foreground) plus the cache copy (background).
    assert!(ops
        .iter()
        .any(|o| o.dev == Dev::Backing && o.foreground && o.kind == IoKind::Write));
    assert!(ops
        .iter()
        .any(|o| o.dev == Dev::Cache && !o.foreground && o.kind == IoKind::Write));
    assert!(t.hit(7));
    assert_eq!(t.e.dirty_lines(), 0);
}

#[test]
fn write_hdd_upd_updates_hits_and_never_allocates() {
    let mut t = T::new(cfg(4, Assoc::Full, WritePolicy::WriteHddUpd));
    let ops = t.write(7); // miss: backing only, not cached
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Backing, IoKind::Write, Purpose::WriteBacking)]
    );
    assert!(!t.cached(7));
    t.read(7); // now cached
    let ops = t.write(7); // hit: backing plus cache update
    assert_eq!(
        purposes(&ops),
        vec![
            (Dev::Backing, IoKind::Write, Purpose::WriteBacking),
            (Dev::Cache, IoKind::Write, Purpose::WriteCache)
        ]
    );
    assert!(t.hit(7));
}

#[test]
fn write_hdd_inv_and_read_only_invalidate_on_hit() {
    for wp in [WritePolicy::WriteHddInv, WritePolicy::ReadOnly] {
        let mut t = T::new(cfg(4, Assoc::Full, wp));
        t.read(7);
        assert!(t.cached(7));
        let ops = t.write(7);
        assert_eq!(
            purposes(&ops),
            vec![(Dev::Backing, IoKind::Write, Purpose::WriteBacking)]
        );
        assert!(!t.cached(7), "{wp}: the stale copy is gone");
        assert!(!t.hit(7));
        t.write(9);
        assert!(!t.cached(9), "{wp}: writes never allocate");
    }
}

#[test]
fn no_write_allocate_sends_write_misses_to_backing() {
    let mut c = cfg(4, Assoc::Full, WritePolicy::WriteBack);
    c.write_allocate = false;
    let mut t = T::new(c);
    let ops = t.write(3);
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Backing, IoKind::Write, Purpose::WriteBacking)]
    );
    assert!(!t.cached(3));
}

#[test]
fn partial_lines_keep_sub_block_valid_bits_without_read_modify_write() {
    // 16 KiB lines of four 4 KiB sub-blocks.
    let mut c = cfg(4, Assoc::Full, WritePolicy::WriteBack);
    c.cache_bytes = 4 * 16384;
    c.line_bytes = 16384;
    let mut t = T::new(c);
    // Write sub-block 1 of line 0 only: no backing read at all.
    let ops = t.io(IoKind::Write, 4096, 4096, Class::Data);
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Cache, IoKind::Write, Purpose::WriteCache)]
    );
    let slot = t.e.mapping().lookup(0).unwrap();
    let bits = &t.e.mapping().bits;
    assert!(
        !bits.valid(slot, 0) && bits.valid(slot, 1) && bits.dirty(slot, 1) && !bits.valid(slot, 2)
    );
    // Reading the whole line: sub-block 1 from the cache (it is dirty: the backing copy is stale),
    // sub-blocks 0 and 2..3 from the backing device, which are then filled.
    let ops = t.io(IoKind::Read, 0, 16384, Class::Data);
    let cache_reads: Vec<_> = ops
        .iter()
        .filter(|o| o.dev == Dev::Cache && o.kind == IoKind::Read)
        .collect();
    assert_eq!(cache_reads.len(), 1);
    assert_eq!(
        (
            cache_reads[0].offset % 16384,
            cache_reads[0].len,
            cache_reads[0].buf_off
        ),
        (4096, 4096, 4096)
    );
    let backing: Vec<_> = ops
        .iter()
        .filter(|o| o.dev == Dev::Backing)
        .map(|o| (o.offset, o.len))
        .collect();
    assert_eq!(backing, vec![(0, 4096), (8192, 8192)]);
    let s = t.e.stats();
    assert_eq!(s.read_accesses - s.read_hits, 1);
    // Now the whole line is valid: a hit.
    assert!(t.hit(0));
}

#[test]
fn unaligned_partial_sub_block_write_goes_around_an_invalid_sub_block() {
    let mut t = T::new(cfg(4, Assoc::Full, WritePolicy::WriteBack));
    // 512 bytes inside an uncached 4 KiB line: cannot be made valid without the rest; write to backing.
    let ops = t.io(IoKind::Write, 8192 + 512, 512, Class::Data);
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Backing, IoKind::Write, Purpose::WriteBacking)]
    );
    assert!(!t.cached(2));
    // Once the line is cached, the same partial write updates the cache (dirty).
    t.read(2);
    let ops = t.io(IoKind::Write, 8192 + 512, 512, Class::Data);
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Cache, IoKind::Write, Purpose::WriteCache)]
    );
    assert_eq!(t.e.dirty_lines(), 1);
}

#[test]
fn sequential_cutoff_bypasses_long_streams_only() {
    let mut c = cfg(64, Assoc::Full, WritePolicy::WriteThrough);
    c.admission = AdmissionConfig {
        kind: AdmissionKind::SeqCutoff,
        seq_cutoff_bytes: 16384,
        ..Default::default()
    };
    let mut t = T::new(c);
    for l in 0..8 {
        t.read(l); // a stream of 4 KiB reads: 16 KiB run after four of them
    }
    // Lines 0..3 were admitted (run <= 16 KiB); 4..7 bypassed.
    assert!((0..4).all(|l| t.cached(l)));
    assert!((4..8).all(|l| !t.cached(l)));
    assert_eq!(t.e.stats().admission_rejects, 4);
    // Bypass does not stop hits: a random read of line 2 hits.
    assert!(t.hit(2));
}

#[test]
fn nhit_admits_on_third_access_once_full() {
    let mut c = cfg(2, Assoc::Full, WritePolicy::WriteThrough);
    c.admission = AdmissionConfig {
        kind: AdmissionKind::Nhit,
        nhit_threshold: 3,
        nhit_trigger: 0.0,
        ..Default::default()
    };
    let mut t = T::new(c);
    t.read(1);
    t.read(1);
    assert!(!t.cached(1));
    t.read(1);
    assert!(t.cached(1));
}

fn two_level(lines: u64, assoc: Assoc) -> T {
    let mut c = cfg(lines, assoc, WritePolicy::WriteHddUpd);
    c.admission = AdmissionConfig {
        kind: AdmissionKind::TwoLevel,
        ..Default::default()
    };
    T::new(c)
}

#[test]
fn two_level_empty_slot_admits() {
    let mut t = two_level(4, Assoc::Direct);
    t.read(1);
    assert!(t.cached(1));
}

#[test]
fn two_level_metadata_beats_data_and_data_never_evicts_metadata() {
    let mut t = two_level(4, Assoc::Direct);
    t.read(1); // data in slot 1
    t.read_meta(5); // metadata wins over data: admitted, line 1 evicted
    assert!(t.cached(5) && !t.cached(1));
    for _ in 0..5 {
        t.read(9); // data, however hot, never evicts metadata
    }
    assert!(t.cached(5) && !t.cached(9));
    assert_eq!(t.e.stats().admission_rejects, 5);
    t.read_meta(13); // metadata replaces metadata
    assert!(t.cached(13));
}

#[test]
fn two_level_data_against_data_by_access_count() {
    let mut t = two_level(4, Assoc::Direct);
    t.read(1);
    t.read(1);
    t.read(1); // line 1: 3 accesses, cached in slot 1
    t.read(5); // 1 access < 3: rejected
    t.read(5); // 2 < 3: rejected
    assert!(t.cached(1) && !t.cached(5));
    t.read(5); // 3 = 3: a tie keeps the occupant
    assert!(t.cached(1));
    t.read(5); // 4 > 3: admitted
    assert!(t.cached(5) && !t.cached(1));
}

#[test]
fn two_level_overrides_the_lru_victim_in_full_associativity() {
    let mut t = two_level(2, Assoc::Full);
    t.read_meta(1);
    t.read(2);
    t.read(2); // LRU order: 1 (metadata) is the victim candidate
    t.read(3); // data against the metadata victim: rejected although 2 is data
    assert!(t.cached(1) && t.cached(2) && !t.cached(3));
}

#[test]
fn trim_drops_cached_and_dirty_data() {
    let mut t = T::new(cfg(4, Assoc::Full, WritePolicy::WriteBack));
    t.write(3);
    assert_eq!(t.e.dirty_lines(), 1);
    let ops = t.io(IoKind::Trim, 3 * L, L, Class::Data);
    assert_eq!(
        purposes(&ops),
        vec![(Dev::Backing, IoKind::Trim, Purpose::Trim)]
    );
    assert!(!t.cached(3));
    assert_eq!(t.e.dirty_lines(), 0);
}

#[test]
fn impossible_configurations_are_refused_with_what_is_allowed() {
    let base = cfg(4, Assoc::Full, WritePolicy::WriteBack);
    let err = |c: CacheConfig| Engine::new(c).err().expect("refused").to_string();
    assert!(err(CacheConfig {
        line_bytes: 3000,
        ..base.clone()
    })
    .contains("power of two from 512 B to 1 MiB"));
    assert!(err(CacheConfig {
        line_bytes: 2 << 20,
        ..base.clone()
    })
    .contains("allowed"));
    assert!(err(CacheConfig {
        cache_bytes: 0,
        ..base.clone()
    })
    .contains("zero"));
    assert!(err(CacheConfig {
        cache_bytes: 1024,
        ..base.clone()
    })
    .contains("larger than the cache size"));
    assert!(err(CacheConfig {
        assoc: Assoc::Ways(8),
        ..base.clone()
    })
    .contains("8-way needs at least 8 lines"));
    assert!(err(CacheConfig {
        sub_block_bytes: 8192,
        ..base.clone()
    })
    .contains("sub-block"));
    assert!("lfu"
        .parse::<EvictionKind>()
        .unwrap_err()
        .contains("allowed: lru, fifo, arc, s3fifo"));
    assert!("write-sideways"
        .parse::<WritePolicy>()
        .unwrap_err()
        .contains("allowed"));
    assert!("0-way".parse::<Assoc>().unwrap_err().contains("allowed"));
}

#[test]
fn metadata_footprint_beats_azor_at_4k_lines() {
    // Azor: 1.28 MB/GiB direct-mapped, 6.04 MB/GiB fully associative, 4 KiB lines.
    for (assoc, azor) in [
        (Assoc::Direct, 1.28e6),
        (Assoc::Full, 6.04e6),
        (Assoc::Ways(8), 6.04e6),
    ] {
        let mut c = cfg(1 << 18, assoc, WritePolicy::WriteBack); // 1 GiB
        c.eviction = EvictionKind::Lru;
        let e = Engine::new(c).unwrap();
        let per_gib = e.metadata_bytes_per_gib();
        assert!(per_gib < azor, "{assoc}: {per_gib} B/GiB >= Azor's {azor}");
    }
}

/// A request's backing-device I/O does not depend on where its lines land in
/// the cache: a 1 MiB read miss is one 1 MiB backing read, and a 1 MiB
/// write-through write one 1 MiB backing write, for every associativity and
/// whether or not dependencies are tracked. (A set-associative cache scatters
/// the 256 lines over 256 cache runs; the engine once closed every open run
/// each few lines, which cut the backing run into pieces of about 3 lines.)
#[test]
fn a_request_is_one_backing_op_whatever_the_associativity() {
    const MIB: u64 = 1 << 20;
    for assoc in [Assoc::Direct, Assoc::Ways(4), Assoc::Full] {
        for synchronous in [true, false] {
            for wp in [
                WritePolicy::WriteBack,
                WritePolicy::WriteThrough,
                WritePolicy::ReadOnly,
            ] {
                let mut t = T::new(cfg(1024, assoc, wp));
                t.e.set_synchronous(synchronous);
                let case = format!("{assoc} {wp:?} synchronous={synchronous}");
                let ops = t.io(IoKind::Read, 8 * MIB, MIB, Class::Data);
                let backing: Vec<_> = ops.iter().filter(|o| o.dev == Dev::Backing).collect();
                assert_eq!(backing.len(), 1, "{case}: {backing:?}");
                assert_eq!(
                    (backing[0].kind, backing[0].offset, backing[0].len),
                    (IoKind::Read, 8 * MIB, MIB),
                    "{case}"
                );
                // Every line was filled, each from that one read.
                let fills: u64 = ops
                    .iter()
                    .filter(|o| o.purpose == Purpose::Fill)
                    .map(|o| o.len)
                    .sum();
                assert_eq!(fills, MIB, "{case}");
                assert_eq!(t.e.stats().hdd_ops, 1, "{case}");
                if wp == WritePolicy::WriteBack {
                    continue;
                }
                let ops = t.io(IoKind::Write, 16 * MIB, MIB, Class::Data);
                let backing: Vec<_> = ops.iter().filter(|o| o.dev == Dev::Backing).collect();
                assert_eq!(backing.len(), 1, "{case}: {backing:?}");
                assert_eq!(
                    (backing[0].kind, backing[0].len),
                    (IoKind::Write, MIB),
                    "{case}"
                );
            }
        }
    }
}
