//! EmulatedHdd: operations take at least as long as the HDD model predicts.
//! Only lower bounds are asserted (a loaded machine may be slower, never
//! faster than a sleep).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rng;
use rand::RngExt;
use tiercache_io::{BlockDev, EmulatedHdd, MemDev};
use tiercache_model::{DeviceModel, IoKind, ModelOp, Profile};

/// Clock and sleep granularity allowance.
const SLACK: Duration = Duration::from_millis(2);
const DEV_LEN: u64 = 256 << 20;

#[test]
fn random_reads_take_the_models_time() {
    let profile = Profile::default();
    let inner = Arc::new(MemDev::new("mem", DEV_LEN as usize));
    let hdd = EmulatedHdd::from_profile(inner, &profile).unwrap();
    assert!(hdd.name().contains("emulated"), "{}", hdd.name());

    let mut r = rng(5);
    let offsets: Vec<u64> = (0..20)
        .map(|_| r.random_range(0..DEV_LEN / 4096) * 4096)
        .collect();

    // The prediction: the same model, stretched over the device as
    // from_profile documents, with each op issued when the previous ends.
    let mut params = profile.hdd.clone();
    params.capacity_bytes = DEV_LEN;
    let mut model = tiercache_model::HddModel::new(params).unwrap();
    let mut t = 0;
    for &off in &offsets {
        t = model.submit(t, &ModelOp::new(IoKind::Read, off, 4096));
    }
    let predicted = Duration::from_nanos(t);
    // Sanity of the reference: 20 random reads of a 7200 rpm disk, each at
    // least overhead + half a revolution (0.1 + 4.17 ms).
    assert!(predicted > Duration::from_millis(20 * 4), "{predicted:?}");

    let start = Instant::now();
    let mut buf = [0u8; 4096];
    for &off in &offsets {
        hdd.read_at(&mut buf, off).unwrap();
    }
    let elapsed = start.elapsed();
    eprintln!("20 random 4 KiB reads: model {predicted:?}, emulation {elapsed:?}");
    assert!(
        elapsed + SLACK >= predicted,
        "emulated reads took {elapsed:?}, the model predicts {predicted:?}"
    );
    assert_eq!(
        hdd.stats(),
        model.stats(),
        "the emulator fed its model the same ops"
    );
}

#[test]
fn concurrent_callers_queue_on_one_actuator() {
    let inner = Arc::new(MemDev::new("mem", DEV_LEN as usize));
    let hdd = Arc::new(EmulatedHdd::from_profile(inner, &Profile::default()).unwrap());
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let hdd = Arc::clone(&hdd);
            s.spawn(move || {
                let mut r = rng(100 + t);
                let mut buf = [0u8; 4096];
                for _ in 0..5 {
                    let off = r.random_range(0..DEV_LEN / 4096) * 4096;
                    hdd.read_at(&mut buf, off).unwrap();
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let busy = Duration::from_nanos(hdd.stats().busy_ns);
    // One actuator: the 20 service times add up instead of overlapping.
    assert!(
        elapsed + SLACK >= busy,
        "elapsed {elapsed:?} < model busy time {busy:?}"
    );
    assert!(busy > Duration::from_millis(20 * 4), "{busy:?}");
}

#[test]
fn data_passes_through_and_bad_ranges_cost_no_disk_time() {
    let inner = Arc::new(MemDev::new("mem", 1 << 20));
    let hdd = EmulatedHdd::from_profile(inner.clone(), &Profile::default()).unwrap();
    hdd.write_at(b"spinning rust", 12345).unwrap();
    let mut b = [0u8; 13];
    inner.read_at(&mut b, 12345).unwrap();
    assert_eq!(&b, b"spinning rust");
    let ops = hdd.stats();
    assert!(hdd.read_at(&mut b, (1 << 20) - 5).is_err());
    assert_eq!(hdd.stats(), ops, "a refused op never reaches the model");
}

#[test]
fn too_small_devices_are_refused_with_a_reason() {
    let inner = Arc::new(MemDev::new("tiny", 1000));
    let e = EmulatedHdd::from_profile(inner, &Profile::default())
        .err()
        .expect("1000 bytes cannot hold 150000 cylinders");
    assert!(e.to_string().contains("capacity_bytes"), "{e}");
}
