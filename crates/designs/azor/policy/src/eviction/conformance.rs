//! Properties every policy must satisfy, checked on random access sequences:
//! `peek_victim` predicts `evict` exactly, and a set-associative cache behaves
//! as independent per-set caches of the same policy.

use super::{Eviction, EvictionKind, Slot};
use proptest::prelude::*;
use rustc_hash::FxHashMap;

/// What happened to one access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Hit,
    Miss { evicted: Option<u64> },
    Removed,
}

/// A `sets × ways` cache driving a policy through the engine's protocol.
/// Line `key` maps to set `key % sets`.
struct Harness {
    policy: Box<dyn Eviction>,
    sets: u32,
    ways: u32,
    slot_of: FxHashMap<u64, Slot>,
    key_of: Vec<Option<u64>>,
}

impl Harness {
    fn new(kind: EvictionKind, sets: u32, ways: u32) -> Self {
        Harness {
            policy: kind.build(sets, ways),
            sets,
            ways,
            slot_of: FxHashMap::default(),
            key_of: vec![None; (sets * ways) as usize],
        }
    }

    fn set_of(&self, key: u64) -> u32 {
        (key % self.sets as u64) as u32
    }

    fn access(&mut self, key: u64) -> Outcome {
        let set = self.set_of(key);
        if let Some(&s) = self.slot_of.get(&key) {
            self.policy.on_hit(set, s);
            return Outcome::Hit;
        }
        let slots = set * self.ways..(set + 1) * self.ways;
        let free = slots.clone().find(|&s| self.key_of[s as usize].is_none());
        let peek = free.is_none().then(|| self.policy.peek_victim(set, key));
        self.policy.on_miss(set, key);
        let (slot, evicted) = match free {
            Some(s) => (s, None),
            None => {
                let keys = &self.key_of;
                let v = self.policy.evict(set, &|s| keys[s as usize].unwrap());
                assert_eq!(
                    Some(v),
                    peek,
                    "{}: peek_victim != evict",
                    self.policy.name()
                );
                assert!(slots.contains(&v), "victim {v} outside set {set}");
                let old = self.key_of[v as usize].take().unwrap();
                self.slot_of.remove(&old);
                (v, Some(old))
            }
        };
        self.key_of[slot as usize] = Some(key);
        self.slot_of.insert(key, slot);
        self.policy.on_insert(set, slot, key);
        Outcome::Miss { evicted }
    }

    /// Invalidate `key` if resident.
    fn remove(&mut self, key: u64) -> Outcome {
        if let Some(s) = self.slot_of.remove(&key) {
            self.policy.on_remove(self.set_of(key), s);
            self.key_of[s as usize] = None;
        }
        Outcome::Removed
    }
}

/// An access (`false`) or an invalidation (`true`) of a line.
fn ops() -> impl Strategy<Value = Vec<(bool, u64)>> {
    prop::collection::vec((prop::bool::weighted(0.05), 0u64..120), 1..2000)
}

fn run(h: &mut Harness, ops: &[(bool, u64)]) -> Vec<Outcome> {
    ops.iter()
        .map(|&(rm, k)| if rm { h.remove(k) } else { h.access(k) })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn peek_victim_predicts_evict(ops in ops(), ways in 1u32..40, sets in 1u32..4) {
        for kind in EvictionKind::ALL {
            // `access` asserts peek == evict on every eviction.
            run(&mut Harness::new(kind, sets, ways), &ops);
        }
    }

    #[test]
    fn sets_are_independent_caches(ops in ops(), ways in 1u32..40, sets in 2u32..6) {
        for kind in EvictionKind::ALL {
            let whole = run(&mut Harness::new(kind, sets, ways), &ops);
            for set in 0..sets {
                let mine: Vec<usize> = (0..ops.len())
                    .filter(|&i| ops[i].1 % sets as u64 == set as u64)
                    .collect();
                // Same keys divided by `sets` so they all land in set 0 of a
                // one-set cache.
                let sub: Vec<(bool, u64)> =
                    mine.iter().map(|&i| (ops[i].0, ops[i].1 / sets as u64)).collect();
                let alone = run(&mut Harness::new(kind, 1, ways), &sub);
                for (j, &i) in mine.iter().enumerate() {
                    let expect = match alone[j] {
                        Outcome::Miss { evicted } => Outcome::Miss {
                            evicted: evicted.map(|k| k * sets as u64 + set as u64),
                        },
                        o => o,
                    };
                    prop_assert_eq!(whole[i], expect, "{} set {} op {}", kind, set, i);
                }
            }
        }
    }
}

#[test]
fn metadata_counts_slot_tables_and_ghost_histories() {
    for kind in EvictionKind::ALL {
        let h = Harness::new(kind, 4, 100);
        // At least two u32 links per slot.
        assert!(h.policy.metadata_bytes() >= 400 * 8, "{kind}");
    }
    // S3-FIFO remembers floor(0.9 * 100) = 90 evicted line numbers per set:
    // each costs at least its u64 key and two u32 links.
    let mut h = Harness::new(EvictionKind::S3fifo, 1, 100);
    let before = h.policy.metadata_bytes();
    for k in 0..1000 {
        h.access(k);
    }
    assert!(h.policy.metadata_bytes() >= before + 90 * 16);
    // ARC's ghost lists grow under a reuse pattern larger than the cache.
    let mut h = Harness::new(EvictionKind::Arc, 1, 100);
    let before = h.policy.metadata_bytes();
    for i in 0..5000u64 {
        h.access((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 300);
    }
    assert!(h.policy.metadata_bytes() > before);
}
