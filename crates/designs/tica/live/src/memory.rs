//! The three-level cache's bound on metadata memory, per 4 KiB page of SSD
//! (TICA's pages are its lines), for `format` (which refuses a pair whose
//! metadata would not fit the machine's allowance,
//! `tiercache_runtime::memory`), `serve`, the docs and the tests.
//!
//! What a page costs while serving (worst case, every slot of both SSDs
//! holding a page):
//! - each SSD's page map (a hash map of page to slot, dirty flag and commit
//!   epoch: 24-byte entries) and its free-slot and mapped-slot bitsets;
//! - the policy's list of SSD pages (a linked hash map: a bucket pointer and
//!   a heap node with the page, its state and two links);
//! - while a checkpoint is written: 8 bytes per page (the pages, sorted, to
//!   refuse a page mapped twice);
//! - at recovery: both SSDs' recovered tables (`tiercache_store::SlotTable`)
//!   and the list of WO-SSD pages sorted for the policy.
//!
//! The DRAM level is not per SSD page: it is the configured `--dram-size`
//! of page data plus [`DRAM_PAGE_OVERHEAD`] per DRAM page.

use anyhow::{bail, Result};
use tiercache_runtime::memory::{human_bytes, metadata_allowance, refusal};
use tiercache_store::SlotTable;

use crate::slots::PAGE;

/// Bytes per entry of a growing hash table of `entry`-byte entries at its
/// worst: 7/8 load, just after doubling, while the old table is still held.
fn hash_entry_bytes(entry: usize) -> f64 {
    (entry as f64 + 1.0) * 16.0 / 7.0 * 1.5
}

/// Heap allocator overhead per small allocation (a linked hash map node).
const ALLOC_OVERHEAD: f64 = 16.0;

/// The bound on metadata bytes per 4 KiB page of SSD (see the module doc).
pub fn bytes_per_page() -> f64 {
    let ssd_map = hash_entry_bytes(8 + 16) + 2.0 / 8.0;
    let policy = hash_entry_bytes(8) + 8.0 + 8.0 + 16.0 + ALLOC_OVERHEAD;
    let recovery = 2.0 * SlotTable::bytes_per_slot(1) + 16.0;
    let checkpoint = 8.0;
    2.0 * ssd_map + policy + recovery + checkpoint
}

/// Bytes per DRAM-level page besides its 4 KiB of data (its map entry and buffer header).
pub const DRAM_PAGE_OVERHEAD: u64 = 128;

/// Memory a serving process takes besides the metadata and the DRAM level:
/// code, threads, I/O buffers and queues.
pub const FIXED_OVERHEAD: u64 = 192 << 20;

/// The bound on metadata memory of a pair with SSDs of `ssd_pages` pages
/// (the larger of the two) and a DRAM level of `dram_bytes`.
pub fn metadata_bytes(ssd_pages: u64, dram_bytes: u64) -> u64 {
    (bytes_per_page() * ssd_pages as f64).ceil() as u64
        + dram_bytes
        + dram_bytes / PAGE * DRAM_PAGE_OVERHEAD
}

/// Refuses (one line) SSDs of `ssd_bytes` bytes (the larger) with a DRAM
/// level of `dram_bytes` whose metadata would take more than the machine's
/// allowance, saying which SSD size would fit. `verb` is "a" (format) or
/// "this" (serve). Nothing is refused when the allowance is unknown.
pub fn check_fits(verb: &str, ssd_bytes: u64, dram_bytes: u64) -> Result<()> {
    let Some(allowance) = metadata_allowance() else {
        return Ok(());
    };
    let need = metadata_bytes(ssd_bytes / PAGE, dram_bytes);
    if need <= allowance {
        return Ok(());
    }
    let left = allowance.saturating_sub(metadata_bytes(0, dram_bytes));
    let fit_pages = (left as f64 / bytes_per_page()) as u64;
    let fit = ((fit_pages * PAGE) >> 30) << 30;
    let fix = if fit > 0 {
        format!(
            "SSDs of up to {} each would fit (pages are 4 KiB)",
            human_bytes(fit)
        )
    } else {
        "a smaller --dram-size and smaller SSDs would".into()
    };
    let what = format!(
        "{verb} three-level cache with {} SSDs of 4 KiB pages ({:.0} B per page) and {} of DRAM",
        human_bytes(ssd_bytes),
        bytes_per_page(),
        human_bytes(dram_bytes)
    );
    bail!("{}", refusal(&what, need, allowance, &fix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_costs_a_few_hundred_bytes_and_dram_counts_whole() {
        let b = bytes_per_page();
        assert!(b > 150.0 && b < 400.0, "{b}");
        assert_eq!(
            metadata_bytes(0, 64 << 20),
            (64 << 20) + (64 << 20) / 4096 * 128
        );
    }

    #[test]
    fn the_design_page_states_this_bound() {
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../../docs/designs/tica.md"
        ))
        .unwrap()
        .replace('\n', " ");
        let per_page = format!("at most {:.0} bytes", bytes_per_page());
        let per_gib = format!(
            "about {:.0} MiB per GiB of SSD",
            bytes_per_page() * 262144.0 / (1 << 20) as f64
        );
        assert!(
            page.contains(&per_page),
            "docs/designs/tica.md should say {per_page}"
        );
        assert!(
            page.contains(&per_gib),
            "docs/designs/tica.md should say {per_gib}"
        );
    }
}
