//! Compressibility models for simulating the compressed log-structured
//! layout (`format --layout log-structured --compress`, the Azor thesis's
//! FlaZ direction): how many 512-byte units each cached 4 KiB block takes.
//!
//! A model is a distribution over 1 to 8 units (8 = stored raw). A block's
//! size is a deterministic sample of it: a hash of the block number picks a
//! point in the cumulative distribution, so a block always has the same size
//! in a run, across runs and across machines.

use serde::Serialize;

/// Allocation unit of records (as the live layout's `compress::UNIT`).
pub const UNIT: u32 = 512;
/// Units of a block stored raw (4 KiB).
pub const RAW_UNITS: u32 = 8;
/// Slots per 4 KiB of data area in a compressed layout (as the live
/// layout's `compress::SLOT_RATIO`): at most this many more blocks fit.
pub const SLOT_RATIO: u32 = 4;

/// A distribution of stored block sizes: `fractions[u - 1]` is the share of
/// blocks stored in `u` units.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeModel {
    fractions: [f64; RAW_UNITS as usize],
    /// Cumulative shares scaled to 2^53, for sampling.
    #[serde(skip)]
    cum: [u64; RAW_UNITS as usize],
}

impl SizeModel {
    /// A model of the shares of blocks of 1..=8 units. The shares must be
    /// finite, non-negative, and sum to 1 (within 1e-6).
    pub fn new(fractions: [f64; RAW_UNITS as usize]) -> Result<SizeModel, String> {
        if let Some(f) = fractions.iter().find(|f| !f.is_finite() || **f < 0.0) {
            return Err(format!(
                "fraction {f} is not a share (allowed: 0 to 1, summing to 1)"
            ));
        }
        let sum: f64 = fractions.iter().sum();
        if (sum - 1.0).abs() > 1e-6 {
            return Err(format!(
                "the fractions sum to {sum} (they must sum to 1: every block has one size)"
            ));
        }
        let scale = (1u64 << 53) as f64;
        let mut cum = [0u64; RAW_UNITS as usize];
        let mut acc = 0.0;
        for (i, f) in fractions.iter().enumerate() {
            acc += f / sum;
            cum[i] = (acc * scale).round() as u64;
        }
        // The last non-empty size catches rounding at the top.
        let last = fractions.iter().rposition(|f| *f > 0.0).expect("sum is 1");
        for c in &mut cum[last..] {
            *c = 1u64 << 53;
        }
        Ok(SizeModel { fractions, cum })
    }

    /// Every block stored in `units` units (1..=8).
    pub fn constant(units: u32) -> Result<SizeModel, String> {
        if !(1..=RAW_UNITS).contains(&units) {
            return Err(format!("{units} units (allowed: 1 to {RAW_UNITS})"));
        }
        let mut f = [0.0; RAW_UNITS as usize];
        f[units as usize - 1] = 1.0;
        SizeModel::new(f)
    }

    /// From the command line's inline form `UNITS:FRACTION,...`, e.g.
    /// `1:0.2,2:0.5,8:0.3` (units 1 to 8, each at most once).
    pub fn parse(s: &str) -> Result<SizeModel, String> {
        let mut f = [0.0; RAW_UNITS as usize];
        let mut seen = [false; RAW_UNITS as usize];
        let form = "expected UNITS:FRACTION pairs separated by commas, e.g. 1:0.2,2:0.5,8:0.3 (UNITS 1 to 8 of 512 bytes, 8 = raw)";
        if s.trim().is_empty() {
            return Err(format!("empty distribution ({form})"));
        }
        for part in s.split(',') {
            let (u, x) = part
                .trim()
                .split_once(':')
                .ok_or_else(|| format!("'{part}': {form}"))?;
            let u: u32 = u
                .trim()
                .parse()
                .ok()
                .filter(|u| (1..=RAW_UNITS).contains(u))
                .ok_or_else(|| format!("'{part}': units '{u}' (allowed: 1 to 8)"))?;
            let x: f64 = x
                .trim()
                .parse()
                .map_err(|_| format!("'{part}': fraction '{x}' is not a number"))?;
            if std::mem::replace(&mut seen[u as usize - 1], true) {
                return Err(format!("'{part}': {u} units given twice"));
            }
            f[u as usize - 1] = x;
        }
        SizeModel::new(f)
    }

    /// From a model file's JSON (what `trace compressibility --out` writes):
    /// its `distribution` object maps units ("1".."8") to fractions.
    pub fn from_json(v: &serde_json::Value) -> Result<SizeModel, String> {
        let d = v
            .get("distribution")
            .and_then(|d| d.as_object())
            .ok_or("no \"distribution\" object (units to fractions, as `tiercache trace compressibility --out` writes)")?;
        let mut f = [0.0; RAW_UNITS as usize];
        for (k, x) in d {
            let u: u32 = k
                .parse()
                .ok()
                .filter(|u| (1..=RAW_UNITS).contains(u))
                .ok_or_else(|| format!("distribution key '{k}' (allowed: 1 to 8)"))?;
            f[u as usize - 1] = x
                .as_f64()
                .ok_or_else(|| format!("distribution[\"{k}\"] is not a number"))?;
        }
        SizeModel::new(f)
    }

    /// The shares of blocks of 1..=8 units.
    pub fn fractions(&self) -> [f64; RAW_UNITS as usize] {
        self.fractions
    }

    /// Mean units per block.
    pub fn mean_units(&self) -> f64 {
        self.fractions
            .iter()
            .enumerate()
            .map(|(i, f)| (i + 1) as f64 * f)
            .sum()
    }

    /// Units block `lba` is stored in: the same for a block every time.
    pub fn units(&self, lba: u64) -> u32 {
        let x = splitmix64(lba) >> 11; // uniform in [0, 2^53)
        self.cum
            .iter()
            .position(|&c| x < c)
            .map_or(RAW_UNITS, |i| i as u32 + 1)
    }

    /// The inline form, as [`SizeModel::parse`] reads it.
    pub fn spec(&self) -> String {
        self.fractions
            .iter()
            .enumerate()
            .filter(|(_, f)| **f > 0.0)
            .map(|(i, f)| format!("{}:{f}", i + 1))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// SplitMix64's finalizer: a well-mixed hash of a block number.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Blocks of one summary copy and slots of a compressed layout's segment of
/// `seg_bytes`: the live layout's rule (`Geometry::compressed`): the plain
/// summary grown until it holds 8 bytes for each of [`SLOT_RATIO`] slots
/// per 4 KiB of data area. Returns (slots, units of data area).
pub fn compressed_segment(seg_bytes: u64) -> Result<(u32, u32), String> {
    use crate::logstore::{data_blocks, summary_blocks, SUMMARY_HEADER};
    data_blocks(seg_bytes)?;
    let seg_blocks = (seg_bytes / 4096) as u32;
    let mut s = summary_blocks(seg_blocks);
    while SUMMARY_HEADER + 8 * u64::from(SLOT_RATIO) * u64::from(seg_blocks - 2 * s)
        > u64::from(s) * 4096
    {
        s += 1;
    }
    let phys = seg_blocks - 2 * s;
    Ok((phys * SLOT_RATIO, phys * RAW_UNITS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_errors() {
        let m = SizeModel::parse("1:0.2, 2:0.5,8:0.3").unwrap();
        assert_eq!(m.fractions(), [0.2, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3]);
        assert!((m.mean_units() - (0.2 + 1.0 + 2.4)).abs() < 1e-12);
        assert_eq!(SizeModel::parse(&m.spec()).unwrap(), m);
        for (bad, why) in [
            ("", "empty"),
            ("1:0.5", "sum to 0.5"),
            ("1:0.5,1:0.5", "twice"),
            ("9:1", "allowed: 1 to 8"),
            ("0:1", "allowed: 1 to 8"),
            ("2-1", "UNITS:FRACTION"),
            ("2:x", "not a number"),
            ("1:-0.5,2:1.5", "not a share"),
            ("1:NaN", "not a share"),
        ] {
            let e = SizeModel::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_are_deterministic_and_follow_the_distribution() {
        let m = SizeModel::parse("1:0.25,4:0.25,8:0.5").unwrap();
        let again = SizeModel::parse("1:0.25,4:0.25,8:0.5").unwrap();
        let mut n = [0u32; 8];
        for b in 0..100_000u64 {
            let u = m.units(b);
            assert_eq!(u, again.units(b));
            assert_eq!(u, m.units(b));
            n[u as usize - 1] += 1;
        }
        assert_eq!(n[1] + n[2] + n[4] + n[5] + n[6], 0);
        for (i, want) in [(0, 0.25), (3, 0.25), (7, 0.5)] {
            let got = f64::from(n[i]) / 100_000.0;
            assert!((got - want).abs() < 0.01, "{i}: {got}");
        }
        for u in 1..=8 {
            let c = SizeModel::constant(u).unwrap();
            assert!((0..1000).all(|b| c.units(b) == u));
        }
        assert!(SizeModel::constant(0).is_err());
    }

    #[test]
    fn model_file() {
        let v = serde_json::json!({"distribution": {"1": 0.5, "8": 0.5}});
        assert_eq!(
            SizeModel::from_json(&v).unwrap(),
            SizeModel::parse("1:0.5,8:0.5").unwrap()
        );
        let e = SizeModel::from_json(&serde_json::json!({})).unwrap_err();
        assert!(e.contains("distribution"), "{e}");
    }

    #[test]
    fn compressed_segments() {
        // 64 KiB: 16 blocks, one summary block each copy still holds 56 entries.
        assert_eq!(compressed_segment(64 << 10).unwrap(), (56, 112));
        let (slots, units) = compressed_segment(1 << 20).unwrap();
        assert_eq!(slots * 2, units);
        assert!(compressed_segment(1000).is_err());
    }
}
