//! The stated metadata memory bound (`memory::metadata_memory`) measured
//! against the real structures with a counting allocator: a full map with
//! every block dirty and its dirty index, and recovery's streamed read of a
//! checkpoint (the map plus a chunk, never a copy of the checkpoint).

use tiercache_flashtier_live::checkpoint::{
    read_newest_with, write_streamed, CheckpointHead, CHUNK,
};
use tiercache_flashtier_live::layout::plan;
use tiercache_flashtier_live::map::{Entry, SparseMap};
use tiercache_flashtier_live::memory::metadata_memory;
use tiercache_fuzz::memory::{peak_of, Counting};
use tiercache_io::{BlockDev, MemDev};

#[global_allocator]
static A: Counting = Counting;

#[test]
fn real_structures_stay_within_the_stated_bound() {
    // A 4 GiB cache of 1 MiB segments over a 64 GiB backing device.
    let mut sb = plan(4 << 30, 1 << 20).unwrap();
    sb.backing_size = 64 << 30;
    let bound = metadata_memory(&sb).unwrap();
    let slots = sb.slots();
    // Half in backing order (the dirty index's worst case), half scattered
    // (an odd multiplier modulo a power of two: no block twice).
    let half = sb.backing_blocks() / 2;
    assert!(half.is_power_of_two());
    let lba = |i: u64| {
        if i.is_multiple_of(2) {
            i
        } else {
            (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % half) * 2 + 1
        }
    };
    let lbas: Vec<u64> = (0..slots).map(lba).collect();
    // Every slot mapped, every block dirty, with the dirty index on (as the
    // store keeps it).
    let (map, used) = peak_of(|| {
        let mut m = SparseMap::new(slots, sb.backing_blocks(), slots).unwrap();
        m.index_dirty();
        for (i, &l) in lbas.iter().enumerate() {
            m.insert(
                l,
                Entry {
                    slot: i as u32,
                    dirty: true,
                },
            )
            .unwrap();
        }
        m
    });
    let stated = bound.map + bound.dirty_index;
    eprintln!(
        "{slots} slots, all dirty: {used} B allocated ({:.2} B/slot), stated {stated} B ({:.2} B/slot)",
        used as f64 / slots as f64,
        stated as f64 / slots as f64
    );
    assert!(used as u64 <= stated, "{used} > {stated}");

    // Recovery's streamed read: the new map and a chunk, not the checkpoint.
    let dev = MemDev::new("cache", (sb.ckpt_off[1] + sb.ckpt_bytes) as usize);
    let head = CheckpointHead::empty(1, sb.nsegs);
    write_streamed(
        &dev,
        &sb,
        &head,
        map.iter().map(|(l, e)| (l, e.dirty, e.slot)),
    )
    .unwrap();
    drop(map);
    let (got, used) = peak_of(|| {
        read_newest_with(
            &dev as &dyn BlockDev,
            &sb,
            |_, _| SparseMap::new(slots, sb.backing_blocks(), slots),
            |m, l, dirty, slot| m.insert(l, Entry { slot, dirty }).map(|_| ()),
        )
        .unwrap()
        .unwrap()
    });
    assert_eq!(got.1.len() as u64, slots);
    let stated = bound.map + bound.segments + 2 * CHUNK as u64;
    eprintln!("recovery read: {used} B allocated at its peak, stated {stated} B");
    assert!(used as u64 <= stated, "{used} > {stated}");
}
