//! The one decision of *when* and *what* to copy from DRAM to the RO-SSD,
//! shared by the simulator and the live three-level cache, which differ only
//! in the clock they pass (the simulator its virtual time, the live cache
//! its wall clock).
//!
//! Two parts:
//!
//! - by request count: after each request, up to [`FlushConfig::per_request`]
//!   flushes are in flight (the oldest dirty DRAM pages first, as
//!   [`Architecture::start_flushes`] picks them);
//! - by time, when [`FlushConfig::timed`]: a tick every [`TICK_NS`] of the
//!   caller's clock; a tick during which no request came flushes up to
//!   [`TICK_MAX_PAGES`] more (an idle cache empties its DRAM write
//!   partition).
//!
//! With the timed part off every flush decision is a function of the request
//! sequence alone: at queue depth 1 the live cache and `sim --no-timing`
//! flush the same pages after the same requests.

use crate::{Architecture, Op, Page};

/// Time between two ticks of the timed part, ns (10 ms).
pub const TICK_NS: u64 = 10_000_000;
/// Pages one idle tick flushes at most.
pub const TICK_MAX_PAGES: usize = 32;

/// How the flusher runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushConfig {
    /// Flushes in flight at most after each request.
    pub per_request: usize,
    /// The timed part (idle ticks) on.
    pub timed: bool,
}

impl Default for FlushConfig {
    /// Four flushes per request, timed part on.
    fn default() -> FlushConfig {
        FlushConfig {
            per_request: 4,
            timed: true,
        }
    }
}

/// The flush scheduler (see the module documentation).
#[derive(Clone, Debug)]
pub struct FlushScheduler {
    cfg: FlushConfig,
    last_tick_ns: u64,
    requests_since_tick: u64,
}

impl FlushScheduler {
    /// A scheduler at time 0 of the caller's clock.
    pub fn new(cfg: FlushConfig) -> FlushScheduler {
        FlushScheduler {
            cfg,
            last_tick_ns: 0,
            requests_since_tick: 0,
        }
    }

    /// Its configuration.
    pub fn config(&self) -> FlushConfig {
        self.cfg
    }

    /// After a request completed: start the flushes it allows (ops into
    /// `out`); returns the tokens for [`Architecture::flush_done`].
    pub fn after_request<A: Architecture + ?Sized>(
        &mut self,
        arch: &mut A,
        out: &mut Vec<Op>,
    ) -> Vec<(Page, u64)> {
        self.requests_since_tick += 1;
        arch.start_flushes(self.cfg.per_request, out)
    }

    /// When the next tick is due, ns on the caller's clock.
    pub fn next_tick_ns(&self) -> u64 {
        self.last_tick_ns + TICK_NS
    }

    /// A tick at `now_ns`: pages to flush now (0 unless the timed part is on
    /// and no request came since the last tick). The caller flushes them in
    /// batches of its choice ([`Architecture::start_flushes`]).
    pub fn tick(&mut self, now_ns: u64) -> usize {
        self.last_tick_ns = self.last_tick_ns.max(now_ns);
        let idle = self.requests_since_tick == 0;
        self.requests_since_tick = 0;
        if self.cfg.timed && idle {
            TICK_MAX_PAGES
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tica::{Tica, TicaConfig};
    use crate::Policy;

    #[test]
    fn flushes_follow_requests_and_idle_ticks() {
        let mut t = Tica::new(TicaConfig::new(16, 64, Policy::Ef));
        let mut ops = Vec::new();
        for p in 0..10 {
            t.access(p, true, &mut ops);
        }
        let mut s = FlushScheduler::new(FlushConfig::default());
        let started = s.after_request(&mut t, &mut ops);
        assert_eq!(started.len(), 4, "four flushes per request");
        for (p, g) in started {
            t.flush_done(p, g);
        }
        assert_eq!(s.tick(TICK_NS), 0, "a request came during the tick");
        assert_eq!(s.tick(2 * TICK_NS), TICK_MAX_PAGES, "an idle tick");
        let mut off = FlushScheduler::new(FlushConfig {
            per_request: 2,
            timed: false,
        });
        assert_eq!(off.tick(TICK_NS), 0, "the timed part is off");
        assert_eq!(off.after_request(&mut t, &mut ops).len(), 2);
    }
}
