//! `tiercache sim --like DEVICE` beyond the SSD cache: on a
//! freshly formatted log-structured cache, tiered volume and three-level
//! cache, `sim --like` gives exactly what the explicit `sim` command of the
//! device's configuration gives (same JSON), and refuses the options the
//! device decides. Runs on the MSR Cambridge sample in
//! ../shared/traces/samples; skips with a message when it is absent.

use crate::common;

use common::{format_cache, sample_trace, sim_json, tiercache};
use std::path::Path;
use std::process::Command;

fn sized(p: &Path, bytes: u64) {
    std::fs::File::create(p).unwrap().set_len(bytes).unwrap();
}

/// `sim --like dev` equals `sim explicit...`; an option the device decides
/// (`refused`) is refused, naming it.
fn assert_like(trace: &Path, dev: &Path, extra: &[&str], explicit: &[&str], refused: [&str; 2]) {
    let mut a = vec!["--like", dev.to_str().unwrap()];
    a.extend_from_slice(extra);
    let like = sim_json(trace, &a);
    let mut e = explicit.to_vec();
    e.extend_from_slice(extra);
    let given = sim_json(trace, &e);
    assert_eq!(
        like,
        given,
        "sim --like {} and sim {explicit:?} differ",
        dev.display()
    );
    let o = Command::new(common::bin())
        .args(["sim", "--trace", trace.to_str().unwrap(), "--like"])
        .arg(dev)
        .args(refused)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains(refused[0]), "{err}");
}

#[test]
fn like_a_log_structured_cache() {
    let Some(trace) = sample_trace() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (cache, backing) = (tmp.path().join("c.img"), tmp.path().join("b.img"));
    sized(&backing, 16 << 30);
    format_cache(
        &cache,
        &backing,
        "8MiB",
        &[
            "--layout",
            "log-structured",
            "--segment-size",
            "256KiB",
            "--write-policy",
            "write-through",
            "--dirty-target",
            "0.3",
        ],
    );
    // The explicit command: the store's data area (segments x segment size).
    let st = tiercache_log_structured_area(&cache);
    assert_like(
        &trace,
        &cache,
        &["--no-timing"],
        &[
            "--mode",
            "ssc",
            "--ftl",
            "log",
            "--segment-size",
            "256KiB",
            "--cache-size",
            &st,
            "--write-policy",
            "write-through",
            "--dirty-target",
            "0.3",
            "--victim",
            "cost-benefit",
        ],
        ["--segment-size", "1MiB"],
    );
}

/// The data area `segments x segment size` of the log-structured cache,
/// from its superblock.
fn tiercache_log_structured_area(cache: &Path) -> String {
    let f = tiercache_io::FileDev::open(cache, tiercache_io::FileDevOptions::default()).unwrap();
    let sb = tiercache_flashtier_live::Superblock::read(&f).expect("superblock");
    assert_eq!(sb.seg_bytes, 256 << 10);
    format!("{}B", u64::from(sb.nsegs) * sb.seg_bytes)
}

#[test]
fn like_a_tiered_volume() {
    let Some(trace) = sample_trace() else { return };
    for capacity in ["sum", "slow"] {
        let tmp = tempfile::tempdir().unwrap();
        let (fast, slow) = (tmp.path().join("fast.img"), tmp.path().join("slow.img"));
        // Sparse, past the sample's last byte: `--like` simulates the
        // volume's size, which must hold the trace.
        sized(&slow, 16 << 30);
        let tiers = format!("{},{}", fast.display(), slow.display());
        tiercache(&[
            "format",
            "--mode",
            "tier",
            "--tiers",
            &tiers,
            "--size",
            "4MiB",
            "--tier-block",
            "64KiB",
            "--tier-policy",
            "frequency",
            "--capacity",
            capacity,
        ]);
        let sb = tiercache_oodt_live::Superblock::read(&fast).expect("superblock");
        let fast_bytes = format!("{}B", sb.layout.fast_slots * 65536);
        assert_like(
            &trace,
            &fast,
            &["--no-baseline"],
            &[
                "--mode",
                "tier",
                "--tier-policy",
                "frequency",
                "--fast-tier-size",
                &fast_bytes,
                "--tier-block",
                "64KiB",
                "--capacity",
                capacity,
                "--plan-every",
                "1000",
                "--moves-per-round",
                "64",
                "--plan-clock",
                "wall",
                "--tier-volume-size",
                &format!("{}B", sb.volume_bytes),
            ],
            ["--tier-policy", "oodt"],
        );
    }
}

#[test]
fn like_a_three_level_cache() {
    let Some(trace) = sample_trace() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (ro, wo, b) = (
        tmp.path().join("ro.img"),
        tmp.path().join("wo.img"),
        tmp.path().join("b.img"),
    );
    for p in [&ro, &wo] {
        sized(p, 8 << 20);
    }
    sized(&b, 16 << 30);
    tiercache(&[
        "format",
        "--mode",
        "tica",
        "--ro-ssd",
        ro.to_str().unwrap(),
        "--wo-ssd",
        wo.to_str().unwrap(),
        "--backing",
        b.to_str().unwrap(),
        "--dram-size",
        "256KiB",
        "--tica-policy",
        "wed",
    ]);
    let like = sim_json(&trace, &["--like", wo.to_str().unwrap(), "--no-timing"]);
    let pages = like["ssd_bytes"].as_u64().unwrap() / 4096;
    assert!(pages > 0 && pages < 2048, "{like:#}");
    assert_eq!(like["dram_bytes"], 256 << 10, "{like:#}");
    assert_eq!(like["mode"], "tica-wed", "{like:#}");
    let pages = format!("{pages}lines");
    for dev in [&wo, &ro] {
        assert_like(
            &trace,
            dev,
            &["--no-timing"],
            &[
                "--mode",
                "tica",
                "--tica-policy",
                "wed",
                "--cache-size",
                &pages,
                "--dram-size",
                "64lines",
            ],
            ["--dram-size", "1MiB"],
        );
    }
}
