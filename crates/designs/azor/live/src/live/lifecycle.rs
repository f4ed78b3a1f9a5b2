//! Lifecycle: draining everything to the backing device (`flush_all`) and
//! the clean shutdown that checkpoints and marks the superblock clean.

use super::LiveCache;
use super::LiveError;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tiercache_azor_policy::OpId;

impl LiveCache {
    /// Whether a clean shutdown started (writes and trims are refused).
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Clean every dirty line and commit: the backing device then holds all data.
    pub async fn flush_all(self: &Arc<Self>) -> Result<(), LiveError> {
        loop {
            let errors = self.stats.backing_errors.load(Ordering::Relaxed);
            let n = self.clean_step(256, true).await;
            self.stats
                .forced_cleaned_lines
                .fetch_add(n as u64, Ordering::Relaxed);
            // Writebacks the background cleaner started: their lines count as
            // clean in the core already, but are clean only once these land
            // (a failure makes them dirty again).
            let others: Vec<OpId> = self
                .core
                .lock()
                .expect("core")
                .wb_write_slots
                .keys()
                .copied()
                .collect();
            for w in others {
                self.wait_op(w).await;
            }
            // Done only when nothing is dirty and no writeback is in flight:
            // the background cleaner may have taken lines again meanwhile
            // (clean in the core, but not yet on the backing device).
            let (dirty, in_flight) = {
                let c = self.core.lock().expect("core");
                (c.engine.dirty_lines(), !c.wb_write_slots.is_empty())
            };
            if n == 0 && dirty == 0 && !in_flight {
                break;
            }
            if (dirty > 0 || in_flight)
                && self.stats.backing_errors.load(Ordering::Relaxed) > errors
            {
                // Retrying forever would hang flush and detach: report it; the data stays dirty.
                return Err(LiveError(format!(
                    "backing device failed writeback: {dirty} lines are still dirty or being written back (kept in the cache)"
                )));
            }
            if n == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        }
        self.commit(true).await
    }

    /// Clean shutdown: stop cleaning and writes, let the ops in flight finish,
    /// commit (flushing the backing device), then checkpoint the table and
    /// mark the superblock clean with the backing device's identity as it is
    /// now. Write-back overwrites in place (rule 3b) stop first, so the
    /// checkpoint describes every such write; a recovery from it trusts clean
    /// bits again. If ops are still in flight after 30 s (a client keeps
    /// reading), or the backing path is unknown, only the checkpoint is
    /// written and the superblock stays "open" (the next start recovers as
    /// after a crash, which is always safe).
    pub async fn shutdown(self: &Arc<Self>) -> Result<(), LiveError> {
        self.close(false).await
    }

    /// Clean shutdown after a detach ([`LiveCache::flush_all`] left nothing
    /// dirty): as [`LiveCache::shutdown`], but the checkpoint is of an empty
    /// table and the superblock is marked detached, so the next `serve`
    /// starts cold whatever the backing device holds by then. Without the
    /// backing identity the empty checkpoint alone is written: the next
    /// start recovers as after a crash, from an empty table.
    pub async fn shutdown_detached(self: &Arc<Self>) -> Result<(), LiveError> {
        self.close(true).await
    }

    async fn close(self: &Arc<Self>, detach: bool) -> Result<(), LiveError> {
        self.stopping.store(true, Ordering::Release);
        self.core.lock().expect("core").fast_overwrite = false;
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let drained = loop {
            if self.core.lock().expect("core").signals.is_empty() {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        };
        self.commit(true).await?;
        let path = self.backing_path.lock().expect("backing path").clone();
        let identity = match (&path, drained) {
            (Some(p), true) => {
                let p = p.clone();
                match tokio::task::spawn_blocking(move || tiercache_io::probe_identity(&p)).await {
                    Ok(Ok(id)) => Some(id),
                    Ok(Err(e)) => {
                        tracing::warn!("clean shutdown: probing the backing device: {e}; the next start recovers as after a crash");
                        None
                    }
                    Err(e) => return Err(LiveError(e.to_string())),
                }
            }
            (_, false) => {
                tracing::warn!("clean shutdown: ops still in flight after 30 s; the next start recovers as after a crash");
                None
            }
            (None, true) => None,
        };
        let me = Arc::clone(self);
        let _g = self.commit_lock.lock().await;
        let gen = tokio::task::spawn_blocking(move || -> Result<u64, LiveError> {
            let mut c = me.core.lock().expect("core");
            let mut st = me.store.lock().expect("store");
            // Records appended since the commit (a late read's fill): commit them
            // first, as `commit` does before its checkpoints.
            let recs = std::mem::take(&mut c.pending);
            if std::mem::take(&mut c.needs_backing_flush) {
                me.backing
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
            let table = tiercache_store::table_entries(&c.view);
            match (identity, detach) {
                (Some(id), false) => st
                    .mark_clean(table, &id)
                    .map_err(|e| LiveError(format!("clean shutdown: {e}")))?,
                (Some(id), true) => st
                    .detach(table, &id)
                    .map_err(|e| LiveError(format!("detach: {e}")))?,
                (None, false) => st
                    .checkpoint(table)
                    .map_err(|e| LiveError(format!("checkpoint: {e}")))?,
                (None, true) => st
                    .checkpoint(std::iter::empty())
                    .map_err(|e| LiveError(format!("checkpoint: {e}")))?,
            }
            Ok(gen)
        })
        .await
        .unwrap_or_else(|e| Err(LiveError(e.to_string())))?;
        self.committed.send_modify(|c| *c = (*c).max(gen));
        Ok(())
    }
}
