//! `tiercache reproduce flashtier`: FlashTier's Table VII (erases, wear
//! difference, write amplification, miss rate of SSD, SSC and SSC-V under
//! write-through caching) and Table VI (device and host memory under
//! write-back caching) on the shared DiskSim traces and a synthetic zipfian
//! overwrite workload. Prints the tables and, with `--out PREFIX`, writes
//! PREFIX-vii.csv and PREFIX-vi.csv.

use anyhow::{Context, Result};
use std::path::PathBuf;
use tiercache_flashtier_policy::reproduce::{
    csv, format_vi, format_vii, table_vi, table_vii, RecordIter, Workload,
};
use tiercache_flashtier_policy::workload::ZipfParams;
use tiercache_flashtier_policy::FtlKind;

/// Options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Folder of the shared traces.
    #[arg(long, default_value = "../shared/traces")]
    pub traces: std::path::PathBuf,
    /// Also write the tables as DIR/flashtier-vii.csv and DIR/flashtier-vi.csv (DIR is
    /// created if absent), as every `reproduce` takes --out.
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Cache size as a share of each workload's unique blocks (FlashTier: 0.25).
    #[arg(long, default_value = "25%", value_parser = tiercache_sim::units::parse_fraction)]
    pub cache_share: f64,
    /// Requests of the synthetic zipfian overwrite workload (0: skip it).
    #[arg(long, default_value_t = 400_000)]
    pub zipf_requests: u64,
    /// Also run the page-mapped layers: page (the paper's prototype "SSC-P")
    /// and page-log (Section 4.3's log/data split on a page-mapped layer).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub page_ftl: bool,
}

fn trace_workload(name: &str, path: PathBuf) -> Result<Workload> {
    Ok(Workload::new(name, move || {
        let r =
            tiercache_trace::open(&path, None, &Default::default()).map_err(|e| e.to_string())?;
        Ok(Box::new(r.map(|x| x.map_err(|e| e.to_string()))) as RecordIter)
    })?)
}

pub fn run(a: Args) -> Result<()> {
    if !(a.cache_share > 0.0 && a.cache_share <= 1.0) {
        anyhow::bail!("--cache-share {} (allowed: above 0 up to 1)", a.cache_share);
    }
    let mut workloads = Vec::new();
    let traces = [
        ("iozone", "disksim/ssd-iozone-aligned2-100K.trace"),
        ("postmark", "disksim/ssd-postmark-aligned2.trace"),
    ];
    let rels: Vec<&str> = traces.iter().map(|(_, f)| *f).collect();
    for (file, p) in super::find_traces(&a.traces, &rels)? {
        let name = traces
            .iter()
            .find(|(_, f)| *f == file)
            .map_or(file, |t| t.0);
        workloads.push(trace_workload(name, p)?);
    }
    if a.zipf_requests > 0 {
        workloads.push(Workload::zipf(ZipfParams {
            requests: a.zipf_requests,
            ..ZipfParams::default()
        })?);
    }
    if workloads.is_empty() {
        anyhow::bail!(
            "no workload: traces absent under {} and --zipf-requests 0",
            a.traces.display()
        );
    }
    let mut vii = Vec::new();
    let mut vi = Vec::new();
    let ftls: &[FtlKind] = if a.page_ftl {
        &[FtlKind::Hybrid, FtlKind::Page, FtlKind::PageLog]
    } else {
        &[FtlKind::Hybrid]
    };
    for w in &workloads {
        eprintln!(
            "{}: {} requests, {} unique 4-KiB blocks, flash {} MiB",
            w.name,
            w.requests,
            w.footprint_blocks,
            w.capacity_for(a.cache_share) >> 20
        );
        for &ftl in ftls {
            for r in table_vii(w, ftl, a.cache_share)? {
                vii.push((w.name.clone(), r));
            }
        }
        for r in table_vi(w, a.cache_share)? {
            vi.push((w.name.clone(), r));
        }
    }
    println!(
        "Table VII: write-through caching, logging off, first 15 % of requests warm the cache"
    );
    println!("{}", format_vii(&vii));
    println!("Table VI: write-back caching (20 % dirty threshold), persistence on, hybrid layer");
    println!("{}", format_vi(&vi));
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        let pvii = out.join("flashtier-vii.csv");
        let pvi = out.join("flashtier-vi.csv");
        std::fs::write(&pvii, csv(&vii)).with_context(|| format!("writing {}", pvii.display()))?;
        std::fs::write(&pvi, csv(&vi)).with_context(|| format!("writing {}", pvi.display()))?;
        eprintln!("wrote {} and {}", pvii.display(), pvi.display());
    }
    Ok(())
}
