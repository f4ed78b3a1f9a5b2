//! The background tasks: the write-back cleaner, which ticks the core's
//! `CleaningScheduler` with the wall clock (the simulator ticks the same
//! scheduler in virtual time), and the periodic journal commit.

use super::LiveCache;
use super::{CLEAN_TICK, COMMIT_INTERVAL};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl LiveCache {
    /// Start the background tasks: the committer and the write-back cleaner
    /// (the shared scheduler's ticks: a rate controller on the dirty line
    /// count, full speed when idle).
    pub fn start_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = me.commit_wanted.notified() => {}
                    _ = tokio::time::sleep(COMMIT_INTERVAL) => {
                        if me.core.lock().expect("core").pending.is_empty() {
                            continue;
                        }
                    }
                }
                if let Err(e) = me.commit(false).await {
                    tracing::error!("background commit failed: {e}");
                }
            }
        });
        let me = Arc::clone(self);
        tokio::spawn(async move {
            // The shared scheduler decides; this task only gives it the wall clock.
            let origin = Instant::now();
            let mut tick = tokio::time::interval(CLEAN_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let now_ns = origin.elapsed().as_nanos() as u64;
                let (plan, rate) = {
                    let mut c = me.core.lock().expect("core");
                    let (dirty, target) = (
                        c.engine.dirty_lines() as u64,
                        c.engine.dirty_target_lines() as u64,
                    );
                    let plan = c.sched.tick(now_ns, dirty, target);
                    (plan, c.sched.rate())
                };
                me.stats
                    .cleaning_target_rate
                    .store(rate.to_bits(), Ordering::Relaxed);
                if plan.lines > 0 {
                    let got = me.clean_step(plan.lines, false).await;
                    if plan.idle {
                        me.stats
                            .idle_cleaned_lines
                            .fetch_add(got as u64, Ordering::Relaxed);
                    }
                }
            }
        });
    }

    /// Write back up to `max_lines` dirty lines (all of them if `force`) and wait for it.
    /// Returns the lines cleaned.
    pub async fn clean_step(self: &Arc<Self>, max_lines: usize, force: bool) -> usize {
        if self.stopping.load(Ordering::Acquire) {
            // A clean shutdown records the backing device as it is: leave it alone.
            return 0;
        }
        let (ops, n) = {
            let mut c = self.core.lock().expect("core");
            let mut out = Vec::new();
            let n = if force {
                c.engine.clean(max_lines, true, &mut out)
            } else {
                c.engine.clean_at_most(max_lines, &mut out)
            };
            self.register(&mut c, &out);
            tracing::trace!(target: "tiercache::ops", "clean -> {out:?}");
            (out, n)
        };
        if n == 0 {
            return 0;
        }
        self.stats
            .cleaned_lines
            .fetch_add(n as u64, Ordering::Relaxed);
        let mut hs = Vec::new();
        for op in ops {
            let me = Arc::clone(self);
            hs.push(tokio::spawn(async move { me.exec(op, None).await }));
        }
        for h in hs {
            let _ = h.await;
        }
        n
    }
}
