//! `--no-timing` is a property of the timing model only: every counter of a
//! run without timing equals that of the timed run (open and closed loop),
//! on a synthetic trace of mixed sizes that makes the timed engine split op
//! runs on dependencies and overlap writebacks.

use tiercache_azor_policy::{CacheConfig, IoKind, WritePolicy};
use tiercache_sim::{run, Replay, SimOptions, SimReport};
use tiercache_trace::{Record, TraceError};

/// A small xorshift generator, so the trace is the same on every run.
fn trace(n: usize, seed: u64) -> Vec<Record> {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let r = next();
            let hot = r % 10 < 7;
            let block = if hot { r % 512 } else { r % 40_000 };
            let len = [512u32, 4096, 8192, 16384, 65536, 262144][(next() % 6) as usize];
            Record {
                time_ns: i as u64 * 50_000,
                offset: block * 4096 + (next() % 4) * 512,
                len,
                kind: if next() % 3 == 0 {
                    IoKind::Write
                } else {
                    IoKind::Read
                },
                class: None,
            }
        })
        .collect()
}

fn sim(records: &[Record], cfg: &CacheConfig, timing: bool, replay: Replay) -> SimReport {
    let mut o = SimOptions::new(cfg.clone());
    o.timing = timing;
    o.replay = replay;
    o.baseline = false;
    let it = records.iter().cloned().map(Ok::<_, TraceError>);
    run(it, || unreachable!("no baseline"), &o, &mut |_| {}).expect("run")
}

#[test]
fn counts_do_not_depend_on_the_timing_model() {
    let records = trace(20_000, 0x9E37_79B9_7F4A_7C15);
    for (line, wp, mib) in [
        (4096, WritePolicy::WriteBack, 8),
        (65536, WritePolicy::WriteBack, 16),
        (4096, WritePolicy::WriteThrough, 4),
        (16384, WritePolicy::WriteBack, 2),
    ] {
        let cfg = CacheConfig {
            cache_bytes: mib << 20,
            line_bytes: line,
            sub_block_bytes: line.min(4096),
            write_policy: wp,
            ..CacheConfig::default()
        };
        let fast = sim(&records, &cfg, false, Replay::Open);
        for replay in [Replay::Open, Replay::Closed { queue_depth: 8 }] {
            let timed = sim(&records, &cfg, true, replay);
            let untimed_counts = serde_json::to_value(&fast).unwrap();
            let timed_counts = serde_json::to_value(&timed).unwrap();
            for (k, v) in untimed_counts.as_object().unwrap() {
                if v.is_u64() {
                    assert_eq!(
                        &timed_counts[k], v,
                        "{k}: timed ({replay:?}) and untimed differ for line {line}, {wp}, {mib} MiB"
                    );
                }
            }
            assert!(timed.mean_response_us.is_some() && fast.mean_response_us.is_none());
        }
    }
}
