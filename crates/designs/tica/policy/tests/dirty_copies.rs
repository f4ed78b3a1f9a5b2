//! "No single point of failure for dirty data": after every step of a random
//! sequence of reads, writes, trims, flush starts and flush completions (in
//! any order, including stale ones), every dirty page of every architecture
//! is held by at least two distinct devices.

use proptest::prelude::*;
use tiercache_tica_policy::baselines::srac::Srac;
use tiercache_tica_policy::baselines::ucache::UCache;
use tiercache_tica_policy::tica::{Tica, TicaConfig};
use tiercache_tica_policy::{Architecture, Dev, Policy};

#[derive(Clone, Debug)]
enum Step {
    Read(u64),
    Write(u64),
    Trim(u64),
    StartFlushes(usize),
    /// Complete the i-th (mod count) started flush token.
    CompleteFlush(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..24).prop_map(Step::Read),
        4 => (0u64..24).prop_map(Step::Write),
        1 => (0u64..24).prop_map(Step::Trim),
        2 => (1usize..4).prop_map(Step::StartFlushes),
        2 => (0usize..8).prop_map(Step::CompleteFlush),
    ]
}

fn check_run(arch: &mut dyn Architecture, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut ops = Vec::new();
    let mut tokens: Vec<(u64, u64)> = Vec::new();
    let mut written = std::collections::BTreeSet::new();
    for (i, s) in steps.iter().enumerate() {
        ops.clear();
        match *s {
            Step::Read(p) => arch.access(p, false, &mut ops),
            Step::Write(p) => {
                arch.access(p, true, &mut ops);
                written.insert(p);
            }
            Step::Trim(p) => {
                arch.trim(p, &mut ops);
                written.remove(&p);
            }
            Step::StartFlushes(k) => tokens.extend(arch.start_flushes(k, &mut ops)),
            Step::CompleteFlush(j) => {
                if !tokens.is_empty() {
                    let (p, g) = tokens.remove(j % tokens.len());
                    arch.flush_done(p, g);
                }
            }
        }
        for (page, devs) in arch.dirty_copies() {
            let mut d: Vec<Dev> = devs.clone();
            d.sort();
            d.dedup();
            prop_assert!(
                d.len() >= 2,
                "step {i} ({s:?}): dirty page {page} only on {devs:?}"
            );
            prop_assert!(!d.contains(&Dev::Hdd));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn tica_keeps_two_copies_of_dirty_data(
        steps in prop::collection::vec(step(), 1..300),
        dram in 2usize..10,
        ssd in 1usize..12,
        policy in prop_oneof![Just(Policy::Ef), Just(Policy::Wed), Just(Policy::Adaptive)],
    ) {
        let mut t = Tica::new(TicaConfig::new(dram, ssd, policy));
        check_run(&mut t, &steps)?;
        // Structural facts the invariant relies on.
        prop_assert!(t.wo_len() <= ssd);
        prop_assert!(t.dram().write_len() + t.dram().read_len() <= t.dram().capacity());
    }

    #[test]
    fn mirrored_baselines_keep_two_copies_of_dirty_data(
        steps in prop::collection::vec(step(), 1..300),
        dram in 1usize..10,
        ssd in 1usize..12,
    ) {
        check_run(&mut UCache::new(dram, ssd), &steps)?;
        check_run(&mut Srac::new(dram, ssd), &steps)?;
    }
}
