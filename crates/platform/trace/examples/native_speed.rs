//! Measures native-format read speed through `open()`.
//!
//! `native_speed write PATH [N]` writes N (default 50 M) synthetic records;
//! `native_speed read PATH [ROUNDS]` reads PATH back and reports records per
//! second of wall time (run under `time` to see CPU time on a busy machine).

use std::path::Path;
use std::time::Instant;

use tiercache_block::IoKind;
use tiercache_trace::{open, write_native, Format, ReadOptions, Record};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: native_speed write PATH [N] | read PATH [ROUNDS]";
    let (Some(mode), Some(path)) = (args.get(1), args.get(2)) else {
        return Err(usage.into());
    };
    let path = Path::new(path);
    let n: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(0);
    match mode.as_str() {
        "write" => {
            let n = if n == 0 { 50_000_000 } else { n };
            let recs = (0..n).map(|i| Record {
                time_ns: i * 1000,
                offset: (i.wrapping_mul(0x9e37_79b9) % (1 << 30)) * 512,
                len: 4096,
                kind: if i % 3 == 0 {
                    IoKind::Write
                } else {
                    IoKind::Read
                },
                class: None,
            });
            println!("wrote {} records", write_native(path, recs)?);
        }
        "read" => {
            for round in 0..n.max(1) {
                let t = Instant::now();
                let mut sum = 0u64;
                let mut count = 0u64;
                for r in open(path, Some(Format::Native), &ReadOptions::default())? {
                    let r = r?;
                    sum = sum.wrapping_add(r.offset ^ u64::from(r.len));
                    count += 1;
                }
                let s = t.elapsed().as_secs_f64();
                println!(
                    "round {round}: {count} records in {s:.3} s = {:.1} M records/s (checksum {sum:x})",
                    count as f64 / s / 1e6
                );
            }
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
