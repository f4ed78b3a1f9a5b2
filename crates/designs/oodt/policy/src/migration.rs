//! Crash-safe block migration: a log of fixed-size, checksummed records and
//! a per-migration state machine (copy, switch the mapping atomically, free).
//!
//! Order of one migration of `block` from `src` to `dst`, each step durable
//! before the next starts:
//! 1. reserve `dst` and lock the block (no writes reach it from now on);
//! 2. append `Begin{id, block, src, dst}` to the log;
//! 3. copy the block `src -> dst`, then flush the destination tier;
//! 4. append `Switch{id}`: **the commit point**; then switch the mapping in
//!    memory and unlock the block (new writes go to `dst`);
//! 5. release `src` (trim it);
//! 6. append `Done{id}`; the record may then be dropped at the next checkpoint.
//!
//! Recovery ([`recover`]) loads the last mapping checkpoint, replays the log
//! up to its first torn or damaged record, completes every migration whose
//! `Switch` is durable (the mapping points to `dst`, whose data was flushed
//! before the switch) and rolls back every other one (the mapping still
//! points to `src`, which was never written while the block was locked).
//! Slot allocators are rebuilt from the mapping, so a crash leaks no slot.
//! The caller writes the log and the data: this module performs no I/O.
//!
//! An **exchange** ([`Exchange`]) swaps the tiers of two blocks in one
//! transaction (a volume whose capacity is the sum of its tiers has no free
//! home to demote to: a cold block goes down as a hot one comes up). It logs
//! one `Begin` per block under the same id, copies both, flushes both
//! destination tiers, logs one `Switch` for both, trims both sources and logs
//! `Done`. Recovery treats every `Begin` of an id alike, so the one `Switch`
//! completes both halves and its absence rolls both back: the exchange
//! happens entirely or not at all. See [`Exchange`] for why no block is ever
//! lost or duplicated.

use crate::mapping::{BlockId, Loc, MappingTable, TierError, TierId};

/// One log record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogRecord {
    /// A migration starts: `block` will move from `src` to `dst`.
    Begin {
        id: u64,
        block: BlockId,
        src: Loc,
        dst: Loc,
    },
    /// The copy of migration `id` is durable; the mapping now points to `dst`.
    Switch { id: u64 },
    /// The source slot of migration `id` is released.
    Done { id: u64 },
}

/// Bytes of one encoded record: tag, id, block, src, dst, CRC32C.
pub const RECORD_BYTES: usize = 1 + 8 + 8 + 9 + 9 + 4;

impl LogRecord {
    /// Fixed-size encoding with a CRC32C over the first 35 bytes.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        let (tag, id, block, src, dst) = match *self {
            LogRecord::Begin {
                id,
                block,
                src,
                dst,
            } => (1u8, id, block, src, dst),
            LogRecord::Switch { id } => {
                (2, id, 0, Loc { tier: 0, slot: 0 }, Loc { tier: 0, slot: 0 })
            }
            LogRecord::Done { id } => {
                (3, id, 0, Loc { tier: 0, slot: 0 }, Loc { tier: 0, slot: 0 })
            }
        };
        b[0] = tag;
        b[1..9].copy_from_slice(&id.to_le_bytes());
        b[9..17].copy_from_slice(&block.to_le_bytes());
        b[17] = src.tier;
        b[18..26].copy_from_slice(&src.slot.to_le_bytes());
        b[26] = dst.tier;
        b[27..35].copy_from_slice(&dst.slot.to_le_bytes());
        let crc = crc32c::crc32c(&b[..35]);
        b[35..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode one record; `None` when torn or damaged.
    pub fn decode(b: &[u8]) -> Option<LogRecord> {
        if b.len() < RECORD_BYTES || crc32c::crc32c(&b[..35]).to_le_bytes() != b[35..39] {
            return None;
        }
        let u = |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
        let id = u(1..9);
        match b[0] {
            1 => Some(LogRecord::Begin {
                id,
                block: u(9..17),
                src: Loc {
                    tier: b[17],
                    slot: u(18..26),
                },
                dst: Loc {
                    tier: b[26],
                    slot: u(27..35),
                },
            }),
            2 => Some(LogRecord::Switch { id }),
            3 => Some(LogRecord::Done { id }),
            _ => None,
        }
    }
}

/// Parse a log: the valid records up to the first torn or damaged one, and
/// the byte length of that valid prefix (where the next append goes).
pub fn parse_log(bytes: &[u8]) -> (Vec<LogRecord>, usize) {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(r) = bytes.get(at..).and_then(LogRecord::decode) {
        out.push(r);
        at += RECORD_BYTES;
    }
    (out, at)
}

/// Where a migration is: the last step done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// `dst` reserved, block locked; `Begin` not yet logged.
    Reserved,
    /// `Begin` is durable.
    Begun,
    /// Data copied to `dst` (maybe not yet durable).
    Copied,
    /// `dst` flushed.
    Flushed,
    /// `Switch` is durable, mapping switched, block unlocked.
    Switched,
    /// `src` released.
    Released,
    /// `Done` is durable; nothing left to do.
    Done,
}

/// The next thing the caller must do (and then report with
/// [`Migration::advance`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Append this record to the log and make it durable.
    Log(LogRecord),
    /// Read the block at `from`, write it at `to`.
    Copy { from: Loc, to: Loc },
    /// Make earlier writes to this tier durable.
    Flush { tier: TierId },
    /// The slot no longer holds live data (discard it).
    Trim { loc: Loc },
}

/// One block migration (see the module docs for the steps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migration {
    pub id: u64,
    pub block: BlockId,
    pub src: Loc,
    pub dst: Loc,
    phase: Phase,
}

impl Migration {
    /// Start moving `block` to tier `to`: reserves the destination slot.
    pub fn start(
        table: &mut MappingTable,
        id: u64,
        block: BlockId,
        to: TierId,
    ) -> Result<Migration, TierError> {
        let src = table.lookup(block).ok_or(TierError::OutOfRange {
            offset: block * u64::from(table.block_bytes()),
            len: u64::from(table.block_bytes()),
            volume_bytes: table.volume_bytes(),
        })?;
        if src.tier == to {
            return Err(TierError::Protocol(format!(
                "block {block} is already on tier {to}"
            )));
        }
        let dst = table.reserve(to, block)?;
        Ok(Migration {
            id,
            block,
            src,
            dst,
            phase: Phase::Reserved,
        })
    }

    /// The last step done.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Whether requests to the block must wait (from reservation to switch).
    pub fn locks_block(&self) -> bool {
        self.phase < Phase::Switched
    }

    /// The next action, `None` once done.
    pub fn next_action(&self) -> Option<Action> {
        match self.phase {
            Phase::Reserved => Some(Action::Log(LogRecord::Begin {
                id: self.id,
                block: self.block,
                src: self.src,
                dst: self.dst,
            })),
            Phase::Begun => Some(Action::Copy {
                from: self.src,
                to: self.dst,
            }),
            Phase::Copied => Some(Action::Flush {
                tier: self.dst.tier,
            }),
            Phase::Flushed => Some(Action::Log(LogRecord::Switch { id: self.id })),
            Phase::Switched => Some(Action::Trim { loc: self.src }),
            Phase::Released => Some(Action::Log(LogRecord::Done { id: self.id })),
            Phase::Done => None,
        }
    }

    /// The caller performed [`next_action`](Self::next_action) durably:
    /// apply its in-memory effect and move on.
    pub fn advance(&mut self, table: &mut MappingTable) -> Result<Phase, TierError> {
        self.phase = match self.phase {
            Phase::Reserved => Phase::Begun,
            Phase::Begun => Phase::Copied,
            Phase::Copied => Phase::Flushed,
            Phase::Flushed => {
                table.switch(self.block, self.src, self.dst)?;
                Phase::Switched
            }
            Phase::Switched => {
                table.release(self.src);
                Phase::Released
            }
            Phase::Released => Phase::Done,
            Phase::Done => {
                return Err(TierError::Protocol(format!(
                    "migration {} is already done",
                    self.id
                )))
            }
        };
        Ok(self.phase)
    }
}

/// The steps of a [`Migration`] or an [`Exchange`], as the caller drives them.
pub trait Steps {
    /// The id in the log.
    fn id(&self) -> u64;
    /// The last step done.
    fn phase(&self) -> Phase;
    /// Whether requests to the blocks must wait (from reservation to switch).
    fn locks_block(&self) -> bool {
        self.phase() < Phase::Switched
    }
    /// The next action, `None` once done.
    fn next_action(&self) -> Option<Action>;
    /// The caller performed [`next_action`](Self::next_action) durably.
    fn advance(&mut self, table: &mut MappingTable) -> Result<Phase, TierError>;
    /// `(block, src, dst)` of every block moved.
    fn halves(&self) -> Vec<(BlockId, Loc, Loc)>;
}

impl Steps for Migration {
    fn id(&self) -> u64 {
        self.id
    }
    fn phase(&self) -> Phase {
        Migration::phase(self)
    }
    fn next_action(&self) -> Option<Action> {
        Migration::next_action(self)
    }
    fn advance(&mut self, table: &mut MappingTable) -> Result<Phase, TierError> {
        Migration::advance(self, table)
    }
    fn halves(&self) -> Vec<(BlockId, Loc, Loc)> {
        vec![(self.block, self.src, self.dst)]
    }
}

/// Two blocks on different tiers trade tiers in one transaction.
///
/// Each block is copied into a **free** slot of the other tier (the scratch
/// slot every tier of a table without homes keeps at rest, see
/// [`MappingTable::new_sum`]), never into the other block's slot. Why no
/// block is ever lost or duplicated, whatever the moment of a crash:
/// - Until the `Switch` record is durable, the durable mapping (checkpoint
///   plus log) puts both blocks at their sources. Nothing writes a source:
///   both blocks are locked from the reservation on (requests wait, those
///   in flight drained before `Begin`), and the copies only write the two
///   reserved destinations, which no block maps to. Recovery rolls both back
///   and trims the destinations: each block is where it was, intact.
/// - `Switch` is appended only after both copies were flushed, so once it is
///   durable both destinations hold the blocks' data durably; recovery maps
///   both blocks there and trims the sources. Each source is trimmed (and
///   freed) only after the switch, so it never holds the only copy when it
///   is discarded.
/// - The two halves share one id and one `Switch`: a torn log keeps both
///   `Begin`s and no `Switch` (roll back), or all of them (complete); a lone
///   first `Begin` rolls back too. Never one half without the other, so a
///   slot is never mapped by two blocks and each block is mapped exactly once.
///
/// Afterwards the two freed sources are the tiers' new scratch slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub id: u64,
    /// `(block, src, dst)` of each block; the tiers are swapped.
    pub halves: [(BlockId, Loc, Loc); 2],
    /// Actions done (0 to 10).
    step: u8,
}

impl Exchange {
    /// Start exchanging block `a` with block `b` (on another tier): reserves
    /// a free slot for each on the other's tier, or refuses with
    /// [`TierError::TierFull`] (nothing reserved).
    pub fn start(
        table: &mut MappingTable,
        id: u64,
        a: BlockId,
        b: BlockId,
    ) -> Result<Exchange, TierError> {
        let loc = |t: &MappingTable, blk: BlockId| {
            t.lookup(blk).ok_or(TierError::OutOfRange {
                offset: blk * u64::from(t.block_bytes()),
                len: u64::from(t.block_bytes()),
                volume_bytes: t.volume_bytes(),
            })
        };
        let (sa, sb) = (loc(table, a)?, loc(table, b)?);
        if sa.tier == sb.tier || a == b {
            return Err(TierError::Protocol(format!(
                "blocks {a} and {b} are both on tier {}",
                sa.tier
            )));
        }
        let da = table.reserve(sb.tier, a)?;
        let db = match table.reserve(sa.tier, b) {
            Ok(d) => d,
            Err(e) => {
                table.release(da);
                return Err(e);
            }
        };
        Ok(Exchange {
            id,
            halves: [(a, sa, da), (b, sb, db)],
            step: 0,
        })
    }
}

impl Steps for Exchange {
    fn id(&self) -> u64 {
        self.id
    }
    fn phase(&self) -> Phase {
        match self.step {
            0 | 1 => Phase::Reserved,
            2 | 3 => Phase::Begun,
            4 | 5 => Phase::Copied,
            6 => Phase::Flushed,
            7 | 8 => Phase::Switched,
            9 => Phase::Released,
            _ => Phase::Done,
        }
    }
    fn next_action(&self) -> Option<Action> {
        let h = |i: usize| self.halves[i];
        Some(match self.step {
            0 | 1 => {
                let (block, src, dst) = h(self.step as usize);
                Action::Log(LogRecord::Begin {
                    id: self.id,
                    block,
                    src,
                    dst,
                })
            }
            2 | 3 => {
                let (_, from, to) = h(self.step as usize - 2);
                Action::Copy { from, to }
            }
            4 | 5 => Action::Flush {
                tier: h(self.step as usize - 4).2.tier,
            },
            6 => Action::Log(LogRecord::Switch { id: self.id }),
            7 | 8 => Action::Trim {
                loc: h(self.step as usize - 7).1,
            },
            9 => Action::Log(LogRecord::Done { id: self.id }),
            _ => return None,
        })
    }
    fn advance(&mut self, table: &mut MappingTable) -> Result<Phase, TierError> {
        match self.step {
            6 => {
                // Both or neither: check both before switching either.
                for &(block, src, _) in &self.halves {
                    if table.lookup(block) != Some(src) {
                        return Err(TierError::Protocol(format!(
                            "block {block} of exchange {} moved",
                            self.id
                        )));
                    }
                }
                for &(block, src, dst) in &self.halves {
                    table.switch(block, src, dst)?;
                }
            }
            7 | 8 => table.release(self.halves[self.step as usize - 7].1),
            10 => {
                return Err(TierError::Protocol(format!(
                    "exchange {} is already done",
                    self.id
                )))
            }
            _ => {}
        }
        self.step += 1;
        Ok(self.phase())
    }
    fn halves(&self) -> Vec<(BlockId, Loc, Loc)> {
        self.halves.to_vec()
    }
}

/// What [`recover`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Migrations whose switch was durable: completed (mapping on `dst`).
    pub completed: Vec<u64>,
    /// Migrations without a durable switch: rolled back (mapping on `src`).
    pub rolled_back: Vec<u64>,
    /// Slots no block maps to any more that may hold old data: trim them.
    pub trim: Vec<Loc>,
    /// Valid log bytes (a torn tail after them is ignored).
    pub log_bytes: usize,
}

/// Rebuild the mapping after a crash from the last checkpoint and the log
/// (see the module docs). Idempotent: recovering twice gives the same table.
pub fn recover(checkpoint: &[u8], log: &[u8]) -> Result<(MappingTable, Recovery), TierError> {
    recover_table(MappingTable::from_checkpoint(checkpoint)?, log)
}

/// [`recover`] from a table already read from the checkpoint (read in
/// chunks: [`MappingTable::read_checkpoint`]).
pub fn recover_table(
    mut table: MappingTable,
    log: &[u8],
) -> Result<(MappingTable, Recovery), TierError> {
    let (records, log_bytes) = parse_log(log);
    let mut begun: Vec<(u64, BlockId, Loc, Loc)> = Vec::new();
    let mut switched: Vec<u64> = Vec::new();
    let mut done: Vec<u64> = Vec::new();
    for r in &records {
        match *r {
            LogRecord::Begin {
                id,
                block,
                src,
                dst,
            } => begun.push((id, block, src, dst)),
            LogRecord::Switch { id } => {
                // Every Begin of the id: one for a migration, two for an exchange.
                let halves: Vec<_> = begun.iter().filter(|m| m.0 == id).copied().collect();
                if halves.is_empty() {
                    return Err(TierError::Corrupt(format!(
                        "switch of migration {id} without its begin"
                    )));
                }
                // Replay in log order: a later migration of the same block
                // starts from this destination.
                for (_, block, _, dst) in halves {
                    table.force(block, dst)?;
                }
                switched.push(id);
            }
            LogRecord::Done { id } => done.push(id),
        }
    }
    table.rebuild_allocators()?;
    let mut rec = Recovery {
        log_bytes,
        ..Recovery::default()
    };
    let homes = table.has_homes();
    for &(id, block, src, dst) in &begun {
        let unmapped =
            |l: Loc| !homes || l.tier != table.capacity_tier() || table.lookup(block) != Some(l);
        if switched.contains(&id) {
            if !rec.completed.contains(&id) {
                rec.completed.push(id);
            }
            if !done.contains(&id) && table.lookup(block) != Some(src) && unmapped(src) {
                rec.trim.push(src);
            }
        } else {
            if !rec.rolled_back.contains(&id) {
                rec.rolled_back.push(id);
            }
            if table.lookup(block) != Some(dst) && unmapped(dst) {
                rec.trim.push(dst);
            }
        }
    }
    // A slot trimmed here must not be one a later migration mapped again.
    // (A home is only ever its own block's: it stays in the list.)
    rec.trim.retain(|l| {
        (homes && l.tier == table.capacity_tier())
            || !(0..table.blocks()).any(|b| table.lookup(b) == Some(*l))
    });
    Ok((table, rec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn records_round_trip_and_torn_tails_are_ignored() {
        let recs = [
            LogRecord::Begin {
                id: 7,
                block: 42,
                src: Loc { tier: 1, slot: 42 },
                dst: Loc { tier: 0, slot: 3 },
            },
            LogRecord::Switch { id: 7 },
            LogRecord::Done { id: 7 },
        ];
        let mut log = Vec::new();
        for r in &recs {
            assert_eq!(LogRecord::decode(&r.encode()), Some(*r));
            log.extend_from_slice(&r.encode());
        }
        assert_eq!(parse_log(&log), (recs.to_vec(), log.len()));
        for cut in 0..log.len() {
            let (got, n) = parse_log(&log[..cut]);
            assert_eq!(got.len(), cut / RECORD_BYTES);
            assert_eq!(n, got.len() * RECORD_BYTES);
        }
        let mut bad = log.clone();
        bad[RECORD_BYTES + 3] ^= 0x10;
        assert_eq!(parse_log(&bad).0.len(), 1);
    }

    /// A simulated volume: durable and volatile data per tier, a durable log
    /// and a durable checkpoint. Data values are version numbers per block.
    #[derive(Clone)]
    struct World {
        table: MappingTable,
        durable: HashMap<Loc, (BlockId, u64)>,
        volatile: HashMap<Loc, (BlockId, u64)>,
        log: Vec<u8>,
        checkpoint: Vec<u8>,
        /// Last acknowledged version of each block (what a reader must see).
        acked: Vec<u64>,
    }

    impl World {
        fn new(blocks: u64, fast: u64) -> World {
            World::with(MappingTable::new(4096, blocks, &[fast]).unwrap())
        }

        fn with(table: MappingTable) -> World {
            let blocks = table.blocks();
            let mut durable = HashMap::new();
            for b in 0..blocks {
                durable.insert(table.lookup(b).unwrap(), (b, 1));
            }
            World {
                checkpoint: table.checkpoint(),
                table,
                durable,
                volatile: HashMap::new(),
                log: Vec::new(),
                acked: vec![1; blocks as usize],
            }
        }

        /// A host write with FUA: durable at its current location.
        fn write(&mut self, b: BlockId) {
            self.acked[b as usize] += 1;
            let loc = self.table.lookup(b).unwrap();
            self.durable.insert(loc, (b, self.acked[b as usize]));
        }

        fn perform(&mut self, a: Action) {
            match a {
                Action::Log(r) => self.log.extend_from_slice(&r.encode()),
                Action::Copy { from, to } => {
                    let v = self
                        .volatile
                        .get(&from)
                        .or(self.durable.get(&from))
                        .copied();
                    self.volatile.insert(to, v.expect("source holds data"));
                }
                Action::Flush { .. } => {
                    let v: Vec<_> = self.volatile.drain().collect();
                    self.durable.extend(v);
                }
                Action::Trim { loc } => {
                    self.durable.remove(&loc);
                    self.volatile.remove(&loc);
                }
            }
        }

        /// Crash now (volatile data lost, the log cut to `log_len` bytes),
        /// recover, and check that every block reads its acknowledged version.
        fn crash_and_check(&self, log_len: usize, what: &str) -> Recovery {
            let (table, rec) = recover(&self.checkpoint, &self.log[..log_len]).unwrap();
            let mut durable = self.durable.clone();
            for l in &rec.trim {
                durable.remove(l);
            }
            let mut seen = HashMap::new();
            for b in 0..table.blocks() {
                let loc = table.lookup(b).unwrap();
                assert_eq!(
                    durable.get(&loc),
                    Some(&(b, self.acked[b as usize])),
                    "{what}: block {b} at {loc:?} after {rec:?}"
                );
                assert!(
                    seen.insert(loc, b).is_none(),
                    "{what}: {loc:?} mapped twice"
                );
            }
            let fast_used = table.residents(0).count() as u64;
            assert_eq!(
                table.free_slots(0),
                table.slots(0).unwrap() - fast_used,
                "{what}: leak"
            );
            // Recovery is idempotent.
            let (again, _) = recover(&self.checkpoint, &self.log[..log_len]).unwrap();
            assert_eq!(again, table, "{what}: second recovery differs");
            rec
        }
    }

    /// Run migrations step by step; crash after every step and at every
    /// byte of every log append; host writes hit unlocked blocks in between.
    fn run_scenario(moves: &[(BlockId, TierId)], checkpoint_after: Option<usize>) {
        let mut w = World::new(8, 2);
        let (mut completed, mut rolled_back, mut crashes) = (0, 0, 0);
        let mut tally = |r: Recovery| {
            crashes += 1;
            completed += usize::from(!r.completed.is_empty());
            rolled_back += usize::from(!r.rolled_back.is_empty());
        };
        let mut id = 0;
        for (i, &(block, to)) in moves.iter().enumerate() {
            id += 1;
            let mut m = Migration::start(&mut w.table, id, block, to).unwrap();
            w.crash_and_check(w.log.len(), &format!("move {i} reserved"));
            while let Some(a) = m.next_action() {
                if let Action::Log(_) = a {
                    let before = w.log.len();
                    let mut torn = w.clone();
                    torn.perform(a);
                    for cut in before..torn.log.len() {
                        tally(torn.crash_and_check(cut, &format!("move {i} torn {a:?} at {cut}")));
                    }
                }
                w.perform(a);
                m.advance(&mut w.table).unwrap();
                tally(w.crash_and_check(w.log.len(), &format!("move {i} after {a:?}")));
                if !m.locks_block() {
                    // The block is unlocked: a host write goes to its new home.
                    w.write(block);
                    w.crash_and_check(w.log.len(), &format!("move {i} write after {a:?}"));
                }
                // Other blocks are never locked.
                w.write((block + 1) % 8);
            }
            if checkpoint_after == Some(i) {
                w.checkpoint = w.table.checkpoint();
                w.log.clear();
                w.crash_and_check(0, &format!("checkpoint after move {i}"));
            }
        }
        // Both recovery paths ran: crashes before and after the commit point.
        assert!(
            crashes >= 3 * moves.len() * super::RECORD_BYTES,
            "{crashes}"
        );
        assert!(
            completed > 0 && rolled_back > 0,
            "{completed} {rolled_back}"
        );
    }

    #[test]
    fn crash_at_every_step_never_loses_or_stales_data() {
        // Promote two blocks, demote one, promote a third into the freed slot,
        // move a block back and forth.
        let moves = [(3, 0), (5, 0), (3, 1), (6, 0), (6, 1), (6, 0)];
        run_scenario(&moves, None);
        run_scenario(&moves, Some(2));
    }

    #[test]
    fn switch_before_flush_would_lose_data() {
        // Independent check of the ordering the state machine enforces: if
        // the switch were logged before the copy is flushed, a crash loses
        // the block. Built by hand, outside the state machine.
        let mut w = World::new(4, 1);
        let src = w.table.lookup(2).unwrap();
        let dst = w.table.reserve(0, 2).unwrap();
        w.perform(Action::Log(LogRecord::Begin {
            id: 1,
            block: 2,
            src,
            dst,
        }));
        w.perform(Action::Copy { from: src, to: dst });
        w.perform(Action::Log(LogRecord::Switch { id: 1 }));
        let (table, _) = recover(&w.checkpoint, &w.log).unwrap();
        let loc = table.lookup(2).unwrap();
        assert_eq!(loc, dst);
        assert_eq!(w.durable.get(&loc), None, "the unflushed copy is gone");
    }

    /// Exchanges on a table without homes: crash after every step and at
    /// every byte of every log append; both blocks always intact, each
    /// mapped exactly once, both recovery paths taken, never half an exchange.
    #[test]
    fn exchange_crash_at_every_step_completes_or_rolls_back_both_blocks() {
        // 3 + 5 slots, 6 blocks: blocks 0..4 on the slow tier, 4..6 fast.
        let mut w = World::with(MappingTable::new_sum(4096, 6, &[3, 5]).unwrap());
        assert_eq!(w.table.tier_of(0), Some(1));
        assert_eq!(w.table.tier_of(5), Some(0));
        let (mut completed, mut rolled_back) = (0, 0);
        let pairs = [(0, 4), (1, 5), (0, 2), (2, 4), (4, 3)];
        for (i, &(a, b)) in pairs.iter().enumerate() {
            let before = (w.table.lookup(a).unwrap(), w.table.lookup(b).unwrap());
            let mut x = Exchange::start(&mut w.table, 100 + i as u64, a, b).unwrap();
            assert_eq!(w.table.free_slots(0), 0, "both scratch slots reserved");
            assert_eq!(w.table.free_slots(1), 0);
            while let Some(act) = x.next_action() {
                if let Action::Log(_) = act {
                    let at = w.log.len();
                    let mut torn = w.clone();
                    torn.perform(act);
                    for cut in at..torn.log.len() {
                        let r = torn.crash_and_check(cut, &format!("pair {i} torn {act:?}"));
                        let (t, _) = recover(&torn.checkpoint, &torn.log[..cut]).unwrap();
                        let now = (t.lookup(a).unwrap(), t.lookup(b).unwrap());
                        let after = (x.halves[0].2, x.halves[1].2);
                        assert!(now == before || now == after, "half an exchange: {now:?}");
                        completed += r.completed.len();
                        rolled_back += r.rolled_back.len();
                    }
                }
                w.perform(act);
                x.advance(&mut w.table).unwrap();
                w.crash_and_check(w.log.len(), &format!("pair {i} after {act:?}"));
                if !x.locks_block() {
                    w.write(a);
                    w.write(b);
                }
            }
            assert_eq!(w.table.tier_of(a), Some(before.1.tier));
            assert_eq!(w.table.tier_of(b), Some(before.0.tier));
            assert_eq!((w.table.free_slots(0), w.table.free_slots(1)), (1, 1));
        }
        assert!(
            completed > 0 && rolled_back > 0,
            "{completed} {rolled_back}"
        );
        // Same-tier pairs are refused; a failed reservation leaks nothing.
        let fast: Vec<_> = w.table.residents(0).collect();
        assert!(Exchange::start(&mut w.table, 1, fast[0], fast[1]).is_err());
        let _hold = w.table.reserve(0, 9).unwrap();
        let (slow, fast) = (
            w.table.residents(1).next().unwrap(),
            w.table.residents(0).next().unwrap(),
        );
        assert_eq!(
            Exchange::start(&mut w.table, 2, slow, fast).unwrap_err(),
            TierError::TierFull(0)
        );
        assert_eq!(w.table.free_slots(1), 1);
    }

    #[test]
    fn migration_to_the_same_tier_or_a_full_tier_is_refused() {
        let mut t = MappingTable::new(4096, 4, &[1]).unwrap();
        assert!(Migration::start(&mut t, 1, 0, 1).is_err());
        let _m = Migration::start(&mut t, 1, 0, 0).unwrap();
        assert_eq!(
            Migration::start(&mut t, 2, 1, 0).unwrap_err(),
            TierError::TierFull(0)
        );
    }
}
