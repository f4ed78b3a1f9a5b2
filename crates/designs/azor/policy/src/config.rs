//! Cache configuration: geometry and policies, validated once.

use crate::admission::AdmissionConfig;
use crate::eviction::EvictionKind;
use serde::{Deserialize, Serialize};
use std::fmt;

pub use crate::error::ConfigError;
use std::str::FromStr;

/// Smallest and largest cache line size (Azor 2.2).
pub const MIN_LINE: u32 = 512;
/// Largest cache line size: 1 MiB.
pub const MAX_LINE: u32 = 1 << 20;
/// Smallest line of a live cache: 4 KiB, a page of the devices it runs on
/// (O_DIRECT and 4Kn disks). The simulator also takes [`MIN_LINE`] and up,
/// for the traces counted in 512-byte pages.
pub const MIN_LIVE_LINE: u32 = 4096;
/// Default sub-block (valid/dirty bit granularity): Azor's 4 KiB block.
pub const DEFAULT_SUB_BLOCK: u32 = 4096;

/// How backing lines map to cache slots (Azor 2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Assoc {
    /// Each line has exactly one slot: `line % slots`.
    Direct,
    /// N-way set-associative: `line % sets` picks a set of N slots.
    Ways(u32),
    /// Any line in any slot: hash table plus replacement list in one table.
    Full,
}

impl fmt::Display for Assoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Assoc::Direct => f.write_str("direct"),
            Assoc::Ways(n) => write!(f, "{n}-way"),
            Assoc::Full => f.write_str("full"),
        }
    }
}

impl FromStr for Assoc {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let l = s.to_ascii_lowercase();
        match l.as_str() {
            "direct" | "dm" | "direct-mapped" | "1-way" => return Ok(Assoc::Direct),
            "full" | "fa" | "fully-associative" => return Ok(Assoc::Full),
            _ => {}
        }
        let n = l.strip_suffix("-way").unwrap_or(&l);
        match n.parse::<u32>() {
            Ok(1) => Ok(Assoc::Direct),
            Ok(n) if n >= 2 => Ok(Assoc::Ways(n)),
            _ => Err(format!(
                "unknown associativity '{s}' (allowed: direct, N-way with N >= 2 such as 8-way, full)"
            )),
        }
    }
}

/// What happens to writes (Azor chapter 2 and the usual write-back).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicy {
    /// Writes go to the cache only and are cleaned to the backing device later.
    WriteBack,
    /// Azor "write-hdd-ssd": writes go to the backing device and the cache.
    WriteThrough,
    /// Azor "write-hdd-upd": writes go to the backing device; a cached copy is updated.
    WriteHddUpd,
    /// Azor "write-hdd-inv" (write-around): writes go to the backing device; a cached copy is invalidated.
    WriteHddInv,
    /// Only reads are cached; writes go to the backing device and invalidate.
    ReadOnly,
}

impl WritePolicy {
    /// Every policy with its command-line spelling.
    pub const ALL: [(WritePolicy, &'static str); 5] = [
        (WritePolicy::WriteBack, "write-back"),
        (WritePolicy::WriteThrough, "write-through"),
        (WritePolicy::WriteHddUpd, "write-hdd-upd"),
        (WritePolicy::WriteHddInv, "write-hdd-inv"),
        (WritePolicy::ReadOnly, "read-only"),
    ];
    /// Command-line spelling.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map(|(_, s)| *s)
            .unwrap_or("?")
    }
    /// Whether a write miss may allocate a line under this policy.
    pub fn may_allocate(self) -> bool {
        matches!(self, WritePolicy::WriteBack | WritePolicy::WriteThrough)
    }
}

impl fmt::Display for WritePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WritePolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let l = s.to_ascii_lowercase();
        let alias = match l.as_str() {
            "write-hdd-ssd" | "wt" => "write-through",
            "wb" => "write-back",
            "write-around" => "write-hdd-inv",
            "ro" => "read-only",
            x => x,
        };
        Self::ALL.iter().find(|(_, n)| *n == alias).map(|(p, _)| *p).ok_or_else(|| {
            format!(
                "unknown write policy '{s}' (allowed: write-back, write-through, write-hdd-upd, write-hdd-inv, read-only)"
            )
        })
    }
}

/// Everything that defines a cache's behaviour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheConfig {
    /// Cache capacity in bytes (rounded down to whole lines, and to whole sets).
    pub cache_bytes: u64,
    /// Cache line size in bytes: a power of two from 512 B to 1 MiB.
    pub line_bytes: u32,
    /// Valid/dirty granularity inside a line: a power of two, at most the line size.
    pub sub_block_bytes: u32,
    pub assoc: Assoc,
    pub eviction: EvictionKind,
    pub write_policy: WritePolicy,
    /// Whether write misses allocate (write-back and write-through only).
    pub write_allocate: bool,
    pub admission: AdmissionConfig,
    /// Write-back: the share of lines allowed to be dirty before cleaning runs at full rate.
    pub dirty_target: f64,
    /// Write-back: when to clean (the scheduler both drivers share).
    #[serde(default)]
    pub cleaning: crate::cleaning::CleaningConfig,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            cache_bytes: 64 << 20,
            line_bytes: 4096,
            sub_block_bytes: 4096,
            assoc: Assoc::Full,
            eviction: EvictionKind::Lru,
            write_policy: WritePolicy::WriteBack,
            write_allocate: true,
            admission: AdmissionConfig::default(),
            dirty_target: 0.2,
            cleaning: crate::cleaning::CleaningConfig::default(),
        }
    }
}

/// Derived geometry of a validated configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Geometry {
    pub slots: u32,
    pub sets: u32,
    pub ways: u32,
    pub line_bytes: u32,
    pub sub_block_bytes: u32,
    /// Sub-blocks per line.
    pub subs: u32,
}

impl CacheConfig {
    /// Check the configuration and derive its geometry.
    pub fn geometry(&self) -> Result<Geometry, ConfigError> {
        let l = self.line_bytes;
        if !(MIN_LINE..=MAX_LINE).contains(&l) || !l.is_power_of_two() {
            return Err(ConfigError(format!(
                "line size {l} B is not allowed (allowed: a power of two from 512 B to 1 MiB)"
            )));
        }
        let sb = self.sub_block_bytes;
        if sb < 512 || !sb.is_power_of_two() || sb > l {
            return Err(ConfigError(format!(
                "sub-block size {sb} B is not allowed (allowed: a power of two from 512 B up to the line size {l} B)"
            )));
        }
        if self.cache_bytes == 0 {
            return Err(ConfigError(
                "cache size is zero (allowed: at least one line)".into(),
            ));
        }
        if self.cache_bytes < l as u64 {
            return Err(ConfigError(format!(
                "line size {l} B is larger than the cache size {} B (the cache must hold at least one line)",
                self.cache_bytes
            )));
        }
        let lines = self.cache_bytes / l as u64;
        if lines >= u32::MAX as u64 / 2 {
            return Err(ConfigError(format!(
                "{lines} cache lines is too many (allowed: fewer than 2^31; use a larger line size)"
            )));
        }
        let lines = lines as u32;
        let (sets, ways) = match self.assoc {
            Assoc::Direct => (lines, 1),
            Assoc::Full => (1, lines),
            Assoc::Ways(n) => {
                if n > lines {
                    return Err(ConfigError(format!(
                        "{n}-way needs at least {n} lines but the cache holds {lines} (allowed: N up to the number of lines, or 'full')"
                    )));
                }
                if n > 4096 {
                    return Err(ConfigError(format!(
                        "{n}-way is too wide (allowed: up to 4096 ways; use 'full' for a fully associative cache)"
                    )));
                }
                (lines / n, n)
            }
        };
        if !(0.0..=1.0).contains(&self.dirty_target) {
            return Err(ConfigError(format!(
                "dirty target {} is not a share (allowed: 0.0 to 1.0)",
                self.dirty_target
            )));
        }
        self.admission.validate()?;
        Ok(Geometry {
            slots: sets * ways,
            sets,
            ways,
            line_bytes: l,
            sub_block_bytes: sb,
            subs: l / sb,
        })
    }
}
