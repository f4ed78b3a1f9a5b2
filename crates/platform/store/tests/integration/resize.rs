//! Resizing a store's data region (`Store::resize`): a power loss at every
//! device operation of a shrink and of a grow recovers the old layout or the
//! new one, with every committed record.

use crate::common;

use std::sync::Arc;

use common::*;
use tiercache_store::crash_sim::{CrashDevice, MemDevice, SplitMix, TearMode};
use tiercache_store::{
    format_reserving, open, table_entries, LineMeta, MetaDevice, Record, Slot, SubBlocks,
    Superblock,
};

const DEV: u64 = 8 << 20;
const SMALL: u64 = 4 << 20;

fn meta(line: u64, dirty: bool) -> LineMeta {
    LineMeta {
        line,
        valid: SubBlocks::first(8),
        dirty: if dirty {
            SubBlocks::first(8)
        } else {
            SubBlocks::EMPTY
        },
        class: 0,
    }
}

fn map(store: &mut tiercache_store::Store<impl MetaDevice>, slot: Slot, m: LineMeta) {
    store
        .append(Record::Map {
            slot,
            line: m.line,
            class: 0,
        })
        .unwrap();
    store
        .append(Record::Valid {
            slot,
            bitmap: m.valid,
        })
        .unwrap();
    if !m.dirty.is_empty() {
        store
            .append(Record::Dirty {
                slot,
                bitmap: m.dirty,
            })
            .unwrap();
    }
}

/// An 8 MiB store (4 KiB lines of 512-byte sub-blocks) with lines 1-3 dirty
/// in slots 0-2 and line 9 clean in the last slot, committed (not closed).
fn full_store() -> (Vec<u8>, Vec<(Slot, LineMeta)>, u32) {
    let dev = MemDevice::new(DEV);
    format_reserving(&dev, &params(4096, 512, Some(64 << 10)), false, None).unwrap();
    let mut store = open(&dev, &backing()).unwrap().store;
    let last = store.layout().slots - 1;
    let mut table = Vec::new();
    for (slot, m) in [
        (0, meta(1, true)),
        (1, meta(2, true)),
        (2, meta(3, true)),
        (last, meta(9, false)),
    ] {
        map(&mut store, slot, m);
        table.push((slot, m));
    }
    store.commit().unwrap();
    drop(store);
    (dev.image(), table, last + 1)
}

fn entries(t: &tiercache_store::SlotTable) -> Vec<(Slot, LineMeta)> {
    table_entries(t).collect()
}

/// Runs `resize` on the store opened from `image`, with a power loss at
/// every device operation from the resize's first on, and checks each
/// survivor (three tear modes): it opens with the old or the new number of
/// slots, and the table `want(new_layout)` says. Returns the image after a
/// resize that completed.
fn crash_everywhere(
    image: &[u8],
    new_size: u64,
    table: &[(Slot, LineMeta)],
    want: &dyn Fn(bool) -> Vec<Vec<(Slot, LineMeta)>>,
) -> Vec<u8> {
    crash_everywhere_keeping(image, new_size, table, true, want)
}

/// [`crash_everywhere`], the resize given the lines of `table` below the new
/// end (`keep`) or none (a cache that starts again empty at its new size).
fn crash_everywhere_keeping(
    image: &[u8],
    new_size: u64,
    table: &[(Slot, LineMeta)],
    keep_lines: bool,
    want: &dyn Fn(bool) -> Vec<Vec<(Slot, LineMeta)>>,
) -> Vec<u8> {
    let (old_slots, new_layout) = {
        let dev = MemDevice::from_image(image.to_vec());
        let o = open(&dev, &backing()).unwrap();
        let l = *o.store.layout();
        (l.slots, l.resized(new_size).unwrap())
    };
    let base = {
        let cd = Arc::new(CrashDevice::new(image.to_vec(), None));
        drop(open(cd.clone(), &backing()).unwrap());
        cd.ops()
    };
    let mut rng = SplitMix(41);
    let mut seen = [false; 2];
    for crash_at in base.. {
        let cd = Arc::new(CrashDevice::new(image.to_vec(), Some(crash_at)));
        let mut store = open(cd.clone(), &backing()).unwrap().store;
        let keep: Vec<_> = table
            .iter()
            .copied()
            .filter(|(s, _)| keep_lines && *s < new_layout.slots)
            .collect();
        let writes = std::cell::Cell::new(0u32);
        let done = store
            .resize(new_layout, keep, &|| writes.set(writes.get() + 1))
            .is_ok();
        if done {
            assert!(writes.get() >= 4, "two superblock copies, each synced");
            let img = cd.survivor(TearMode::DropAll, &mut rng);
            assert_eq!(seen, [true, true], "crashes before and after the switch");
            return img;
        }
        if !cd.crashed() {
            cd.crash_now();
        }
        for mode in [TearMode::DropAll, TearMode::Prefix, TearMode::RandomSectors] {
            let mem = MemDevice::from_image(cd.survivor(mode, &mut rng));
            let o = open(&mem, &backing())
                .unwrap_or_else(|e| panic!("crash_at {crash_at} {mode:?}: {e}"));
            let slots = o.store.layout().slots;
            assert!(
                slots == old_slots || slots == new_layout.slots,
                "crash_at {crash_at}: {slots} slots, neither {old_slots} nor {}",
                new_layout.slots
            );
            let is_new = slots == new_layout.slots;
            seen[is_new as usize] = true;
            let mut got = entries(&o.table);
            // After an unclean shutdown the store keeps the bits; the engine's
            // rule (dirty_all_valid) is not applied here.
            got.sort_by_key(|e| e.0);
            let w = want(is_new);
            assert!(
                w.contains(&got),
                "crash_at {crash_at} {mode:?} (new layout: {is_new}): {got:?}, expected one of {w:?}"
            );
            assert_eq!(Superblock::read(&mem).unwrap().newest.layout.slots, slots);
        }
    }
    unreachable!()
}

#[test]
fn a_power_loss_at_every_write_of_a_shrink_and_a_grow_keeps_every_commit() {
    let (image, table, slots) = full_store();
    let tail_dropped: Vec<_> = table.iter().copied().filter(|(s, _)| *s < 3).collect();
    // Shrink: the clean tail line is dropped (the caller wrote back and
    // evicted what was past the new end); the old layout may keep it (a
    // crash before the checkpoint without it is durable).
    let shrunk = crash_everywhere(&image, SMALL, &table, &|is_new| {
        if is_new {
            vec![tail_dropped.clone()]
        } else {
            vec![table.clone(), tail_dropped.clone()]
        }
    });
    let small = open(&MemDevice::from_image(shrunk.clone()), &backing())
        .unwrap()
        .store
        .layout()
        .slots;
    assert!(small < slots);
    // A record past the new end is refused now.
    let dev = MemDevice::from_image(shrunk.clone());
    let mut store = open(&dev, &backing()).unwrap().store;
    assert!(store
        .append(Record::Map {
            slot: small,
            line: 50,
            class: 0
        })
        .is_err());
    drop(store);
    // Grow back to the whole device: the first slots keep their lines.
    let grown = crash_everywhere(&shrunk, DEV, &tail_dropped, &|_| vec![tail_dropped.clone()]);
    let dev = MemDevice::from_image(grown);
    let mut store = open(&dev, &backing()).unwrap().store;
    assert_eq!(store.layout().slots, slots);
    // A new slot past the old end is usable, and recovered.
    map(&mut store, slots - 1, meta(70, true));
    store.commit().unwrap();
    drop(store);
    let o = open(&dev, &backing()).unwrap();
    assert_eq!(o.table.get(slots - 1).map(|m| m.line), Some(70));
}

#[test]
fn a_shrink_refuses_a_table_with_lines_past_the_new_end_and_a_short_device() {
    let (image, table, _) = full_store();
    let dev = MemDevice::from_image(image);
    let mut store = open(&dev, &backing()).unwrap().store;
    let small = store.layout().resized(SMALL).unwrap();
    let e = store.resize(small, table, &|| {}).unwrap_err().to_string();
    assert!(e.contains("still mapped past the new end"), "{e}");
    // Growing past the device's bytes is refused before anything is written.
    let reserved = {
        let d = MemDevice::new(DEV);
        format_reserving(&d, &params(4096, 512, Some(64 << 10)), false, Some(2 * DEV)).unwrap();
        d
    };
    let mut store = open(&reserved, &backing()).unwrap().store;
    let big = store.layout().resized(2 * DEV).unwrap();
    let e = store
        .resize(big, Vec::new(), &|| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("the new size needs"), "{e}");
}

/// A set-associative cache starts again empty at its new size (the number
/// of slots decides each line's set): its lines are checkpointed away before
/// the superblock records the new size, so that no crash recovers the new
/// geometry with lines in the old one's places. (Without that checkpoint, a
/// grow wrote only the superblock.)
#[test]
fn a_grow_that_drops_every_line_checkpoints_first() {
    let (image, table, slots) = full_store();
    let kept: Vec<_> = table.iter().copied().filter(|(s, _)| *s < 3).collect();
    let shrunk = crash_everywhere(&image, SMALL, &table, &|is_new| {
        if is_new {
            vec![kept.clone()]
        } else {
            vec![table.clone(), kept.clone()]
        }
    });
    let grown = crash_everywhere_keeping(&shrunk, DEV, &kept, false, &|is_new| {
        if is_new {
            vec![Vec::new()]
        } else {
            vec![kept.clone(), Vec::new()]
        }
    });
    let dev = MemDevice::from_image(grown);
    let o = open(&dev, &backing()).unwrap();
    assert_eq!(o.store.layout().slots, slots);
    assert!(entries(&o.table).is_empty());
}
