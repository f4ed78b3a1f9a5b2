//! Cross-check against a peer tool: libCacheSim's own vscsi reader (Python
//! package `libcachesim`) must see the same request sequence (LBN, size,
//! op) as ours on the shared CloudPhysics vscsi sample. Skips when the
//! sample, python3 or the package is missing.

use std::path::Path;
use std::process::Command;

use tiercache_block::IoKind;
use tiercache_trace::{open, Format, ReadOptions};

const SAMPLE: &str = "/work/shared/traces/samples/cloudPhysicsIO.vscsi";

const SCRIPT: &str = r#"
import sys, libcachesim as lcs
r = lcs.TraceReader(sys.argv[1], lcs.TraceType.VSCSI_TRACE)
out = sys.stdout
for q in r:
    out.write("%d %d %s\n" % (q.obj_id, q.obj_size, "W" if "WRITE" in str(q.op) else "R"))
"#;

#[test]
fn vscsi_matches_libcachesim() {
    if !Path::new(SAMPLE).exists() {
        eprintln!("SKIP: {SAMPLE} is absent");
        return;
    }
    let out = match Command::new("python3")
        .args(["-c", SCRIPT, SAMPLE])
        .output()
    {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => {
            eprintln!(
                "SKIP: libcachesim not usable: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            return;
        }
        Err(e) => {
            eprintln!("SKIP: python3 not runnable: {e}");
            return;
        }
    };
    let theirs: Vec<(u64, u32, IoKind)> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let kind = if f[2] == "W" {
                IoKind::Write
            } else {
                IoKind::Read
            };
            (f[0].parse().unwrap(), f[1].parse().unwrap(), kind)
        })
        .collect();
    let ours: Vec<(u64, u32, IoKind)> = open(
        Path::new(SAMPLE),
        Some(Format::Vscsi),
        &ReadOptions::default(),
    )
    .unwrap()
    .map(|r| {
        let r = r.unwrap();
        (r.offset / 512, r.len, r.kind)
    })
    .collect();
    assert_eq!(ours.len(), theirs.len());
    assert!(ours == theirs, "request sequences differ");
}
