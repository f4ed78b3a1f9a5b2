//! FaultyDev: which ops fail, when, how often, and that failures change nothing.

use std::io;
use std::sync::Arc;

use tiercache_io::{BlockDev, FaultCounts, FaultRule, FaultyDev, MemDev, OpKinds};

const EIO: i32 = 5;

fn setup(seed: u64) -> (Arc<MemDev>, FaultyDev) {
    let mem = Arc::new(MemDev::new("mem", 1 << 16));
    let dev = FaultyDev::new(mem.clone(), seed);
    (mem, dev)
}

fn is_eio(r: io::Result<()>) -> bool {
    matches!(r, Err(e) if e.raw_os_error() == Some(EIO))
}

#[test]
fn range_rules_fail_only_overlapping_ops_of_their_kinds() {
    let (_, dev) = setup(0);
    dev.add_rule(FaultRule::always(OpKinds::READ).in_range(4096..8192))
        .unwrap();
    let mut b = [0u8; 100];
    // Overlapping the bad range at either end or inside: EIO.
    for off in [4000, 4096, 6000, 8191] {
        assert!(is_eio(dev.read_at(&mut b, off)), "read at {off}");
    }
    // Just outside: fine.
    for off in [3996, 8192, 0, 60_000] {
        dev.read_at(&mut b, off).unwrap();
    }
    // Writes and flushes are not affected by a read rule.
    dev.write_at(&b, 5000).unwrap();
    dev.flush().unwrap();
    assert_eq!(
        dev.injected(),
        FaultCounts {
            reads: 4,
            ..FaultCounts::default()
        }
    );
}

#[test]
fn after_n_ops_the_next_ones_fail_and_change_nothing() {
    let (mem, dev) = setup(0);
    dev.add_rule(FaultRule::always(OpKinds::WRITE).after(3))
        .unwrap();
    for i in 0..3u64 {
        dev.write_at(&[1; 10], i * 10).unwrap();
    }
    assert!(is_eio(dev.write_at(&[2; 10], 100)));
    assert!(is_eio(dev.write_at_fua(&[2; 10], 200)));
    // Reads still work; the failed writes never reached the inner device.
    let mut b = [9u8; 10];
    dev.read_at(&mut b, 100).unwrap();
    assert_eq!(b, [0; 10]);
    mem.read_at(&mut b, 200).unwrap();
    assert_eq!(b, [0; 10]);
    mem.read_at(&mut b, 20).unwrap();
    assert_eq!(b, [1; 10]);
    assert_eq!(dev.injected().writes, 2);
}

fn failure_pattern(seed: u64, p: f64, n: usize) -> Vec<bool> {
    let (_, dev) = setup(seed);
    dev.add_rule(FaultRule::always(OpKinds::READ).with_probability(p))
        .unwrap();
    let mut b = [0u8; 8];
    (0..n)
        .map(|i| is_eio(dev.read_at(&mut b, i as u64)))
        .collect()
}

#[test]
fn random_faults_are_seeded_and_have_the_asked_rate() {
    let n = 4000;
    let a = failure_pattern(42, 0.3, n);
    assert_eq!(a, failure_pattern(42, 0.3, n), "same seed, same faults");
    assert_ne!(a, failure_pattern(43, 0.3, n), "another seed, other faults");
    let rate = a.iter().filter(|&&f| f).count() as f64 / n as f64;
    // Binomial(4000, 0.3): sd = 0.0072; allow 5 sd.
    assert!((rate - 0.3).abs() < 0.036, "fault rate {rate}");
    assert!(failure_pattern(1, 0.0, 500).iter().all(|&f| !f));
}

#[test]
fn pulled_device_fails_everything_until_restored() {
    let (_, dev) = setup(0);
    dev.write_at(b"before", 0).unwrap();
    dev.fail_all();
    let mut b = [0u8; 6];
    assert!(is_eio(dev.read_at(&mut b, 0)));
    assert!(is_eio(dev.write_at(b"during", 0)));
    assert!(is_eio(dev.write_at_fua(b"during", 0)));
    assert!(is_eio(dev.flush()));
    assert!(is_eio(dev.trim(0, 6)));
    assert_eq!(
        dev.injected(),
        FaultCounts {
            reads: 1,
            writes: 2,
            flushes: 1,
            trims: 1
        }
    );
    assert_eq!(dev.injected().total(), 5);
    dev.restore();
    dev.read_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"before");
    dev.flush().unwrap();
}

#[test]
fn range_rules_never_fail_flushes_and_rules_can_be_cleared() {
    let (_, dev) = setup(0);
    dev.add_rule(FaultRule::always(OpKinds::ALL).in_range(0..100))
        .unwrap();
    dev.flush().unwrap();
    assert!(is_eio(dev.trim(50, 100)));
    dev.add_rule(FaultRule::always(OpKinds::FLUSH)).unwrap();
    assert!(is_eio(dev.flush()));
    dev.clear_rules();
    dev.flush().unwrap();
    dev.trim(50, 100).unwrap();
}

#[test]
fn invalid_rules_are_refused_with_the_allowed_values() {
    let (_, dev) = setup(0);
    let e = dev
        .add_rule(FaultRule::always(OpKinds::READ).with_probability(1.5))
        .unwrap_err();
    assert!(e.to_string().contains("0.0..=1.0"), "{e}");
    let e = dev
        .add_rule(FaultRule::always(OpKinds::READ).in_range(10..10))
        .unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    assert!(dev
        .add_rule(FaultRule::always(OpKinds::READ).with_probability(f64::NAN))
        .is_err());
}
