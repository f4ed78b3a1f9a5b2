//! Table VII on two scattered write-heavy synthetic workloads (single 4-KiB
//! blocks, Zipf 0.99, each block placed on its own in a disk range several
//! times the footprint): `scattered` (400,000 requests over 131,072 blocks,
//! spread 4, 90 % writes, seed 42) and `scattered-b` (1,000,000 requests over
//! 65,536 blocks, spread 8, 95 % writes, seed 7).
//! `cargo run --release -p tiercache-flashtier-policy --example scattered -- [REQUESTS] [BLOCKS] [SPREAD]`
//! replaces the first workload's size.
//!
//! Layers: hybrid, page (the prototype's SSC-P) and page-log (Section 4.3's
//! log/data split on a page-mapped layer; its SSD row is page's).
//! For each page-mapped SSC it also runs an SSD cache sized to hold as many
//! blocks as the SSC keeps mapped at the end: the share of the SSC's extra
//! misses that capacity alone explains.

use tiercache_flashtier_policy::reproduce::{format_vii, simulate, table_vii, Workload};
use tiercache_flashtier_policy::workload::ZipfParams;
use tiercache_flashtier_policy::{DeviceKind, FtlKind, ManagerKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| -> Result<u64, std::num::ParseIntError> {
        args.get(i).map_or(Ok(d), |s| s.parse())
    };
    let a = ZipfParams::scattered(arg(1, 400_000)?, arg(2, 131_072)?, arg(3, 4)?);
    let b = ZipfParams {
        seed: 7,
        write_share: 0.95,
        ..ZipfParams::scattered(1_000_000, 65_536, 8)
    };
    for (name, p) in [("scattered", a), ("scattered-b", b)] {
        let mut w = Workload::zipf(p)?;
        w.name = name.into();
        eprintln!(
            "{}: {} requests, {} unique blocks",
            w.name, w.requests, w.footprint_blocks
        );
        let mut rows = Vec::new();
        for ftl in [FtlKind::Hybrid, FtlKind::Page] {
            rows.extend(
                table_vii(&w, ftl, 0.25)?
                    .into_iter()
                    .map(|r| (w.name.clone(), r)),
            );
        }
        // page-log: the SSD is the page-mapped one above; only the SSCs differ.
        for kind in [DeviceKind::Ssc, DeviceKind::SscV] {
            let r = simulate(
                &w,
                kind,
                FtlKind::PageLog,
                ManagerKind::WriteThrough,
                w.capacity_for(0.25),
                false,
            )?;
            rows.push((w.name.clone(), r));
        }
        println!("{}", format_vii(&rows));
        for (_, r) in &rows {
            let pages = u64::from(r.flash_blocks) * 64;
            println!(
                "{} {}: hit {:.2} % mapped {} of {} pages ({} flash pages hold no cached block), \
                 switch/partial/full {}/{}/{}, log blocks {}",
                r.ftl_kind,
                r.mode,
                r.hit_ratio * 100.0,
                r.ftl.mapped_pages,
                r.cache_capacity_blocks,
                pages.saturating_sub(r.ftl.mapped_pages),
                r.ftl.switch_merges,
                r.ftl.partial_merges,
                r.ftl.full_merges,
                r.ftl.log_blocks
            );
        }
        for (_, r) in rows
            .iter()
            .filter(|(_, r)| r.ftl_kind.starts_with("page") && r.mode != "ssd")
        {
            let cap = (r.ftl.mapped_pages as f64 / 0.93).ceil() as u64 * 4096;
            let s = simulate(
                &w,
                DeviceKind::Ssd,
                FtlKind::Page,
                ManagerKind::WriteThrough,
                cap,
                false,
            )?;
            println!(
                "{} {}: miss {:.2} %; an SSD cache of {} blocks (its {} mapped): miss {:.2} %",
                r.ftl_kind,
                r.mode,
                r.miss_rate * 100.0,
                s.cache_capacity_blocks,
                r.ftl.mapped_pages,
                s.miss_rate * 100.0
            );
        }
    }
    Ok(())
}
