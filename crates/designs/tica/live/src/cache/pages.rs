//! Page accesses: reading, peeking and writing one page through the policy.

use super::State;
use super::{CacheError, Fault};
use crate::pair::Role;
use tiercache_tica_policy::Architecture;
use tiercache_tica_policy::{Op, Page};

impl State {
    /// Read one page (healthy or degraded).
    pub(super) fn read_page(&mut self, p: Page) -> Result<Vec<u8>, CacheError> {
        loop {
            if self.degraded.is_some() {
                return self.degraded_read(p);
            }
            let mut ops = Vec::new();
            self.tica.access(p, false, &mut ops);
            if let Some(d) = self.read_ops(p, &ops)? {
                return Ok(d);
            }
        }
    }

    /// Run the ops of the policy's read of page `p`: its bytes, or `None`
    /// when an SSD failed and the cache degraded (read it again).
    pub(super) fn read_ops(&mut self, p: Page, ops: &[Op]) -> Result<Option<Vec<u8>>, CacheError> {
        match self.exec(ops, None) {
            Ok(mut bufs) => {
                self.gc_dram();
                bufs.remove(&p)
                    .map(Some)
                    .ok_or_else(|| CacheError(format!("internal: no op read page {p}")))
            }
            Err(Fault::Ssd(role, why)) => {
                self.degrade(role, &why)?;
                Ok(None)
            }
            Err(Fault::Other(e)) => {
                self.counters.errors += 1;
                if !self.tica.on_wo(p) {
                    // A failed miss: the policy placed the page in DRAM
                    // without data; forget it there.
                    let mut trims = Vec::new();
                    self.tica.trim(p, &mut trims);
                    self.dram.remove(&p);
                }
                self.resync_policy();
                Err(CacheError(e))
            }
        }
    }

    /// The current contents of a page without touching the policy's order
    /// (the old bytes of a partial write).
    pub(super) fn peek_page(&mut self, p: Page) -> Result<Vec<u8>, CacheError> {
        if let Some(d) = self.dram.get(&p) {
            return Ok(d.data.clone());
        }
        if self.degraded.is_none() {
            let role = if self.ro.get(p).is_some() {
                Some(Role::RoSsd)
            } else if self.wo.get(p).is_some() {
                Some(Role::WoSsd)
            } else {
                None
            };
            if let Some(role) = role {
                match self.ssd(role).read(p) {
                    Ok(d) => return Ok(d),
                    Err(e) => {
                        self.degrade(role, &e.0)?;
                        return self.peek_page(p);
                    }
                }
            }
            return self.backing_read(p);
        }
        self.degraded_read(p)
    }

    /// Write one whole page.
    pub(super) fn write_page(&mut self, p: Page, data: &[u8]) -> Result<(), CacheError> {
        loop {
            if self.degraded.is_some() {
                self.backing_write(p, data)?;
                self.degrade_forget(p);
                if let Some(d) = self.dram.get_mut(&p) {
                    d.data.copy_from_slice(data);
                    d.dirty = false;
                }
                self.counters.degraded_writes += 1;
                return Ok(());
            }
            let mut ops = std::mem::take(&mut self.ops);
            ops.clear();
            self.tica.access(p, true, &mut ops);
            let r = self.exec(&ops, Some((p, data)));
            self.ops = ops;
            match r {
                Ok(_) => {
                    self.gc_dram();
                    return Ok(());
                }
                Err(Fault::Ssd(role, why)) => self.degrade(role, &why)?,
                Err(Fault::Other(e)) => {
                    self.counters.errors += 1;
                    // The write failed half way: its page's contents are
                    // undefined; drop it everywhere (its older copies were
                    // already unmapped by the first ops).
                    let mut trims = Vec::new();
                    self.tica.trim(p, &mut trims);
                    self.dram.remove(&p);
                    let _ = self.ro.unmap(p);
                    let _ = self.wo.unmap(p);
                    self.resync_policy();
                    return Err(CacheError(e));
                }
            }
        }
    }
}
