//! The SSD cache's bound on metadata memory: bytes of RAM per line slot,
//! for `format` (which refuses a cache that would not fit the machine's
//! allowance, `tiercache_runtime::memory`), `serve`, the docs and the tests.
//!
//! What a slot costs while serving (worst case, every slot mapped and dirty):
//! - the core's line table: a fully associative hash index of `u32` bucket
//!   heads (rounded up to a power of two: up to 8 bytes), a `u32` chain link
//!   and a 40-bit line (17 bytes), or a `u32` tag when set-associative (4);
//!   two bits per sub-block (valid, dirty) and a class bit;
//! - its replacement state: two `u32` links (LRU, FIFO, ARC, S3-FIFO), ARC
//!   and S3-FIFO's per-slot flags and ghost histories (up to one ghost per
//!   slot), per-set list ends shared by the set's ways;
//! - its dirty-line set (a B-tree of line numbers): up to every line;
//! - n-hit admission's access counts (up to four tracked lines per slot);
//! - the live server's copy of the table as the log describes it (the
//!   compact `tiercache_store::SlotTable`), and the snapshot of it a
//!   checkpoint writes from;
//! - while a checkpoint is written: 8 bytes per mapped slot (the lines,
//!   sorted, to refuse a line mapped twice) and a bitset of the mapped slots.
//!
//! Recovery needs less (the recovered table and the same 8 bytes per slot,
//! before the core exists). Not per slot: 2LBS admission's access counts grow
//! with the lines referenced on the backing device, and buffers of requests
//! in flight with the load; [`FIXED_OVERHEAD`] covers the latter.

use anyhow::{bail, Result};
use tiercache_azor_policy::admission::AdmissionKind;
use tiercache_azor_policy::eviction::EvictionKind;
use tiercache_azor_policy::{Assoc, CacheConfig};
use tiercache_runtime::memory::{human_bytes, metadata_allowance, refusal};
use tiercache_store::SlotTable;

/// Bytes per entry of a growing hash table of `entry`-byte entries, at its
/// worst: 7/8 load, just after doubling, while the old table is still held
/// (one control byte per bucket).
pub fn hash_entry_bytes(entry: usize) -> f64 {
    (entry as f64 + 1.0) * 16.0 / 7.0 * 1.5
}

/// Bytes per dirty line in the core's dirty set (a B-tree of `u64` with
/// nodes of 11 keys, half full at worst, plus the inner nodes).
pub const DIRTY_LINE_BYTES: f64 = 24.0;

/// Bytes per ghost entry of ARC and S3-FIFO: its two links, its line, its
/// list and its hash index entry.
pub fn ghost_entry_bytes() -> f64 {
    8.0 + 8.0 + 4.0 + hash_entry_bytes(16)
}

/// Memory a serving process takes besides the per-slot metadata: code,
/// threads, I/O buffers and queues, the metadata log's buffers.
pub const FIXED_OVERHEAD: u64 = 192 << 20;

/// The bound on metadata bytes per line slot for a configuration (see the module doc).
pub fn bytes_per_slot(cfg: &CacheConfig) -> f64 {
    let subs = (cfg.line_bytes / cfg.sub_block_bytes.max(1)).max(1);
    let ways = match cfg.assoc {
        Assoc::Direct => 1.0,
        Assoc::Ways(n) => n.max(1) as f64,
        Assoc::Full => f64::INFINITY,
    };
    let per_set = |bytes: f64| if ways.is_finite() { bytes / ways } else { 0.0 };
    let index = match cfg.assoc {
        Assoc::Full => 8.0 + 4.0 + 4.0 + 1.0,
        _ => 4.0,
    };
    let bits = 2.0 * subs as f64 / 8.0 + 1.0 / 8.0;
    let eviction = match (cfg.assoc, cfg.eviction) {
        (Assoc::Direct, _) => 0.0,
        (_, EvictionKind::Lru) | (_, EvictionKind::Fifo) => 8.0 + per_set(8.0),
        (_, EvictionKind::Arc) => 8.0 + 1.0 + per_set(16.0 + 8.0 + 1.0) + ghost_entry_bytes(),
        (_, EvictionKind::S3fifo) => 8.0 + 2.0 + per_set(16.0 + 2.0) + ghost_entry_bytes(),
    };
    let admission = match cfg.admission.kind {
        AdmissionKind::Nhit => 4.0 * hash_entry_bytes(12),
        _ => 0.0,
    };
    let view = SlotTable::bytes_per_slot(subs);
    let checkpoint = 8.0 + 2.0 / 8.0;
    index + bits + eviction + DIRTY_LINE_BYTES + admission + 2.0 * view + checkpoint
}

/// The bound on metadata bytes of a cache of `slots` line slots.
pub fn metadata_bytes(cfg: &CacheConfig, slots: u64) -> u64 {
    (bytes_per_slot(cfg) * slots as f64).ceil() as u64
}

/// Refuses (one line) a cache device of `dev_size` bytes whose metadata
/// would take more than the machine's allowance, naming the smallest line
/// size that would fit. Nothing is refused when the allowance is unknown.
pub fn check_fits(cfg: &CacheConfig, dev_size: u64) -> Result<()> {
    let Some(allowance) = metadata_allowance() else {
        return Ok(());
    };
    // Every line the size holds (an upper bound on the layout's slots; also
    // counted past the 2^32 - 1 slots a cache can address).
    let nominal = dev_size / cfg.line_bytes as u64;
    let need = metadata_bytes(cfg, nominal);
    if need <= allowance {
        return Ok(());
    }
    let fix = fitting_line_size(cfg, dev_size, allowance)
        .map(|l| {
            format!(
                "--line-size {} would fit",
                human_bytes(l as u64).replace(' ', "")
            )
        })
        .unwrap_or_else(|| "no line size up to 1 MiB fits; use a smaller cache".into());
    let what = format!(
        "a {} cache with {} lines ({:.0} B per line)",
        human_bytes(dev_size),
        human_bytes(cfg.line_bytes as u64),
        bytes_per_slot(cfg)
    );
    bail!("{}", refusal(&what, need, allowance, &fix))
}

/// Refuses a cache device with more lines than a cache can address (slots
/// are `u32`), naming the line size that would do: the layout would
/// otherwise leave the rest of the device unused.
pub fn check_addressable(cfg: &CacheConfig, dev_size: u64) -> Result<()> {
    let lines = dev_size / cfg.line_bytes as u64;
    if lines <= u32::MAX as u64 {
        return Ok(());
    }
    let line = (cfg.line_bytes.trailing_zeros() + 1..=20)
        .map(|s| 1u64 << s)
        .find(|l| dev_size / l <= u32::MAX as u64)
        .map(|l| format!("--line-size {} would do", human_bytes(l).replace(' ', "")))
        .unwrap_or_else(|| "use a smaller cache device".into());
    bail!(
        "a {} cache with {} lines has {lines} lines, more than the {} a cache can address; {line}",
        human_bytes(dev_size),
        human_bytes(cfg.line_bytes as u64),
        u32::MAX
    )
}

/// The smallest power-of-two line size (up to 1 MiB, keeping the sub-block
/// size valid) whose metadata fits `allowance`.
fn fitting_line_size(cfg: &CacheConfig, dev_size: u64, allowance: u64) -> Option<u32> {
    (cfg.line_bytes.trailing_zeros() + 1..=20)
        .map(|s| 1u32 << s)
        .filter(|&line| {
            line / cfg.sub_block_bytes.max(1) <= tiercache_store::layout::MAX_SUB_BLOCKS
        })
        .find(|&line| {
            let c = CacheConfig {
                line_bytes: line,
                ..cfg.clone()
            };
            metadata_bytes(&c, dev_size / line as u64) <= allowance
        })
}

/// Refuses to open a cache of `slots` slots whose metadata would exceed the
/// allowance (a cache formatted on a larger machine, or before the bound).
pub fn check_open(cfg: &CacheConfig, slots: u64, dev_size: u64) -> Result<()> {
    let Some(allowance) = metadata_allowance() else {
        return Ok(());
    };
    let need = metadata_bytes(cfg, slots);
    if need <= allowance {
        return Ok(());
    }
    let what = format!(
        "this {} cache with {} lines ({:.0} B per line)",
        human_bytes(dev_size),
        human_bytes(cfg.line_bytes as u64),
        bytes_per_slot(cfg)
    );
    bail!(
        "{}",
        refusal(
            &what,
            need,
            allowance,
            "serve it on a machine with more RAM, or reformat it with a larger --line-size"
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cache_costs_under_80_bytes_a_line() {
        let cfg = CacheConfig::default();
        let b = bytes_per_slot(&cfg);
        assert!(b > 60.0 && b < 80.0, "{b}");
        // Larger lines with more sub-blocks cost more per line, less per GiB.
        let big = CacheConfig {
            line_bytes: 1 << 20,
            ..cfg.clone()
        };
        assert!(bytes_per_slot(&big) > b);
        assert!(bytes_per_slot(&big) / 256.0 < b);
    }

    #[test]
    fn the_fitting_line_size_is_the_smallest_that_fits() {
        let cfg = CacheConfig::default();
        let size = 1u64 << 40;
        let allowance = 12u64 << 30;
        let line = fitting_line_size(&cfg, size, allowance).unwrap();
        assert_eq!(line, 8192);
        assert!(metadata_bytes(&cfg, size / 4096) > allowance);
        let none = fitting_line_size(&cfg, 1 << 60, allowance);
        assert_eq!(none, None);
    }

    #[test]
    fn the_design_page_states_this_bound() {
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../../docs/designs/ssd-cache.md"
        ))
        .unwrap();
        let cfg = CacheConfig::default();
        let row = format!(
            "| 4 KiB | {:.0} | about {:.0} MiB |",
            bytes_per_slot(&cfg),
            bytes_per_slot(&cfg) * 262144.0 / (1 << 20) as f64
        );
        assert!(
            page.contains(&row),
            "docs/designs/ssd-cache.md should have the row {row}"
        );
    }
}
