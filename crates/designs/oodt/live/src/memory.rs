//! The volume's metadata memory: what a tiered volume of a given geometry
//! holds in host memory at most, whatever its workload. `format` refuses a
//! volume whose metadata would exceed the machine's allowance
//! ([`tiercache_runtime::memory::metadata_allowance`]) and `open` refuses to
//! serve one, with the same one line ([`check_fits`]).
//!
//! Per block of the volume, at most:
//! - the mapping table's entry
//!   ([`ENTRY_BYTES`](tiercache_oodt_policy::mapping::ENTRY_BYTES)), twice: the worker copies
//!   the table to write a checkpoint without holding the volume's lock;
//! - the placement policy's statistics
//!   ([`PolicyKind::stats_bytes_per_block`]);
//! - a planner round's candidates, one per block with statistics, counted
//!   as every block with room for the vector's growth (twice its size);
//! - a bit of the planner's ranked set;
//!
//! per slot of an allocator (the fast tier's, and the slow tier's in a
//! `sum` volume), a bit, twice (the table and its copy); and per fast-tier
//! slot [`MOVE_SLOT_BYTES`] for a round's moves. Checkpoints are written and
//! read in chunks of [`CHECKPOINT_CHUNK`](tiercache_oodt_policy::mapping::CHECKPOINT_CHUNK)
//! bytes, never as a copy of the table's bytes. Everything else is a fixed overhead independent of the
//! volume's size.

use tiercache_oodt_policy::planner::Move;
use tiercache_oodt_policy::policy::{Candidate, PolicyKind};
use tiercache_oodt_policy::MappingTable;
use tiercache_runtime::memory::{check_allowance, human_bytes};

use crate::superblock::{Capacity, Superblock};

/// Host bytes per fast-tier slot of a planner round's moves: each resident
/// block may be moved out and a block moved in, and the schedule copies
/// them (four [`Move`]s), plus a resident's block number when evacuating.
pub const MOVE_SLOT_BYTES: u64 = 4 * std::mem::size_of::<Move>() as u64 + 8;
/// Host bytes per block of a planner round's candidates (with room for the
/// vector's growth) and its ranked set.
pub const PLAN_BLOCK_BYTES: f64 = 2.0 * std::mem::size_of::<Candidate>() as f64 + 0.125;

/// The metadata memory of a volume, by part (bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetadataMemory {
    /// The mapping table and the copy a checkpoint takes.
    pub table: u64,
    /// The placement policy's per-block statistics.
    pub stats: u64,
    /// A planner round: candidates, ranked set, moves.
    pub planner: u64,
    /// Blocks of the volume.
    pub blocks: u64,
}

impl MetadataMemory {
    /// The bound, in bytes.
    pub fn total(&self) -> u64 {
        self.table + self.stats + self.planner
    }
    /// The bound per block, in bytes.
    pub fn per_block(&self) -> f64 {
        self.total() as f64 / self.blocks.max(1) as f64
    }
}

/// The most metadata memory a volume of `blocks` blocks takes, with
/// `fast_slots` and (`sum`) `slow_slots` slots, under `policy`.
pub fn metadata_memory_of(
    blocks: u64,
    fast_slots: u64,
    slow_slots: u64,
    policy: PolicyKind,
) -> MetadataMemory {
    let allocators: &[u64] = if slow_slots > 0 {
        &[fast_slots, slow_slots]
    } else {
        &[fast_slots]
    };
    MetadataMemory {
        table: 2 * MappingTable::memory_bytes_for(blocks, allocators),
        stats: blocks * policy.stats_bytes_per_block(),
        planner: (blocks as f64 * PLAN_BLOCK_BYTES) as u64 + fast_slots * MOVE_SLOT_BYTES,
        blocks,
    }
}

/// The most metadata memory the volume of `sb` takes under `policy`.
pub fn metadata_memory(sb: &Superblock, policy: PolicyKind) -> MetadataMemory {
    let slow = match sb.capacity {
        Capacity::Sum => sb.layout.slow_slots,
        Capacity::Slow => 0,
    };
    metadata_memory_of(sb.blocks(), sb.layout.fast_slots, slow, policy)
}

/// Refuse (one line) a volume of `volume_bytes` in blocks of `block_bytes`
/// whose metadata (`m`) would exceed the machine's allowance, saying which
/// block size would fit.
pub fn check_fits(
    m: &MetadataMemory,
    volume_bytes: u64,
    block_bytes: u32,
    policy: PolicyKind,
) -> Result<(), String> {
    let what = format!(
        "a tiered volume of {} in {} blocks of {} ({:.1} B each with policy {policy})",
        human_bytes(volume_bytes),
        m.blocks,
        human_bytes(u64::from(block_bytes)),
        m.per_block()
    );
    check_allowance(&what, m.total(), |allowance| {
        // The metadata scales with the number of blocks.
        let at = |bs: u64| m.total() as f64 * f64::from(block_bytes) / bs as f64;
        let fits = (12..=22)
            .map(|s| 1u64 << s)
            .find(|&bs| at(bs) <= allowance as f64);
        match fits {
            Some(bs) => format!("format it with --tier-block {} or larger", size_arg(bs)),
            None => "no block size up to 4MiB fits: use a smaller volume".to_string(),
        }
    })
}

/// A size as `--tier-block` takes it.
fn size_arg(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{}MiB", b >> 20)
    } else {
        format!("{}KiB", b >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_of_common_geometries() {
        // 16 TiB in 1 MiB blocks, 1 TiB of it on the fast tier, policy oodt.
        let m = metadata_memory_of(16 << 20, 1 << 20, 15 << 20, PolicyKind::Oodt);
        // Table and copy 8.25, statistics 8, candidates 32.1, moves 104 per
        // fast slot (6.5 per block here).
        assert!((54.5..55.5).contains(&m.per_block()), "{m:?}");
        assert!(m.total() < 1 << 30, "{m:?}");
    }
}
