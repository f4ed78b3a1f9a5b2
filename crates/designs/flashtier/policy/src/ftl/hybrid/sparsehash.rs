//! The SSC device's block map in the flash model, with its memory measured:
//! a model of the firmware's table as the paper sizes it (the device memory
//! and the sparse-versus-dense comparison of Table VI), not the cache's map
//! (that is [`crate::sparse::SparseMap`], the one map the live store keeps
//! and `sim --mode ssc --ftl log` runs).
//!
//! [`SparseHash`] follows Google's sparse hash map as FlashTier describes it
//! (Section 4.1): `t` buckets in groups of `M = 32`; each group stores only
//! its occupied buckets in a packed array plus a 32-bit occupancy bitmap, and
//! a bucket's slot is the popcount of the bitmap below it. Open addressing
//! with quadratic probing; the table doubles past a 0.8 load and removals
//! leave tombstones (counted, reclaimed on resize). [`DenseMap`] is a linear
//! table indexed by logical address, as a plain SSD keeps.

use tiercache_block::lazy::Paged;

const M: usize = 32;
const EMPTY_VAL: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
struct Group {
    bitmap: u32,
    keys: Vec<u64>,
    vals: Vec<u32>,
}

impl Group {
    fn slot(&self, i: usize) -> usize {
        (self.bitmap & ((1u32 << i) - 1)).count_ones() as usize
    }
    fn has(&self, i: usize) -> bool {
        self.bitmap & (1 << i) != 0
    }
}

/// A sparse hash map from `u64` keys to `u32` values whose memory grows with
/// the number of entries, not with the key range.
#[derive(Clone, Debug)]
pub struct SparseHash {
    groups: Vec<Group>,
    buckets: usize,
    len: usize,
    /// Occupied buckets, live or tombstone.
    used: usize,
}

impl Default for SparseHash {
    fn default() -> Self {
        Self::new()
    }
}

fn hash(k: u64) -> u64 {
    // splitmix64 finaliser: full avalanche, so clustered block numbers spread.
    let mut z = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SparseHash {
    /// An empty map.
    pub fn new() -> Self {
        Self::with_buckets(M)
    }

    fn with_buckets(buckets: usize) -> Self {
        SparseHash {
            groups: vec![Group::default(); buckets / M],
            buckets,
            len: 0,
            used: 0,
        }
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Find the bucket of `k`: Ok(bucket) when present, Err(first free or
    /// tombstone bucket on the probe path) when absent.
    fn find(&self, k: u64) -> Result<usize, usize> {
        let mask = self.buckets - 1;
        let mut b = hash(k) as usize & mask;
        let mut tomb = None;
        for step in 1..=self.buckets {
            let g = &self.groups[b / M];
            let i = b % M;
            if !g.has(i) {
                return Err(tomb.unwrap_or(b));
            }
            let s = g.slot(i);
            if g.vals[s] == EMPTY_VAL {
                tomb.get_or_insert(b);
            } else if g.keys[s] == k {
                return Ok(b);
            }
            b = (b + step) & mask;
        }
        Err(tomb.expect("a full table always has a tombstone or resizes first"))
    }

    /// Value for `k`.
    pub fn get(&self, k: u64) -> Option<u32> {
        self.find(k).ok().map(|b| {
            let g = &self.groups[b / M];
            g.vals[g.slot(b % M)]
        })
    }

    /// Insert or overwrite; returns the previous value.
    pub fn insert(&mut self, k: u64, v: u32) -> Option<u32> {
        assert!(v != EMPTY_VAL, "value u32::MAX is reserved");
        match self.find(k) {
            Ok(b) => {
                let g = &mut self.groups[b / M];
                let s = g.slot(b % M);
                Some(std::mem::replace(&mut g.vals[s], v))
            }
            Err(b) => {
                if (self.used + 1) * 5 > self.buckets * 4 {
                    self.resize();
                    return self.insert(k, v);
                }
                let g = &mut self.groups[b / M];
                let i = b % M;
                let s = g.slot(i);
                if g.has(i) {
                    // Reuse a tombstone.
                    g.keys[s] = k;
                    g.vals[s] = v;
                } else {
                    g.bitmap |= 1 << i;
                    g.keys.insert(s, k);
                    g.vals.insert(s, v);
                    g.keys.shrink_to_fit();
                    g.vals.shrink_to_fit();
                    self.used += 1;
                }
                self.len += 1;
                None
            }
        }
    }

    /// Remove `k`; returns its value.
    pub fn remove(&mut self, k: u64) -> Option<u32> {
        let b = self.find(k).ok()?;
        let g = &mut self.groups[b / M];
        let s = g.slot(b % M);
        self.len -= 1;
        Some(std::mem::replace(&mut g.vals[s], EMPTY_VAL))
    }

    fn resize(&mut self) {
        // Grow when live entries need it; otherwise rebuild at the same size
        // to drop tombstones.
        let buckets = if (self.len + 1) * 2 > self.buckets {
            self.buckets * 2
        } else {
            self.buckets
        };
        let mut n = Self::with_buckets(buckets);
        for g in std::mem::take(&mut self.groups) {
            for (k, v) in g.keys.into_iter().zip(g.vals) {
                if v != EMPTY_VAL {
                    n.insert(k, v);
                }
            }
        }
        *self = n;
    }

    /// Bytes of memory held: the group headers (bitmap and two array
    /// pointers with lengths) plus the packed key and value arrays.
    pub fn memory_bytes(&self) -> u64 {
        let header = std::mem::size_of::<Group>() as u64;
        let mut b = std::mem::size_of::<Self>() as u64 + header * self.groups.len() as u64;
        for g in &self.groups {
            b += (g.keys.capacity() * 8 + g.vals.capacity() * 4) as u64;
        }
        b
    }
}

/// A linear table indexed by logical address (a plain SSD's map). The
/// modelled device holds it whole; the simulation allocates only the pages of
/// it a trace writes.
#[derive(Clone, Debug)]
pub struct DenseMap {
    vals: Paged<u32>,
    len: usize,
}

impl DenseMap {
    /// A table for keys `0..range`.
    pub fn new(range: u64) -> Self {
        DenseMap {
            vals: Paged::new(range as usize, EMPTY_VAL),
            len: 0,
        }
    }

    /// Value for `k` (None outside the range).
    pub fn get(&self, k: u64) -> Option<u32> {
        let k = usize::try_from(k).ok().filter(|&k| k < self.vals.len())?;
        Some(self.vals[k]).filter(|&v| v != EMPTY_VAL)
    }

    /// Insert or overwrite; keys outside the range are a caller bug.
    pub fn insert(&mut self, k: u64, v: u32) -> Option<u32> {
        let old = std::mem::replace(&mut self.vals[k as usize], v);
        if old == EMPTY_VAL {
            self.len += 1;
            None
        } else {
            Some(old)
        }
    }

    /// Remove `k`.
    pub fn remove(&mut self, k: u64) -> Option<u32> {
        let k = usize::try_from(k).ok().filter(|&k| k < self.vals.len())?;
        let old = std::mem::replace(&mut self.vals[k], EMPTY_VAL);
        (old != EMPTY_VAL).then(|| {
            self.len -= 1;
            old
        })
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the modelled device holds: 4 per address of the range, plus a
    /// plain table's header (however little of it the simulation allocated).
    pub fn memory_bytes(&self) -> u64 {
        let header = std::mem::size_of::<Vec<u32>>() + std::mem::size_of::<usize>();
        (self.vals.len() * 4 + header) as u64
    }
}

/// A block map that is either dense (SSD) or sparse (SSC).
#[derive(Clone, Debug)]
pub enum BlockMap {
    Dense(DenseMap),
    Sparse(SparseHash),
}

impl BlockMap {
    /// Value for `k`.
    pub fn get(&self, k: u64) -> Option<u32> {
        match self {
            BlockMap::Dense(m) => m.get(k),
            BlockMap::Sparse(m) => m.get(k),
        }
    }
    /// Insert or overwrite.
    pub fn insert(&mut self, k: u64, v: u32) -> Option<u32> {
        match self {
            BlockMap::Dense(m) => m.insert(k, v),
            BlockMap::Sparse(m) => m.insert(k, v),
        }
    }
    /// Remove `k`.
    pub fn remove(&mut self, k: u64) -> Option<u32> {
        match self {
            BlockMap::Dense(m) => m.remove(k),
            BlockMap::Sparse(m) => m.remove(k),
        }
    }
    /// Entries.
    pub fn len(&self) -> usize {
        match self {
            BlockMap::Dense(m) => m.len(),
            BlockMap::Sparse(m) => m.len(),
        }
    }
    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes held.
    pub fn memory_bytes(&self) -> u64 {
        match self {
            BlockMap::Dense(m) => m.memory_bytes(),
            BlockMap::Sparse(m) => m.memory_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn sparse_map_matches_std_hashmap() {
        let mut s = SparseHash::new();
        let mut r: HashMap<u64, u32> = HashMap::new();
        let mut x = 12345u64;
        for i in 0..200_000u32 {
            x = hash(x);
            let k = x % 50_000 * 4099;
            match x % 3 {
                0 | 1 => assert_eq!(s.insert(k, i), r.insert(k, i)),
                _ => assert_eq!(s.remove(k), r.remove(&k)),
            }
        }
        assert_eq!(s.len(), r.len());
        for (k, v) in &r {
            assert_eq!(s.get(*k), Some(*v));
        }
        assert_eq!(s.get(7), None);
    }

    #[test]
    fn sparse_map_memory_grows_with_entries_not_range() {
        let mut s = SparseHash::new();
        // 100k keys spread over a 2^40 range.
        for i in 0..100_000u64 {
            s.insert(i * 10_000_019, i as u32);
        }
        let per = s.memory_bytes() as f64 / 1e5;
        // 12 B of key+value plus the group overhead amortised over >= 12.8
        // entries per group (load in [0.4, 0.8]): well under 20 B.
        assert!(per > 12.0 && per < 20.0, "{per} B/entry");
        let d = DenseMap::new(1 << 20);
        // 4 B per address plus a plain table's header (a Vec and a length),
        // however little of it the simulation allocated.
        let header = std::mem::size_of::<Vec<u32>>() + std::mem::size_of::<usize>();
        assert_eq!(d.memory_bytes(), (1 << 22) + header as u64);
    }
}
