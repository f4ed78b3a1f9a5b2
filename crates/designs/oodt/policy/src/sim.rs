//! Timed replay of a trace through a two-tier volume: the fast tier is the
//! profile's SSD model, the capacity tier its HDD model.
//!
//! Per request: the dispatcher splits it at block boundaries and routes the
//! parts; physically contiguous parts on the same tier are submitted as one
//! device operation (as the block layer's plugging would merge them); a part
//! on a block under migration starts when the block is unlocked; the request
//! completes with its last part. Every `every_requests` requests (or after
//! `idle_ns` of idle devices, open loop only) the planner runs and its moves
//! are executed at once, costing device time: per run of blocks contiguous
//! on both tiers one read on the source and one write on the destination,
//! plus migration-log writes on the fast tier (one `Begin` batch per round,
//! one `Switch` per run, after which the run's blocks unlock).
//!
//! Open loop replays at the trace's timestamps; closed loop issues the next
//! request as soon as fewer than `queue_depth` are in flight.

use crate::dispatcher::{Dispatcher, SubRequest};
use crate::mapping::{BlockId, Loc, MappingTable, TierError};
use crate::migration::{Exchange, Steps, RECORD_BYTES};
use crate::planner::{plan_round, Pair, PlannerConfig, Round, Trigger};
use crate::policy::{build, Access, Candidate, PolicyConfig, PolicyKind, TierPolicy};
use hdrhistogram::Histogram;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tiercache_block::{Class, IoKind};
use tiercache_model::{DeviceModel, ModelOp, Profile};
use tiercache_trace::{Record, TraceError};

/// How requests are issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// At the trace's timestamps.
    Open,
    /// As fast as the devices allow, this many requests in flight.
    Closed { queue_depth: u32 },
}

/// One simulation's configuration.
#[derive(Clone, Debug)]
pub struct TierSimConfig {
    pub policy: PolicyKind,
    pub policy_cfg: PolicyConfig,
    /// Tiering block size (4 KiB to 4 MiB).
    pub block_bytes: u32,
    /// Fast tier size in bytes (rounded down to blocks; 0: HDD only).
    pub fast_tier_bytes: u64,
    /// Exported volume size; requests must fall inside it.
    pub volume_bytes: u64,
    pub planner: PlannerConfig,
    pub profile: Profile,
    pub replay: Replay,
    /// Model a `--capacity sum` volume: every block in one slot of either
    /// tier (the slow tier sized so the volume covers the trace: its blocks
    /// minus the fast tier's plus two scratch slots), every move an exchange
    /// (both copies, both writes, one Begin pair and one Switch). `false`:
    /// homes on the slow tier (`--capacity slow`).
    pub capacity_sum: bool,
}

impl TierSimConfig {
    /// The planner used unless told otherwise: a round every 1000 requests
    /// (or after 100 ms idle), moving at most 1/8 of the fast tier per round
    /// (at least 32, at most 4096 blocks).
    pub fn default_planner(fast_slots: u64) -> PlannerConfig {
        PlannerConfig {
            every_requests: 1000,
            idle_ns: Some(100_000_000),
            max_moves_per_round: (fast_slots / 8).clamp(32, 4096) as usize,
        }
    }
}

/// What stops a run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Tier(#[from] TierError),
    #[error("device profile: {0}")]
    Profile(String),
}

/// Results of one run (the `--json` object of `tiercache sim --mode tier`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TierReport {
    pub policy: String,
    pub tier_block: u32,
    pub fast_tier_bytes: u64,
    pub fast_tier_blocks: u64,
    pub volume_blocks: u64,
    /// Distinct blocks the trace touched.
    pub footprint_blocks: u64,
    pub requests: u64,
    /// Trims and flushes, not replayed.
    pub skipped_requests: u64,
    pub mean_response_us: f64,
    pub p50_response_us: f64,
    pub p99_response_us: f64,
    pub max_response_us: f64,
    /// First arrival to last completion, simulated.
    pub elapsed_s: f64,
    /// Share of the footprint blocks resident on the fast tier at the end (0 to 1).
    pub fast_tier_block_share: f64,
    /// Block accesses (request parts) served by the fast tier.
    pub fast_tier_access_share: f64,
    /// `sum` or `slow` (see [`TierSimConfig::capacity_sum`]).
    pub capacity: &'static str,
    /// Exchanges (each also counts one promotion and one demotion).
    pub exchanges: u64,
    /// Blocks moved (each promotion or demotion counts once).
    pub migrations: u64,
    pub promotions: u64,
    pub demotions: u64,
    pub migrated_bytes: u64,
    pub planning_rounds: u64,
    /// Request parts that waited for a block under migration.
    pub locked_waits: u64,
    /// Mapping table, allocator and policy statistics, per volume block.
    pub metadata_bytes_per_block: f64,
    pub ssd_utilization: f64,
    pub hdd_utilization: f64,
}

struct Tiers {
    dev: [Box<dyn DeviceModel>; 2],
}

impl Tiers {
    fn submit(&mut self, tier: u8, now: u64, op: ModelOp) -> u64 {
        self.dev[tier.min(1) as usize].submit(now, &op)
    }
}

struct State<'a> {
    cfg: &'a TierSimConfig,
    table: MappingTable,
    policy: Box<dyn TierPolicy>,
    tiers: Tiers,
    locks: FxHashMap<BlockId, u64>,
    cands: Vec<Candidate>,
    budget: usize,
    migrations: u64,
    exchanges: u64,
    promotions: u64,
    demotions: u64,
    rounds: u64,
    busy_until: u64,
}

impl State<'_> {
    /// One planning round at `now` (Algorithm 2), executed on the models.
    fn round(&mut self, now: u64) -> Result<(), SimError> {
        self.rounds += 1;
        let moves = match plan_round(
            &self.table,
            self.policy.as_mut(),
            &mut self.cands,
            self.budget,
        ) {
            Round::Moves(m) => m,
            Round::Exchanges(pairs) => return self.exchange_round(now, &pairs),
        };
        if moves.is_empty() {
            return Ok(());
        }
        self.locks.retain(|_, &mut u| u > now);
        let bs = u64::from(self.cfg.block_bytes);
        let log_op = |n: usize| {
            ModelOp::new(
                IoKind::Write,
                0,
                ((n * RECORD_BYTES) as u64).div_ceil(4096) * 4096,
            )
        };
        // The Begin batch must be durable before any copy starts.
        let begun = self.tiers.submit(0, now, log_op(moves.len()));
        let mut i = 0;
        while i < moves.len() {
            // A run: same cell, consecutive blocks, consecutive slots.
            let m0 = moves[i];
            let src0 = self.table.lookup(m0.block).expect("planned block exists");
            let dst0 = self.table.reserve(m0.to, m0.block)?;
            let mut run: Vec<(BlockId, Loc, Loc)> = vec![(m0.block, src0, dst0)];
            while let Some(m) = moves.get(i + run.len()) {
                let (pb, ps, pd) = *run.last().expect("non-empty");
                let src = self.table.lookup(m.block).expect("planned block exists");
                if m.from != m0.from
                    || m.to != m0.to
                    || m.block != pb + 1
                    || src.slot != ps.slot + 1
                {
                    break;
                }
                let dst = self.table.reserve(m.to, m.block)?;
                if dst.slot != pd.slot + 1 {
                    self.table.release(dst);
                    break;
                }
                run.push((m.block, src, dst));
            }
            let n = run.len() as u64;
            let read = self.tiers.submit(
                src0.tier,
                begun,
                ModelOp::new(IoKind::Read, src0.byte_offset(self.cfg.block_bytes), n * bs),
            );
            let written = self.tiers.submit(
                dst0.tier,
                read,
                ModelOp::new(
                    IoKind::Write,
                    dst0.byte_offset(self.cfg.block_bytes),
                    n * bs,
                ),
            );
            let unlocked = self.tiers.submit(0, written, log_op(run.len()));
            for &(b, src, dst) in &run {
                self.table.switch(b, src, dst)?;
                self.table.release(src);
                self.locks.insert(b, unlocked);
            }
            self.busy_until = self.busy_until.max(unlocked);
            if m0.to < m0.from {
                self.promotions += n;
            } else {
                self.demotions += n;
            }
            self.migrations += n;
            i += run.len();
        }
        Ok(())
    }
}

impl State<'_> {
    /// A round of exchanges (a `sum` volume): one `Begin` batch, then per
    /// pair both reads, both writes and one `Switch`, after which both
    /// blocks unlock.
    fn exchange_round(&mut self, now: u64, pairs: &[Pair]) -> Result<(), SimError> {
        if pairs.is_empty() {
            return Ok(());
        }
        self.locks.retain(|_, &mut u| u > now);
        let bs = self.cfg.block_bytes;
        let log_op = |n: usize| {
            ModelOp::new(
                IoKind::Write,
                0,
                ((n * RECORD_BYTES) as u64).div_ceil(4096) * 4096,
            )
        };
        let begun = self.tiers.submit(0, now, log_op(2 * pairs.len()));
        for p in pairs {
            let mut x = match Exchange::start(&mut self.table, 0, p.up.block, p.down.block) {
                Ok(x) => x,
                Err(TierError::TierFull(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let mut written = begun;
            for &(_, src, dst) in &x.halves {
                let read = self.tiers.submit(
                    src.tier,
                    begun,
                    ModelOp::new(IoKind::Read, src.byte_offset(bs), u64::from(bs)),
                );
                let w = self.tiers.submit(
                    dst.tier,
                    read,
                    ModelOp::new(IoKind::Write, dst.byte_offset(bs), u64::from(bs)),
                );
                written = written.max(w);
            }
            let unlocked = self.tiers.submit(0, written, log_op(1));
            while x.next_action().is_some() {
                x.advance(&mut self.table)?;
            }
            for &(b, _, _) in &x.halves {
                self.locks.insert(b, unlocked);
            }
            self.busy_until = self.busy_until.max(unlocked);
            self.exchanges += 1;
            self.promotions += 1;
            self.demotions += 1;
            self.migrations += 2;
        }
        Ok(())
    }
}

/// Replay `records` (see the module docs).
pub fn run<I>(records: I, cfg: &TierSimConfig) -> Result<TierReport, SimError>
where
    I: IntoIterator<Item = Result<Record, TraceError>>,
{
    let (st, blocks, fast_slots) = build_state(cfg)?;
    let mut r = Replayer {
        cfg,
        st,
        blocks,
        fast_slots,
        disp: Dispatcher::new(),
        trigger: Trigger::default(),
        parts: Vec::new(),
        hist: Histogram::<u64>::new_with_bounds(1, 1 << 50, 3).expect("valid histogram bounds"),
        touched: vec![0u64; blocks.div_ceil(64) as usize],
        inflight: BinaryHeap::new(),
        requests: 0,
        skipped: 0,
        sum_ns: 0,
        first: None,
        last_issue: 0,
        accesses: 0,
        fast_accesses: 0,
        locked_waits: 0,
    };
    for rec in records {
        r.request(&rec?)?;
    }
    Ok(r.report())
}

/// The part of a fast tier of `fast_tier_bytes` a volume of `volume_bytes`
/// can use, in blocks of `block_bytes`: at most the volume's blocks plus the
/// one scratch slot a migration needs; the rest could never hold data.
pub fn usable_fast_tier_bytes(fast_tier_bytes: u64, volume_bytes: u64, block_bytes: u32) -> u64 {
    let bs = u64::from(block_bytes.max(1));
    let cap = (volume_bytes.div_ceil(bs).max(1) + 1) * bs;
    (fast_tier_bytes / bs * bs).min(cap)
}

/// Check the block size and planner, then build the mapping table, policy
/// and device models; returns the state with the volume and fast-tier sizes
/// in blocks.
fn build_state(cfg: &TierSimConfig) -> Result<(State<'_>, u64, u64), SimError> {
    let bs = cfg.block_bytes;
    if !(4096..=4 << 20).contains(&bs) || !bs.is_power_of_two() {
        return Err(TierError::Config(format!(
            "tier block {bs} B (allowed: a power of two from 4 KiB to 4 MiB)"
        ))
        .into());
    }
    cfg.planner.validate()?;
    let blocks = cfg.volume_bytes.div_ceil(u64::from(bs)).max(1);
    let fast_slots =
        usable_fast_tier_bytes(cfg.fast_tier_bytes, cfg.volume_bytes, bs) / u64::from(bs);
    let table = if cfg.capacity_sum && fast_slots >= 2 {
        // As the live volume: blocks 0.. on the slow tier, the tail fast.
        MappingTable::new_sum(
            bs,
            blocks,
            &[fast_slots, (blocks + 2).saturating_sub(fast_slots).max(2)],
        )?
    } else {
        MappingTable::new(bs, blocks, &[fast_slots])?
    };
    let policy = build(cfg.policy, &cfg.policy_cfg, blocks, bs)?;
    let prof = |e: tiercache_model::ProfileError| SimError::Profile(e.to_string());
    let tiers = Tiers {
        dev: [
            Box::new(cfg.profile.ssd_model().map_err(prof)?),
            Box::new(cfg.profile.hdd_model().map_err(prof)?),
        ],
    };
    let st = State {
        cfg,
        table,
        policy,
        tiers,
        locks: FxHashMap::default(),
        cands: Vec::new(),
        budget: cfg.planner.max_moves_per_round,
        migrations: 0,
        exchanges: 0,
        promotions: 0,
        demotions: 0,
        rounds: 0,
        busy_until: 0,
    };
    Ok((st, blocks, fast_slots))
}

/// The replay loop's state around [`State`]: dispatcher, planning trigger,
/// closed-loop queue and the counters the report is made of.
struct Replayer<'a> {
    cfg: &'a TierSimConfig,
    st: State<'a>,
    /// Volume size in blocks.
    blocks: u64,
    /// Fast tier size in blocks.
    fast_slots: u64,
    disp: Dispatcher,
    trigger: Trigger,
    /// Parts of the current request (reused buffer).
    parts: Vec<SubRequest>,
    hist: Histogram<u64>,
    /// Bitmap of the blocks the trace touched.
    touched: Vec<u64>,
    /// Completion times of the requests in flight (closed replay).
    inflight: BinaryHeap<Reverse<u64>>,
    requests: u64,
    skipped: u64,
    sum_ns: u128,
    first: Option<u64>,
    last_issue: u64,
    accesses: u64,
    fast_accesses: u64,
    locked_waits: u64,
}

impl Replayer<'_> {
    /// Replay one record: issue it, run an idle round if the devices were
    /// idle long enough, serve its parts and run a round when one is due.
    fn request(&mut self, rec: &Record) -> Result<(), SimError> {
        let read = match rec.kind {
            IoKind::Read => true,
            IoKind::Write => false,
            IoKind::Trim | IoKind::Flush => {
                self.skipped += 1;
                return Ok(());
            }
        };
        let t = self.issue_time(rec);
        self.last_issue = t;
        self.first.get_or_insert(t);
        self.idle_round(t)?;
        let done = self.serve(rec, read, t)?;
        let resp = done - t;
        self.hist.saturating_record(resp.max(1));
        self.sum_ns += u128::from(resp);
        self.requests += 1;
        self.st.busy_until = self.st.busy_until.max(done);
        if let Replay::Closed { .. } = self.cfg.replay {
            self.inflight.push(Reverse(done));
        }
        if self.fast_slots > 0 && self.trigger.on_request(&self.cfg.planner) {
            self.st.round(t)?;
        }
        Ok(())
    }

    /// When `rec` is issued: at its timestamp (open replay), or once a slot
    /// of the queue depth is free (closed replay).
    fn issue_time(&mut self, rec: &Record) -> u64 {
        match self.cfg.replay {
            Replay::Open => rec.time_ns,
            Replay::Closed { queue_depth } => {
                let mut t = self.last_issue;
                if self.inflight.len() >= queue_depth.max(1) as usize {
                    t = t.max(self.inflight.pop().map_or(0, |Reverse(x)| x));
                }
                t
            }
        }
    }

    /// Run a planning round in the idle gap before `t`, when the devices were
    /// idle for the planner's idle time and the trigger agrees.
    fn idle_round(&mut self, t: u64) -> Result<(), SimError> {
        if let Some(idle) = self.cfg.planner.idle_ns {
            if self.fast_slots > 0 && t > self.st.busy_until.saturating_add(idle) {
                let gap = t - self.st.busy_until;
                if self.trigger.on_idle(&self.cfg.planner, gap) {
                    self.st.round(self.st.busy_until + idle)?;
                }
            }
        }
        Ok(())
    }

    /// Split `rec` into block parts, tell the policy about each and submit
    /// contiguous parts on one tier as one op (after any migration lock on
    /// their blocks); returns when the request completes.
    fn serve(&mut self, rec: &Record, read: bool, t: u64) -> Result<u64, SimError> {
        self.parts.clear();
        let id = self.disp.dispatch(
            &self.st.table,
            rec.offset,
            u64::from(rec.len),
            &mut self.parts,
        )?;
        let meta = rec.class.is_some_and(Class::is_metadata);
        let mut done = t;
        let mut i = 0;
        while i < self.parts.len() {
            let p0 = self.parts[i];
            let mut len = u64::from(p0.len);
            let mut start = t;
            let mut j = i;
            while j < self.parts.len() {
                let p = self.parts[j];
                if j > i && (p.loc.tier != p0.loc.tier || p.tier_offset != p0.tier_offset + len) {
                    break;
                }
                if j > i {
                    len += u64::from(p.len);
                }
                if let Some(&u) = self.st.locks.get(&p.block) {
                    if u > t {
                        start = start.max(u);
                        self.locked_waits += 1;
                    }
                }
                self.st.policy.observe(&Access {
                    block: p.block,
                    offset: p.offset,
                    len: p.len,
                    read,
                    meta,
                    request_offset: rec.offset,
                    request_len: u64::from(rec.len),
                    first_part: j == 0,
                });
                self.touched[(p.block / 64) as usize] |= 1 << (p.block % 64);
                self.accesses += 1;
                self.fast_accesses += u64::from(p.loc.tier == 0);
                self.disp.complete_part(id)?;
                j += 1;
            }
            let kind = if read { IoKind::Read } else { IoKind::Write };
            done = done.max(self.st.tiers.submit(
                p0.loc.tier,
                start,
                ModelOp::new(kind, p0.tier_offset, len),
            ));
            i = j;
        }
        Ok(done)
    }

    /// Turn the counters, histogram and device models into the report.
    fn report(self) -> TierReport {
        let (cfg, st, blocks, fast_slots) = (self.cfg, &self.st, self.blocks, self.fast_slots);
        let bs = cfg.block_bytes;
        let (requests, accesses) = (self.requests, self.accesses);
        let hist = &self.hist;
        let end = st.busy_until.max(self.last_issue);
        let elapsed = end.saturating_sub(self.first.unwrap_or(0));
        let footprint: u64 = self.touched.iter().map(|w| u64::from(w.count_ones())).sum();
        // Footprint blocks on the fast tier (a `sum` volume starts blocks
        // there that the trace may never touch: they are not counted).
        let fast_footprint: u64 = self
            .touched
            .iter()
            .enumerate()
            .flat_map(|(w, &bits)| {
                (0..64u64)
                    .filter(move |b| bits >> b & 1 == 1)
                    .map(move |b| w as u64 * 64 + b)
            })
            .filter(|&b| st.table.tier_of(b) == Some(0))
            .count() as u64;
        let util = |d: &dyn DeviceModel| {
            if elapsed > 0 {
                d.busy_ns() as f64 / elapsed as f64
            } else {
                0.0
            }
        };
        let us = |ns: u64| ns as f64 / 1000.0;
        TierReport {
            policy: cfg.policy.to_string(),
            tier_block: bs,
            fast_tier_bytes: fast_slots * u64::from(bs),
            fast_tier_blocks: fast_slots,
            volume_blocks: blocks,
            footprint_blocks: footprint,
            requests,
            skipped_requests: self.skipped,
            mean_response_us: if requests > 0 {
                self.sum_ns as f64 / requests as f64 / 1000.0
            } else {
                0.0
            },
            p50_response_us: us(hist.value_at_quantile(0.5)),
            p99_response_us: us(hist.value_at_quantile(0.99)),
            max_response_us: us(hist.max()),
            elapsed_s: elapsed as f64 / 1e9,
            fast_tier_block_share: if footprint > 0 {
                fast_footprint as f64 / footprint as f64
            } else {
                0.0
            },
            fast_tier_access_share: if accesses > 0 {
                self.fast_accesses as f64 / accesses as f64
            } else {
                0.0
            },
            capacity: if st.table.has_homes() { "slow" } else { "sum" },
            exchanges: st.exchanges,
            migrations: st.migrations,
            promotions: st.promotions,
            demotions: st.demotions,
            migrated_bytes: st.migrations * u64::from(bs),
            planning_rounds: st.rounds,
            locked_waits: self.locked_waits,
            metadata_bytes_per_block: (st.table.memory_bytes() + st.policy.stats_bytes()) as f64
                / blocks as f64,
            ssd_utilization: util(st.tiers.dev[0].as_ref()),
            hdd_utilization: util(st.tiers.dev[1].as_ref()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: u64, len: u32, kind: IoKind) -> Result<Record, TraceError> {
        Ok(Record {
            time_ns: 0,
            offset,
            len,
            kind,
            class: None,
        })
    }

    fn cfg(policy: PolicyKind, fast_tier_bytes: u64) -> TierSimConfig {
        TierSimConfig {
            policy,
            policy_cfg: PolicyConfig::default(),
            block_bytes: 4096,
            fast_tier_bytes,
            volume_bytes: 1 << 30,
            planner: PlannerConfig {
                every_requests: 100,
                idle_ns: None,
                max_moves_per_round: 64,
            },
            profile: Profile::default(),
            replay: Replay::Closed { queue_depth: 1 },
            capacity_sum: false,
        }
    }

    /// The deployed `sum` volume: both tiers always full, hot blocks come up
    /// only by exchange, each counted as one promotion and one demotion.
    #[test]
    fn a_sum_volume_moves_hot_blocks_up_by_exchanges() {
        let c = TierSimConfig {
            capacity_sum: true,
            ..cfg(PolicyKind::Oodt, 64 * 4096)
        };
        let r = run(workload(), &c).unwrap();
        assert_eq!(r.capacity, "sum");
        assert!(r.exchanges >= 16, "{r:?}");
        assert_eq!(r.promotions, r.exchanges);
        assert_eq!(r.demotions, r.exchanges);
        assert_eq!(r.migrations, 2 * r.exchanges);
        assert!(r.fast_tier_access_share > 0.45, "{r:?}");
        let slow = run(workload(), &cfg(PolicyKind::Oodt, 64 * 4096)).unwrap();
        assert_eq!(slow.capacity, "slow");
        assert_eq!(slow.exchanges, 0);
    }

    /// A hot set of 16 random blocks read over and over, plus a cold scan.
    fn workload() -> Vec<Result<Record, TraceError>> {
        let mut v = Vec::new();
        for round in 0..200u64 {
            for h in 0..16u64 {
                v.push(rec(h * 7_919 * 4096 % (1 << 29), 4096, IoKind::Read));
            }
            v.push(rec((1 << 29) + round * 65536, 65536, IoKind::Write));
        }
        v
    }

    #[test]
    fn hot_random_blocks_end_up_on_the_fast_tier_and_speed_up_the_replay() {
        let hdd = run(workload(), &cfg(PolicyKind::Oodt, 0)).unwrap();
        assert_eq!(hdd.migrations, 0);
        assert_eq!(hdd.fast_tier_access_share, 0.0);
        for p in PolicyKind::ALL {
            let r = run(workload(), &cfg(p, 64 * 4096)).unwrap();
            assert_eq!(r.requests, 200 * 17);
            assert!(r.promotions >= 16, "{p}: {r:?}");
            // Half the request parts are hot reads (16 of 32 per round).
            assert!(r.fast_tier_access_share > 0.45, "{p}: {r:?}");
            assert!(
                r.mean_response_us < hdd.mean_response_us / 2.0,
                "{p}: {r:?} vs {hdd:?}"
            );
            assert_eq!(r.migrated_bytes, r.migrations * 4096);
        }
    }

    #[test]
    fn metadata_overhead_is_at_most_12_bytes_per_block() {
        let r = run(workload(), &cfg(PolicyKind::Oodt, 64 * 4096)).unwrap();
        // 4 B mapping + 8 B statistics + 1 bit per fast slot.
        assert!(
            r.metadata_bytes_per_block <= 12.01,
            "{}",
            r.metadata_bytes_per_block
        );
        assert!(r.metadata_bytes_per_block >= 12.0);
    }

    #[test]
    fn bad_input_is_refused_with_what_is_allowed() {
        let mut c = cfg(PolicyKind::Oodt, 4096);
        c.block_bytes = 3000;
        let e = run(Vec::new(), &c).unwrap_err().to_string();
        assert!(e.contains("allowed"), "{e}");
        let c = cfg(PolicyKind::Oodt, 4096);
        let e = run(vec![rec(1 << 30, 4096, IoKind::Read)], &c)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside the volume"), "{e}");
    }
}
