//! `tiercache sim` as a library: its options ([`SimArgs`]) and the
//! simulations of the designs beyond the SSD cache ([`modes`]: FlashTier,
//! OODT tiering, TICA and its baselines). The CLI prints what a mode returns;
//! the Python module (`tiercache._native`) returns the same JSON, so
//! `tiercache.simulate(mode=M, ...)` is exactly `tiercache sim --mode M --json`.

pub mod args;
pub mod compress;
pub mod design;
pub mod error;
pub mod modes;
pub mod mrc;
pub mod policy;
pub mod policy_args;

/// `f(0)`, ..., `f(n - 1)` on `jobs` threads, each taking the next index
/// as it finishes one: the results in index order. The sweeps of `sim` and
/// `mrc` run their sizes through it.
pub fn parallel_map<T: Send>(n: usize, jobs: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<T>>> =
        std::sync::Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = f(i);
                results.lock().expect("results")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("results")
        .into_iter()
        .map(|r| r.expect("every index ran"))
        .collect()
}

pub use args::{replay_choice, SimArgs, DEFAULT_QUEUE_DEPTH, DEFAULT_TRACE_BLOCK};
pub use modes::{BadOption, ModeOutput};
pub use policy::{parse_2lbs_levels, PolicyError, PolicySpec};
pub use policy_args::PolicyArgs;
