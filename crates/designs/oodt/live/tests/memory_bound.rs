//! The stated metadata memory bound (`memory::metadata_memory_of`) measured
//! against the real structures with a counting allocator: the mapping table,
//! the copy a checkpoint takes, the policy's statistics and a planner round
//! with every block a candidate; and recovery's streamed read of a
//! checkpoint (the table plus chunks, never a copy of the checkpoint).

use std::sync::Arc;

use tiercache_fuzz::memory::{peak_of, Counting};
use tiercache_io::{BlockDev, MemDev};
use tiercache_oodt_live::journal::Journal;
use tiercache_oodt_live::memory::metadata_memory_of;
use tiercache_oodt_live::superblock::Layout as VolumeLayout;
use tiercache_oodt_policy::mapping::CHECKPOINT_CHUNK;
use tiercache_oodt_policy::planner::plan_round;
use tiercache_oodt_policy::policy::{build, Access, PolicyConfig, PolicyKind};
use tiercache_oodt_policy::MappingTable;

#[global_allocator]
static A: Counting = Counting;

#[test]
fn real_structures_stay_within_the_stated_bound() {
    let bs = 4096u32;
    let (fast, slow) = (50_000u64, 450_002u64);
    let blocks = fast + slow - 2;
    let bound = metadata_memory_of(blocks, fast, slow, PolicyKind::Oodt);
    let ((), used) = peak_of(|| {
        let table = MappingTable::new_sum(bs, blocks, &[fast, slow]).unwrap();
        let copy = table.clone();
        let mut policy = build(PolicyKind::Oodt, &PolicyConfig::default(), blocks, bs).unwrap();
        // Every block read a few times, at scattered places: all are candidates.
        for round in 0..3u64 {
            for i in 0..blocks {
                let b = (i * 7919 + round) % blocks;
                let offset = b * u64::from(bs);
                policy.observe(&Access {
                    block: b,
                    offset,
                    len: bs,
                    read: true,
                    meta: false,
                    request_offset: offset,
                    request_len: u64::from(bs),
                    first_part: true,
                });
            }
        }
        let mut cands = Vec::new();
        let round = plan_round(&table, policy.as_mut(), &mut cands, 64);
        assert!(!round.is_empty());
        assert!(
            cands.len() as u64 > blocks / 2,
            "{} candidates",
            cands.len()
        );
        drop((copy, round, cands));
    });
    eprintln!(
        "{blocks} blocks, every one a candidate: {used} B at the peak ({:.2} B/block), stated {} B ({:.2} B/block)",
        used as f64 / blocks as f64,
        bound.total(),
        bound.per_block()
    );
    assert!(used as u64 <= bound.total(), "{used} > {}", bound.total());

    // Recovery's streamed read of a checkpoint: the table and chunks.
    let (layout, vblocks) = VolumeLayout::compute_sum(64 << 20, slow * u64::from(bs), bs).unwrap();
    let dev: Arc<dyn BlockDev> = Arc::new(MemDev::new("fast", layout.data_offset as usize));
    let table =
        MappingTable::new_sum(bs, vblocks, &[layout.fast_slots, layout.slow_slots]).unwrap();
    Journal::format(Arc::clone(&dev), layout, &table).unwrap();
    let table_bytes = table.memory_bytes();
    drop(table);
    let (rec, used) = peak_of(|| Journal::open(Arc::clone(&dev), layout).unwrap().1);
    let stated = table_bytes + layout.log_bytes + 4 * CHECKPOINT_CHUNK as u64;
    eprintln!("recovery read: {used} B at its peak, stated {stated} B (table {table_bytes} B)");
    assert_eq!(rec.table.blocks(), vblocks);
    assert!(used as u64 <= stated, "{used} > {stated}");
}
