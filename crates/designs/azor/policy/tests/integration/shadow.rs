//! Property tests of the core against a shadow model.
//!
//! Random requests drive the engine; its ops run on two simulated devices
//! that store, per 512-byte sector, the id of the write that produced it.
//! Ops run in a random order that respects their dependencies, and
//! background ops (fills, writebacks) may linger across requests. Like a
//! real client with a queue depth, several requests may be in flight at once
//! (reads beside writes; overlapping writes are serialized, as their final
//! content would be undefined). The shadow model is the latest acknowledged
//! write id of each sector. Checked:
//! - every read returns, per sector, the write acknowledged last before the
//!   read was sent or one still in flight at that time or sent since (never stale);
//! - after forced cleaning, the backing device alone equals the shadow
//!   (no dirty data dropped without writeback);
//! - the engine's invariants and counters hold throughout.

use proptest::prelude::*;
use rustc_hash::FxHashMap;
use std::collections::{HashMap, HashSet};
use tiercache_azor_policy::admission::{AdmissionConfig, AdmissionKind};
use tiercache_azor_policy::eviction::EvictionKind;
use tiercache_azor_policy::{
    Assoc, CacheConfig, Class, Dev, Engine, IoKind, Op, Request, Source, WritePolicy,
};

const SECTOR: u64 = 512;

#[derive(Clone, Debug)]
struct Cmd {
    kind: IoKind,
    sector: u64,
    sectors: u64,
    meta: bool,
    /// Low bits: how many pending ops to complete (in random order) before the
    /// next request; bit 4: send the next request without waiting for this one.
    drain: u8,
}

fn cmd() -> impl Strategy<Value = Cmd> {
    (0u8..10, 0u64..256, 1u64..40, any::<bool>(), any::<u8>()).prop_map(
        |(k, sector, sectors, meta, drain)| Cmd {
            kind: match k {
                0..=4 => IoKind::Read,
                5..=8 => IoKind::Write,
                _ => IoKind::Trim,
            },
            sector,
            sectors,
            meta,
            drain,
        },
    )
}

fn config() -> impl Strategy<Value = CacheConfig> {
    (
        prop_oneof![
            Just(Assoc::Direct),
            Just(Assoc::Ways(2)),
            Just(Assoc::Ways(4)),
            Just(Assoc::Full)
        ],
        prop_oneof![Just(512u32), Just(2048), Just(4096), Just(16384)],
        prop_oneof![Just(512u32), Just(4096)],
        0usize..5,
        0usize..4,
        0usize..4,
        any::<bool>(),
        4u64..24,
    )
        .prop_map(|(assoc, line, sub, wp, ev, adm, alloc, lines)| {
            let sub = sub.min(line);
            let kind = [
                AdmissionKind::Always,
                AdmissionKind::SeqCutoff,
                AdmissionKind::Nhit,
                AdmissionKind::TwoLevel,
            ][adm];
            CacheConfig {
                cache_bytes: lines * line as u64,
                line_bytes: line,
                sub_block_bytes: sub,
                assoc,
                eviction: EvictionKind::ALL[ev],
                write_policy: WritePolicy::ALL[wp].0,
                write_allocate: alloc,
                admission: AdmissionConfig {
                    kind,
                    seq_cutoff_bytes: 8192,
                    nhit_threshold: 2,
                    nhit_trigger: 0.5,
                    ..Default::default()
                },
                dirty_target: 0.5,
                cleaning: Default::default(),
            }
        })
}

/// Devices holding write ids per sector, plus buffers of requests and writeback reads.
#[derive(Default)]
struct World {
    cache: FxHashMap<u64, u64>,
    backing: FxHashMap<u64, u64>,
    req_bufs: HashMap<u64, Vec<u64>>,
    /// Sectors of a request's buffer before its first byte (a read's buffer
    /// starts at the request's first sub-block).
    req_skip: HashMap<u64, usize>,
    op_bufs: HashMap<u64, Vec<u64>>,
    pending: Vec<Op>,
    done: HashSet<u64>,
    /// Foreground ops still pending per request.
    fg_left: HashMap<u64, usize>,
    /// Requests whose last foreground op just completed (acknowledged to the client).
    acked: Vec<u64>,
}

impl World {
    fn ready(&self) -> Vec<usize> {
        (0..self.pending.len())
            .filter(|&i| self.pending[i].waits_for().all(|d| self.done.contains(&d)))
            .collect()
    }

    fn run(&mut self, i: usize, eng: &mut Engine) {
        let op = self.pending.swap_remove(i);
        let n = (op.len / SECTOR) as usize;
        assert_eq!(
            op.len % SECTOR,
            0,
            "test requests are sector aligned: {op:?}"
        );
        let first = op.offset / SECTOR;
        match op.kind {
            IoKind::Read => {
                let dev = if op.dev == Dev::Cache {
                    &self.cache
                } else {
                    &self.backing
                };
                let data: Vec<u64> = (0..n as u64)
                    .map(|k| dev.get(&(first + k)).copied().unwrap_or(0))
                    .collect();
                if op.req != 0 {
                    let buf = self.req_bufs.get_mut(&op.req).expect("request buffer");
                    let b = (op.buf_off / SECTOR) as usize;
                    buf[b..b + n].copy_from_slice(&data);
                } else {
                    self.op_bufs.insert(op.id, data);
                }
            }
            IoKind::Write => {
                let data: Vec<u64> = match op.src {
                    Source::Request => {
                        let b = (op.buf_off / SECTOR) as usize;
                        self.req_bufs[&op.req][b..b + n].to_vec()
                    }
                    Source::Op(id) => self
                        .op_bufs
                        .get(&id)
                        .expect("writeback read ran first")
                        .clone(),
                    Source::Ops(first, k) => (first..first + k as u64)
                        .flat_map(|id| {
                            self.op_bufs
                                .get(&id)
                                .unwrap_or_else(|| panic!("writeback read {id} missing for {op:?}"))
                                .clone()
                        })
                        .collect(),
                    Source::None => panic!("write without data: {op:?}"),
                };
                assert_eq!(data.len(), n, "writeback data length: {op:?}");
                let dev = if op.dev == Dev::Cache {
                    &mut self.cache
                } else {
                    &mut self.backing
                };
                for (k, v) in data.into_iter().enumerate() {
                    dev.insert(first + k as u64, v);
                }
            }
            IoKind::Trim => {
                // Trimmed data reads back as anything; the shadow stops checking it.
                for k in 0..n as u64 {
                    self.backing.insert(first + k, u64::MAX);
                }
            }
            IoKind::Flush => {}
        }
        self.done.insert(op.id);
        if op.foreground {
            let left = self.fg_left.get_mut(&op.req).unwrap();
            *left -= 1;
            if *left == 0 {
                self.acked.push(op.req);
            }
        }
        let mut out = Vec::new();
        eng.complete(&op, &mut out);
        self.pending.extend(out);
    }
}

/// A request the client sent and has not seen acknowledged yet.
struct InFlight {
    cmd: Cmd,
    /// For reads: per sector, the write acknowledged last when the read was sent.
    floor: Vec<u64>,
}

fn overlaps(a: &Cmd, b: &Cmd) -> bool {
    a.sector < b.sector + b.sectors && b.sector < a.sector + a.sectors
}

fn check(cfg: CacheConfig, cmds: Vec<Cmd>, seed: u64) -> Result<(), TestCaseError> {
    let mut eng = Engine::new(cfg.clone()).expect("valid config");
    let mut w = World::default();
    // Latest acknowledged write id per sector; u64::MAX = trimmed (unchecked).
    let mut shadow: FxHashMap<u64, u64> = FxHashMap::default();
    // Newest write sent per sector and newest trim sent per sector (acknowledged or not).
    let mut sent: FxHashMap<u64, u64> = FxHashMap::default();
    let mut trims: FxHashMap<u64, u64> = FxHashMap::default();
    let mut inflight: HashMap<u64, InFlight> = HashMap::new();
    let mut rng = seed;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Acknowledge finished requests: check reads, make writes the shadow.
    let settle = |w: &mut World,
                  inflight: &mut HashMap<u64, InFlight>,
                  shadow: &mut FxHashMap<u64, u64>,
                  sent: &FxHashMap<u64, u64>,
                  trims: &FxHashMap<u64, u64>|
     -> Result<(), TestCaseError> {
        for id in std::mem::take(&mut w.acked) {
            let f = inflight.remove(&id).expect("acked request was in flight");
            let c = &f.cmd;
            match c.kind {
                IoKind::Read => {
                    let buf = &w.req_bufs[&id];
                    let skip = w.req_skip[&id];
                    for s in 0..c.sectors {
                        let sector = c.sector + s;
                        let (floor, got) = (f.floor[s as usize], buf[skip + s as usize]);
                        let newest = sent.get(&sector).copied().unwrap_or(0);
                        // A trim sent since makes the content undefined.
                        let trimmed = trims.get(&sector).is_some_and(|&t| t > floor);
                        let ok = floor == u64::MAX
                            || trimmed
                            || (got != u64::MAX && got >= floor && got <= newest.max(floor));
                        prop_assert!(
                            ok,
                            "stale read of sector {} (request {}): got write {}, acknowledged before the read {}, newest sent {} ({:?})",
                            sector,
                            id,
                            got,
                            floor,
                            newest,
                            cfg
                        );
                    }
                }
                IoKind::Write => {
                    for s in 0..c.sectors {
                        shadow.insert(c.sector + s, id);
                    }
                }
                IoKind::Trim => {
                    for s in 0..c.sectors {
                        shadow.insert(c.sector + s, u64::MAX);
                    }
                }
                IoKind::Flush => {}
            }
        }
        Ok(())
    };
    for (k, c) in cmds.iter().enumerate() {
        let id = k as u64 + 1;
        let writes = matches!(c.kind, IoKind::Write | IoKind::Trim);
        // Overlapping writes are serialized; at most 4 requests are in flight.
        while inflight.len() >= 4
            || (writes
                && inflight
                    .values()
                    .any(|f| f.cmd.kind != IoKind::Read && overlaps(&f.cmd, c)))
        {
            let r = w.ready();
            prop_assert!(!r.is_empty(), "deadlock: pending {:?}", w.pending);
            let pick = r[(next() as usize) % r.len()];
            w.run(pick, &mut eng);
            settle(&mut w, &mut inflight, &mut shadow, &sent, &trims)?;
        }
        let req = Request {
            id,
            kind: c.kind,
            offset: c.sector * SECTOR,
            len: c.sectors * SECTOR,
            class: if c.meta { Class::Metadata } else { Class::Data },
            fua: false,
        };
        // A read's buffer spans the request widened to whole sub-blocks.
        let (start, span) = eng.buffer_span(&req);
        let buf: Vec<u64> = match c.kind {
            IoKind::Write => vec![id; c.sectors as usize],
            _ => vec![0; (span / SECTOR) as usize],
        };
        w.req_bufs.insert(id, buf);
        w.req_skip
            .insert(id, ((req.offset - start) / SECTOR) as usize);
        let floor = (0..c.sectors)
            .map(|s| shadow.get(&(c.sector + s)).copied().unwrap_or(0))
            .collect();
        if writes {
            for s in 0..c.sectors {
                if c.kind == IoKind::Trim {
                    trims.insert(c.sector + s, id);
                } else {
                    sent.insert(c.sector + s, id);
                }
            }
        }
        inflight.insert(
            id,
            InFlight {
                cmd: c.clone(),
                floor,
            },
        );
        let mut out = Vec::new();
        eng.submit(&req, &mut out);
        eng.clean(2, false, &mut out);
        let fg = out.iter().filter(|o| o.foreground && o.req == id).count();
        w.fg_left.insert(id, fg);
        if fg == 0 {
            w.acked.push(id);
        }
        w.pending.extend(out);
        settle(&mut w, &mut inflight, &mut shadow, &sent, &trims)?;
        // Usually the client waits for its request; sometimes it sends the next one first.
        if c.drain & 0x10 == 0 {
            while inflight.contains_key(&id) {
                let r = w.ready();
                prop_assert!(!r.is_empty(), "deadlock: pending {:?}", w.pending);
                let pick = r[(next() as usize) % r.len()];
                w.run(pick, &mut eng);
                settle(&mut w, &mut inflight, &mut shadow, &sent, &trims)?;
            }
        }
        // Let some ops run.
        for _ in 0..(c.drain % 4) {
            let r = w.ready();
            if r.is_empty() {
                break;
            }
            let pick = r[(next() as usize) % r.len()];
            w.run(pick, &mut eng);
            settle(&mut w, &mut inflight, &mut shadow, &sent, &trims)?;
        }
        eng.check_invariants();
    }
    // The client waits for everything it sent.
    while !inflight.is_empty() {
        let r = w.ready();
        prop_assert!(!r.is_empty(), "deadlock: pending {:?}", w.pending);
        let pick = r[(next() as usize) % r.len()];
        w.run(pick, &mut eng);
        settle(&mut w, &mut inflight, &mut shadow, &sent, &trims)?;
    }
    // Detach: clean everything, run every op, then the backing device alone must be current.
    let mut out = Vec::new();
    eng.clean(usize::MAX, true, &mut out);
    for o in &out {
        w.fg_left.entry(o.req).or_insert(0);
    }
    w.pending.extend(out);
    while !w.pending.is_empty() {
        let r = w.ready();
        prop_assert!(
            !r.is_empty(),
            "deadlock at detach: {:?} done {:?}",
            w.pending,
            w.done
        );
        w.run(r[0], &mut eng);
    }
    prop_assert_eq!(eng.dirty_lines(), 0);
    for (&sector, &v) in &shadow {
        if v != u64::MAX {
            prop_assert_eq!(
                w.backing.get(&sector).copied().unwrap_or(0),
                v,
                "sector {} lost after detach ({:?})",
                sector,
                cfg
            );
        }
    }
    eng.check_invariants();
    let s = eng.stats();
    prop_assert_eq!(s.requests, cmds.len() as u64);
    prop_assert!(s.read_hits <= s.read_accesses && s.write_hits <= s.write_accesses);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn never_stale_never_loses_dirty_data(cfg in config(), cmds in prop::collection::vec(cmd(), 1..120), seed in 1u64..u64::MAX) {
        check(cfg, cmds, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The `--no-timing` fast path (no ops handed out) makes the same decisions
    /// and counts as a driver that receives and completes every op.
    #[test]
    fn count_only_equals_full_synchronous_run(cfg in config(), cmds in prop::collection::vec(cmd(), 1..200)) {
        let mut full = Engine::new(cfg.clone()).unwrap();
        full.set_synchronous(true);
        let mut fast = Engine::new(cfg).unwrap();
        fast.set_count_only(true);
        let mut out = Vec::new();
        for (k, c) in cmds.iter().enumerate() {
            let req = Request {
                id: k as u64 + 1,
                kind: c.kind,
                offset: c.sector * SECTOR,
                len: c.sectors * SECTOR,
                class: if c.meta { Class::Metadata } else { Class::Data },
                fua: false,
            };
            out.clear();
            full.submit(&req, &mut out);
            full.clean(2, false, &mut out);
            let emitted = out.len();
            out.clear();
            fast.submit(&req, &mut out);
            fast.clean(2, false, &mut out);
            prop_assert_eq!(out.len(), 0);
            prop_assert!(emitted > 0 || c.kind == IoKind::Trim);
        }
        prop_assert_eq!(full.stats(), fast.stats());
        prop_assert_eq!(full.dirty_lines(), fast.dirty_lines());
    }
}
