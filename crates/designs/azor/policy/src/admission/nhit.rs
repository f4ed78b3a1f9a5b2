//! n-hit promotion, as Open CAS's `nhit`: a line is admitted on its n-th
//! access; the filter only acts once the cache is `trigger` full (before that
//! everything is admitted, as Open CAS does).

use rustc_hash::FxHashMap;

/// Access counts of lines not (yet) admitted, in a bounded table.
pub struct Nhit {
    threshold: u32,
    trigger: f64,
    counts: FxHashMap<u64, u32>,
    limit: usize,
}

impl Nhit {
    /// `limit`: how many lines are tracked before the table is aged (halved).
    pub fn new(threshold: u32, trigger: f64, limit: usize) -> Self {
        Nhit {
            threshold,
            trigger,
            counts: FxHashMap::default(),
            limit: limit.max(64),
        }
    }

    /// Count an access to a missed `line`; true when it may be admitted now.
    pub fn admit(&mut self, line: u64, occupancy: f64) -> bool {
        let c = self.counts.entry(line).or_insert(0);
        *c += 1;
        let ok = *c >= self.threshold || occupancy < self.trigger;
        if ok {
            self.counts.remove(&line);
        } else if self.counts.len() > self.limit {
            // Age: halve all counts and forget the ones that reach zero.
            self.counts.retain(|_, c| {
                *c /= 2;
                *c > 0
            });
        }
        ok
    }

    pub fn metadata_bytes(&self) -> usize {
        self.counts.capacity() * 13
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn third_access_is_admitted_once_cache_is_full_enough() {
        let mut n = Nhit::new(3, 0.8, 1000);
        // Below the trigger everything is admitted.
        assert!(n.admit(7, 0.5));
        // Above it, line 9 needs three accesses.
        assert!(!n.admit(9, 0.9));
        assert!(!n.admit(9, 0.9));
        assert!(n.admit(9, 0.9));
        // Admission resets the count.
        assert!(!n.admit(9, 0.9));
    }
}
