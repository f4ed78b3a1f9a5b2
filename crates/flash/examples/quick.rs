use std::path::Path;
use tiercache_flash::workload::{zipf_overwrites, ZipfParams};
use tiercache_flash::*;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cap: u64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(265 << 20);
    let ftl: FtlKind = args.get(3).map(|s| s.parse().unwrap()).unwrap_or_default();
    let mgr: ManagerKind = args
        .get(4)
        .map(|s| s.parse().unwrap())
        .unwrap_or(ManagerKind::WriteThrough);
    for kind in [DeviceKind::Ssd, DeviceKind::Ssc, DeviceKind::SscV] {
        let mut d = DeviceConfig::new(kind, cap).unwrap();
        d.ftl = ftl;
        d.persistence = false;
        let t = std::time::Instant::now();
        let (recs, n): (
            Box<dyn Iterator<Item = Result<tiercache_trace::Record, String>>>,
            u64,
        ) = if args[1] == "zipf" {
            let p = ZipfParams::default();
            (Box::new(zipf_overwrites(&p).map(Ok)), p.requests)
        } else {
            let r = tiercache_trace::open(Path::new(&args[1]), None, &Default::default()).unwrap();
            (Box::new(r.map(|x| x.map_err(|e| e.to_string()))), 100_000)
        };
        let cfg = FlashSimConfig {
            device: d,
            manager: mgr,
            dirty_target: 0.2,
            warmup_requests: n * 15 / 100,
        };
        match run(recs, &cfg) {
            Ok(r) => println!("{:6} wa {:.3} erases {} wear {} copies {} silent {} miss {:.4} full {} sw {} part {} dev {:.2}B/blk host {:.2} {:?}", r.mode, r.ftl.write_amplification, r.ftl.erases, r.ftl.max_wear_difference, r.ftl.gc_page_copies, r.ftl.silent_evictions, r.miss_rate, r.ftl.full_merges, r.ftl.switch_merges, r.ftl.partial_merges, r.device_bytes_per_block, r.host_bytes_per_block, t.elapsed()),
            Err(e) => println!("{kind}: {e}"),
        }
    }
}
