//! Crash consistency of the log and checkpoints: random workloads on a device
//! that loses power at a random operation, with writes since the last sync
//! dropped, torn at a sector, or landing in random order; the recovered table
//! is compared with a shadow model.

use crate::common;

use common::*;
use proptest::prelude::*;
use tiercache_store::crash_sim::{CrashDevice, MemDevice, SplitMix, TearMode};
use tiercache_store::{open, MetaDevice};

const MODES: [TearMode; 3] = [TearMode::DropAll, TearMode::Prefix, TearMode::RandomSectors];

/// Counts the device operations a workload issues when nothing crashes.
fn ops_without_crash(image: &[u8], ops: &[Op]) -> u64 {
    let dev = std::sync::Arc::new(CrashDevice::new(image.to_vec(), None));
    let mut store = open(dev.clone(), &backing()).unwrap().store;
    let mut model = empty_model(store.layout().slots as usize);
    for op in ops {
        match *op {
            Op::Append(k, a, b, bits) => {
                for r in gen_burst(&model, k, a, b, bits) {
                    store.append(r).unwrap();
                    model.apply(&r);
                }
            }
            Op::Commit => {
                if store.commit().is_err() {
                    store
                        .checkpoint(tiercache_store::table_entries(&model.table))
                        .unwrap();
                }
            }
            Op::Checkpoint => store
                .checkpoint(tiercache_store::table_entries(&model.table))
                .unwrap(),
        }
    }
    dev.ops()
}

#[test]
fn every_crash_point_recovers_a_committed_prefix() {
    let image = small_image();
    let slots = tiercache_store::open(&MemDevice::from_image(image.clone()), &backing())
        .unwrap()
        .table
        .len();
    let mut rng = SplitMix(42);
    let ops = random_ops(&mut rng, 300);
    let total = ops_without_crash(&image, &ops);
    assert!(total > 50, "workload issues {total} device operations");
    eprintln!("{total} crash points x {} tear modes", MODES.len());
    // Every crash point, each tear mode.
    for crash_at in 0..=total {
        for mode in MODES {
            crash_cycle(
                image.clone(),
                &empty_model(slots),
                &ops,
                crash_at,
                mode,
                &mut rng,
            );
        }
    }
}

#[test]
fn repeated_crashes_keep_every_committed_record() {
    // Crash, recover, run more, crash again: a torn tail left by one crash
    // must never be replayed as part of a later epoch.
    let mut rng = SplitMix(7);
    let mut image = small_image();
    let slots = open(&MemDevice::from_image(image.clone()), &backing())
        .unwrap()
        .table
        .len();
    let mut model = empty_model(slots);
    for cycle in 0..60 {
        let ops = random_ops(&mut rng, 80);
        let crash_at = rng.below(120);
        let mode = MODES[cycle % 3];
        let (img, m) = crash_cycle(image, &model, &ops, crash_at, mode, &mut rng);
        image = img;
        model = m;
    }
    // The final state is also what `check` sees.
    let report = tiercache_store::check(&MemDevice::from_image(image)).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!(
        report.mapped_slots,
        model.table.iter().filter(|m| m.is_some()).count() as u64
    );
}

#[test]
fn committed_records_survive_even_if_everything_after_is_lost() {
    // Hand-checked case: commit 3 records, append 2 more and crash before
    // their commit: exactly the 3 come back.
    let image = small_image();
    let dev = std::sync::Arc::new(CrashDevice::new(image, None));
    let mut store = open(dev.clone(), &backing()).unwrap().store;
    use tiercache_store::{Record, SubBlocks};
    store
        .append(Record::Map {
            slot: 5,
            line: 77,
            class: 1,
        })
        .unwrap();
    store
        .append(Record::Dirty {
            slot: 5,
            bitmap: SubBlocks([0b1010, 0, 0, 0]),
        })
        .unwrap();
    store
        .append(Record::Map {
            slot: 6,
            line: 78,
            class: 0,
        })
        .unwrap();
    let st = store.commit().unwrap();
    assert_eq!((st.records, st.blocks, st.syncs), (3, 1, 2));
    store.append(Record::Unmap { slot: 5 }).unwrap();
    store
        .append(Record::Valid {
            slot: 6,
            bitmap: SubBlocks([1, 0, 0, 0]),
        })
        .unwrap();
    dev.crash_now();
    let img = dev.survivor(TearMode::RandomSectors, &mut SplitMix(1));
    let mem = MemDevice::from_image(img);
    let opened = open(&mem, &backing()).unwrap();
    let m5 = opened.table.get(5).unwrap();
    assert_eq!(
        (m5.line, m5.class, m5.dirty.0[0], m5.valid.0[0]),
        (77, 1, 0b1010, 0b1010)
    );
    let m6 = opened.table.get(6).unwrap();
    assert_eq!((m6.line, m6.valid.0[0]), (78, 0));
    assert_eq!(opened.table.mapped(), 2);
    assert_eq!(opened.report.records_replayed, 3);
    assert!(!opened.report.clean_shutdown);
}

#[test]
fn torn_commit_is_rolled_back_as_a_whole() {
    // A commit spanning several blocks, crashed in the middle of its write
    // with only some sectors landing: none of its records may be applied.
    let image = small_image();
    let probe = std::sync::Arc::new(CrashDevice::new(image.clone(), None));
    let slots = open(probe.clone(), &backing())
        .unwrap()
        .store
        .layout()
        .slots;
    let ops_before = probe.ops();
    let mut rng = SplitMix(3);
    let mut torn_seen = 0;
    for trial in 0..40 {
        // open: sb write (2 writes + 2 syncs); commit: sync, write (crash here), sync.
        let dev = std::sync::Arc::new(CrashDevice::new(image.clone(), Some(ops_before + 1)));
        let mut store = open(dev.clone(), &backing()).unwrap().store;
        use tiercache_store::Record;
        for s in 0..700u32.min(slots) {
            store
                .append(Record::Map {
                    slot: s,
                    line: s as u64 + 1000,
                    class: 0,
                })
                .unwrap();
        }
        assert!(
            store.log_usage().pending >= 3,
            "the commit spans several blocks"
        );
        assert!(store.commit().is_err());
        let mode = if trial % 2 == 0 {
            TearMode::Prefix
        } else {
            TearMode::RandomSectors
        };
        let mem = MemDevice::from_image(dev.survivor(mode, &mut rng));
        let opened = open(&mem, &backing()).unwrap();
        let mapped = opened.table.mapped();
        assert!(
            mapped == 0 || mapped == 700.min(slots as usize),
            "partial commit applied: {mapped}"
        );
        torn_seen += opened.report.torn_tail as u32;
    }
    assert!(torn_seen > 0, "some trials tore the commit");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn random_workloads_and_crash_points_match_the_shadow_model(
        raw in proptest::collection::vec((0u8..20, any::<u8>(), any::<u32>(), any::<u64>(), any::<u64>()), 1..120),
        crash_at in 0u64..160,
        mode in 0usize..3,
        seed in any::<u64>(),
    ) {
        let ops: Vec<Op> = raw
            .into_iter()
            .map(|(w, k, a, b, bits)| match w {
                0..=13 => Op::Append(k, a, b, bits),
                14..=18 => Op::Commit,
                _ => Op::Checkpoint,
            })
            .collect();
        let image = small_image();
        let slots = open(&MemDevice::from_image(image.clone()), &backing()).unwrap().table.len();
        let mut rng = SplitMix(seed);
        crash_cycle(image, &empty_model(slots), &ops, crash_at, MODES[mode], &mut rng);
    }
}

#[test]
fn device_ops_are_counted_for_crash_points() {
    // Sanity of the harness itself: a workload without crash issues
    // writes and syncs that the crash points range over.
    let image = small_image();
    let dev = CrashDevice::new(image, None);
    dev.write_at(&[1; 512], 0).unwrap();
    dev.sync().unwrap();
    assert_eq!(dev.ops(), 2);
}

#[test]
fn stale_tail_of_a_torn_commit_is_never_revived() {
    // Commit C (300 Maps = 2 log blocks) crashes with its first block lost
    // and its second block on the media. After recovery the engine commits
    // C' of exactly one block's worth of records. C's orphaned second block
    // carries the same epoch and the very sequence number that follows C',
    // so a store that kept appending to the old epoch would replay it.
    use tiercache_store::Record;
    let image = small_image();
    let dev = std::sync::Arc::new(CrashDevice::new(image, Some(6)));
    let mut store = open(dev.clone(), &backing()).unwrap().store; // ops 0..4: superblock
    for s in 0..300u32 {
        store
            .append(Record::Map {
                slot: s,
                line: 1000 + s as u64,
                class: 0,
            })
            .unwrap();
    }
    assert_eq!(store.log_usage().pending, 2);
    assert!(
        store.commit().is_err(),
        "crash at the sync after the log write"
    );
    let img = dev.survivor(TearMode::DropRange { from: 0, to: 8 }, &mut SplitMix(0));
    let mem = MemDevice::from_image(img);
    let opened = open(&mem, &backing()).unwrap();
    assert!((opened.table.mapped() == 0), "C is not applied");
    let mut store = opened.store;
    let per_block = 4056 / 18; // 4 KiB block minus 40-byte header; Map record 14 bytes + crc 4
    for s in 0..per_block as u32 {
        store
            .append(Record::Map {
                slot: s,
                line: 5000 + s as u64,
                class: 0,
            })
            .unwrap();
    }
    assert_eq!(store.log_usage().pending, 1);
    store.commit().unwrap();
    drop(store);
    let opened = open(&mem, &backing()).unwrap();
    let mapped: Vec<u64> = opened.table.iter().map(|(_, m)| m.line).collect();
    assert_eq!(mapped, (5000..5000 + per_block as u64).collect::<Vec<_>>());
}
