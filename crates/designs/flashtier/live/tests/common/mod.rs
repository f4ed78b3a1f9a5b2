//! Helpers shared by the log-structured cache's integration tests: a seeded
//! generator and a block pattern whose every 512-byte sector names its block
//! and version, so torn and misdirected data are recognized sector by sector.

#![allow(dead_code)]

use tiercache_flashtier_live::BLOCK;

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Block `b` at version `v`: every 512-byte sector says which, the rest
/// depends on both (a torn block is recognized sector by sector).
pub fn block(b: u64, v: u64) -> Vec<u8> {
    let mut d = vec![0u8; BLOCK as usize];
    for (s, sec) in d.chunks_mut(512).enumerate() {
        sec[..8].copy_from_slice(&b.to_le_bytes());
        sec[8..16].copy_from_slice(&v.to_le_bytes());
        for (i, x) in sec[16..].iter_mut().enumerate() {
            *x = (b
                .wrapping_mul(31)
                .wrapping_add(v.wrapping_mul(7))
                .wrapping_add((s * 64 + i / 8) as u64)) as u8;
        }
    }
    d
}

/// The version of each sector of block `b`.
pub fn sectors(b: u64, d: &[u8]) -> Result<Vec<u64>, String> {
    d.chunks(512)
        .enumerate()
        .map(|(s, sec)| {
            let v = u64::from_le_bytes(sec[8..16].try_into().unwrap());
            if sec != &block(b, v)[s * 512..(s + 1) * 512] {
                return Err(format!(
                    "block {b} sector {s}: garbage or misdirected data (header {:?})",
                    &sec[..16]
                ));
            }
            Ok(v)
        })
        .collect()
}
