//! Detach and a backing device modified while the cache was stopped: the
//! next open starts cold (or refuses, with dirty data), crash-safely.

use crate::common;

use std::sync::Arc;

use common::*;
use tiercache_store::crash_sim::{CrashDevice, MemDevice, SplitMix, TearMode};
use tiercache_store::{
    check, open, open_verified, BackingIdentity, LineMeta, MetaDevice, Record, Slot, SlotTable,
    State, StoreError, SubBlocks, Superblock, COLD_DETACHED,
};

fn all(n: u32) -> SubBlocks {
    SubBlocks::first(n)
}

/// A store with lines 5 and 9 cached clean in slots 0 and 1 (whole 4 KiB
/// lines of 512-byte sub-blocks), closed clean; the slots hold `data(line)`.
fn cached_clean() -> (MemDevice, Vec<(Slot, LineMeta)>) {
    let dev = MemDevice::from_image(small_image());
    let mut store = open(&dev, &backing()).unwrap().store;
    let mut table = Vec::new();
    for (slot, line) in [(0u32, 5u64), (1, 9)] {
        let off = store.layout().slot_offset(slot).unwrap();
        dev.write_at(&data(line), off).unwrap();
        store
            .append(Record::Map {
                slot,
                line,
                class: 0,
            })
            .unwrap();
        store
            .append(Record::Valid {
                slot,
                bitmap: all(8),
            })
            .unwrap();
        table.push((
            slot,
            LineMeta {
                line,
                valid: all(8),
                dirty: SubBlocks::EMPTY,
                class: 0,
            },
        ));
    }
    store.commit().unwrap();
    store.close(table.clone(), &backing()).unwrap();
    (dev, table)
}

fn data(line: u64) -> Vec<u8> {
    vec![line as u8; 4096]
}

/// A backing device holding `data(line)` for every cached line.
fn backing_dev() -> MemDevice {
    let b = MemDevice::new(64 << 10);
    for line in [5u64, 9] {
        b.write_at(&data(line), line * 4096).unwrap();
    }
    b
}

fn mapped(t: &SlotTable) -> usize {
    t.mapped()
}

#[test]
fn a_detached_store_opens_cold_and_says_so() {
    let (dev, table) = cached_clean();
    let mut store = open(&dev, &backing()).unwrap().store;
    store.detach(table, &backing()).unwrap();
    let sb = Superblock::read(&dev).unwrap().newest;
    assert!(sb.detached && sb.state == State::Clean);
    let r = check(&dev).unwrap();
    assert_eq!(r.state(), "detached");
    assert_eq!(r.mapped_slots, 0, "the detach left an empty checkpoint");
    assert!(r.to_string().contains("state: detached"), "{r}");
    // The backing device changed (fingerprint): a detached cache opens all the same, cold.
    let mut changed = backing();
    changed.fingerprint ^= 1;
    let o = open(&dev, &changed).unwrap();
    assert_eq!(mapped(&o.table), 0);
    assert_eq!(o.report.cold_start.as_deref(), Some(COLD_DETACHED));
    assert!(o
        .report
        .to_string()
        .contains("started cold: the cache was detached"));
    // Open again: not detached any more.
    let sb = Superblock::read(&dev).unwrap().newest;
    assert!(!sb.detached && sb.state == State::Open);
}

#[test]
fn detach_refuses_dirty_lines() {
    let (dev, mut table) = cached_clean();
    let mut store = open(&dev, &backing()).unwrap().store;
    table[0].1.dirty = all(1);
    let e = store.detach(table, &backing()).unwrap_err();
    assert!(e.to_string().contains("1 lines are dirty"), "{e}");
}

/// A crash at every device operation of a detach: the store opens either
/// with its lines (the detach had not begun to take effect, and the
/// superblock still says open, so recovery treats them as after a crash) or
/// empty; once the empty checkpoint is durable it is never warm again.
#[test]
fn a_crash_during_detach_never_leaves_the_old_lines_after_the_empty_checkpoint() {
    let (dev, table) = cached_clean();
    let image = {
        let o = open(&dev, &backing()).unwrap();
        drop(o.store);
        dev.image()
    };
    // Device operations of the open before the detach.
    let base = {
        let cd = Arc::new(CrashDevice::new(image.clone(), None));
        drop(open(cd.clone(), &backing()).unwrap());
        cd.ops()
    };
    let mut rng = SplitMix(7);
    let mut saw = [false; 2];
    for crash_at in base..base + 40 {
        let cd = Arc::new(CrashDevice::new(image.clone(), Some(crash_at)));
        let mut store = open(cd.clone(), &backing()).unwrap().store;
        let done = store.detach(table.clone(), &backing()).is_ok();
        if !cd.crashed() {
            cd.crash_now();
        }
        for mode in [TearMode::DropAll, TearMode::Prefix, TearMode::RandomSectors] {
            let mem = MemDevice::from_image(cd.survivor(mode, &mut rng));
            let sb = Superblock::read(&mem).unwrap().newest;
            let o = open(&mem, &backing()).unwrap();
            let n = mapped(&o.table);
            if done || sb.detached {
                assert_eq!(n, 0, "crash_at {crash_at}: detached yet warm");
            }
            if sb.state == State::Clean {
                assert!(sb.detached, "crash_at {crash_at}: clean but not detached");
            }
            assert!(n == 0 || n == 2, "crash_at {crash_at}: {n} lines");
            saw[(n == 0) as usize] = true;
        }
        if done {
            break;
        }
    }
    assert!(
        saw[0] && saw[1],
        "crashes before and after the empty checkpoint"
    );
}

#[test]
fn a_changed_backing_device_starts_a_clean_cache_cold() {
    let (dev, _) = cached_clean();
    let mut changed = backing();
    changed.sampled = Some(1);
    let mut recorded = backing();
    recorded.sampled = Some(2);
    // Record the sampled fingerprint (close again with it).
    {
        let o = open(&dev, &backing()).unwrap();
        let t: Vec<_> = tiercache_store::table_entries(&o.table).collect();
        o.store.close(t, &recorded).unwrap();
    }
    let o = open(&dev, &changed).unwrap();
    assert_eq!(mapped(&o.table), 0);
    let why = o.report.cold_start.unwrap();
    assert!(why.contains("sampled blocks changed"), "{why}");
    drop(o.store);
    // Cold for good: the empty table was checkpointed.
    assert_eq!(mapped(&open(&dev, &changed).unwrap().table), 0);
}

#[test]
fn open_verified_compares_cached_lines_with_the_backing_device() {
    // Unchanged: warm.
    let (dev, _) = cached_clean();
    let b = backing_dev();
    let o = open_verified(&dev, &backing(), &b).unwrap();
    assert_eq!(mapped(&o.table), 2);
    assert_eq!(o.report.cold_start, None);
    let t: Vec<_> = tiercache_store::table_entries(&o.table).collect();
    o.store.close(t, &backing()).unwrap();
    // Line 9 changed on the backing device (no fingerprint shows it): cold.
    b.write_at(&[0xbb; 512], 9 * 4096 + 1024).unwrap();
    let o = open_verified(&dev, &backing(), &b).unwrap();
    assert_eq!(mapped(&o.table), 0);
    let why = o.report.cold_start.unwrap();
    assert!(why.contains("cached line 9"), "{why}");
}

#[test]
fn open_verified_ignores_sub_blocks_that_are_not_valid() {
    let (dev, mut table) = cached_clean();
    // Only the first sub-block of each line is valid.
    let mut store = open(&dev, &backing()).unwrap().store;
    for (slot, m) in &mut table {
        store
            .append(Record::Valid {
                slot: *slot,
                bitmap: all(1),
            })
            .unwrap();
        m.valid = all(1);
    }
    store.commit().unwrap();
    store.close(table, &backing()).unwrap();
    let b = backing_dev();
    b.write_at(&[0xbb; 512], 9 * 4096 + 1024).unwrap();
    let o = open_verified(&dev, &backing(), &b).unwrap();
    assert_eq!(mapped(&o.table), 2, "{:?}", o.report.cold_start);
}

#[test]
fn a_changed_backing_device_with_dirty_data_is_refused_and_nothing_changes() {
    let dev = MemDevice::from_image(small_image());
    let mut store = open(&dev, &backing()).unwrap().store;
    store
        .append(Record::Map {
            slot: 0,
            line: 5,
            class: 0,
        })
        .unwrap();
    store
        .append(Record::Valid {
            slot: 0,
            bitmap: all(8),
        })
        .unwrap();
    store
        .append(Record::Dirty {
            slot: 0,
            bitmap: all(2),
        })
        .unwrap();
    store.commit().unwrap();
    let m = LineMeta {
        line: 5,
        valid: all(8),
        dirty: all(2),
        class: 0,
    };
    store.close([(0, m)], &backing()).unwrap();
    let mut changed: BackingIdentity = backing();
    changed.fingerprint ^= 1;
    let e = open(&dev, &changed).err().unwrap();
    assert!(matches!(e, StoreError::BackingModified(_)), "{e}");
    // The original contents open warm, the dirty line intact.
    let o = open(&dev, &backing()).unwrap();
    assert_eq!(o.table.get(0), Some(m));
}
