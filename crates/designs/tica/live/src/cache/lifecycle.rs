//! Lifecycle: writing everything back and the clean shutdown.

use super::CacheError;
use super::ThreeLevel;

impl ThreeLevel {
    /// Write every dirty page back to the backing device and flush it
    /// (control `flush`). Returns the pages written.
    pub fn write_back_all(&self) -> Result<u64, CacheError> {
        let mut s = self.lock();
        Self::check_open(&s)?;
        s.write_back_all()
    }

    /// Clean shutdown: finish the flusher's work, commit, and close both
    /// stores (a warm restart keeps both SSDs' contents). With `detach`,
    /// every dirty page is written back first: the backing device alone is
    /// then complete.
    pub fn shutdown(&self, detach: bool) -> Result<(), CacheError> {
        self.stop_background();
        let mut s = self.lock();
        if s.closed {
            return Ok(());
        }
        if detach {
            s.write_back_all()?;
        } else {
            while s.flush_some(256)? > 0 {}
        }
        s.flush()?;
        s.closed = true;
        if s.degraded.is_some() {
            return Ok(());
        }
        let id = tiercache_io::probe_identity(&self.backing_path)
            .map_err(|e| CacheError(format!("probing the backing device: {e}")))?;
        // The WO-SSD first: a crash between the two leaves the RO-SSD
        // unclean, and recovery then ignores it. A detach empties both
        // (the next open starts cold); a crash between them leaves the
        // RO-SSD's pages, which are not on the (empty) WO-SSD, so recovery
        // drops them.
        if detach {
            s.wo.detach(&id).map_err(|e| CacheError(e.0))?;
            s.ro.detach(&id).map_err(|e| CacheError(e.0))?;
        } else {
            s.wo.close(&id).map_err(|e| CacheError(e.0))?;
            s.ro.close(&id).map_err(|e| CacheError(e.0))?;
        }
        Ok(())
    }
}
