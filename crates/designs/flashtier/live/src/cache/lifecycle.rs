//! Lifecycle: writing every dirty block back and the clean shutdown.

use super::LogCache;
use super::{err, Res};

impl LogCache {
    /// Write every dirty block back, flush the backing device and
    /// checkpoint (the `flush` control command). Returns how many.
    pub fn write_back_all(&self) -> Res<u64> {
        let mut st = self.lock()?;
        let before = st.counters.written_back;
        st.clean_cursor = 0;
        while st.map.dirty() > 0 {
            if self.write_back_some(&mut st, 1024)? == 0 {
                break;
            }
        }
        self.flush_locked(&mut st)?;
        self.checkpoint(&mut st)?;
        Ok(st.counters.written_back - before)
    }

    /// Clean shutdown: everything durable, a checkpoint, the superblock
    /// marked clean with the backing device's identity as it is now. With
    /// `detach`, every dirty block is written back first, so the backing
    /// device alone holds all data, and the checkpoint is empty (written
    /// before the superblock says detached): the next open starts cold,
    /// after a crash too. Without the backing identity (its probe failed)
    /// the superblock stays open: the next start recovers as after a crash.
    pub fn shutdown(&self, detach: bool) -> Res<()> {
        self.stop_cleaner();
        if detach {
            self.write_back_all()?;
        }
        let mut st = self.lock()?;
        self.flush_locked(&mut st)?;
        self.checkpoint(&mut st)?;
        if detach {
            let dirty = st.map.dirty();
            if dirty > 0 {
                return Err(err(format!(
                    "detach: {dirty} blocks are still dirty (kept in the cache)"
                )));
            }
            self.write_checkpoint(&mut st, true)?;
        }
        let identity = match tiercache_io::probe_identity(&self.backing_path) {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::warn!(
                    "clean shutdown: probing the backing device: {e}; the next start recovers as after a crash"
                );
                None
            }
        };
        st.sb.clean = identity.is_some();
        st.sb.detached = detach && identity.is_some();
        if identity.is_some() {
            st.sb.identity = identity;
        }
        let mut sb = st.sb.clone();
        sb.write(self.cache.as_ref())
            .map_err(|e| err(format!("cache device: writing the superblock: {e}")))?;
        st.sb = sb;
        st.closed = true;
        Ok(())
    }
}
