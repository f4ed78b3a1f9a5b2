//! The crash rule of the crate docs, tested end to end: a tiny write-back
//! engine writes stamped data into cache slots and metadata records in the
//! documented order, on a device that loses power at a random operation.
//! After recovery every valid sub-block must hold data of its own line, at
//! least as new as the last flushed write, and clean sub-blocks must match
//! the backing device. An engine that skips rule 8 (commit the remap before
//! writing into a reused slot) must be caught serving another line's data.
//! The same holds for rule 3b (write-back overwrites clean sub-blocks in
//! place without a commit; recovery after the crash makes valid sub-blocks
//! dirty), and skipping either half of 3b is caught.

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use tiercache_store::crash_sim::{CrashDevice, MemDevice, SplitMix, TearMode, SECTOR};
use tiercache_store::{
    dirty_all_valid, open, LineMeta, MetaDevice, Record, Slot, Store, SubBlocks,
};

const SUBS: u32 = 8; // 4 KiB lines, 512-byte sub-blocks
const CACHE_SLOTS: u32 = 4; // the engine uses only a few slots, to force evictions
const LINES: u64 = 10;
const STAMP_MAGIC: u64 = 0x5354_414d_505f_4f4b;

type Key = (u64, u32);

fn stamp(line: u64, k: u32, version: u64) -> Vec<u8> {
    let mut b = vec![0u8; SECTOR as usize];
    b[0..8].copy_from_slice(&STAMP_MAGIC.to_le_bytes());
    b[8..16].copy_from_slice(&line.to_le_bytes());
    b[16..20].copy_from_slice(&k.to_le_bytes());
    b[20..28].copy_from_slice(&version.to_le_bytes());
    b
}

/// (line, sub-block, version) of a stamped sector, or None for anything else.
fn read_stamp(b: &[u8]) -> Option<(u64, u32, u64)> {
    let word = |r: std::ops::Range<usize>| b[r].iter().rev().fold(0u64, |a, &x| a << 8 | x as u64);
    (word(0..8) == STAMP_MAGIC).then(|| (word(8..16), word(16..20) as u32, word(20..28)))
}

/// A backing device whose writes are durable only after a flush.
#[derive(Default, Clone)]
struct Backing {
    volatile: HashMap<Key, u64>,
    durable: HashMap<Key, u64>,
}

impl Backing {
    fn flush(&mut self) {
        self.durable = self.volatile.clone();
    }
    /// After power loss: durable data plus each unflushed write with probability 1/2.
    fn survivor(&self, rng: &mut SplitMix) -> HashMap<Key, u64> {
        let mut out = self.durable.clone();
        let mut keys: Vec<_> = self.volatile.keys().copied().collect();
        keys.sort_unstable();
        for k in keys {
            if self.durable.get(&k) != self.volatile.get(&k) && rng.next_u64() & 1 == 1 {
                out.insert(k, self.volatile[&k]);
            }
        }
        out
    }
}

struct Engine<'a> {
    store: Store<Arc<CrashDevice>>,
    dev: &'a CrashDevice,
    table: Vec<Option<LineMeta>>,
    line_slot: HashMap<u64, Slot>,
    backing: Backing,
    next_version: u64,
    acked: HashMap<Key, u64>,
    flushed: HashMap<Key, u64>,
    variant: Variant,
}

/// Which rules the engine follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// Rules 1-10.
    Rules,
    /// Violates rule 8: writes into a reused slot before the remap is durable.
    SkipRemapCommit,
    /// Rule 3b instead of rules 3 and 5.
    Rule3b,
    /// Rule 3b, but recovery trusts clean bits (violates 3b (i)).
    Rule3bTrustClean,
    /// Rule 3b, but a write bypassing the cache does not drop the cached copy (violates 3b (ii)).
    Rule3bNoDrop,
}

impl Variant {
    fn rule3b(self) -> bool {
        matches!(
            self,
            Variant::Rule3b | Variant::Rule3bTrustClean | Variant::Rule3bNoDrop
        )
    }
}

/// Err(()) = the cache device lost power.
type Step = Result<(), ()>;

impl Engine<'_> {
    fn append(&mut self, r: Record) {
        self.store.append(r).expect("engine appends valid records");
        let s = r.slot() as usize;
        if let (Record::Map { .. } | Record::Unmap { .. }, Some(old)) = (r, self.table[s]) {
            self.line_slot.remove(&old.line);
        }
        r.apply(&mut self.table);
        if let Record::Map { line, slot, .. } = r {
            self.line_slot.insert(line, slot);
        }
    }
    fn commit(&mut self) -> Step {
        self.store.commit().map(|_| ()).map_err(|_| ())
    }
    fn offset(&self, slot: Slot, k: u32) -> u64 {
        self.store.layout().slot_offset(slot).unwrap() + k as u64 * SECTOR
    }
    fn bit(k: u32) -> SubBlocks {
        let mut b = SubBlocks::EMPTY;
        b.set(k);
        b
    }

    /// Rules 7 and 8: write back the victim's dirty data, flush the backing
    /// device, unmap, map the new line and commit before any data goes in.
    fn allocate(&mut self, line: u64, rng: &mut SplitMix) -> Result<Slot, ()> {
        let free = (0..CACHE_SLOTS).find(|&s| self.table[s as usize].is_none());
        let slot = match free {
            Some(s) => s,
            None => {
                let s = rng.below(CACHE_SLOTS as u64) as Slot;
                let victim = self.table[s as usize].unwrap();
                for k in 0..SUBS {
                    if victim.dirty.get(k) {
                        let mut b = vec![0u8; SECTOR as usize];
                        self.dev
                            .read_at(&mut b, self.offset(s, k))
                            .map_err(|_| ())?;
                        let (l, kk, v) = read_stamp(&b).expect("dirty data is stamped");
                        assert_eq!((l, kk), (victim.line, k));
                        self.backing.volatile.insert((l, k), v);
                    }
                }
                self.backing.flush();
                self.append(Record::Unmap { slot: s });
                s
            }
        };
        self.append(Record::Map {
            slot,
            line,
            class: 0,
        });
        if self.variant != Variant::SkipRemapCommit {
            self.commit()?;
        }
        Ok(slot)
    }

    /// A write-back write of one sub-block (rules 1, 2, 3).
    fn write(&mut self, line: u64, k: u32, rng: &mut SplitMix) -> Step {
        self.next_version += 1;
        let v = self.next_version;
        let slot = match self.line_slot.get(&line) {
            Some(&s) => s,
            None => self.allocate(line, rng)?,
        };
        let m = self.table[slot as usize].unwrap();
        if m.valid.get(k) && !m.dirty.get(k) && !self.variant.rule3b() {
            // Rule 3: the clean copy must become dirty durably before it is overwritten.
            self.append(Record::Dirty {
                slot,
                bitmap: Self::bit(k),
            });
            self.commit()?;
        }
        self.dev
            .write_at(&stamp(line, k, v), self.offset(slot, k))
            .map_err(|_| ())?;
        if !self.table[slot as usize].unwrap().dirty.get(k) {
            self.append(Record::Dirty {
                slot,
                bitmap: Self::bit(k),
            });
        }
        self.acked.insert((line, k), v);
        Ok(())
    }

    /// A write that bypasses the cache (a partial sub-block write of an
    /// uncached sub-block, a TRIM, a rerouted failed cache write): the cached
    /// copy is dropped first (rule 5: durably; rule 3b: appended), then the
    /// backing device gets the new version.
    fn bypass(&mut self, line: u64, k: u32) -> Step {
        self.next_version += 1;
        let v = self.next_version;
        if let Some(&slot) = self.line_slot.get(&line) {
            let m = self.table[slot as usize].unwrap();
            if m.valid.get(k) && self.variant != Variant::Rule3bNoDrop {
                self.append(Record::Valid {
                    slot,
                    bitmap: m.valid.minus(Self::bit(k)),
                });
                if !self.variant.rule3b() {
                    self.commit()?;
                }
            }
        }
        self.backing.volatile.insert((line, k), v);
        self.acked.insert((line, k), v);
        Ok(())
    }

    /// NBD FLUSH: flush the backing device and commit, then every acknowledged write is durable.
    fn flush(&mut self) -> Step {
        self.backing.flush();
        self.commit()?;
        self.flushed = self.acked.clone();
        Ok(())
    }

    /// Rule 6: writeback, backing flush, then Clean (left buffered).
    fn clean(&mut self, slot: Slot) -> Step {
        let Some(m) = self.table[slot as usize] else {
            return Ok(());
        };
        if m.dirty.is_empty() {
            return Ok(());
        }
        for k in 0..SUBS {
            if m.dirty.get(k) {
                let mut b = vec![0u8; SECTOR as usize];
                self.dev
                    .read_at(&mut b, self.offset(slot, k))
                    .map_err(|_| ())?;
                let (l, _, v) = read_stamp(&b).expect("dirty data is stamped");
                self.backing.volatile.insert((l, k), v);
            }
        }
        self.backing.flush();
        self.append(Record::Clean {
            slot,
            bitmap: m.dirty,
        });
        Ok(())
    }
}

/// Runs a random workload that crashes at cache-device operation `crash_at`,
/// recovers, and returns the rule violations found.
fn run(seed: u64, crash_at: u64, mode: TearMode, variant: Variant) -> Vec<String> {
    let mut rng = SplitMix(seed);
    let dev = Arc::new(CrashDevice::new(small_image(), Some(crash_at)));
    let Ok(opened) = open(dev.clone(), &backing()) else {
        return vec![];
    };
    let mut e = Engine {
        table: opened.table.to_vec(),
        store: opened.store,
        dev: &dev,
        line_slot: HashMap::new(),
        backing: Backing::default(),
        next_version: 0,
        acked: HashMap::new(),
        flushed: HashMap::new(),
        variant,
    };
    for _ in 0..200 {
        let step = match rng.below(11) {
            0..=6 => {
                let (line, k) = (rng.below(LINES), rng.below(SUBS as u64) as u32);
                e.write(line, k, &mut rng)
            }
            10 => {
                let (line, k) = (rng.below(LINES), rng.below(SUBS as u64) as u32);
                e.bypass(line, k)
            }
            7 | 8 => e.flush(),
            _ => {
                let s = rng.below(CACHE_SLOTS as u64) as Slot;
                e.clean(s)
            }
        };
        if step.is_err() {
            break;
        }
    }
    if !dev.crashed() {
        dev.crash_now();
    }
    // Reboot.
    let mem = MemDevice::from_image(dev.survivor(mode, &mut rng));
    let backing_now = e.backing.survivor(&mut rng);
    let mut table = match open(&mem, &backing()) {
        Ok(o) => {
            assert!(
                !o.report.clean_shutdown,
                "the engine never closes the store"
            );
            o.table.to_vec()
        }
        Err(err) => return vec![format!("recovery failed: {err}")],
    };
    if variant.rule3b() && variant != Variant::Rule3bTrustClean {
        // Rule 3b (i): after an unclean shutdown every valid sub-block is dirty
        // (cleaning will write the slot's bytes back).
        dirty_all_valid(&mut table);
    }
    let layout = *e.store.layout();
    let mut problems = Vec::new();
    let mut visible: HashMap<Key, u64> = backing_now.clone();
    for (slot, m) in table.iter().enumerate() {
        let Some(m) = m else { continue };
        for k in 0..SUBS {
            if !m.valid.get(k) {
                continue;
            }
            let mut b = vec![0u8; SECTOR as usize];
            let off = layout.slot_offset(slot as Slot).unwrap() + k as u64 * SECTOR;
            mem.read_at(&mut b, off).unwrap();
            match read_stamp(&b) {
                Some((l, kk, v)) if (l, kk) == (m.line, k) => {
                    visible.insert((l, k), v);
                    if !m.dirty.get(k) && backing_now.get(&(l, k)) != Some(&v) {
                        problems.push(format!(
                            "slot {slot} line {l} sub-block {k}: clean version {v} but backing has {:?}",
                            backing_now.get(&(l, k))
                        ));
                    }
                }
                other => problems.push(format!(
                    "slot {slot} maps line {} sub-block {k} but holds {other:?}: another line's data",
                    m.line
                )),
            }
        }
    }
    for (key, &f) in &e.flushed {
        let seen = visible.get(key).copied().unwrap_or(0);
        if seen < f {
            problems.push(format!(
                "line {} sub-block {}: flushed version {f} lost, reads return {seen}",
                key.0, key.1
            ));
        }
    }
    problems
}

const MODES: [TearMode; 3] = [TearMode::DropAll, TearMode::Prefix, TearMode::RandomSectors];

fn all_runs_clean(variant: Variant) -> usize {
    let mut runs = 0;
    for seed in 0..40u64 {
        for crash_at in (4..400).step_by(7) {
            let mode = MODES[(seed as usize + crash_at as usize) % 3];
            let problems = run(seed, crash_at, mode, variant);
            assert!(
                problems.is_empty(),
                "{variant:?} seed {seed} crash_at {crash_at} {mode:?}: {problems:?}"
            );
            runs += 1;
        }
    }
    runs
}

/// The first problem containing `what` that some run of `variant` shows.
fn caught(variant: Variant, what: &str) -> Option<String> {
    for seed in 0..40u64 {
        for crash_at in (4..400).step_by(3) {
            for mode in MODES {
                let problems = run(seed, crash_at, mode, variant);
                if let Some(p) = problems.iter().find(|p| p.contains(what)) {
                    return Some(p.clone());
                }
            }
        }
    }
    None
}

#[test]
fn engine_following_the_crash_rule_never_serves_wrong_or_stale_data() {
    assert!(all_runs_clean(Variant::Rules) > 1000);
}

#[test]
fn rule_3b_write_back_never_serves_wrong_or_stale_data() {
    assert!(all_runs_clean(Variant::Rule3b) > 1000);
}

#[test]
fn skipping_the_remap_commit_is_caught_serving_another_lines_data() {
    assert!(
        caught(Variant::SkipRemapCommit, "another line's data").is_some(),
        "the rule-8 violation was never observable"
    );
}

#[test]
fn rule_3b_without_dirtying_valid_data_at_recovery_is_caught() {
    assert!(
        caught(Variant::Rule3bTrustClean, "clean version").is_some(),
        "trusting clean bits after rule 3b was never observable"
    );
}

#[test]
fn rule_3b_without_dropping_the_copy_of_a_bypassing_write_is_caught() {
    assert!(
        caught(Variant::Rule3bNoDrop, "lost").is_some(),
        "a bypassing write without the drop was never observable"
    );
}
