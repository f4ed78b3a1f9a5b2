//! Service units shared by the models: `n` identical units, FIFO start order,
//! and exact busy-time accounting (time during which at least one unit works).

/// `n` identical service units (an HDD actuator, SSD channels, a DRAM bus).
///
/// Operations start in submission order: an operation needing `k` units
/// starts when the `k` earliest-free units are all free (and not before
/// `now`). Start times are therefore non-decreasing for non-decreasing `now`,
/// which makes the busy-time union below exact.
#[derive(Clone, Debug)]
pub(crate) struct Units {
    /// Free time of every unit, sorted ascending (length `n`, never changes).
    free: Vec<u64>,
    /// Reused buffers for multi-unit operations (capacity `n`, never grow).
    ends: Vec<u64>,
    merged: Vec<u64>,
    /// End of the latest busy interval seen so far.
    busy_until: u64,
    /// Length of the union of all busy intervals.
    busy_ns: u64,
}

impl Units {
    pub(crate) fn new(n: usize) -> Self {
        let n = n.max(1);
        Units {
            free: vec![0; n],
            ends: Vec::with_capacity(n),
            merged: Vec::with_capacity(n),
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
        let start = now.max(self.free[0]);
        let end = start.saturating_add(dur);
        // Drop free[0] and insert `end`, keeping the order.
        let mut i = 0;
        while i + 1 < self.free.len() && self.free[i + 1] < end {
            self.free[i] = self.free[i + 1];
            i += 1;
        }
        self.free[i] = end;
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
        // The k earliest-free units are free[..k]; the last of them frees at free[k - 1].
        let start = now.max(self.free[k - 1]);
        self.ends.clear();
        self.ends
            .extend((0..k).map(|i| start.saturating_add(dur(i))));
        self.ends.sort_unstable();
        let done = self.ends[k - 1];
        // Merge the new ends with the untouched units' free times.
        self.merged.clear();
        let (mut a, mut b) = (0, k);
        while a < k || b < self.free.len() {
            if b == self.free.len() || (a < k && self.ends[a] <= self.free[b]) {
                self.merged.push(self.ends[a]);
                a += 1;
            } else {
                self.merged.push(self.free[b]);
                b += 1;
            }
        }
        std::mem::swap(&mut self.free, &mut self.merged);
        self.mark_busy(start, done);
        done
    }

    /// A barrier: starts once every unit is free (and not before `now`),
    /// takes `dur` ns, and does not hold any unit. Returns its completion.
    pub(crate) fn barrier(&mut self, now: u64, dur: u64) -> u64 {
        let all_free = self.free[self.free.len() - 1];
        let start = now.max(all_free);
        let end = start.saturating_add(dur);
        self.mark_busy(start, end);
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Length of the union of intervals, by sorting and merging.
    fn union_len(mut iv: Vec<(u64, u64)>) -> u64 {
        iv.sort_unstable();
        let (mut total, mut cur) = (0u64, None::<(u64, u64)>);
        for (s, e) in iv {
            cur = match cur {
                Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    total += ce - cs;
                    Some((s, e))
                }
                None => Some((s, e)),
            };
        }
        total + cur.map_or(0, |(s, e)| e - s)
    }

    #[test]
    fn busy_time_equals_union_of_busy_intervals() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for n in [1usize, 2, 3, 10] {
            let mut units = Units::new(n);
            let mut intervals = Vec::new();
            let mut now = 0;
            for _ in 0..5_000 {
                now += rnd(300);
                let d = 1 + rnd(1_000);
                match rnd(3) {
                    0 => {
                        let end = units.serve_one(now, d);
                        intervals.push((end - d, end));
                    }
                    1 => {
                        let k = 1 + rnd(n as u64 + 2) as usize;
                        let dur = |i: usize| d + 7 * i as u64;
                        let end = units.serve_many(now, k, dur);
                        let longest = dur(k.clamp(1, n) - 1);
                        intervals.push((end - longest, end));
                    }
                    _ => {
                        let end = units.barrier(now, d);
                        intervals.push((end - d, end));
                    }
                }
            }
            assert_eq!(units.busy_ns(), union_len(intervals), "{n} units");
        }
    }

    #[test]
    fn operations_start_no_earlier_than_now_and_in_fifo_order() {
        let mut units = Units::new(2);
        assert_eq!(units.serve_one(100, 10), 110);
        assert_eq!(units.serve_one(0, 50), 50); // second unit is free at 0
        assert_eq!(units.serve_one(0, 5), 55); // waits for the earliest unit (50)
        assert_eq!(units.serve_many(0, 2, |_| 1), 111); // both free at 110
        assert_eq!(units.barrier(0, 4), 115);
    }
}
