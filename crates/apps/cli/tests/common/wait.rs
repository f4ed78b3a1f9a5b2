//! Waiting for a condition instead of sleeping: a test waits until what it
//! needs holds (a socket answers, a process exited, a counter moved), polling
//! with a generous timeout that only a broken or hung server ever reaches.
//! No test depends on how long something takes.
//!
//! Standalone (std only), so that `clients_util` includes it too.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How long to wait for something that happens promptly on an idle machine
/// (a server listening, a process exiting, a background step): generous,
/// since the machine may be loaded by parallel tests.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Pause between two polls of a condition.
const POLL: Duration = Duration::from_millis(10);

/// Poll `cond` until it returns `Some`, or `None` once `timeout` has passed.
pub fn poll_for<T>(timeout: Duration, mut cond: impl FnMut() -> Option<T>) -> Option<T> {
    let t0 = Instant::now();
    loop {
        if let Some(v) = cond() {
            return Some(v);
        }
        if t0.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Poll `cond` until it returns `Some`; panic naming `what` when `timeout`
/// passes first.
pub fn wait_for<T>(what: impl Display, timeout: Duration, cond: impl FnMut() -> Option<T>) -> T {
    poll_for(timeout, cond)
        .unwrap_or_else(|| panic!("timed out after {} s waiting for {what}", timeout.as_secs()))
}

/// Poll `cond` until it holds; panic naming `what` when `timeout` passes first.
pub fn wait_until(what: impl Display, timeout: Duration, mut cond: impl FnMut() -> bool) {
    wait_for(what, timeout, || cond().then_some(()))
}
