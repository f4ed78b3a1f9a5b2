//! Service units shared by the models: `n` identical units, FIFO start order,
//! and exact busy-time accounting (time during which at least one unit works).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// `n` identical service units (an HDD actuator, SSD channels, a DRAM bus).
///
/// Operations start in submission order: an operation needing `k` units
/// starts when the `k` earliest-free units are all free (and not before
/// `now`). Start times are therefore non-decreasing for non-decreasing `now`,
/// which makes the busy-time union below exact.
#[derive(Clone, Debug)]
pub(crate) struct Units {
    /// Free time of every unit (min-heap).
    free: BinaryHeap<Reverse<u64>>,
    /// Reused buffer for multi-unit operations (capacity `n`, never grows).
    scratch: Vec<u64>,
    /// End of the latest busy interval seen so far.
    busy_until: u64,
    /// Length of the union of all busy intervals.
    busy_ns: u64,
}

impl Units {
    pub(crate) fn new(n: usize) -> Self {
        let n = n.max(1);
        let mut free = BinaryHeap::with_capacity(n);
        for _ in 0..n {
            free.push(Reverse(0));
        }
        Units {
            free,
            scratch: Vec::with_capacity(n),
            busy_until: 0,
            busy_ns: 0,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.free.len()
    }

    pub(crate) fn busy_ns(&self) -> u64 {
        self.busy_ns
    }

    /// Add the busy interval `[start, end)` to the union.
    #[inline]
    fn mark_busy(&mut self, start: u64, end: u64) {
        if end > self.busy_until {
            self.busy_ns += end - start.max(self.busy_until);
            self.busy_until = end;
        }
    }

    /// Serve an operation on one unit for `dur` ns; returns its completion.
    #[inline]
    pub(crate) fn serve_one(&mut self, now: u64, dur: u64) -> u64 {
        let Reverse(first_free) = self.free.pop().unwrap_or(Reverse(0));
        let start = now.max(first_free);
        let end = start.saturating_add(dur);
        self.free.push(Reverse(end));
        self.mark_busy(start, end);
        end
    }

    /// Serve an operation on `k` units (clamped to `1..=n`) starting together;
    /// unit `i` (0-based) works `dur(i)` ns. Returns the operation's
    /// completion, the latest of its units' ends.
    pub(crate) fn serve_many(&mut self, now: u64, k: usize, dur: impl Fn(usize) -> u64) -> u64 {
        let k = k.clamp(1, self.count());
        if k == 1 {
            return self.serve_one(now, dur(0));
        }
        self.scratch.clear();
        for _ in 0..k {
            let Reverse(t) = self.free.pop().unwrap_or(Reverse(0));
            self.scratch.push(t);
        }
        // The k-th earliest free time is the last popped.
        let start = now.max(self.scratch[k - 1]);
        let mut done = start;
        for i in 0..k {
            let end = start.saturating_add(dur(i));
            self.free.push(Reverse(end));
            done = done.max(end);
        }
        self.mark_busy(start, done);
        done
    }

    /// A barrier: starts once every unit is free (and not before `now`),
    /// takes `dur` ns, and does not hold any unit. Returns its completion.
    pub(crate) fn barrier(&mut self, now: u64, dur: u64) -> u64 {
        let all_free = self.free.iter().map(|r| r.0).max().unwrap_or(0);
        let start = now.max(all_free);
        let end = start.saturating_add(dur);
        self.mark_busy(start, end);
        end
    }
}
