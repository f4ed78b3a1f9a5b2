//! Resizing the fast tier while the volume serves (`tiercache resize`).
//!
//! Only the fast tier changes: the exported size stays what it was, because
//! an NBD client learns the size once, when it connects. A volume of
//! capacity `slow` resizes (every block has a home on the slow tier, so the
//! fast tier's slots are only where some blocks are faster); a volume of
//! capacity `sum` is refused (its size is both tiers', so the fast tier
//! cannot change without changing the exported size).
//!
//! The fast tier's slot count is recorded twice: in the superblock (both
//! copies; copy 0 wins while it is intact) and in each mapping checkpoint.
//! The **superblock is the commit point**: at open, the mapping is given
//! the superblock's slot count (see `open`), which always succeeds, because
//! the slots a resize drops hold no block before the superblock drops them.
//!
//! - **grow**: a fast-tier file is extended first (a block device must hold
//!   the new size already); then both superblock copies record the new
//!   size, each written and synced; then the mapping takes the new slots
//!   and a checkpoint records them. A crash before copy 0 is durable
//!   recovers the old size (a longer file is fine), after it the new one.
//! - **shrink**: the blocks in the slots past the new end are moved home,
//!   one migration each (logged like every migration), while requests are
//!   served; then the mapping drops the slots and a checkpoint records
//!   them; then both superblock copies; last a fast-tier file is cut (a
//!   block device keeps its size; its tail is no longer used). A crash
//!   before copy 0 is durable recovers the old size (the mapping grows back
//!   to it, with free slots), after it the new one.
//!
//! Migrations do not race a resize: the planner's jobs wait on
//! [`TieredVolume::resizing`](super::TieredVolume) until it ends. Requests
//! are never paused (a migration locks only its block); FLUSH and FUA mean
//! what they always mean.

use std::io;
use std::time::Instant;

use serde_json::{json, Value};
use tiercache_oodt_policy::planner::Move;
use tiercache_oodt_policy::BlockId;
use tiercache_runtime::resize::MetadataWrites as Writes;

use super::{lock, TieredVolume};
use crate::superblock::{Capacity, Superblock, SB_BYTES};

impl TieredVolume {
    /// Resize the fast tier to `fast_bytes` bytes of device (its metadata
    /// and data slots end there) while the volume serves; the reply of the
    /// `resize` control command, or a one-line refusal (nothing changed).
    pub fn resize(&self, fast_bytes: u64) -> Result<Value, String> {
        let started = Instant::now();
        let _paused = lock(&self.resizing);
        let sb = lock(&self.sb_now).clone();
        let bs = u64::from(sb.block_bytes);
        let old = lock(&self.core).table.slots(0).unwrap_or(0);
        let new = self.resize_refusal(&sb, fast_bytes, old)?;
        let writes = Writes::from_env();
        let mut moved = 0u64;
        if new == old {
            return Ok(json!({
                "ok": true,
                "message": format!("nothing to do: the fast tier already holds {old} blocks of {bs} bytes at {fast_bytes} bytes"),
                "slots": old, "old_slots": old, "moved_blocks": 0, "volume_bytes": self.size(),
                "seconds": started.elapsed().as_secs_f64(), "metadata_writes": 0,
            }));
        }
        let mut next = sb.clone();
        next.layout.fast_slots = new;
        if is_regular_file(&sb.tiers[0].identity) {
            next.tiers[0].identity.size = fast_bytes;
        }
        let dev = &self.devs[0];
        let old_len = dev.len();
        if new > old {
            if fast_bytes > old_len {
                dev.set_len(fast_bytes)
                    .map_err(|e| format!("cannot grow the fast tier: {e}"))?;
                writes.done();
            }
            if let Err(e) = self.write_superblock(&next, &writes) {
                // The superblock may hold either size: the mapping keeps the
                // old one (the open takes the superblock's, with free slots).
                self.fail(format!("resize: writing the superblock: {e}"));
                return Err(format!("resize failed writing the superblock: {e}"));
            }
            *lock(&self.sb_now) = next;
            lock(&self.core)
                .table
                .resize_fast(0, new)
                .map_err(|e| format!("resize: {e}"))?;
            // The open would take the new size from the superblock anyway.
            if let Err(e) = self.checkpoint_observed(&|| writes.done()) {
                self.fail(format!("resize: checkpoint: {e}"));
                return Err(format!(
                    "resize: the new size is recorded, but the checkpoint failed: {e}"
                ));
            }
        } else {
            moved = self
                .move_home_from(new)
                .map_err(|e| format!("moving the blocks past the new end home failed: {e}"))?;
            lock(&self.core)
                .table
                .resize_fast(0, new)
                .map_err(|e| format!("{e}"))?;
            let undo = |why: String| {
                // Not recorded by the superblock: the old slots are usable again.
                let _ = lock(&self.core).table.resize_fast(0, old);
                why
            };
            if let Err(e) = self.checkpoint_observed(&|| writes.done()) {
                self.fail(format!("resize: checkpoint: {e}"));
                return Err(undo(format!("resize failed writing a checkpoint: {e}")));
            }
            if let Err(e) = self.write_superblock(&next, &writes) {
                self.fail(format!("resize: writing the superblock: {e}"));
                return Err(undo(format!("resize failed writing the superblock: {e}")));
            }
            *lock(&self.sb_now) = next;
            if fast_bytes < old_len && is_regular_file(&sb.tiers[0].identity) {
                match dev.set_len(fast_bytes) {
                    Ok(()) => writes.done(),
                    Err(e) => tracing::warn!("cutting the fast tier to {fast_bytes} bytes: {e}"),
                }
            }
        }
        self.wake_worker();
        let verb = if new > old { "grew" } else { "shrank" };
        Ok(json!({
            "ok": true,
            "message": format!(
                "{verb} the fast tier from {old} to {new} blocks of {bs} bytes ({} moved home) in {:.2} s; the volume stays {} bytes (NBD clients learn the size when they connect)",
                moved, started.elapsed().as_secs_f64(), self.size()
            ),
            "slots": new, "old_slots": old, "moved_blocks": moved, "volume_bytes": self.size(),
            "fast_bytes": fast_bytes,
            "seconds": started.elapsed().as_secs_f64(), "metadata_writes": writes.count(),
        }))
    }

    /// The new slot count for a fast tier of `fast_bytes`, or why it cannot be.
    fn resize_refusal(&self, sb: &Superblock, fast_bytes: u64, old: u64) -> Result<u64, String> {
        let bs = u64::from(sb.block_bytes);
        if sb.capacity == Capacity::Sum {
            return Err(format!(
                "a tiered volume of capacity sum exports both tiers' blocks ({} bytes), and the exported size cannot change while NBD clients are connected (format with --capacity slow to resize the fast tier)",
                self.size()
            ));
        }
        if let Some(why) = &lock(&self.core).failed {
            return Err(format!("the volume is degraded: {why}"));
        }
        if !fast_bytes.is_multiple_of(4096) {
            return Err(format!("{fast_bytes} bytes is not a multiple of 4 KiB"));
        }
        let data = sb.layout.data_offset;
        let new = fast_bytes.saturating_sub(data) / bs;
        if new == 0 {
            return Err(format!(
                "a fast tier of {fast_bytes} bytes holds no block: its metadata takes {data} bytes and one block is {bs} bytes"
            ));
        }
        let max = tiercache_oodt_policy::mapping::MAX_FAST_SLOTS;
        if new > max {
            return Err(format!("{new} fast-tier blocks (allowed: at most {max})"));
        }
        let dev = &self.devs[0];
        if new > old && !is_regular_file(&sb.tiers[0].identity) && fast_bytes > dev.len() {
            return Err(format!(
                "the fast tier {} holds {} bytes, fewer than {fast_bytes}",
                dev.name(),
                dev.len()
            ));
        }
        if new > old {
            let kind = self
                .cfg
                .policy
                .parse()
                .unwrap_or(tiercache_oodt_policy::policy::PolicyKind::Oodt);
            let m = crate::memory::metadata_memory_of(sb.blocks(), new, 0, kind);
            crate::memory::check_fits(&m, sb.volume_bytes, sb.block_bytes, kind)
                .map_err(|e| e.to_string())?;
        }
        Ok(new)
    }

    /// Move every block in a fast-tier slot at or past `end` home; the blocks moved.
    fn move_home_from(&self, end: u64) -> io::Result<u64> {
        let tail: Vec<BlockId> = {
            let c = lock(&self.core);
            c.table
                .residents(0)
                .filter(|&b| c.table.lookup(b).is_some_and(|l| l.slot >= end))
                .collect()
        };
        let mut moved = 0;
        for block in tail {
            if !self.checkpoint_if_full() {
                return Err(io::Error::other("checkpoint failed"));
            }
            let mv = Move {
                block,
                from: 0,
                to: 1,
                rank: u32::MAX,
                score: f32::NEG_INFINITY,
            };
            if self.migrate(mv)? > 0 {
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Write both superblock copies of `sb`, copy 0 first, each synced.
    fn write_superblock(&self, sb: &Superblock, writes: &Writes) -> io::Result<()> {
        let b = sb.encode().map_err(io::Error::other)?;
        let dev = &self.devs[0];
        for at in [0, SB_BYTES] {
            dev.write_at(&b, at)?;
            writes.done();
            dev.flush()?;
            writes.done();
        }
        Ok(())
    }
}

/// Whether the recorded identity is a regular file's (it has an inode).
fn is_regular_file(id: &tiercache_store::BackingIdentity) -> bool {
    id.file_id.is_some()
}
