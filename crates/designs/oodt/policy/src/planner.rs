//! The migration planner (Algorithm 2).
//!
//! Runs every `every_requests` requests (Algorithm 1, lines 24-27) or when
//! the devices have been idle for `idle_ns`. [`plan`] ranks the candidate
//! blocks, fills the fastest tier with the best ones, ranks the rest again by
//! their score without the read term (3.2.2) to fill the slower tiers, and
//! records every block whose tier changes in the migration matrix
//! (`[from][to]` lists). Blocks on a fast tier that nobody ranks go to the
//! capacity tier. [`MigrationMatrix::schedule`] then picks at most a budget
//! of moves (the bounded rate): the best-ranked promotions, each paired with
//! the demotion of the worst-ranked resident when its tier has no free slot,
//! and orders them cell by cell, demotions first (they free the slots
//! promotions need), each cell in logical-address order, so blocks leaving
//! for the disk arrive in address order (3.1).

use crate::mapping::{BlockId, MappingTable, TierError, TierId};
use crate::policy::{Candidate, TierPolicy};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What clock planning rounds follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlanClock {
    /// Every `every_requests` requests, and after `idle_ns` without
    /// requests (the live volume's wall clock, the simulator's virtual one).
    #[default]
    Wall,
    /// Every `every_requests` requests only, the round run right after the
    /// request that made it due, before the next: deterministic, the same
    /// live and simulated.
    Requests,
}

impl fmt::Display for PlanClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PlanClock::Wall => "wall",
            PlanClock::Requests => "requests",
        })
    }
}

impl FromStr for PlanClock {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "wall" => Ok(PlanClock::Wall),
            "requests" => Ok(PlanClock::Requests),
            _ => Err(format!(
                "unknown plan clock '{s}' (allowed: wall, requests)"
            )),
        }
    }
}

/// The work of one planning round, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Round {
    /// Block moves (a table with homes).
    Moves(Vec<Move>),
    /// Exchanges (a two-tier table without homes).
    Exchanges(Vec<Pair>),
}

impl Round {
    /// No work at all.
    pub fn is_empty(&self) -> bool {
        match self {
            Round::Moves(m) => m.is_empty(),
            Round::Exchanges(p) => p.is_empty(),
        }
    }
}

/// One planning round (Algorithm 2), the one the simulator and the live
/// volume both run: ask `policy` for its candidates (`cands` is a reused
/// buffer), rank them and build the migration matrix for `table`, then
/// schedule at most `budget` moves, as exchanges when the table has no
/// homes.
pub fn plan_round(
    table: &MappingTable,
    policy: &mut dyn TierPolicy,
    cands: &mut Vec<Candidate>,
    budget: usize,
) -> Round {
    cands.clear();
    policy.candidates(table.slots(0).unwrap_or(0), cands);
    let matrix = plan(table, cands);
    if table.has_homes() {
        Round::Moves(matrix.schedule(table, budget))
    } else {
        Round::Exchanges(matrix.schedule_exchanges(budget))
    }
}

/// When to plan and how much to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannerConfig {
    /// Plan after this many requests (the migration-time threshold).
    pub every_requests: u64,
    /// Also plan once the devices have been idle this long (ns).
    pub idle_ns: Option<u64>,
    /// At most this many block moves per planning round.
    pub max_moves_per_round: usize,
}

impl PlannerConfig {
    /// Refuse a configuration that would never plan or never move.
    pub fn validate(&self) -> Result<(), TierError> {
        if self.every_requests == 0 || self.max_moves_per_round == 0 {
            return Err(TierError::Config(format!(
                "planner every {} requests, {} moves per round (allowed: both at least 1)",
                self.every_requests, self.max_moves_per_round
            )));
        }
        Ok(())
    }
}

/// Counts requests since the last round (Algorithm 1, lines 24-27).
#[derive(Clone, Debug, Default)]
pub struct Trigger {
    since: u64,
}

impl Trigger {
    /// One request was dispatched; `true` when a round is due.
    pub fn on_request(&mut self, cfg: &PlannerConfig) -> bool {
        self.since += 1;
        if self.since >= cfg.every_requests {
            self.since = 0;
            return true;
        }
        false
    }

    /// The devices have been idle `idle_ns`; `true` when a round is due
    /// (something happened since the last one).
    pub fn on_idle(&mut self, cfg: &PlannerConfig, idle_ns: u64) -> bool {
        if cfg.idle_ns.is_some_and(|t| idle_ns >= t) && self.since > 0 {
            self.since = 0;
            return true;
        }
        false
    }
}

/// One block to move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Move {
    pub block: BlockId,
    pub from: TierId,
    pub to: TierId,
    /// Position in the ranking (0 = best; `u32::MAX`: not ranked).
    pub rank: u32,
    /// The score it was ranked by (negative infinity: not ranked).
    pub score: f32,
}

impl std::fmt::Display for Move {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "block {} from tier {} to tier {}",
            self.block, self.from, self.to
        )?;
        if self.rank == u32::MAX {
            write!(f, " (not ranked: no recent accesses)")
        } else {
            write!(f, " (rank {}, score {})", self.rank, self.score)
        }
    }
}

/// `cells[from][to]`: the blocks to move from tier `from` to tier `to`, in
/// logical-address order.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationMatrix {
    tiers: usize,
    cells: Vec<Vec<Move>>,
}

impl MigrationMatrix {
    /// Moves from tier `from` to tier `to`.
    pub fn cell(&self, from: TierId, to: TierId) -> &[Move] {
        &self.cells[from as usize * self.tiers + to as usize]
    }

    /// Total number of moves.
    pub fn len(&self) -> usize {
        self.cells.iter().map(Vec::len).sum()
    }

    /// No move at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Choose and order at most `budget` moves (see the module docs).
    pub fn schedule(&self, table: &MappingTable, budget: usize) -> Vec<Move> {
        let all = self.cells.iter().flatten();
        let mut promos: Vec<Move> = all.clone().filter(|m| m.to < m.from).copied().collect();
        promos.sort_unstable_by_key(|m| (m.rank, m.block));
        let mut outs: Vec<Vec<Move>> = vec![Vec::new(); self.tiers];
        for m in all.filter(|m| m.to > m.from) {
            outs[m.from as usize].push(*m);
        }
        for o in &mut outs {
            // Best first, so the worst-ranked is at the back.
            o.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.block.cmp(&b.block)));
        }
        let mut free: Vec<u64> = (0..self.tiers)
            .map(|t| table.free_slots(t as TierId))
            .collect();
        let mut chosen = Vec::new();
        for m in promos {
            if chosen.len() >= budget {
                break;
            }
            if free[m.to as usize] == 0 {
                let Some(pos) = outs[m.to as usize]
                    .iter()
                    .rposition(|o| free[o.to as usize] > 0)
                else {
                    continue;
                };
                if chosen.len() + 2 > budget {
                    break;
                }
                let o = outs[m.to as usize].remove(pos);
                free[o.to as usize] -= 1;
                free[o.from as usize] = free[o.from as usize].saturating_add(1);
                chosen.push(o);
            }
            free[m.to as usize] -= 1;
            free[m.from as usize] = free[m.from as usize].saturating_add(1);
            chosen.push(m);
        }
        chosen.sort_unstable_by_key(|m| (m.to < m.from, m.from, m.to, m.block));
        chosen
    }
}

/// One exchange for a table without homes: `up` comes to the fast tier as
/// `down` leaves it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    pub up: Move,
    pub down: Move,
}

impl std::fmt::Display for Pair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exchange of {} with {}", self.up, self.down)
    }
}

impl MigrationMatrix {
    /// Choose at most `budget / 2` exchanges (at least one) for a two-tier table without
    /// homes (whose tiers are always full: every move is an exchange): the
    /// best-ranked promotions, each paired with the worst-ranked demotion;
    /// promotions without a demotion to pair wait for a later round.
    pub fn schedule_exchanges(&self, budget: usize) -> Vec<Pair> {
        let all = self.cells.iter().flatten();
        let mut ups: Vec<Move> = all.clone().filter(|m| m.to < m.from).copied().collect();
        ups.sort_unstable_by_key(|m| (m.rank, m.block));
        let mut downs: Vec<Move> = all.filter(|m| m.to > m.from).copied().collect();
        // Best first, so the worst-ranked is at the back.
        downs.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.block.cmp(&b.block)));
        let mut out = Vec::new();
        for up in ups {
            if out.len() >= (budget / 2).max(1) {
                break;
            }
            let Some(pos) = downs
                .iter()
                .rposition(|d| d.from == up.to && d.to == up.from)
            else {
                continue;
            };
            out.push(Pair {
                up,
                down: downs.remove(pos),
            });
        }
        out
    }
}

/// Algorithm 2, lines 1-12: rank `candidates` (reordered in place) and build
/// the migration matrix for `table`'s tiers.
pub fn plan(table: &MappingTable, candidates: &mut Vec<Candidate>) -> MigrationMatrix {
    let tiers = table.tiers();
    let last = table.capacity_tier();
    candidates.retain(|c| c.score > 0.0 && c.block < table.blocks());
    let tier_of = |b: BlockId| table.tier_of(b).unwrap_or(last);
    // Best first; on ties keep what is already fast, then lower addresses.
    let by_score = |a: &Candidate, b: &Candidate| {
        b.score
            .total_cmp(&a.score)
            .then(tier_of(a.block).cmp(&tier_of(b.block)))
            .then(a.block.cmp(&b.block))
    };
    let cap0 = table
        .usable_slots(0)
        .unwrap_or(0)
        .min(candidates.len() as u64) as usize;
    if cap0 < candidates.len() {
        // Only the fastest tier's share needs a full order.
        candidates.select_nth_unstable_by(cap0, by_score);
    }
    candidates[..cap0].sort_unstable_by(by_score);
    let mut cells = vec![Vec::new(); tiers * tiers];
    let mut push = |block: BlockId, to: TierId, rank: u32, score: f32| {
        let from = tier_of(block);
        if from != to {
            cells[from as usize * tiers + to as usize].push(Move {
                block,
                from,
                to,
                rank,
                score,
            });
        }
    };
    for (i, c) in candidates[..cap0].iter().enumerate() {
        push(c.block, 0, i as u32, c.score);
    }
    // Once the fastest tier is full, rank the rest without the read term.
    let rest = &mut candidates[cap0..];
    if tiers > 2 {
        rest.sort_unstable_by(|a, b| {
            b.score_without_read
                .total_cmp(&a.score_without_read)
                .then(tier_of(a.block).cmp(&tier_of(b.block)))
                .then(a.block.cmp(&b.block))
        });
    }
    let mut at = 0usize;
    for t in 1..tiers as TierId {
        let cap = if t == last {
            rest.len() - at
        } else {
            (table.usable_slots(t).unwrap_or(0) as usize).min(rest.len() - at)
        };
        for c in &rest[at..at + cap] {
            push(c.block, t, (cap0 + at) as u32, c.score_without_read);
            at += 1;
        }
    }
    // Fast-tier residents nobody ranked go to the capacity tier.
    let mut ranked = vec![0u64; table.blocks().div_ceil(64) as usize];
    for c in candidates.iter() {
        ranked[(c.block / 64) as usize] |= 1 << (c.block % 64);
    }
    for t in 0..last {
        for b in table.residents(t) {
            if ranked[(b / 64) as usize] >> (b % 64) & 1 == 0 {
                push(b, last, u32::MAX, f32::NEG_INFINITY);
            }
        }
    }
    for c in &mut cells {
        c.sort_unstable_by_key(|m| m.block);
    }
    MigrationMatrix { tiers, cells }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_read_as_text_in_logs() {
        let up = Move {
            block: 3,
            from: 1,
            to: 0,
            rank: 0,
            score: 2.5,
        };
        // A demotion of a block outside the ranking (no recent accesses).
        let down = Move {
            block: 9,
            from: 0,
            to: 1,
            rank: u32::MAX,
            score: f32::NEG_INFINITY,
        };
        assert_eq!(
            Pair { up, down }.to_string(),
            "exchange of block 3 from tier 1 to tier 0 (rank 0, score 2.5) with \
             block 9 from tier 0 to tier 1 (not ranked: no recent accesses)"
        );
    }

    fn cand(block: BlockId, score: f32, without_read: f32) -> Candidate {
        Candidate {
            block,
            score,
            score_without_read: without_read,
        }
    }

    fn place(t: &mut MappingTable, block: BlockId, tier: TierId) {
        let h = t.lookup(block).unwrap();
        let d = t.reserve(tier, block).unwrap();
        t.switch(block, h, d).unwrap();
    }

    fn blocks(ms: &[Move]) -> Vec<BlockId> {
        ms.iter().map(|m| m.block).collect()
    }

    /// Ten blocks, a fast tier of 4 holding 7, 8, 9; scores rank 2, 7, 5, 1
    /// best: promote 1, 2, 5; demote 8 (ranked 5th) and 9 (unranked).
    fn example() -> (MappingTable, MigrationMatrix) {
        let mut t = MappingTable::new(4096, 10, &[4]).unwrap();
        for b in [7, 8, 9] {
            place(&mut t, b, 0);
        }
        let mut c = vec![
            cand(8, 1.0, 1.0),
            cand(2, 5.0, 5.0),
            cand(5, 3.0, 3.0),
            cand(7, 4.0, 4.0),
            cand(1, 2.0, 2.0),
            cand(3, 0.0, 0.0),
        ];
        let m = plan(&t, &mut c);
        (t, m)
    }

    #[test]
    fn matrix_holds_exactly_the_tier_changes_in_address_order() {
        let (_, m) = example();
        assert_eq!(blocks(m.cell(1, 0)), vec![1, 2, 5]);
        assert_eq!(blocks(m.cell(0, 1)), vec![8, 9]);
        assert!(m.cell(0, 0).is_empty() && m.cell(1, 1).is_empty());
        assert_eq!(m.len(), 5);
    }

    #[test]
    fn schedule_demotes_worst_first_for_room_and_respects_the_budget() {
        let (t, m) = example();
        // One free slot: 2 takes it, 5 needs 9 (unranked) out, 1 needs 8 out.
        let all = m.schedule(&t, 100);
        assert_eq!(
            all.iter()
                .map(|m| (m.block, m.from, m.to))
                .collect::<Vec<_>>(),
            vec![(8, 0, 1), (9, 0, 1), (1, 1, 0), (2, 1, 0), (5, 1, 0)]
        );
        let three = m.schedule(&t, 3);
        assert_eq!(blocks(&three), vec![9, 2, 5]);
        assert_eq!(blocks(&m.schedule(&t, 2)), vec![2]);
    }

    #[test]
    fn tiers_below_the_fastest_are_ranked_without_the_read_term() {
        // Tier 0: 1 slot, tier 1: 2 slots, tier 2: capacity.
        let t = MappingTable::new(4096, 10, &[1, 2]).unwrap();
        let mut c = vec![
            cand(0, 10.0, 1.0),
            cand(1, 5.0, 5.0),
            cand(2, 4.0, 4.0),
            cand(3, 3.5, 3.5),
            cand(4, 9.0, 0.5), // read-heavy: second overall, last without reads
        ];
        let m = plan(&t, &mut c);
        assert_eq!(blocks(m.cell(2, 0)), vec![0]);
        assert_eq!(blocks(m.cell(2, 1)), vec![1, 2]);
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn trigger_fires_every_n_requests_and_on_idle() {
        let cfg = PlannerConfig {
            every_requests: 3,
            idle_ns: Some(100),
            max_moves_per_round: 1,
        };
        let mut tr = Trigger::default();
        let fired: Vec<bool> = (0..7).map(|_| tr.on_request(&cfg)).collect();
        assert_eq!(fired, vec![false, false, true, false, false, true, false]);
        assert!(!tr.on_idle(&cfg, 99));
        assert!(tr.on_idle(&cfg, 100));
        assert!(!tr.on_idle(&cfg, 1000), "nothing new since the last round");
        assert!(PlannerConfig {
            every_requests: 0,
            ..cfg
        }
        .validate()
        .is_err());
    }
}
