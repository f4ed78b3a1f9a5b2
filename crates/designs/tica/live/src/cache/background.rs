//! The background flusher thread: the wall clock's ticks of the flush
//! scheduler (idle flushing) and metadata commits; its start and stop.

use super::CacheError;
use super::ThreeLevel;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest sleep between two looks at the stop flag.
const TICK_SLEEP_MAX: Duration = Duration::from_millis(10);

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

    /// One tick of the flush scheduler at `now_ns` of the wall clock (idle
    /// flushing), and a metadata commit when records waited longer than a
    /// second.
    fn flusher_tick(&self, now_ns: u64) -> Result<usize, CacheError> {
        let mut s = self.lock();
        if s.closed {
            return Ok(0);
        }
        let n = s.flush_tick(now_ns)?;
        if s.degraded.is_none()
            && (s.wo.has_pending() || s.ro.has_pending())
            && s.wo.since_commit() > Duration::from_secs(1)
        {
            s.sync()?;
        }
        Ok(n)
    }

    /// Start the background flusher thread: it passes the wall clock to the
    /// flush scheduler at each tick.
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let h = std::thread::Builder::new()
            .name("tica-flusher".into())
            .spawn(move || {
                let t0 = Instant::now();
                while !me.stop.load(Ordering::Relaxed) {
                    let next = me.lock().flusher.next_tick_ns();
                    let now = t0.elapsed().as_nanos() as u64;
                    if now < next {
                        std::thread::sleep(Duration::from_nanos(next - now).min(TICK_SLEEP_MAX));
                        continue;
                    }
                    if let Err(e) = me.flusher_tick(now) {
                        eprintln!("tiercache: flusher: {e}");
                        std::thread::sleep(Duration::from_millis(100));
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
