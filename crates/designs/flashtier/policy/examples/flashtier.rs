//! The `tiercache reproduce flashtier` tables without the CLI:
//! `cargo run --release -p tiercache-flashtier-policy --example flashtier -- [TRACES_DIR] [ZIPF_REQUESTS]`.

use std::path::PathBuf;
use tiercache_flashtier_policy::reproduce::{
    csv, format_vi, format_vii, table_vi, table_vii, RecordIter, Workload,
};
use tiercache_flashtier_policy::workload::ZipfParams;
use tiercache_flashtier_policy::FtlKind;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).map_or("../shared/traces", |s| s.as_str()));
    let zipf: u64 = args.get(2).map_or(Ok(400_000), |s| s.parse())?;
    let mut ws = Vec::new();
    for (name, file) in [
        ("iozone", "disksim/ssd-iozone-aligned2-100K.trace"),
        ("postmark", "disksim/ssd-postmark-aligned2.trace"),
    ] {
        let p = dir.join(file);
        if !p.exists() {
            eprintln!("skipping {name}: {} is absent", p.display());
            continue;
        }
        ws.push(Workload::new(name, move || {
            let r =
                tiercache_trace::open(&p, None, &Default::default()).map_err(|e| e.to_string())?;
            Ok(Box::new(r.map(|x| x.map_err(|e| e.to_string()))) as RecordIter)
        })?);
    }
    if zipf > 0 {
        ws.push(Workload::zipf(ZipfParams {
            requests: zipf,
            ..ZipfParams::default()
        })?);
    }
    let (mut vii, mut vi) = (Vec::new(), Vec::new());
    for w in &ws {
        eprintln!(
            "{}: {} requests, {} unique blocks",
            w.name, w.requests, w.footprint_blocks
        );
        for ftl in [FtlKind::Hybrid, FtlKind::Page, FtlKind::PageLog] {
            vii.extend(
                table_vii(w, ftl, 0.25)?
                    .into_iter()
                    .map(|r| (w.name.clone(), r)),
            );
        }
        vi.extend(table_vi(w, 0.25)?.into_iter().map(|r| (w.name.clone(), r)));
    }
    println!("{}", format_vii(&vii));
    println!("{}", format_vi(&vi));
    std::fs::write("/tmp/flashtier-vii.csv", csv(&vii))?;
    std::fs::write("/tmp/flashtier-vi.csv", csv(&vi))?;
    Ok(())
}
