//! The dispatcher (Algorithm 1, lines 1-9): split a request at block
//! boundaries, look each part up in the mapping table and route it to its
//! tier; a request completes when all its parts have; parts on blocks under
//! migration wait until the block is unlocked.

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

/// Routes requests and tracks their completion.
#[derive(Debug, Default)]
pub struct Dispatcher {
    locked: FxHashSet<BlockId>,
    pending: FxHashMap<ReqId, u32>,
    next: ReqId,
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
        let bs = table.block_bytes();
        let mut parts = 0u32;
        for (block, at, plen) in split(offset, len, bs) {
            let loc = table
                .lookup(block)
                .expect("checked against the volume size");
            out.push(SubRequest {
                block,
                offset: at,
                len: plen,
                loc,
                tier_offset: loc.byte_offset(bs) + at % u64::from(bs),
                locked: self.locked.contains(&block),
            });
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

    /// Unlock after the mapping switched; parts waiting on it may go.
    pub fn unlock(&mut self, block: BlockId) {
        self.locked.remove(&block);
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
