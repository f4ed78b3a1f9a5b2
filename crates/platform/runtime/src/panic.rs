//! The panic policy: a panic anywhere aborts the process, in every build.
//!
//! A panic means a broken invariant; a storage server must not keep
//! answering requests from a state it no longer trusts (a poisoned lock, a
//! half-applied metadata update). Every design recovers from an abort as
//! from a kill -9 or a power loss (their crash tests prove it), so abort is
//! the safe answer, as in TigerBeetle. The release profile also sets
//! `panic = "abort"`; this hook makes test builds behave the same.

/// Environment variable that enables the `panic` control command (tests of this policy only).
pub const TEST_PANIC_ENV: &str = "TIERCACHE_TEST_PANIC";

/// Install the hook: print the panic once, say what happens next, abort.
pub fn install() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        eprintln!(
            "tiercache: internal error (a bug: please report it); aborting. \
             Acknowledged writes are safe: the next start recovers as after a crash."
        );
        std::process::abort();
    }));
}
