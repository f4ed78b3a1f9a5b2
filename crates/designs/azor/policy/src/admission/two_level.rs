//! Azor's two-level block selection (Azor 2.4, Figure 2.2).
//!
//! Cache fills and write allocations pass through this decision:
//! 1. the target slot is empty: admit;
//! 2. the incoming line is metadata: admit (level 1);
//! 3. the occupant is metadata (and the incoming line data): abort (level 1);
//! 4. both are data: the one with more accesses in the window wins; ties keep
//!    the occupant (level 2).
//!
//! Access counts are kept per backing line that was referenced at least once
//! (Azor keeps an array indexed by HDD block; a hash map sized by the
//! footprint is the same idea without the dense array). With a window, counts
//! are halved every `window` accesses, lazily.

use rustc_hash::FxHashMap;

/// Outcome of a 2LBS decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The slot is free.
    AdmitEmpty,
    /// Incoming metadata wins.
    AdmitMetadata,
    /// Occupant is metadata, incoming is data: keep the occupant.
    RejectMetadataOccupant,
    /// Incoming data has more accesses than the occupant.
    AdmitMoreAccesses,
    /// Occupant has at least as many accesses.
    RejectFewerAccesses,
    /// Level 2 off and level 1 does not decide: LRU decides (admit).
    AdmitByEviction,
}

impl Decision {
    pub fn admits(self) -> bool {
        matches!(
            self,
            Decision::AdmitEmpty
                | Decision::AdmitMetadata
                | Decision::AdmitMoreAccesses
                | Decision::AdmitByEviction
        )
    }
}

/// 2LBS state: the per-line access counts.
pub struct TwoLevel {
    metadata_level: bool,
    frequency_level: bool,
    window: u64,
    accesses: u64,
    /// line -> (count, epoch of last update)
    counts: FxHashMap<u64, (u32, u32)>,
}

impl TwoLevel {
    pub fn new(metadata_level: bool, frequency_level: bool, window: u64) -> Self {
        TwoLevel {
            metadata_level,
            frequency_level,
            window,
            accesses: 0,
            counts: FxHashMap::default(),
        }
    }

    fn epoch(&self) -> u32 {
        self.accesses.checked_div(self.window).unwrap_or(0) as u32
    }

    /// Record one access to `line`.
    pub fn record(&mut self, line: u64) {
        if !self.frequency_level {
            return;
        }
        self.accesses += 1;
        let e = self.epoch();
        let c = self.counts.entry(line).or_insert((0, e));
        let age = e - c.1;
        c.0 = (c.0 >> age.min(31)).saturating_add(1);
        c.1 = e;
    }

    /// Current (aged) access count of `line`.
    pub fn count(&self, line: u64) -> u32 {
        match self.counts.get(&line) {
            None => 0,
            Some(&(c, e)) => c >> (self.epoch() - e).min(31),
        }
    }

    /// Decide whether `incoming` (metadata or not) may replace `occupant`
    /// (`None` for an empty slot; otherwise its line and whether it is metadata).
    pub fn decide(
        &self,
        incoming: u64,
        incoming_meta: bool,
        occupant: Option<(u64, bool)>,
    ) -> Decision {
        let Some((occ, occ_meta)) = occupant else {
            return Decision::AdmitEmpty;
        };
        if self.metadata_level {
            if incoming_meta {
                return Decision::AdmitMetadata;
            }
            if occ_meta {
                return Decision::RejectMetadataOccupant;
            }
        }
        if !self.frequency_level {
            return Decision::AdmitByEviction;
        }
        if self.count(incoming) > self.count(occ) {
            Decision::AdmitMoreAccesses
        } else {
            Decision::RejectFewerAccesses
        }
    }

    pub fn metadata_bytes(&self) -> usize {
        self.counts.capacity() * 17
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Decision::*;

    #[test]
    fn figure_2_2_decision_path() {
        let mut t = TwoLevel::new(true, true, 0);
        // Empty slot admits anything.
        assert_eq!(t.decide(1, false, None), AdmitEmpty);
        // Metadata always admitted, even over metadata.
        assert_eq!(t.decide(1, true, Some((2, false))), AdmitMetadata);
        assert_eq!(t.decide(1, true, Some((2, true))), AdmitMetadata);
        // Data never evicts metadata, however often accessed.
        for _ in 0..10 {
            t.record(1);
        }
        assert_eq!(t.decide(1, false, Some((2, true))), RejectMetadataOccupant);
        // Data against data: more accesses wins; a tie keeps the occupant.
        t.record(2);
        assert_eq!(t.decide(1, false, Some((2, false))), AdmitMoreAccesses);
        assert_eq!(t.decide(2, false, Some((1, false))), RejectFewerAccesses);
        t.record(3);
        assert_eq!(t.decide(3, false, Some((2, false))), RejectFewerAccesses);
    }

    #[test]
    fn levels_switch_independently() {
        let mut only_meta = TwoLevel::new(true, false, 0);
        only_meta.record(5);
        assert_eq!(
            only_meta.decide(5, false, Some((6, false))),
            AdmitByEviction
        );
        assert_eq!(
            only_meta.decide(5, false, Some((6, true))),
            RejectMetadataOccupant
        );
        let mut only_freq = TwoLevel::new(false, true, 0);
        only_freq.record(5);
        only_freq.record(5);
        // Level 1 off: metadata has no privilege; counts decide.
        assert_eq!(
            only_freq.decide(5, false, Some((6, true))),
            AdmitMoreAccesses
        );
        assert_eq!(
            only_freq.decide(6, true, Some((5, false))),
            RejectFewerAccesses
        );
    }

    #[test]
    fn window_halves_counts() {
        let mut t = TwoLevel::new(true, true, 4);
        for _ in 0..4 {
            t.record(1); // epoch 0 -> counts 1,2,3 then the 4th access lands in epoch 1
        }
        // accesses=4: epoch 1; line 1 was updated at its 4th access in epoch 1 with 3>>1 + 1 = 2.
        assert_eq!(t.count(1), 2);
        for _ in 0..4 {
            t.record(9);
        }
        // Epoch 2 now: line 1's count is halved once more.
        assert_eq!(t.count(1), 1);
    }
}
