//! Write-back cleaning rate: how many dirty lines to write back per unit of
//! time, so that cleaning keeps up under sustained load without stalling a
//! write burst.
//!
//! A proportional-integral controller on the dirty line count, after
//! bcache's writeback rate (`drivers/md/bcache/writeback.c`): at or below
//! the dirty target it does nothing; above it, the proportional term cleans
//! a fixed share of the excess per second and the integral term raises the
//! rate while the excess persists, so a sustained write load is cleaned
//! towards the target while a burst is absorbed first. This is the fix for
//! the most common complaint about dm-cache's and Open CAS's default
//! cleaners, which clean only when the device is idle.
//!
//! Pure: the caller supplies elapsed time (the simulator its virtual clock,
//! the live server the wall clock), so it is deterministic and testable.

/// Tuning of [`CleaningRate`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleaningTuning {
    /// Share of the excess over the target cleaned per second by the
    /// proportional term (bcache: 1/40; higher here, caches are smaller).
    pub p_per_s: f64,
    /// Integral gain: lines/s added per line·s of accumulated excess.
    pub i_per_s2: f64,
    /// Least rate while above the target, lines/s.
    pub min_lines_per_s: f64,
    /// Most rate, lines/s (the device also bounds it: a step waits for its writebacks).
    pub max_lines_per_s: f64,
}

impl CleaningTuning {
    /// Defaults for a cache of `slots` lines: 1/40 of the excess per second
    /// (bcache's `writeback_rate_p_term_inverse`), the integral doubling that
    /// after about 25 s of a steady excess, at least 0.1 % of the cache per
    /// second, at most the whole cache per second.
    pub fn for_slots(slots: u64) -> CleaningTuning {
        let slots = slots.max(1) as f64;
        CleaningTuning {
            p_per_s: 1.0 / 40.0,
            i_per_s2: 0.001,
            min_lines_per_s: (slots / 1000.0).max(8.0),
            max_lines_per_s: slots.max(1024.0),
        }
    }
}

/// The controller's state.
#[derive(Clone, Debug)]
pub struct CleaningRate {
    target: f64,
    tuning: CleaningTuning,
    integral: f64,
    rate: f64,
    /// Lines allowed but not yet handed out (fractions carry over).
    credit: f64,
}

impl CleaningRate {
    /// A controller holding the dirty line count at `target_lines`.
    pub fn new(target_lines: u64, tuning: CleaningTuning) -> CleaningRate {
        debug_assert!(tuning.p_per_s >= 0.0 && tuning.i_per_s2 >= 0.0);
        debug_assert!(tuning.min_lines_per_s <= tuning.max_lines_per_s);
        CleaningRate {
            target: target_lines as f64,
            tuning,
            integral: 0.0,
            rate: 0.0,
            credit: 0.0,
        }
    }

    /// Advance by `dt_s` seconds with `dirty` lines dirty now; returns how
    /// many lines to clean now.
    pub fn step(&mut self, dirty: u64, dt_s: f64) -> usize {
        let dt = dt_s.clamp(0.0, 1.0);
        let excess = dirty as f64 - self.target;
        if excess <= 0.0 {
            // At or below the target: nothing to do, and no wind-up kept.
            self.integral = 0.0;
            self.rate = 0.0;
            self.credit = 0.0;
            return 0;
        }
        let t = self.tuning;
        let p = excess * t.p_per_s;
        let unclamped = p + self.integral * t.i_per_s2;
        // Anti-windup: integrate only while the output is not at its ceiling.
        if unclamped < t.max_lines_per_s {
            self.integral += excess * dt;
        }
        self.rate = (p + self.integral * t.i_per_s2).clamp(t.min_lines_per_s, t.max_lines_per_s);
        self.credit = (self.credit + self.rate * dt).min(excess);
        let n = self.credit.floor();
        self.credit -= n;
        debug_assert!(self.credit >= 0.0 && self.credit < 1.0 + excess);
        n as usize
    }

    /// The current rate, lines/s (0 at or below the target).
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// When the scheduler cleans, as configured (`--clean-rate`, `--timed-cleaning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CleaningConfig {
    /// Lines each request writes back after a dirty eviction, for the next
    /// [`PRESSURE_REQUESTS`] requests (pressure cleaning; `--clean-rate`).
    pub pressure_lines: u32,
    /// Whether the time-driven cleaner runs: the rate controller above the
    /// dirty target, and full speed during a tick with no request.
    pub timed: bool,
}

impl Default for CleaningConfig {
    fn default() -> Self {
        CleaningConfig {
            pressure_lines: 2,
            timed: true,
        }
    }
}

/// Requests after a dirty eviction that each clean `pressure_lines` lines.
pub const PRESSURE_REQUESTS: u32 = 1024;
/// Interval of the time-driven cleaner, ns (10 ms).
pub const TICK_NS: u64 = 10_000_000;
/// Lines the time-driven cleaner writes back per tick when no request came
/// during the last one (idle: full speed), and at most per tick.
pub const TICK_MAX_LINES: usize = 256;

/// What a tick of the scheduler asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickPlan {
    /// Lines to write back now (with `Engine::clean_at_most`).
    pub lines: usize,
    /// No request came since the previous tick: cleaning at full speed.
    pub idle: bool,
}

/// The one decision of *when* to clean, shared by the live server and the
/// simulator, which differ only in the clock they pass: the live server its
/// wall clock, the simulator the trace's virtual time. Two parts:
///
/// - pressure cleaning, by request count: once a victim was dirty (a
///   writeback before reuse), each of the next [`PRESSURE_REQUESTS`]
///   requests cleans `pressure_lines` lines (`Engine::clean`), so victims
///   are clean again; a write burst is otherwise not slowed;
/// - time-driven cleaning, a tick every [`TICK_NS`]: the [`CleaningRate`]
///   controller above the dirty target, or [`TICK_MAX_LINES`] when no
///   request came during the tick (`Engine::clean_at_most`).
#[derive(Clone, Debug)]
pub struct CleaningScheduler {
    cfg: CleaningConfig,
    tuning: CleaningTuning,
    target: u64,
    ctl: CleaningRate,
    dirty_evictions_seen: u64,
    pressure_left: u32,
    last_tick_ns: u64,
    requests_since_tick: u64,
}

impl CleaningScheduler {
    /// A scheduler for a cache of `slots` lines with `target_lines` allowed
    /// dirty, at time 0 of the caller's clock.
    pub fn new(cfg: CleaningConfig, slots: u64, target_lines: u64) -> CleaningScheduler {
        let tuning = CleaningTuning::for_slots(slots);
        CleaningScheduler {
            cfg,
            tuning,
            target: target_lines,
            ctl: CleaningRate::new(target_lines, tuning),
            dirty_evictions_seen: 0,
            pressure_left: 0,
            last_tick_ns: 0,
            requests_since_tick: 0,
        }
    }

    /// After a request was submitted, with the engine's `dirty_evictions`
    /// counter: how many lines to clean now (`Engine::clean(n, false, ..)`).
    pub fn after_request(&mut self, dirty_evictions: u64) -> usize {
        self.requests_since_tick += 1;
        if dirty_evictions != self.dirty_evictions_seen {
            self.dirty_evictions_seen = dirty_evictions;
            self.pressure_left = PRESSURE_REQUESTS;
        }
        if self.pressure_left > 0 {
            self.pressure_left -= 1;
            self.cfg.pressure_lines as usize
        } else {
            0
        }
    }

    /// When the next tick is due, ns on the caller's clock.
    pub fn next_tick_ns(&self) -> u64 {
        self.last_tick_ns + TICK_NS
    }

    /// A tick at `now_ns` with `dirty` lines dirty and `target_lines` the
    /// dirty target now (a `set --dirty-target` restarts the controller).
    pub fn tick(&mut self, now_ns: u64, dirty: u64, target_lines: u64) -> TickPlan {
        let dt = now_ns.saturating_sub(self.last_tick_ns) as f64 / 1e9;
        self.last_tick_ns = self.last_tick_ns.max(now_ns);
        let idle = self.requests_since_tick == 0;
        self.requests_since_tick = 0;
        if target_lines != self.target {
            self.target = target_lines;
            self.ctl = CleaningRate::new(target_lines, self.tuning);
        }
        if !self.cfg.timed {
            return TickPlan { lines: 0, idle };
        }
        let paced = self.ctl.step(dirty, dt);
        let full = idle && dirty > target_lines;
        TickPlan {
            lines: if full {
                TICK_MAX_LINES
            } else {
                paced.min(TICK_MAX_LINES)
            },
            idle: full,
        }
    }

    /// The rate the controller asks for now, lines/s.
    pub fn rate(&self) -> f64 {
        self.ctl.rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl(target: u64) -> CleaningRate {
        CleaningRate::new(
            target,
            CleaningTuning {
                p_per_s: 0.1,
                i_per_s2: 0.01,
                min_lines_per_s: 10.0,
                max_lines_per_s: 100_000.0,
            },
        )
    }

    #[test]
    fn pressure_cleaning_follows_dirty_evictions() {
        let mut s = CleaningScheduler::new(CleaningConfig::default(), 1000, 100);
        assert_eq!(s.after_request(0), 0, "no dirty eviction yet");
        assert_eq!(s.after_request(1), 2);
        for _ in 1..PRESSURE_REQUESTS {
            assert_eq!(s.after_request(1), 2);
        }
        assert_eq!(
            s.after_request(1),
            0,
            "pressure lasts PRESSURE_REQUESTS requests"
        );
        assert_eq!(s.after_request(2), 2, "a new dirty eviction restarts it");
    }

    #[test]
    fn ticks_clean_full_speed_when_idle_and_nothing_when_untimed() {
        let mut s = CleaningScheduler::new(CleaningConfig::default(), 100_000, 100);
        s.after_request(0);
        let busy = s.tick(TICK_NS, 1000, 100);
        assert!(!busy.idle && busy.lines < TICK_MAX_LINES, "{busy:?}");
        let idle = s.tick(2 * TICK_NS, 1000, 100);
        assert_eq!(
            idle,
            TickPlan {
                lines: TICK_MAX_LINES,
                idle: true
            }
        );
        assert_eq!(s.next_tick_ns(), 3 * TICK_NS);
        let cfg = CleaningConfig {
            timed: false,
            ..CleaningConfig::default()
        };
        let mut s = CleaningScheduler::new(cfg, 100_000, 100);
        assert_eq!(s.tick(TICK_NS, 1000, 100).lines, 0);
    }

    #[test]
    fn nothing_at_or_below_target() {
        let mut c = ctl(1000);
        assert_eq!(c.step(1000, 1.0), 0);
        assert_eq!(c.step(10, 1.0), 0);
        assert_eq!(c.rate(), 0.0);
    }

    #[test]
    fn proportional_term_by_hand() {
        // Excess 10 000 lines: P = 1 000 lines/s; after the first 0.1 s the
        // integral holds 1 000 line·s, adding 10 lines/s: 1 010 lines/s, 101 lines.
        let mut c = ctl(1000);
        assert_eq!(c.step(11_000, 0.1), 101);
        assert!((c.rate() - 1010.0).abs() < 1e-9, "{}", c.rate());
    }

    #[test]
    fn floor_applies_to_small_excess() {
        // Excess 5: P = 0.5 lines/s, below the 10 lines/s floor; over 1 s the
        // floor hands out 10 lines, but never more than the excess.
        let mut c = ctl(100);
        assert_eq!(c.step(105, 1.0), 5);
        assert_eq!(c.rate(), 10.0);
    }

    #[test]
    fn sustained_excess_raises_the_rate() {
        // A steady excess (writes re-dirty what is cleaned) makes the integral
        // grow: the rate after 30 s is well above the proportional term alone.
        let mut c = ctl(0);
        let mut last = 0.0;
        for _ in 0..300 {
            c.step(10_000, 0.1);
            assert!(
                c.rate() >= last,
                "the rate never falls while the excess holds"
            );
            last = c.rate();
        }
        // P = 1 000; integral 10 000 x 30 s = 300 000 line·s, x 0.01 = 3 000.
        assert!((c.rate() - 4000.0).abs() < 1.0, "{}", c.rate());
    }

    #[test]
    fn converges_on_a_closed_loop() {
        // A brute-force plant: 20 000 dirty lines above a 1 000 target, no new
        // writes; cleaning what the controller asks drains to the target.
        let mut c = ctl(1000);
        let mut dirty = 21_000u64;
        let mut t = 0.0;
        while dirty > 1000 && t < 120.0 {
            let n = c.step(dirty, 0.01) as u64;
            dirty -= n.min(dirty - 1000);
            t += 0.01;
        }
        assert_eq!(dirty, 1000, "drained in {t:.1} s");
        // P alone would take ln(20 000)/0.1 s ~ 99 s to the last line; the
        // floor and the integral finish it well before.
        assert!(t < 60.0, "took {t:.1} s");
    }

    #[test]
    fn ceiling_holds_and_winds_up_no_further() {
        let mut c = CleaningRate::new(
            0,
            CleaningTuning {
                p_per_s: 0.1,
                i_per_s2: 0.01,
                min_lines_per_s: 1.0,
                max_lines_per_s: 500.0,
            },
        );
        for _ in 0..1000 {
            c.step(100_000, 0.1);
        }
        assert_eq!(c.rate(), 500.0);
        // Once the excess is gone, the rate is zero at once (no wound-up integral).
        assert_eq!(c.step(0, 0.1), 0);
        assert_eq!(c.rate(), 0.0);
    }
}
