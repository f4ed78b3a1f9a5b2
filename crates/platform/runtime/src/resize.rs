//! What every design's resize while serving shares: the count of its
//! metadata writes, and the test knob that stops a resize at one of them so
//! that the crash tests can kill the server there.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Test knob: a resize stops (and waits to be killed) after this many
/// metadata writes: a device's size change, and each write and sync of a
/// design's checkpoints, summaries or superblock copies.
pub const STOP_AT_ENV: &str = "TIERCACHE_TEST_RESIZE_STOP_AT";

/// The metadata writes of one resize, counted as they are done.
#[derive(Debug)]
pub struct MetadataWrites {
    n: AtomicU32,
    stop_at: Option<u32>,
}

impl MetadataWrites {
    /// A new count, stopping where [`STOP_AT_ENV`] says (if set).
    pub fn from_env() -> MetadataWrites {
        MetadataWrites {
            n: AtomicU32::new(0),
            stop_at: std::env::var(STOP_AT_ENV).ok().and_then(|v| v.parse().ok()),
        }
    }

    /// Count one write; at the one [`STOP_AT_ENV`] names, say so on stderr
    /// and never return (the crash test kills the process).
    pub fn done(&self) {
        let n = self.n.fetch_add(1, Ordering::SeqCst) + 1;
        if self.stop_at == Some(n) {
            eprintln!("tiercache: resize stopped after metadata write {n} ({STOP_AT_ENV})");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
    }

    /// Writes counted so far.
    pub fn count(&self) -> u32 {
        self.n.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_write() {
        let w = MetadataWrites {
            n: AtomicU32::new(0),
            stop_at: None,
        };
        for _ in 0..5 {
            w.done();
        }
        assert_eq!(w.count(), 5);
    }
}
