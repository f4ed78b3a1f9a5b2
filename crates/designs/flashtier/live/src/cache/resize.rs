//! Resizing the cache while it serves (`tiercache resize`): segments are
//! added or retired.
//!
//! The segment count lives in the superblock, written as two copies, each
//! synced (the newer valid one wins), so a crash at any write recovers the
//! old count or the new one. Recovery takes a checkpoint of either count:
//! segments past the checkpoint's are free, and no checkpoint entry points
//! past the superblock's.
//! - **grow**: a cache file is extended (a block device must hold the new
//!   size), the new segments' summaries are zeroed and synced (no older life
//!   there is ever believed), then, under the lock, the superblock records
//!   the new count and the new segments join the free list. Only the
//!   checkpoint areas limit the count: `format --max-size` sizes them.
//! - **shrink**: the segments past the new end leave the free list and are
//!   never opened again (an open one is sealed first); then each one still
//!   in use is cleaned like any victim, one per lock hold while requests are
//!   served: clean blocks are evicted silently (the backing device has
//!   them), dirty blocks move to the open segment or, when it has no room,
//!   are written back. Under the lock, a checkpoint (no entry past the new
//!   end, the backing device flushed) comes before the superblock with the
//!   new count, and only then is a cache file cut (a block device keeps its
//!   size; its tail is no longer used). Until the superblock is written the
//!   retired segments keep their data, so a crash recovers the old count
//!   with everything; after it, the new count with everything.
//!
//! FLUSH and FUA take the lock like every other request and mean what they
//! always mean.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tiercache_runtime::resize::MetadataWrites;

use super::{err, LogCache, Res, State};
use crate::segment::BLOCK;

pub use tiercache_runtime::resize::STOP_AT_ENV;

/// Fewest segments a cache has (as `format` requires).
const MIN_SEGMENTS: u32 = 4;

/// What a shrink did to the blocks of the retired segments.
#[derive(Default)]
struct Moved {
    evicted: u64,
    moved: u64,
    written_back: u64,
}

impl LogCache {
    /// Resize the cache device to `size` bytes (see the module doc). Answers
    /// what changed; refuses with one line what cannot be done, having
    /// changed nothing.
    pub fn resize(&self, size: u64) -> Res<Value> {
        let Ok(_one) = self.resizing.try_lock() else {
            return Err(err("another resize is running"));
        };
        let started = Instant::now();
        let (old, new) = {
            let st = self.lock()?;
            (st.sb.nsegs, self.check_resize(&st, size)?)
        };
        let slots = |n: u32| n as u64 * self.data_blocks as u64;
        if new == old {
            return Ok(json!({
                "ok": true,
                "message": format!("the cache already has {old} segments ({} blocks of 4 KiB) in {size} bytes", slots(old)),
                "old_segments": old, "segments": old,
                "old_slots": slots(old), "slots": slots(old),
                "cache_bytes": slots(old) * BLOCK,
            }));
        }
        let writes = MetadataWrites::from_env();
        let mut pause = Duration::ZERO;
        let mut moved = Moved::default();
        if new > old {
            self.grow(size, old, new, &writes, &mut pause)?;
        } else {
            moved = self.shrink(size, new, &writes, &mut pause)?;
        }
        let message = format!(
            "resized from {old} segments ({} blocks of 4 KiB) to {new} segments ({} blocks) in {:.3} s (holding the cache's lock at most {:.3} s at a time){}",
            slots(old),
            slots(new),
            started.elapsed().as_secs_f64(),
            pause.as_secs_f64(),
            if new < old {
                format!(
                    "; from the retired segments {} clean blocks evicted, {} dirty blocks moved, {} written back",
                    moved.evicted, moved.moved, moved.written_back
                )
            } else {
                String::new()
            }
        );
        tracing::info!("{message}");
        Ok(json!({
            "ok": true,
            "message": message,
            "old_segments": old,
            "segments": new,
            "old_slots": slots(old),
            "slots": slots(new),
            "cache_bytes": slots(new) * BLOCK,
            "device_bytes": size,
            "evicted_blocks": moved.evicted,
            "moved_blocks": moved.moved,
            "written_back_blocks": moved.written_back,
            "seconds": started.elapsed().as_secs_f64(),
            "paused_seconds": pause.as_secs_f64(),
            "metadata_writes": writes.count(),
        }))
    }

    /// The new segment count for a device of `size` bytes, or why the
    /// resize cannot be done (nothing changed).
    fn check_resize(&self, st: &State, size: u64) -> Res<u32> {
        if let Some(why) = &st.degraded {
            return Err(err(format!(
                "the cache device is failing (degraded: {why}): it cannot be resized; detach the cache"
            )));
        }
        if !size.is_multiple_of(BLOCK) {
            return Err(err(format!("size {size} is not a multiple of 4 KiB")));
        }
        let sb = &st.sb;
        let least = sb.device_bytes(MIN_SEGMENTS);
        if size < least {
            return Err(err(format!(
                "a cache device of {size} bytes holds fewer than {MIN_SEGMENTS} segments of {} bytes after its metadata: at least {least} bytes",
                sb.seg_bytes
            )));
        }
        let new = ((size - sb.seg_off) / sb.seg_bytes).min(u32::MAX as u64) as u32;
        let max = sb.max_nsegs();
        if new > max {
            return Err(err(format!(
                "{size} bytes would hold {new} segments, but the checkpoint areas were made for at most {max} (a cache device of {} bytes); format the cache with --max-size to grow it further",
                sb.device_bytes(max)
            )));
        }
        if new > sb.nsegs {
            let mut grown = sb.clone();
            grown.nsegs = new;
            crate::memory::check_fits(&grown).map_err(err)?;
        }
        Ok(new)
    }

    /// Grow from `old` to `new` segments on a device of `size` bytes.
    fn grow(
        &self,
        size: u64,
        old: u32,
        new: u32,
        writes: &MetadataWrites,
        pause: &mut Duration,
    ) -> Res<()> {
        let old_len = self.cache.len();
        if size > old_len {
            self.cache
                .set_len(size)
                .map_err(|e| err(format!("cannot grow the cache device: {e}")))?;
            writes.done();
        }
        let undo = |e: String| {
            if size > old_len {
                // The superblock keeps the old count: give the file back.
                let _ = self.cache.set_len(old_len);
            }
            err(e)
        };
        // The new segments' summaries, zeroed: whatever the device held
        // there (an older cache, a life before a shrink) is never replayed.
        let (seg_off, seg_bytes) = {
            let st = self.lock().map_err(|e| undo(e.0))?;
            (st.sb.seg_off, st.sb.seg_bytes)
        };
        let zero = vec![0u8; 2 * self.geo.summary_blocks as usize * BLOCK as usize];
        let zeroed = (old..new)
            .try_for_each(|s| self.cache.write_at(&zero, seg_off + s as u64 * seg_bytes))
            .and_then(|_| self.cache.flush());
        if let Err(e) = zeroed {
            return Err(undo(format!(
                "cache device: clearing the new segments' summaries: {e}"
            )));
        }
        writes.done();
        let mut st = self.lock().map_err(|e| undo(e.0))?;
        let held = Instant::now();
        let r = self.grow_locked(&mut st, new, writes);
        *pause = (*pause).max(held.elapsed());
        drop(st);
        r.map_err(|e| undo(e.0))
    }

    /// The part of a grow under the lock: the map for the new slots, the
    /// superblock, the new free segments.
    fn grow_locked(&self, st: &mut State, new: u32, writes: &MetadataWrites) -> Res<()> {
        let mut grown = st.sb.clone();
        grown.nsegs = new;
        // The map first (it can fail: nothing is written then).
        let map = st
            .map
            .with_slots(grown.slots())
            .map_err(|e| err(format!("the map cannot hold the new slots: {e}")))?;
        grown
            .write_then(self.cache.as_ref(), &|| writes.done())
            .map_err(|e| err(format!("cache device: writing the superblock: {e}")))?;
        st.sb = grown;
        st.map = map;
        st.add_segments(new).map_err(err)?;
        let slots = st.sb.slots() as usize;
        st.shadows.resize(slots.div_ceil(64), 0);
        if self.geo.is_compressed() {
            st.loc.resize(slots, 0);
        }
        Ok(())
    }

    /// Shrink to `new` segments on a device of `size` bytes: retire, empty,
    /// record, cut.
    fn shrink(
        &self,
        size: u64,
        new: u32,
        writes: &MetadataWrites,
        pause: &mut Duration,
    ) -> Res<Moved> {
        let before = self.counters();
        let r = self.retire(new, pause).and_then(|_| {
            let mut st = self.lock()?;
            let held = Instant::now();
            let r = self.shrink_locked(&mut st, new, writes);
            *pause = (*pause).max(held.elapsed());
            r
        });
        if let Err(e) = r {
            if let Ok(mut st) = self.lock() {
                st.unretire();
            }
            if e.0.starts_with("backing device") {
                return Err(err(format!(
                    "the backing device failed writeback, so the dirty blocks of the retired segments cannot be written back now ({e}); the size is unchanged"
                )));
            }
            return Err(err(format!("{e}; the size is unchanged")));
        }
        // A block device keeps its size (its tail is no longer used).
        match self.cache.set_len(size) {
            Ok(()) => writes.done(),
            Err(e) => tracing::warn!(
                "resize: the cache now uses {size} bytes, but cutting the device failed: {e}"
            ),
        }
        let after = self.counters();
        Ok(Moved {
            evicted: after.silent_evictions - before.silent_evictions,
            moved: after.moved_dirty - before.moved_dirty,
            written_back: after.cleaning_written_back - before.cleaning_written_back,
        })
    }

    /// Retire the segments from `new` on and clean each one still in use,
    /// one per lock hold (requests run between them).
    fn retire(&self, new: u32, pause: &mut Duration) -> Res<()> {
        {
            let mut st = self.lock()?;
            let held = Instant::now();
            st.retire_from(new);
            // Announced lives of retired segments are forgotten (a roll
            // announces again from the free list).
            st.announced.clear();
            if st.open.is_some_and(|s| s >= new) {
                if st.free.is_empty() {
                    st.ensure_free(self, 1)?;
                }
                self.roll(&mut st)?;
            }
            *pause = (*pause).max(held.elapsed());
        }
        loop {
            let mut st = self.lock()?;
            let held = Instant::now();
            let Some(v) = st.retiring() else {
                return Ok(());
            };
            if st.open == Some(v) {
                // Opened before the retirement took the free list (cannot
                // happen: the open segment was rolled under the same lock).
                return Err(err(format!("retired segment {v} is open")));
            }
            if st.degraded.is_some() {
                return Err(err("the cache device is failing (degraded)"));
            }
            // Dirty blocks move into the open segment when they fit: open a
            // fresh one while free segments are to spare (else they are
            // written back).
            if st.room() < st.segs[v as usize].live as usize && st.free.len() > super::RESERVE {
                self.roll(&mut st)?;
            }
            st.clean_segment(self, v)?;
            *pause = (*pause).max(held.elapsed());
            drop(st);
            // Requests waiting for the lock go first.
            std::thread::yield_now();
        }
    }

    /// The end of a shrink under the lock (every retired segment free): a
    /// checkpoint, the superblock with the new count, the state for it.
    fn shrink_locked(&self, st: &mut State, new: u32, writes: &MetadataWrites) -> Res<()> {
        let map = st.map_for_active().map_err(err)?;
        if st.open.is_some_and(|s| s >= new) {
            return Err(err("the open segment is past the new end"));
        }
        // No entry past the new end is in the checkpoint, and the journal
        // starts over (no record names a retired segment).
        self.checkpoint(st)?;
        writes.done();
        let mut shrunk = st.sb.clone();
        shrunk.nsegs = new;
        shrunk
            .write_then(self.cache.as_ref(), &|| writes.done())
            .map_err(|e| err(format!("cache device: writing the superblock: {e}")))?;
        let old = st.segs.len() as u32;
        st.sb = shrunk;
        st.drop_retired(map);
        let slots = st.sb.slots() as usize;
        st.shadows.truncate(slots.div_ceil(64));
        if self.geo.is_compressed() {
            st.loc.truncate(slots);
        }
        // A read that looked up a slot of a retired segment before it was
        // emptied, still reading off the lock, sees its segment change and
        // reads again (`fast`); the device may be cut under it.
        for s in new..old {
            self.gens.reopen(s, u64::MAX);
        }
        Ok(())
    }
}
