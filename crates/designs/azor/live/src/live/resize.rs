//! Resizing the cache while it serves (`tiercache resize`).
//!
//! The size lives in the superblock's layout, written by the store's
//! crash-consistent superblock update (two copies, each synced; the newer
//! valid one wins), so a crash at any write recovers the old size or the new
//! one:
//! - **grow**: the cache file is extended first (a block device must hold
//!   the new size already), then, with requests paused and every op in
//!   flight drained, the superblock records the new layout and the engine is
//!   rebuilt with the new slots; they are used only after that;
//! - **shrink**: dirty lines are written back while requests are served,
//!   then, paused and drained, every line still dirty is written back and
//!   the backing device flushed; a checkpoint of the table without the slots
//!   past the new end comes before the superblock with the new layout (so no
//!   log record names a slot past it), and only then is the cache file cut
//!   (a block device keeps its size; its tail is no longer used).
//!
//! A fully associative cache keeps its lines below the new end, in their
//! eviction order, and its counters. Elsewhere (direct-mapped, N-way) the
//! slot count decides each line's set, so the cache starts again empty at
//! its new size: every dirty line is written back first, grow or shrink, and
//! the checkpoint holds no line; it keeps its counters. FLUSH and FUA requests wait for the
//! pause like every other request, then mean what they always mean.

use super::{LiveCache, LiveError};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_azor_policy::Assoc;
use tiercache_runtime::resize::MetadataWrites;
use tiercache_store::Layout;

pub use tiercache_runtime::resize::STOP_AT_ENV;

/// Dirty lines at most left for the pause of a shrink (cleaning while
/// serving stops there).
const PRECLEAN_DONE: usize = 256;
/// Cleaning while serving gives up getting below [`PRECLEAN_DONE`] after
/// this long (a write load faster than cleaning); the pause cleans the rest.
const PRECLEAN_MAX: Duration = Duration::from_secs(30);

impl LiveCache {
    /// Resize the cache device to `size` bytes (see the module doc). Answers
    /// what changed; refuses with one line what cannot be done now, having
    /// changed nothing.
    pub async fn resize(self: &Arc<Self>, size: u64) -> Result<Value, LiveError> {
        let _one = self.set_lock.lock().await;
        let started = Instant::now();
        let old = *self.store.lock().expect("store").layout();
        let new = self.check_resize(&old, size)?;
        if new == old {
            return Ok(json!({
                "ok": true,
                "message": format!("the cache is already {size} bytes ({} lines)", old.slots),
                "slots": old.slots, "old_slots": old.slots,
                "cache_bytes": old.slots as u64 * old.line_size as u64,
            }));
        }
        let writes = Arc::new(MetadataWrites::from_env());
        let after_write = {
            let writes = Arc::clone(&writes);
            move || writes.done()
        };
        let grow = new.slots > old.slots;
        let mut cleaned = 0;
        if grow {
            let dev = Arc::clone(&self.cache);
            let hook = after_write.clone();
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                dev.set_len(size)?;
                hook();
                Ok(())
            })
            .await
            .map_err(|e| LiveError(e.to_string()))?
            .map_err(|e| LiveError(format!("cannot grow the cache device: {e}")))?;
        }
        if !grow || !self.keeps_lines() {
            cleaned += self.clean_while_serving().await?;
        }
        self.set_paused(true);
        let paused = Instant::now();
        let r = self.resize_paused(old, new, &after_write).await;
        self.set_paused(false);
        let pause = paused.elapsed();
        let (more, dropped) = match r {
            Ok(x) => x,
            Err(e) => {
                if grow {
                    // The superblock keeps the old size: give the file back.
                    let dev = Arc::clone(&self.cache);
                    let old_len = old.dev_size;
                    let _ = tokio::task::spawn_blocking(move || dev.set_len(old_len)).await;
                }
                return Err(e);
            }
        };
        cleaned += more;
        if !grow {
            let dev = Arc::clone(&self.cache);
            let hook = after_write.clone();
            let cut = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                dev.set_len(size)?;
                hook();
                Ok(())
            })
            .await
            .map_err(|e| LiveError(e.to_string()))?;
            if let Err(e) = cut {
                tracing::warn!(
                    "resize: the cache now uses {size} bytes, but cutting the file failed: {e}"
                );
            }
        }
        let bytes = |l: &Layout| l.slots as u64 * l.line_size as u64;
        let message = format!(
            "resized from {} lines ({} bytes of cache) to {} lines ({} bytes) in {:.3} s (requests paused {:.3} s){}",
            old.slots,
            bytes(&old),
            new.slots,
            bytes(&new),
            started.elapsed().as_secs_f64(),
            pause.as_secs_f64(),
            match (cleaned, dropped) {
                (0, 0) => String::new(),
                (c, d) => format!("; {c} dirty lines written back, {d} lines dropped"),
            }
        );
        tracing::info!("{message}");
        Ok(json!({
            "ok": true,
            "message": message,
            "old_slots": old.slots,
            "slots": new.slots,
            "cache_bytes": bytes(&new),
            "device_bytes": size,
            "written_back_lines": cleaned,
            "dropped_lines": dropped,
            "seconds": started.elapsed().as_secs_f64(),
            "paused_seconds": pause.as_secs_f64(),
            "metadata_writes": writes.count(),
        }))
    }

    /// The new layout, or why the resize cannot be done (nothing changed).
    fn check_resize(&self, old: &Layout, size: u64) -> Result<Layout, LiveError> {
        if self.is_stopping() {
            return Err(LiveError("the cache is shutting down".into()));
        }
        if let Some(why) = self.metadata_failure() {
            return Err(LiveError(format!(
                "the cache metadata store failed ({why}); reopen the cache first"
            )));
        }
        let cfg = {
            let c = self.core.lock().expect("core");
            if c.engine.is_degraded() {
                return Err(LiveError(
                    "the cache device is failing (degraded): it cannot be resized; detach the cache"
                        .into(),
                ));
            }
            if !c.stranded.is_empty() {
                return Err(LiveError(format!(
                    "{} lines could not be written back (the backing device failed); restart the cache to retry before resizing",
                    c.stranded.len()
                )));
            }
            c.engine.config().clone()
        };
        if !size.is_multiple_of(4096) {
            return Err(LiveError(format!("size {size} is not a multiple of 4 KiB")));
        }
        let new = old.resized(size).map_err(|e| {
            LiveError(match e {
                tiercache_store::StoreError::InvalidParams(why) => why,
                e => e.to_string(),
            })
        })?;
        if new.slots > old.slots {
            let mut c = cfg.clone();
            c.cache_bytes = new.slots as u64 * new.line_size as u64;
            crate::memory::check_fits(&c, size).map_err(|e| LiveError(format!("{e:#}")))?;
        }
        Ok(new)
    }

    /// Whether a resize keeps the lines below the new end: only in a fully
    /// associative cache (elsewhere the slot count decides each line's set,
    /// so the cache starts again empty, every line written back first).
    fn keeps_lines(&self) -> bool {
        self.core.lock().expect("core").engine.config().assoc == Assoc::Full
    }

    /// Write dirty lines back while requests are served, until few are left.
    async fn clean_while_serving(self: &Arc<Self>) -> Result<u64, LiveError> {
        let started = Instant::now();
        let mut total = 0u64;
        loop {
            let dirty = self.core.lock().expect("core").engine.dirty_lines();
            if dirty <= PRECLEAN_DONE || started.elapsed() >= PRECLEAN_MAX {
                return Ok(total);
            }
            if self.is_stopping() {
                return Err(LiveError(
                    "the cache is shutting down; its size is unchanged".into(),
                ));
            }
            let errors = self.stats.backing_errors.load(Ordering::Relaxed);
            let n = self.clean_step(256, true).await as u64;
            self.stats
                .forced_cleaned_lines
                .fetch_add(n, Ordering::Relaxed);
            total += n;
            if self.stats.backing_errors.load(Ordering::Relaxed) > errors {
                return Err(LiveError(format!(
                    "the backing device failed writeback, so the {dirty} dirty lines cannot be written back now; the size is unchanged"
                )));
            }
            if n == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    /// The resize with requests paused: drain, (write everything back,)
    /// record the new layout, rebuild the engine. Returns the lines written
    /// back and the lines dropped past the new end.
    async fn resize_paused(
        self: &Arc<Self>,
        old: Layout,
        new: Layout,
        after_write: &(impl Fn() + Clone + Send + 'static),
    ) -> Result<(u64, u64), LiveError> {
        let mut cleaned = 0;
        loop {
            while !self.core.lock().expect("core").signals.is_empty() {
                if self.is_stopping() {
                    return Err(LiveError(
                        "the cache is shutting down; its size is unchanged".into(),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if new.slots < old.slots || !self.keeps_lines() {
                let before = self.stats.forced_cleaned_lines.load(Ordering::Relaxed);
                self.flush_all().await.map_err(|e| {
                    LiveError(format!(
                        "the dirty lines cannot be written back now ({}); the size is unchanged",
                        e.0
                    ))
                })?;
                cleaned += self.stats.forced_cleaned_lines.load(Ordering::Relaxed) - before;
            } else {
                self.commit(true).await?;
            }
            let me = Arc::clone(self);
            let hook = after_write.clone();
            let _g = self.commit_lock.lock().await;
            let switched = tokio::task::spawn_blocking(move || me.switch_layout(new, &hook))
                .await
                .unwrap_or_else(|e| Err(LiveError(e.to_string())))?;
            // `None`: the background cleaner started a writeback meanwhile: drain again.
            if let Some(dropped) = switched {
                return Ok((cleaned, dropped));
            }
        }
    }

    /// Commit what is buffered, record `new` in the store, rebuild the
    /// engine and the log view for it (no op in flight, nothing dirty past
    /// the new end). Returns the lines dropped past the new end, or `None`
    /// (nothing done) when an op is in flight again.
    fn switch_layout(&self, new: Layout, after_write: &dyn Fn()) -> Result<Option<u64>, LiveError> {
        let mut c = self.core.lock().expect("core");
        if !c.signals.is_empty() {
            return Ok(None);
        }
        let mut st = self.store.lock().expect("store");
        let recs = std::mem::take(&mut c.pending);
        if std::mem::take(&mut c.needs_backing_flush) {
            self.backing
                .flush()
                .map_err(|e| LiveError(format!("backing device flush failed: {e}")))?;
        }
        if !recs.is_empty() {
            for r in recs {
                st.append(r)
                    .map_err(|e| LiveError(format!("metadata log: {e}")))?;
            }
            st.commit()
                .map_err(|e| LiveError(format!("metadata commit: {e}")))?;
        }
        let gen = c.appended_gen;
        // A cache that is not fully associative starts again empty: every
        // line goes (all clean by now), as if past the new end.
        let end = if c.engine.config().assoc == Assoc::Full {
            new.slots
        } else {
            0
        };
        let past: Vec<_> = c.view.iter().filter(|(s, _)| *s >= end).collect();
        if let Some((s, m)) = past.iter().find(|(_, m)| !m.dirty.is_empty()) {
            return Err(LiveError(format!(
                "slot {s} past the new end still holds dirty data of line {}; the size is unchanged",
                m.line
            )));
        }
        let mut view = tiercache_store::SlotTable::new(new.slots, c.view.sub_blocks());
        for (s, m) in c.view.iter().filter(|(s, _)| *s < end) {
            view.set(s, Some(m));
        }
        st.resize(new, view.iter(), after_write)
            .map_err(|e| LiveError(format!("recording the new size: {e}")))?;
        drop(st);
        let engine = c
            .engine
            .resized(new.slots)
            .map_err(|e| LiveError(format!("rebuilding the cache for the new size: {e}")))?;
        c.engine = engine;
        let _ = c.engine.take_touched();
        c.view = view;
        // The what-if sizes are multiples of the cache's size: start again.
        if c.whatif.is_some() {
            let w = crate::whatif::WhatIf::new(c.engine.config(), new.slots as u64);
            c.whatif = Some(Box::new(w));
        }
        c.sched = tiercache_azor_policy::cleaning::CleaningScheduler::new(
            c.engine.config().cleaning,
            new.slots as u64,
            c.engine.dirty_target_lines() as u64,
        );
        let gone = |s: &tiercache_azor_policy::eviction::Slot| *s < end;
        c.withdrawn.retain(|s, _| gone(s));
        c.slot_gen.retain(|s, _| gone(s));
        c.inflight_writes.retain(|s, _| gone(s));
        c.pending_unmap.retain(|s, _| gone(s));
        c.wb_slots.retain(|s, _| gone(s));
        c.poisoned.retain(|(s, _), _| gone(s));
        c.dropped_subs.retain(|(s, _), _| gone(s));
        drop(c);
        self.committed.send_modify(|c| *c = (*c).max(gen));
        Ok(Some(past.len() as u64))
    }
}
