//! Device failure: writing dirty pages back from the surviving copies,
//! rewriting the surviving SSD empty, and continuing degraded.

use super::State;
use super::{CacheError, Degraded};
use crate::pair::{PairInfo, Role};
use std::sync::Arc;

impl State {
    /// Handle the failure of SSD `failed` (see the module documentation).
    pub(super) fn degrade(&mut self, failed: Role, why: &str) -> Result<(), CacheError> {
        if self.degraded.is_some() {
            return Ok(());
        }
        let dev_name = self.ssd(failed).name.clone();
        eprintln!(
            "tiercache: {} {dev_name} FAILED ({why}); writing dirty data back to the backing device \
             from the surviving copies and continuing DEGRADED (write-through, no SSD levels)",
            failed.label()
        );
        tracing::error!(device = %dev_name, "{} failed: {why}", failed.label());
        let survivor = failed.peer();
        let pages = self.dirty_pages();
        let (mut written, mut lost) = (0u64, 0u64);
        for &p in &pages {
            let in_dram = self.dram.get(&p).map(|d| d.data.clone());
            let on_survivor = self.ssd(survivor).get(p).is_some();
            let data = match in_dram {
                Some(d) => Some(d),
                None if on_survivor => match self.ssd(survivor).read(p) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        eprintln!(
                            "tiercache: page {p} LOST: its surviving copy failed too: {}",
                            e.0
                        );
                        None
                    }
                },
                None => {
                    eprintln!(
                        "tiercache: page {p} LOST: no copy outside the failed {}",
                        failed.label()
                    );
                    None
                }
            };
            match data {
                Some(d) => {
                    self.backing_write(p, &d)?;
                    written += 1;
                }
                None => lost += 1,
            }
        }
        self.backing_flush()?;
        for d in self.dram.values_mut() {
            d.dirty = false;
        }
        // The surviving SSD is rewritten empty with a note, so that no later
        // start trusts the failed device's (now stale) metadata.
        self.ssd(failed).abandon();
        let surv_dev = Arc::clone(&self.ssd(survivor).dev);
        if let Some(sb) = self.ssd(survivor).abandon() {
            if let Ok(info) = serde_json::from_str::<PairInfo>(&sb.policy) {
                let note = format!("{} failed: {why}", failed.label());
                if let Err(e) = crate::pair::mark_peer_failed(&surv_dev, &sb, info, &note) {
                    eprintln!(
                        "tiercache: could not record the failure on the surviving {}: {e:#}",
                        survivor.label()
                    );
                }
            }
        }
        eprintln!(
            "tiercache: degraded: {written} dirty pages written back{}; the backing device is complete",
            if lost > 0 {
                format!(", {lost} LOST")
            } else {
                String::new()
            }
        );
        self.degraded = Some(Degraded {
            failed,
            reason: why.to_string(),
            written_back: written,
            lost,
            since: std::time::SystemTime::now(),
        });
        Ok(())
    }
}
