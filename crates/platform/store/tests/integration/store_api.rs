//! Format, open, close, checkpoints, fallback, refusals and `check`.

use crate::common;

use std::fs::OpenOptions;

use common::*;
use tiercache_store::crash_sim::MemDevice;
use tiercache_store::layout::BLOCK;
use tiercache_store::{
    check, dirty_all_valid, format, open, table_entries, BackingIdentity, LineMeta, Record,
    StoreError, SubBlocks,
};

fn bits(v: u64) -> SubBlocks {
    SubBlocks([v, 0, 0, 0])
}

fn formatted() -> MemDevice {
    MemDevice::from_image(small_image())
}

/// Applies records to a table (the reference for what open must return).
fn model_of(slots: usize, recs: &[Record]) -> Vec<Option<LineMeta>> {
    let mut t = vec![None; slots];
    recs.iter().for_each(|r| r.apply(&mut t));
    t
}

fn sample_records() -> Vec<Record> {
    vec![
        Record::Map {
            slot: 0,
            line: 100,
            class: 2,
        },
        Record::Map {
            slot: 1,
            line: 7,
            class: 0,
        },
        Record::Valid {
            slot: 0,
            bitmap: bits(0b1111),
        },
        Record::Dirty {
            slot: 0,
            bitmap: bits(0b1),
        },
        Record::Dirty {
            slot: 1,
            bitmap: bits(0b10),
        },
        Record::Clean {
            slot: 0,
            bitmap: bits(0b1),
        },
        Record::Map {
            slot: 2,
            line: 55,
            class: 1,
        },
        Record::Unmap { slot: 2 },
    ]
}

#[test]
fn records_survive_reopen_and_clean_close() {
    let dev = formatted();
    let opened = open(&dev, &backing()).unwrap();
    assert!(
        opened.report.clean_shutdown,
        "a fresh format counts as clean"
    );
    assert!((opened.table.mapped() == 0));
    let slots = opened.table.len();
    let mut store = opened.store;
    let uuid = store.superblock().uuid;
    for r in sample_records() {
        store.append(r).unwrap();
    }
    store.commit().unwrap();
    drop(store); // unclean: no close
    let expected = model_of(slots, &sample_records());
    // Hand check of the reference: slot 0 = line 100, valid 0b1111 | 0b1, dirty 0b1 then cleaned.
    let m0 = expected[0].unwrap();
    assert_eq!(
        (m0.line, m0.class, m0.valid, m0.dirty),
        (100, 2, bits(0b1111), bits(0))
    );
    let opened = open(&dev, &backing()).unwrap();
    assert_eq!(opened.table, expected);
    assert_eq!(opened.report.records_replayed, 8);
    assert!(!opened.report.clean_shutdown);
    assert_eq!(opened.store.superblock().uuid, uuid);
    assert_eq!(
        opened.store.superblock().policy,
        r#"{"eviction":"lru","mode":"writeback"}"#
    );
    // Clean close: the next open replays nothing and reports a clean shutdown.
    opened
        .store
        .close(table_entries(&expected), &backing())
        .unwrap();
    let opened = open(&dev, &backing()).unwrap();
    assert!(opened.report.clean_shutdown);
    assert_eq!(opened.report.records_replayed, 0);
    assert_eq!(opened.table, expected);
    let rep = check(&dev).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    assert_eq!(
        (rep.mapped_slots, rep.dirty_slots, rep.dirty_sub_blocks),
        (2, 1, 1)
    );
    let text = rep.to_string();
    assert!(
        text.contains("mapped slots: 2, dirty slots: 1") && text.ends_with("result: ok"),
        "{text}"
    );
}

/// Rule 3b's states: open until `mark_clean`, clean until the next commit
/// with records; `check` reports what an unclean write-back recovery dirties.
#[test]
fn mark_clean_holds_until_records_follow_and_check_reports_unclean_dirtying() {
    let dev = formatted();
    let opened = open(&dev, &backing()).unwrap();
    let slots = opened.table.len();
    let mut store = opened.store;
    assert!(!store.is_marked_clean(), "open marks the store open");
    for r in sample_records() {
        store.append(r).unwrap();
    }
    store.commit().unwrap();
    let expected = model_of(slots, &sample_records());
    // Crash now: the superblock says open, and check says what recovery makes dirty.
    let rep = check(&dev).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    // Slot 0 (valid 0b1111, clean) and slot 1 (valid = dirty 0b10: nothing to add).
    assert_eq!(rep.unclean_dirtied_slots, Some(1));
    assert!(rep.to_string().contains("1 slots with clean sub-blocks"));
    let mut t = expected.clone();
    assert_eq!(dirty_all_valid(&mut t), 1);
    assert_eq!(t[0].unwrap().dirty, bits(0b1111));
    assert_eq!(t[1], expected[1]);
    // A clean mark without closing: a reopen trusts the table as checkpointed.
    store
        .mark_clean(table_entries(&expected), &backing())
        .unwrap();
    assert!(store.is_marked_clean());
    let rep = check(&dev).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    assert_eq!(rep.unclean_dirtied_slots, None);
    // An empty commit (an NBD FLUSH with nothing new) keeps it clean...
    store.commit().unwrap();
    let o = open(&dev, &backing()).unwrap();
    assert!(o.report.clean_shutdown);
    assert_eq!(o.table, expected);
    drop(o);
    // ... while records mark it open again before they are written.
    let dev = formatted();
    let mut store = open(&dev, &backing()).unwrap().store;
    store.mark_clean(std::iter::empty(), &backing()).unwrap();
    store
        .append(Record::Map {
            slot: 3,
            line: 9,
            class: 0,
        })
        .unwrap();
    store.commit().unwrap();
    assert!(!store.is_marked_clean());
    let o = open(&dev, &backing()).unwrap();
    assert!(!o.report.clean_shutdown);
    assert_eq!(o.table.get(3).map(|m| m.line), Some(9));
    let rep = check(&dev).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
}

#[test]
fn log_full_keeps_records_until_a_checkpoint() {
    let dev = formatted();
    let opened = open(&dev, &backing()).unwrap();
    let slots = opened.table.len();
    let mut store = opened.store;
    let cap = store.log_usage().capacity;
    assert_eq!(cap, 16, "64 KiB log");
    let mut all = Vec::new();
    let mut full = false;
    // Each commit of one record takes a whole block: the 17th commit is refused.
    for i in 0..=cap as u32 {
        let r = Record::Map {
            slot: i,
            line: 1000 + i as u64,
            class: 0,
        };
        store.append(r).unwrap();
        all.push(r);
        match store.commit() {
            Ok(_) => {}
            Err(StoreError::LogFull {
                needed,
                free,
                capacity,
            }) => {
                assert_eq!((needed, free, capacity, i), (1, 0, 16, 16));
                full = true;
            }
            Err(e) => panic!("{e}"),
        }
        if i == 10 {
            assert!(store.wants_checkpoint(), "two thirds full");
        }
    }
    assert!(full);
    assert_eq!(store.pending(), 1);
    let table = model_of(slots, &all);
    store.checkpoint(table_entries(&table)).unwrap();
    assert_eq!(store.pending(), 0);
    assert_eq!(store.log_usage().used, 0);
    store.append(Record::Unmap { slot: 3 }).unwrap();
    store.commit().unwrap();
    drop(store);
    all.push(Record::Unmap { slot: 3 });
    let opened = open(&dev, &backing()).unwrap();
    assert_eq!(opened.table, model_of(slots, &all));
    assert_eq!(opened.report.records_replayed, 1);
}

#[test]
fn invalid_records_and_tables_are_refused() {
    let dev = formatted();
    let mut store = open(&dev, &backing()).unwrap().store;
    let slots = store.layout().slots;
    let e = store
        .append(Record::Map {
            slot: slots,
            line: 1,
            class: 0,
        })
        .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = store
        .append(Record::Dirty {
            slot: 0,
            bitmap: bits(1),
        })
        .unwrap_err();
    assert!(e.to_string().contains("unmapped"), "{e}");
    store
        .append(Record::Map {
            slot: 0,
            line: 1,
            class: 0,
        })
        .unwrap();
    let e = store
        .append(Record::Valid {
            slot: 0,
            bitmap: bits(1 << 8),
        })
        .unwrap_err();
    assert!(e.to_string().contains("past the line's 8"), "{e}");
    let m = LineMeta {
        line: 5,
        valid: bits(1),
        dirty: bits(1),
        class: 0,
    };
    let e = store.checkpoint(vec![(0, m), (1, m)]).unwrap_err();
    assert!(
        e.to_string()
            .contains("line 5 is mapped by more than one slot"),
        "{e}"
    );
    let bad = LineMeta {
        dirty: bits(2),
        ..m
    };
    let e = store.checkpoint(vec![(0, bad)]).unwrap_err();
    assert!(e.to_string().contains("not valid"), "{e}");
}

#[test]
fn torn_newest_checkpoint_falls_back_to_the_other_region() {
    let dev = formatted();
    let opened = open(&dev, &backing()).unwrap();
    let slots = opened.table.len();
    let mut store = opened.store;
    let recs = sample_records();
    for r in &recs[..4] {
        store.append(*r).unwrap();
    }
    store.commit().unwrap();
    let old_epoch = store.epoch();
    let table = model_of(slots, &recs[..4]);
    store.checkpoint(table_entries(&table)).unwrap();
    let new_epoch = store.epoch();
    assert_eq!(new_epoch, old_epoch + 1);
    let layout = *store.layout();
    drop(store);
    // Damage the body of the newest checkpoint (as a torn checkpoint write would).
    let region = (new_epoch % 2) as usize;
    dev.corrupt(layout.checkpoint_offsets[region] + BLOCK + 3, 0x40);
    let rep = check(&dev).unwrap();
    assert!(rep.is_ok(), "{:?}", rep.problems);
    assert!(
        rep.checkpoints[region].contains("damaged"),
        "{:?}",
        rep.checkpoints
    );
    assert!(!rep.warnings.is_empty());
    let opened = open(&dev, &backing()).unwrap();
    assert_eq!(opened.report.checkpoint_epoch, old_epoch);
    assert!(opened.report.fallback.is_some());
    assert_eq!(
        opened.report.records_replayed, 4,
        "the older epoch's log is replayed"
    );
    assert_eq!(opened.table, table);
}

#[test]
fn lost_checkpoint_with_a_live_log_is_refused() {
    // Once a checkpoint's epoch has log records, slots may have been reused;
    // going back to the older checkpoint could serve another line's data.
    let dev = formatted();
    let opened = open(&dev, &backing()).unwrap();
    let slots = opened.table.len();
    let mut store = opened.store;
    let recs = sample_records();
    let table = model_of(slots, &recs[..2]);
    store.checkpoint(table_entries(&table)).unwrap();
    let epoch = store.epoch();
    store.append(recs[2]).unwrap();
    store.commit().unwrap();
    let layout = *store.layout();
    drop(store);
    dev.corrupt(
        layout.checkpoint_offsets[(epoch % 2) as usize] + BLOCK + 1,
        0x01,
    );
    let e = open(&dev, &backing()).err().expect("open must refuse");
    assert!(matches!(e, StoreError::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("cannot be trusted"), "{e}");
    let rep = check(&dev).unwrap();
    assert!(!rep.is_ok());
}

#[test]
fn damaged_superblock_copy_is_tolerated() {
    let dev = formatted();
    dev.corrupt(100, 0xff);
    let rep = check(&dev).unwrap();
    assert_eq!(rep.superblock_copies, [false, true]);
    assert!(rep.is_ok());
    let store = open(&dev, &backing()).unwrap().store;
    drop(store);
    // open rewrote both copies.
    assert_eq!(check(&dev).unwrap().superblock_copies, [true, true]);
}

#[test]
fn duplicate_line_from_a_buggy_engine_is_reported() {
    let dev = formatted();
    let mut store = open(&dev, &backing()).unwrap().store;
    store
        .append(Record::Map {
            slot: 0,
            line: 9,
            class: 0,
        })
        .unwrap();
    store
        .append(Record::Map {
            slot: 1,
            line: 9,
            class: 0,
        })
        .unwrap();
    store.commit().unwrap();
    drop(store);
    let rep = check(&dev).unwrap();
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains("line 9 is mapped by both slot 0 and slot 1")),
        "{:?}",
        rep.problems
    );
    assert!(open(&dev, &backing()).is_err());
}

#[test]
fn format_refuses_an_existing_store_without_force() {
    let dev = formatted();
    let old = check(&dev).unwrap().superblock.uuid;
    let e = format(&dev, &params(4096, 512, Some(64 << 10)), false).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, StoreError::Occupied { .. }), "{msg}");
    assert!(
        msg.contains("existing tiercache cache") && msg.contains("--force"),
        "{msg}"
    );
    let sb = format(&dev, &params(4096, 512, Some(64 << 10)), true).unwrap();
    assert_ne!(sb.uuid, old);
    // The old store's log can never be replayed into the new one.
    assert!(open(&dev, &backing())
        .unwrap()
        .table
        .iter()
        .next()
        .is_none());
}

#[test]
fn open_refuses_a_device_that_is_not_a_cache() {
    let dev = MemDevice::new(4 << 20);
    let e = open(&dev, &backing()).err().unwrap();
    assert!(matches!(e, StoreError::NotTiercache(_)), "{e}");
}

#[test]
fn backing_mismatch_is_refused_and_says_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let a = temp_file(&dir, "a.img", 8 << 20, 0xaa);
    let b = temp_file(&dir, "b.img", 8 << 20, 0xaa);
    let c = temp_file(&dir, "c.img", 16 << 20, 0xaa);
    let id_a = BackingIdentity::probe(&a).unwrap();
    let cache = temp_file(&dir, "cache.img", 4 << 20, 0);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&cache)
        .unwrap();
    let mut p = params(4096, 512, Some(64 << 10));
    p.backing = id_a.clone();
    format(&f, &p, false).unwrap();
    let e = open(&f, &BackingIdentity::probe(&b).unwrap())
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(matches!(e, StoreError::BackingMismatch(_)), "{msg}");
    assert!(
        msg.contains("file identity differs") && msg.contains("path differs"),
        "{msg}"
    );
    let e = open(&f, &BackingIdentity::probe(&c).unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("size differs (recorded 8388608 bytes, found 16777216 bytes)"),
        "{e}"
    );
    // The right backing opens; a clean close records it (with a dirty line).
    let dirty_line = LineMeta {
        line: 3,
        valid: bits(0xff),
        dirty: bits(1),
        class: 0,
    };
    let mut store = open(&f, &id_a).unwrap().store;
    store
        .append(Record::Map {
            slot: 0,
            line: 3,
            class: 0,
        })
        .unwrap();
    store
        .append(Record::Valid {
            slot: 0,
            bitmap: bits(0xff),
        })
        .unwrap();
    store
        .append(Record::Dirty {
            slot: 0,
            bitmap: bits(1),
        })
        .unwrap();
    store.commit().unwrap();
    store
        .close([(0, dirty_line)], &BackingIdentity::probe(&a).unwrap())
        .unwrap();
    // Modify the backing device while the cache is stopped.
    {
        let bf = OpenOptions::new().write(true).open(&a).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&bf, b"changed", 4096).unwrap();
    }
    // Dirty data: refused, saying what changed and what to do.
    let e = open(&f, &BackingIdentity::probe(&a).unwrap())
        .err()
        .unwrap();
    assert!(matches!(e, StoreError::BackingModified(_)), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("modified while the cache was stopped")
            && e.contains("1 lines of dirty data")
            && e.contains("--force"),
        "{e}"
    );
    // Still refused (nothing was written).
    assert!(open(&f, &BackingIdentity::probe(&a).unwrap()).is_err());
}

#[test]
fn damage_in_the_middle_of_the_log_is_refused_but_a_torn_tail_is_not() {
    let build = || {
        let dev = formatted();
        let mut store = open(&dev, &backing()).unwrap().store;
        let l = *store.layout();
        // Three commits of one block each at ring blocks 0, 1, 2 (fresh store: epoch 1 starts at 0).
        for (slot, line) in [(0u32, 10u64), (1, 11), (2, 12)] {
            store
                .append(Record::Map {
                    slot,
                    line,
                    class: 0,
                })
                .unwrap();
            store.commit().unwrap();
        }
        (dev, l)
    };
    let (dev, l) = build();
    dev.corrupt(l.log_offset + 45, 0x10); // a record of the first commit
    let e = open(&dev, &backing())
        .err()
        .expect("must refuse")
        .to_string();
    assert!(e.contains("damaged in the middle"), "{e}");
    assert!(!check(&dev).unwrap().is_ok());

    let (dev, l) = build();
    dev.corrupt(l.log_offset + 2 * BLOCK + 45, 0x10); // the last commit
    let opened = open(&dev, &backing()).unwrap();
    assert!(opened.report.torn_tail);
    let lines: Vec<u64> = opened.table.iter().map(|(_, m)| m.line).collect();
    assert_eq!(lines, vec![10, 11]);
}

#[test]
fn a_failed_store_refuses_further_work_until_reopened() {
    use std::sync::Arc;
    use tiercache_store::crash_sim::CrashDevice;
    // Fail the device at the commit's first sync (ops 0..4 are open's superblock writes).
    let dev = Arc::new(CrashDevice::new(small_image(), Some(4)));
    let mut store = open(dev.clone(), &backing()).unwrap().store;
    store
        .append(Record::Map {
            slot: 0,
            line: 1,
            class: 0,
        })
        .unwrap();
    let e = store.commit().unwrap_err();
    assert!(matches!(e, StoreError::Io { .. }), "{e}");
    let e = store
        .append(Record::Unmap { slot: 0 })
        .unwrap_err()
        .to_string();
    assert!(e.contains("failed earlier") && e.contains("reopen"), "{e}");
    assert!(store.commit().is_err());
}
