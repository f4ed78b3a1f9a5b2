//! The dispatcher (Algorithm 1, lines 1-9): split a request at block
//! boundaries, look each part up in the mapping table and route it to its
//! tier; a request completes when all its parts have; parts on blocks under
//! migration wait until the block is unlocked.
//!
//! The simulator dispatches with [`Dispatcher::dispatch`] (a part on a
//! locked block is marked and waits for the unlock in virtual time). The
//! live volume, with requests running concurrently, uses claims: a request
//! [`registers`](Dispatcher::register) byte-range claims on its blocks
//! (refused while a block is under migration), runs once no earlier
//! overlapping claim where one side writes is left
//! ([`ready`](Dispatcher::ready)), is [`routed`](Dispatcher::route) and
//! [`released`](Dispatcher::release) after its I/O; a migration
//! [`locks`](Dispatcher::lock) its block and waits until it is
//! [`drained`](Dispatcher::drained). Both paths route with the same lookup.

use crate::mapping::{BlockId, Loc, MappingTable, TierError};
use rustc_hash::{FxHashMap, FxHashSet};

/// One part of a request: the piece inside one block, routed to a tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubRequest {
    pub block: BlockId,
    /// Byte offset of the part in the volume.
    pub offset: u64,
    pub len: u32,
    /// Where the block lives.
    pub loc: Loc,
    /// Byte offset of the part on its tier's device.
    pub tier_offset: u64,
    /// The block is under migration: the part must wait for its unlock.
    pub locked: bool,
}

/// Split `[offset, offset + len)` at multiples of `block_bytes` into
/// `(block, part offset, part length)`.
pub fn split(offset: u64, len: u64, block_bytes: u32) -> impl Iterator<Item = (BlockId, u64, u32)> {
    let bs = u64::from(block_bytes.max(1));
    let end = offset.saturating_add(len);
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let block = at / bs;
        let stop = ((block + 1) * bs).min(end);
        let part = (block, at, (stop - at) as u32);
        at = stop;
        Some(part)
    })
}

/// Request id handed out by [`Dispatcher::dispatch`].
pub type ReqId = u64;

/// One registered request's claim on a byte range of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Claim {
    /// The request (ids grow in arrival order).
    id: ReqId,
    start: u32,
    end: u32,
    /// A write or trim: excludes every overlapping claim.
    write: bool,
}

impl Claim {
    fn conflicts(&self, o: &Claim) -> bool {
        (self.write || o.write) && self.start < o.end && o.start < self.end
    }
}

/// Routes requests and tracks their completion.
#[derive(Debug, Default)]
pub struct Dispatcher {
    locked: FxHashSet<BlockId>,
    pending: FxHashMap<ReqId, u32>,
    next: ReqId,
    /// Claims of registered requests, per block.
    claims: FxHashMap<BlockId, Vec<Claim>>,
}

/// `[offset, offset + len)` within `table`'s volume and not empty.
fn check_range(table: &MappingTable, offset: u64, len: u64) -> Result<(), TierError> {
    if len == 0 {
        return Err(TierError::Empty(offset));
    }
    let volume_bytes = table.volume_bytes();
    if offset
        .checked_add(len)
        .filter(|&e| e <= volume_bytes)
        .is_none()
    {
        return Err(TierError::OutOfRange {
            offset,
            len,
            volume_bytes,
        });
    }
    Ok(())
}

/// The part of `[at, at + plen)` (inside `block`) on its tier.
fn sub_request(
    table: &MappingTable,
    block: BlockId,
    at: u64,
    plen: u32,
    locked: bool,
) -> SubRequest {
    let bs = table.block_bytes();
    let loc = table
        .lookup(block)
        .expect("checked against the volume size");
    SubRequest {
        block,
        offset: at,
        len: plen,
        loc,
        tier_offset: loc.byte_offset(bs) + at % u64::from(bs),
        locked,
    }
}

impl Dispatcher {
    /// A dispatcher with no locked block and no request in flight.
    pub fn new() -> Self {
        Self::default()
    }

    /// Split and route one request; its parts are appended to `out` in
    /// address order. Returns the request id to pass to
    /// [`complete_part`](Self::complete_part).
    pub fn dispatch(
        &mut self,
        table: &MappingTable,
        offset: u64,
        len: u64,
        out: &mut Vec<SubRequest>,
    ) -> Result<ReqId, TierError> {
        check_range(table, offset, len)?;
        let mut parts = 0u32;
        for (block, at, plen) in split(offset, len, table.block_bytes()) {
            out.push(sub_request(
                table,
                block,
                at,
                plen,
                self.locked.contains(&block),
            ));
            parts += 1;
        }
        let id = self.next;
        self.next += 1;
        self.pending.insert(id, parts);
        Ok(id)
    }

    /// One part of request `id` completed; `true` when it was the last one.
    pub fn complete_part(&mut self, id: ReqId) -> Result<bool, TierError> {
        let left = self
            .pending
            .get_mut(&id)
            .ok_or_else(|| TierError::Protocol(format!("request {id} is not in flight")))?;
        *left -= 1;
        if *left == 0 {
            self.pending.remove(&id);
            return Ok(true);
        }
        Ok(false)
    }

    /// Requests still in flight.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// The migration planner locks a block before moving it.
    pub fn lock(&mut self, block: BlockId) {
        self.locked.insert(block);
    }

    /// Unlock after the mapping switched (or the migration was abandoned);
    /// parts and registrations waiting on it may go.
    pub fn unlock(&mut self, block: BlockId) {
        self.locked.remove(&block);
    }

    /// Register request `[offset, offset + len)` (`write`: a write or trim)
    /// with a claim on each block it touches; `Ok(None)` while any of its
    /// blocks is under migration (try again after an unlock). Returns the
    /// request's id.
    pub fn register(
        &mut self,
        table: &MappingTable,
        offset: u64,
        len: u64,
        write: bool,
    ) -> Result<Option<ReqId>, TierError> {
        check_range(table, offset, len)?;
        let bs = table.block_bytes();
        if split(offset, len, bs).any(|(b, _, _)| self.locked.contains(&b)) {
            return Ok(None);
        }
        let id = self.next;
        self.next += 1;
        for (block, at, plen) in split(offset, len, bs) {
            let start = (at % u64::from(bs)) as u32;
            self.claims.entry(block).or_default().push(Claim {
                id,
                start,
                end: start + plen,
                write,
            });
        }
        Ok(Some(id))
    }

    /// Whether registered request `id` (`[offset, offset + len)`) may run:
    /// no earlier claim that overlaps one of its claims where either writes.
    /// Overlapping requests thus run in arrival order when one writes, so a
    /// read never sees half a write and writes land in order.
    pub fn ready(&self, id: ReqId, offset: u64, len: u64, block_bytes: u32) -> bool {
        split(offset, len, block_bytes).all(|(block, _, _)| {
            let Some(cs) = self.claims.get(&block) else {
                return true;
            };
            let Some(mine) = cs.iter().find(|c| c.id == id) else {
                return true;
            };
            !cs.iter().any(|c| c.id < id && c.conflicts(mine))
        })
    }

    /// Route a registered, ready request: its parts, in address order. (A
    /// block locked after the request registered still routes to its
    /// current location: the migration copies only once such claims drain.)
    pub fn route(&self, table: &MappingTable, offset: u64, len: u64, out: &mut Vec<SubRequest>) {
        for (block, at, plen) in split(offset, len, table.block_bytes()) {
            out.push(sub_request(table, block, at, plen, false));
        }
    }

    /// Drop request `id`'s claims (its I/O finished or it was abandoned).
    /// Returns whether a block under migration has no claim left (the
    /// migration waiting for it may go).
    pub fn release(&mut self, id: ReqId, offset: u64, len: u64, block_bytes: u32) -> bool {
        let mut drained = false;
        for (block, _, _) in split(offset, len, block_bytes) {
            if let Some(cs) = self.claims.get_mut(&block) {
                cs.retain(|c| c.id != id);
                if cs.is_empty() {
                    self.claims.remove(&block);
                    drained |= self.locked.contains(&block);
                }
            }
        }
        drained
    }

    /// Whether no registered request holds a claim on `block`.
    pub fn drained(&self, block: BlockId) -> bool {
        !self.claims.contains_key(&block)
    }

    /// Blocks under migration.
    pub fn locked_blocks(&self) -> usize {
        self.locked.len()
    }

    /// Whether `block` is under migration.
    pub fn is_locked(&self, block: BlockId) -> bool {
        self.locked.contains(&block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_cuts_exactly_at_block_boundaries() {
        // 4 KiB blocks; a 10 KiB request starting 1 KiB before a boundary.
        let parts: Vec<_> = split(3072, 10240, 4096).collect();
        assert_eq!(
            parts,
            vec![
                (0, 3072, 1024),
                (1, 4096, 4096),
                (2, 8192, 4096),
                (3, 12288, 1024)
            ]
        );
        // Aligned single block, and a request inside one block.
        assert_eq!(
            split(8192, 4096, 4096).collect::<Vec<_>>(),
            vec![(2, 8192, 4096)]
        );
        assert_eq!(
            split(100, 200, 4096).collect::<Vec<_>>(),
            vec![(0, 100, 200)]
        );
        assert_eq!(split(0, 0, 4096).count(), 0);
    }

    #[test]
    fn split_parts_cover_the_request_without_gaps() {
        for (off, len, bs) in [
            (0u64, 1u64, 512u32),
            (511, 2, 512),
            (12345, 99999, 4096),
            (7, 1 << 22, 1 << 20),
        ] {
            let parts: Vec<_> = split(off, len, bs).collect();
            let mut at = off;
            for &(b, o, l) in &parts {
                assert_eq!(o, at);
                assert_eq!(o / u64::from(bs), b);
                assert_eq!(
                    (o + u64::from(l) - 1) / u64::from(bs),
                    b,
                    "part crosses a boundary"
                );
                at += u64::from(l);
            }
            assert_eq!(at, off + len);
        }
    }

    #[test]
    fn parts_are_routed_to_their_tier_and_complete_together() {
        let mut t = MappingTable::new(4096, 8, &[4]).unwrap();
        let h = t.lookup(1).unwrap();
        let d = t.reserve(0, 1).unwrap();
        t.switch(1, h, d).unwrap();
        let mut d = Dispatcher::new();
        d.lock(2);
        let mut out = Vec::new();
        let id = d.dispatch(&t, 2048, 8192, &mut out).unwrap();
        let tiers: Vec<_> = out
            .iter()
            .map(|s| (s.block, s.loc.tier, s.tier_offset, s.locked))
            .collect();
        assert_eq!(
            tiers,
            vec![(0, 1, 2048, false), (1, 0, 0, false), (2, 1, 8192, true)]
        );
        assert!(!d.complete_part(id).unwrap());
        assert!(!d.complete_part(id).unwrap());
        assert!(d.complete_part(id).unwrap());
        assert_eq!(d.in_flight(), 0);
        assert!(d.complete_part(id).is_err());
        d.unlock(2);
        assert!(!d.is_locked(2));
    }

    #[test]
    fn claims_order_overlapping_writes_and_drain_for_migrations() {
        let t = MappingTable::new(4096, 8, &[4]).unwrap();
        let mut d = Dispatcher::new();
        // A write of block 0's first half, then a read of all of block 0,
        // then a read of its second half, then a read of block 1.
        let w = d.register(&t, 0, 2048, true).unwrap().unwrap();
        let r = d.register(&t, 0, 4096, false).unwrap().unwrap();
        let r2 = d.register(&t, 2048, 2048, false).unwrap().unwrap();
        assert!(d.ready(w, 0, 2048, 4096));
        assert!(
            !d.ready(r, 0, 4096, 4096),
            "the read waits for the earlier write"
        );
        assert!(d.ready(r2, 2048, 2048, 4096), "no overlap with the write");
        let mut out = Vec::new();
        d.route(&t, 0, 2048, &mut out);
        assert_eq!(
            (out[0].block, out[0].loc.tier, out[0].tier_offset),
            (0, 1, 0)
        );
        // A migration locks block 0: new requests wait, it waits for the claims.
        d.lock(0);
        assert_eq!(d.register(&t, 100, 10, false).unwrap(), None);
        assert!(!d.drained(0));
        assert!(!d.release(w, 0, 2048, 4096));
        assert!(d.ready(r, 0, 4096, 4096));
        assert!(!d.release(r2, 2048, 2048, 4096));
        assert!(
            d.release(r, 0, 4096, 4096),
            "the last claim drains the block"
        );
        assert!(d.drained(0));
        d.unlock(0);
        assert!(d.register(&t, 100, 10, false).unwrap().is_some());
        assert!(d.register(&t, 0, 0, false).is_err());
    }

    #[test]
    fn bad_requests_are_refused() {
        let t = MappingTable::new(4096, 2, &[1]).unwrap();
        let mut d = Dispatcher::new();
        let mut out = Vec::new();
        assert_eq!(d.dispatch(&t, 0, 0, &mut out), Err(TierError::Empty(0)));
        assert!(matches!(
            d.dispatch(&t, 4096, 4097, &mut out),
            Err(TierError::OutOfRange { .. })
        ));
        assert!(out.is_empty());
    }
}
