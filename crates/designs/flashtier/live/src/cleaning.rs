//! Segment cleaning: which segment to reclaim next.
//!
//! Cleaning a segment drops its live clean blocks silently (the backing
//! device holds them: FlashTier's silent eviction) and moves only its live
//! dirty blocks (to the open segment, or back to the backing device when
//! they do not fit). The victim is the segment whose reclaiming pays most:
//! fewest live blocks (greedy), or most free space weighted by age
//! (cost-benefit, as in LFS): old segments hold cold data, so evicting them
//! is also an approximation of LRU.

/// Where a segment is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegState {
    /// Holds nothing the map points at; may be opened.
    Free,
    /// Being appended to.
    Open,
    /// Full (or closed by a restart); a cleaning candidate.
    Sealed,
}

/// What cleaning knows about one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegInfo {
    pub state: SegState,
    /// Sequence number of its current life (higher = younger).
    pub seq: u64,
    /// Mapped blocks in it.
    pub live: u32,
}

/// How to choose a victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimPolicy {
    /// Fewest live blocks.
    Greedy,
    /// Highest (1 - u) * age / (1 + u), u = live share.
    CostBenefit,
}

/// The sealed segment to clean next (`None` if there is none). `data_blocks`
/// is the slot count of a segment, `now` the next sequence number.
pub fn pick_victim(
    segs: &[SegInfo],
    data_blocks: u32,
    now: u64,
    policy: VictimPolicy,
) -> Option<u32> {
    let sealed = segs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.state == SegState::Sealed);
    match policy {
        VictimPolicy::Greedy => sealed
            .min_by_key(|(i, s)| (s.live, s.seq, *i))
            .map(|(i, _)| i as u32),
        VictimPolicy::CostBenefit => sealed
            .map(|(i, s)| {
                let u = s.live as f64 / data_blocks as f64;
                let age = now.saturating_sub(s.seq) as f64 + 1.0;
                (i, (1.0 - u) * age / (1.0 + u))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(state: SegState, seq: u64, live: u32) -> SegInfo {
        SegInfo { state, seq, live }
    }

    #[test]
    fn greedy_takes_the_emptiest_sealed_segment() {
        let segs = [
            s(SegState::Sealed, 1, 200),
            s(SegState::Open, 9, 0),
            s(SegState::Sealed, 5, 10),
            s(SegState::Free, 0, 0),
            s(SegState::Sealed, 6, 10),
        ];
        assert_eq!(pick_victim(&segs, 254, 10, VictimPolicy::Greedy), Some(2));
        assert_eq!(
            pick_victim(&segs[1..2], 254, 10, VictimPolicy::Greedy),
            None
        );
    }

    #[test]
    fn cost_benefit_prefers_old_segments_at_equal_use() {
        let segs = [
            s(SegState::Sealed, 100, 100),
            s(SegState::Sealed, 10, 100),
            s(SegState::Sealed, 99, 20),
        ];
        // Old and half full beats young and nearly empty when it is old enough.
        assert_eq!(
            pick_victim(&segs, 254, 101, VictimPolicy::CostBenefit),
            Some(1)
        );
        assert_eq!(pick_victim(&segs, 254, 101, VictimPolicy::Greedy), Some(2));
    }
}
