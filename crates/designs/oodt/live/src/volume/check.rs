//! Offline checking: verifying a volume's metadata without serving it.

use crate::journal::{Journal, RecoveryReport};
use crate::superblock::{Capacity, Superblock};
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use tiercache_io::{BlockDev, FileDev, FileDevOptions};
use tiercache_store::BackingIdentity;
/// What [`check_volume`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// Blocks of the volume.
    pub blocks: u64,
    /// Fast-tier slots.
    pub fast_slots: u64,
    /// Fast-tier slots holding a block.
    pub fast_used: u64,
    /// What the volume's capacity is.
    pub capacity: Capacity,
    /// Volume size in bytes.
    pub volume_bytes: u64,
    /// What a restart would recover (nothing is written by the check).
    pub recovery: RecoveryReport,
    /// Problems found; empty when the metadata is sound.
    pub problems: Vec<String>,
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.recovery;
        writeln!(
            f,
            "tiered volume ({} bytes, capacity {}): {} blocks, {} of {} fast slots used; checkpoint {}, {} log records \
             ({} switched migrations to replay, {} to finish, {} to roll back)",
            self.volume_bytes,
            self.capacity,
            self.blocks,
            self.fast_used,
            self.fast_slots,
            r.checkpoint_seq,
            r.log_records,
            r.completed,
            r.completed_after_switch,
            r.rolled_back
        )?;
        if self.problems.is_empty() {
            write!(f, "ok")
        } else {
            write!(f, "PROBLEMS:\n  {}", self.problems.join("\n  "))
        }
    }
}

/// Verify the metadata of a tiered volume that is not being served,
/// read-only: superblock, tiers' identities, checkpoints and log replay.
pub fn check_volume(fast: &Path) -> anyhow::Result<CheckReport> {
    let sb = Superblock::read(fast)
        .with_context(|| format!("{} is not a tiered volume", fast.display()))?;
    let mut problems = Vec::new();
    for (i, t) in sb.tiers.iter().enumerate().skip(1) {
        match BackingIdentity::probe(Path::new(&t.identity.path)) {
            Ok(found) => {
                if let Some(d) = t.identity.differences(&found, false) {
                    problems.push(format!("tier {i} ({}): {d}", t.identity.path));
                }
            }
            Err(e) => problems.push(format!("tier {i} ({}): {e}", t.identity.path)),
        }
    }
    if sb.capacity == Capacity::Sum
        && sb.tiers[1].identity.size < sb.layout.slow_slots * u64::from(sb.block_bytes)
    {
        problems.push("the slow tier is smaller than its recorded slots".into());
    }
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(
        fast,
        FileDevOptions {
            read_only: true,
            ..Default::default()
        },
    )?);
    let l = sb.layout;
    let fast_needed = l
        .fast_slots
        .checked_mul(u64::from(sb.block_bytes))
        .and_then(|n| n.checked_add(l.data_offset));
    let fast_len = dev.len();
    let journal = if fast_needed.is_none_or(|n| fast_len < n) {
        Err(std::io::Error::other(format!(
            "the fast tier is {fast_len} bytes, smaller than its recorded layout"
        )))
    } else {
        Journal::open(dev, sb.layout)
    };
    let (table, recovery) = match journal {
        Ok((_, rec)) => (Some(rec.table), rec.report),
        Err(e) => {
            problems.push(format!("mapping: {e}"));
            (None, RecoveryReport::default())
        }
    };
    if let Some(t) = &table {
        if t.blocks() != sb.blocks() || t.block_bytes() != sb.block_bytes {
            problems.push("the mapping checkpoint does not match the superblock".into());
        }
        if t.has_homes() != (sb.capacity == Capacity::Slow) {
            problems.push(format!(
                "the mapping checkpoint's layout is not the superblock's capacity mode ({})",
                sb.capacity
            ));
        }
        if sb.capacity == Capacity::Slow && t.slots(0) != Some(l.fast_slots) {
            // A resize stopped between its checkpoint and its superblock:
            // the open takes the superblock's size, if the slots it drops
            // hold no block.
            if let Err(e) = t.clone().resize_fast(0, l.fast_slots) {
                problems.push(format!(
                    "the mapping checkpoint's fast tier does not fit the superblock's {} slots: {e}",
                    l.fast_slots
                ));
            }
        }
        if sb.capacity == Capacity::Sum {
            let seen: u64 = (0..t.tiers() as u8).map(|x| t.used_slots(x)).sum();
            if seen != t.blocks() {
                problems.push(format!(
                    "{} blocks but {seen} slots in use: a slot leaked or is mapped twice",
                    t.blocks()
                ));
            }
        }
    }
    Ok(CheckReport {
        blocks: sb.blocks(),
        fast_slots: sb.layout.fast_slots,
        fast_used: table.as_ref().map_or(0, |t| t.used_slots(0)),
        capacity: sb.capacity,
        volume_bytes: sb.volume_bytes,
        recovery,
        problems,
    })
}
