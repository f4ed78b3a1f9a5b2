//! Table VII on the scattered write-heavy synthetic workload (single 4-KiB
//! blocks, Zipf 0.99, spread over a disk range 4 x the footprint):
//! `cargo run --release -p tiercache-flash --example scattered -- [REQUESTS] [BLOCKS] [SPREAD]`.

use tiercache_flash::reproduce::{format_vii, table_vii, Workload};
use tiercache_flash::workload::ZipfParams;
use tiercache_flash::FtlKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| -> Result<u64, std::num::ParseIntError> {
        args.get(i).map_or(Ok(d), |s| s.parse())
    };
    let p = ZipfParams::scattered(arg(1, 400_000)?, arg(2, 131_072)?, arg(3, 4)?);
    let mut w = Workload::zipf(p)?;
    w.name = "scattered".into();
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
    println!("{}", format_vii(&rows));
    for (_, r) in &rows {
        println!(
            "{} {}: hit {:.2} % mapped {} of {} pages, switch/partial/full {}/{}/{}, log blocks {}",
            r.ftl_kind,
            r.mode,
            r.hit_ratio * 100.0,
            r.ftl.mapped_pages,
            r.cache_capacity_blocks,
            r.ftl.switch_merges,
            r.ftl.partial_merges,
            r.ftl.full_merges,
            r.ftl.log_blocks
        );
    }
    Ok(())
}
