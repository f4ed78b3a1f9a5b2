//! The background flusher thread (DRAM to RO-SSD) and its start and stop.

use super::CacheError;
use super::ThreeLevel;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl ThreeLevel {
    /// Run the flusher once: up to `max` dirty DRAM pages to the RO-SSD, and
    /// a metadata commit when records waited longer than a second.
    pub fn flusher_step(&self, max: usize) -> Result<usize, CacheError> {
        let mut s = self.lock();
        if s.closed {
            return Ok(0);
        }
        let n = s.flush_some(max)?;
        if s.degraded.is_none()
            && (s.wo.has_pending() || s.ro.has_pending())
            && s.wo.since_commit() > Duration::from_secs(1)
        {
            s.sync()?;
        }
        Ok(n)
    }

    /// Start the background flusher thread.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name("tica-flusher".into())
            .spawn(move || {
                while !me.stop.load(Ordering::Relaxed) {
                    match me.flusher_step(32) {
                        Ok(n) if n > 0 => std::thread::yield_now(),
                        Ok(_) => std::thread::sleep(Duration::from_millis(2)),
                        Err(e) => {
                            eprintln!("tiercache: flusher: {e}");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                }
            });
        match h {
            Ok(h) => *self.flusher.lock().unwrap_or_else(|e| e.into_inner()) = Some(h),
            Err(e) => eprintln!("tiercache: could not start the flusher thread: {e}"),
        }
    }

    /// Stop the background flusher thread (shutdown does it too).
    pub fn stop_background(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let h = self
            .flusher
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}
