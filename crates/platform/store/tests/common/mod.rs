//! Shared test harness: a shadow model of the slot table, a generator of
//! valid record sequences, and a driver that runs them against a store on a
//! crash-injecting device.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use tiercache_store::crash_sim::{CrashDevice, MemDevice, SplitMix, TearMode};
use tiercache_store::{
    format, open, table_entries, BackingIdentity, FormatParams, LineMeta, Record, Slot, StoreError,
    SubBlocks,
};

pub fn backing() -> BackingIdentity {
    BackingIdentity {
        path: "/test/backing".into(),
        size: 1 << 30,
        fingerprint: 0x1234,
        file_id: Some((1, 2)),
        serial: None,
        sampled: None,
        times: None,
    }
}

pub fn params(line: u32, sub: u32, log_bytes: Option<u64>) -> FormatParams {
    FormatParams {
        line_size: line,
        sub_block_size: sub,
        log_bytes,
        policy: r#"{"eviction":"lru","mode":"writeback"}"#.into(),
        backing: backing(),
    }
}

/// A freshly formatted image: 3 MiB (512 slots), 4 KiB lines, 512-byte
/// sub-blocks (8 per line), a 64 KiB log (16 blocks, so checkpoints and
/// LogFull happen often).
pub fn small_image() -> Vec<u8> {
    let dev = MemDevice::new(3 << 20);
    format(&dev, &params(4096, 512, Some(64 << 10)), false).unwrap();
    dev.image()
}

const WORKING_SLOTS: u32 = 48;

/// Shadow of the slot table with a line index, so generated records are valid.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub table: Vec<Option<LineMeta>>,
    pub line_slot: HashMap<u64, Slot>,
}

impl Model {
    pub fn new(table: Vec<Option<LineMeta>>) -> Model {
        let line_slot = table
            .iter()
            .enumerate()
            .filter_map(|(s, m)| m.map(|m| (m.line, s as Slot)))
            .collect();
        Model { table, line_slot }
    }
    pub fn apply(&mut self, r: &Record) {
        let s = r.slot() as usize;
        if let Some(old) = self.table[s] {
            if matches!(r, Record::Map { .. } | Record::Unmap { .. }) {
                self.line_slot.remove(&old.line);
            }
        }
        r.apply(&mut self.table);
        if let Record::Map { line, slot, .. } = r {
            self.line_slot.insert(*line, *slot);
        }
    }
    /// Turns random numbers into a record valid in the current state
    /// (including the Unmap a Map of an already cached line needs first).
    pub fn gen(&self, kind: u8, a: u32, b: u64, bits: u64, sub_blocks: u32) -> Vec<Record> {
        // A small working set, so records hit mapped slots and lines collide.
        let slots = (self.table.len() as u32).min(WORKING_SLOTS);
        let slot = a % slots;
        let mask = if sub_blocks >= 64 {
            u64::MAX
        } else {
            (1u64 << sub_blocks) - 1
        };
        let bitmap = SubBlocks([bits & mask, 0, 0, 0]);
        match (kind % 6, self.table[slot as usize]) {
            (0, _) | (1, None) => {
                let line = b % (4 * slots as u64);
                let mut out = Vec::new();
                if let Some(&old) = self.line_slot.get(&line) {
                    if old != slot {
                        out.push(Record::Unmap { slot: old });
                    }
                }
                out.push(Record::Map {
                    slot,
                    line,
                    class: (b % 3) as u8,
                });
                out
            }
            (1, Some(_)) => vec![Record::Valid { slot, bitmap }],
            (2, Some(_)) | (3, Some(_)) => vec![Record::Dirty { slot, bitmap }],
            (4, Some(_)) => vec![Record::Clean { slot, bitmap }],
            (5, Some(_)) => vec![Record::Unmap { slot }],
            _ => vec![],
        }
    }
}

/// A burst of 1..=24 valid records derived from the random numbers (bursts
/// make commits span several sectors and blocks, so tears split them).
pub fn gen_burst(model: &Model, k: u8, a: u32, b: u64, bits: u64) -> Vec<Record> {
    let mut m = model.clone();
    let mut rng = SplitMix(b ^ ((a as u64) << 32) ^ k as u64);
    let n = 1 + (k as u64 * 7 + bits) % 24;
    let mut out = Vec::new();
    for i in 0..n {
        let recs = m.gen(
            (k as u64 + i * 5 + rng.below(6)) as u8,
            rng.next_u64() as u32,
            rng.next_u64(),
            rng.next_u64(),
            8,
        );
        for r in recs {
            m.apply(&r);
            out.push(r);
        }
    }
    out
}

/// One step of a workload.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Random numbers for [`Model::gen`].
    Append(u8, u32, u64, u64),
    Commit,
    Checkpoint,
}

/// Runs `ops` on a store over a device holding `image` that crashes at
/// operation `crash_at` (or, if it never does, loses power at the end), then
/// recovers from the surviving image and checks the recovered table against
/// the model: it must be the committed state, or (if the crash hit a commit
/// or checkpoint) the committed state plus that whole in-flight group.
/// Returns the surviving image and the recovered model for another cycle.
pub fn crash_cycle(
    image: Vec<u8>,
    start: &Model,
    ops: &[Op],
    crash_at: u64,
    mode: TearMode,
    rng: &mut SplitMix,
) -> (Vec<u8>, Model) {
    let dev = Arc::new(CrashDevice::new(image, Some(crash_at)));
    let mut committed = start.clone();
    let mut current = start.clone();
    let mut in_flight: Option<Model> = None;
    match open(dev.clone(), &backing()) {
        Ok(opened) => {
            assert_eq!(opened.table, start.table, "reopen before any crash");
            let mut store = opened.store;
            for op in ops {
                let res = match *op {
                    Op::Append(k, a, b, bits) => {
                        for r in gen_burst(&current, k, a, b, bits) {
                            store.append(r).unwrap();
                            current.apply(&r);
                        }
                        Ok(())
                    }
                    Op::Commit => store.commit().map(|_| ()),
                    Op::Checkpoint => store.checkpoint(table_entries(&current.table)),
                };
                match res {
                    Ok(()) if !matches!(op, Op::Append(..)) => committed = current.clone(),
                    Ok(()) => {}
                    Err(StoreError::LogFull { .. }) => {
                        // The records stay buffered; the engine checkpoints.
                        match store.checkpoint(table_entries(&current.table)) {
                            Ok(()) => committed = current.clone(),
                            Err(_) => {
                                in_flight = Some(current.clone());
                                break;
                            }
                        }
                    }
                    Err(_) => {
                        in_flight = Some(current.clone());
                        break;
                    }
                }
            }
        }
        Err(_) => assert!(dev.crashed(), "open failed without a crash"),
    }
    if !dev.crashed() {
        dev.crash_now();
    }
    let survivor = dev.survivor(mode, rng);
    let mem = MemDevice::from_image(survivor);
    let opened = open(&mem, &backing()).unwrap_or_else(|e| panic!("recovery failed: {e}"));
    let got = opened.table.to_vec();
    let ok = got == committed.table || in_flight.as_ref().is_some_and(|m| got == m.table);
    assert!(
        ok,
        "recovered table is neither the committed state nor committed + in-flight group \
         (crash_at {crash_at}, mode {mode:?}, report {:?})",
        opened.report
    );
    drop(opened.store);
    let model = Model::new(got);
    (mem.image(), model)
}

pub fn random_ops(rng: &mut SplitMix, n: usize) -> Vec<Op> {
    (0..n)
        .map(|_| match rng.below(20) {
            0..=13 => Op::Append(
                rng.below(256) as u8,
                rng.next_u64() as u32,
                rng.next_u64(),
                rng.next_u64(),
            ),
            14..=18 => Op::Commit,
            _ => Op::Checkpoint,
        })
        .collect()
}

pub fn empty_model(slots: usize) -> Model {
    Model::new(vec![None; slots])
}

/// A file `name` of `len` bytes in `dir`, its first 128 KiB filled with `fill`.
pub fn temp_file(dir: &tempfile::TempDir, name: &str, len: u64, fill: u8) -> std::path::PathBuf {
    let p = dir.path().join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    std::io::Write::write_all(&mut f, &vec![fill; (128 << 10).min(len) as usize]).unwrap();
    f.set_len(len).unwrap();
    p
}
