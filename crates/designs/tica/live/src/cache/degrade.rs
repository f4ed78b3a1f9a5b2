//! Device failure: writing dirty pages back from the surviving copies,
//! recording the failure on the surviving SSD, and continuing degraded.
//!
//! Degrading is resumable: the first SSD error switches every request to
//! the degraded paths at once (writes go through to the backing device and
//! take their page off the write-back list; reads of a page still on the
//! list come from DRAM or the surviving SSD) and records the dirty pages to
//! write back. The write-back, the backing flush and the note on the
//! surviving SSD then run until they are done: a backing or surviving-SSD
//! error fails the request that met it and leaves the rest for the next
//! request, FLUSH or FUA write, which succeeds only once every step is
//! done. Until then the pair on disk is what it was before the failure
//! (recovery trusts it and gets every write a FLUSH covered); after, the
//! backing device holds everything and the note makes the next start
//! refuse the pair. No step ever runs twice from a half-done state.

use std::collections::BTreeSet;

use super::State;
use super::{CacheError, Degraded};
use crate::pair::{PairInfo, Role};
use tiercache_tica_policy::Page;

/// Degrading not yet finished (see the module documentation).
pub(super) struct DegradeWork {
    /// Dirty pages not yet written back (their newest copy is in DRAM or
    /// on the surviving SSD).
    pending: BTreeSet<Page>,
    /// The surviving SSD's superblock once its store was dropped, until
    /// the note is on it.
    survivor_sb: Option<tiercache_store::Superblock>,
}

impl State {
    /// Handle the failure of SSD `failed`: degrade at once, then write back
    /// and mark the pair (resumed by later calls if a step fails).
    pub(super) fn degrade(&mut self, failed: Role, why: &str) -> Result<(), CacheError> {
        let _slow = super::inline::SlowIo::enter(&self.slow);
        if self.degraded.is_none() {
            let dev_name = self.ssd(failed).name.clone();
            eprintln!(
                "tiercache: {} {dev_name} FAILED ({why}); writing dirty data back to the backing device \
                 from the surviving copies and continuing DEGRADED (write-through, no SSD levels)",
                failed.label()
            );
            tracing::error!(device = %dev_name, "{} failed: {why}", failed.label());
            self.work = Some(DegradeWork {
                pending: self.dirty_pages().into_iter().collect(),
                survivor_sb: None,
            });
            self.degraded = Some(Degraded {
                failed,
                reason: why.to_string(),
                written_back: 0,
                lost: 0,
                since: std::time::SystemTime::now(),
            });
        }
        self.finish_degrade()
    }

    /// Whether page `p` still waits for its write-back (its newest copy is
    /// in DRAM or on the surviving SSD, not on the backing device).
    pub(super) fn degrade_pending(&self, p: Page) -> bool {
        self.work.as_ref().is_some_and(|w| w.pending.contains(&p))
    }

    /// Page `p` went to the backing device (a degraded write) or was
    /// trimmed: nothing older of it is written back.
    pub(super) fn degrade_forget(&mut self, p: Page) {
        if let Some(w) = &mut self.work {
            w.pending.remove(&p);
        }
    }

    /// Read page `p` while degraded: DRAM, else the surviving SSD while its
    /// write-back is pending, else the backing device.
    pub(super) fn degraded_read(&mut self, p: Page) -> Result<Vec<u8>, CacheError> {
        if let Some(d) = self.dram.get(&p) {
            self.counters.degraded_dram_reads += 1;
            return Ok(d.data.clone());
        }
        if self.degrade_pending(p) {
            if let Some(d) = self.pending_copy(p)? {
                return Ok(d);
            }
        }
        self.counters.degraded_backing_reads += 1;
        self.backing_read(p)
    }

    /// The newest copy of a pending page outside DRAM: the surviving SSD's,
    /// else (no second copy) the failed SSD's if it still reads; `None` if
    /// there is none.
    fn pending_copy(&mut self, p: Page) -> Result<Option<Vec<u8>>, CacheError> {
        let Some(failed) = self.degraded.as_ref().map(|d| d.failed) else {
            return Ok(None);
        };
        let survivor = failed.peer();
        if self.ssd(survivor).get(p).is_some() {
            return self.ssd(survivor).read(p).map(Some).map_err(|e| {
                CacheError(format!(
                    "page {p}: its surviving copy failed to read too (retried later): {}",
                    e.0
                ))
            });
        }
        if self.ssd(failed).get(p).is_some() {
            return Ok(self.ssd(failed).read(p).ok());
        }
        Ok(None)
    }

    /// Run the steps of degrading that are not done yet.
    pub(super) fn finish_degrade(&mut self) -> Result<(), CacheError> {
        let Some(failed) = self.degraded.as_ref().map(|d| d.failed) else {
            return Ok(());
        };
        let survivor = failed.peer();
        while let Some(p) = self.work.as_ref().and_then(|w| w.pending.first().copied()) {
            let data = match self.dram.get(&p) {
                Some(d) => Some(d.data.clone()),
                None => self.pending_copy(p)?,
            };
            match data {
                Some(d) => {
                    self.backing_write(p, &d)?;
                    self.degraded.as_mut().expect("degraded").written_back += 1;
                }
                None => {
                    eprintln!(
                        "tiercache: page {p} LOST: no readable copy outside the failed {}",
                        failed.label()
                    );
                    self.degraded.as_mut().expect("degraded").lost += 1;
                }
            }
            self.degrade_forget(p);
        }
        let Some(abandoned) = self.work.as_ref().map(|w| w.survivor_sb.is_some()) else {
            return Ok(());
        };
        self.backing_flush()?;
        if !abandoned {
            for d in self.dram.values_mut() {
                d.dirty = false;
            }
            // The surviving SSD gets a note (one atomic superblock update,
            // see `mark_peer_failed`), so that no later start trusts the
            // failed device's (now stale) metadata.
            self.ssd(failed).abandon();
            let sb = self.ssd(survivor).abandon();
            let w = self.work.as_mut().expect("degrading");
            w.survivor_sb = sb;
        }
        let sb = self.work.as_ref().and_then(|w| w.survivor_sb.clone());
        if let Some(sb) = sb {
            let surv_dev = std::sync::Arc::clone(&self.ssd(survivor).dev);
            if let Ok(info) = serde_json::from_str::<PairInfo>(&sb.policy) {
                let reason = self.degraded.as_ref().map(|d| d.reason.clone());
                let note = format!("{} failed: {}", failed.label(), reason.unwrap_or_default());
                crate::pair::mark_peer_failed(&surv_dev, &sb, info, &note).map_err(|e| {
                    CacheError(format!(
                        "could not record the failure on the surviving {} (retried at the next FLUSH): {e:#}",
                        survivor.label()
                    ))
                })?;
            }
        }
        self.work = None;
        let d = self.degraded.as_ref().expect("degraded");
        eprintln!(
            "tiercache: degraded: {} dirty pages written back{}; the backing device is complete",
            d.written_back,
            if d.lost > 0 {
                format!(", {} LOST", d.lost)
            } else {
                String::new()
            }
        );
        Ok(())
    }
}
