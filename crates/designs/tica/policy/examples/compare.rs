//! Compare TICA-A/EF/WED with uCache and S-RAC on one trace, DRAM at 1 % and
//! each SSD at 10 % of the footprint (what `tiercache reproduce tica` does
//! per trace), printing one JSON line per architecture.
//!
//! `cargo run --release -p tiercache-tica-policy --example compare -- TRACE FORMAT`

use tiercache_tica_policy::sim::{Replay, SimConfig};
use tiercache_tica_policy::{Arch, Policy};
use tiercache_trace::{Format, ReadOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, format] = args.as_slice() else {
        return Err("usage: compare TRACE FORMAT".into());
    };
    let path = std::path::Path::new(path);
    let format: Format = format.parse()?;
    let ro = ReadOptions::default();
    let st =
        tiercache_trace::stats::trace_stats(tiercache_trace::open(path, Some(format), &ro)?, 4096)?;
    let pages = st.unique_blocks;
    let dram = (pages as f64 * 0.01).round().max(2.0) as u64;
    let ssd = (pages as f64 * 0.10).round().max(1.0) as u64;
    for arch in [
        Arch::UCache,
        Arch::Srac,
        Arch::Tica(Policy::Ef),
        Arch::Tica(Policy::Wed),
        Arch::Tica(Policy::Adaptive),
    ] {
        let mut cfg = SimConfig::new(arch, dram, ssd);
        cfg.replay = if std::env::var_os("OPEN").is_some() && st.duration_ns > 0 {
            Replay::Open
        } else {
            Replay::Closed
        };
        let r = tiercache_tica_policy::run(tiercache_trace::open(path, Some(format), &ro)?, &cfg)?;
        println!("{}", serde_json::to_string(&r)?);
    }
    Ok(())
}
