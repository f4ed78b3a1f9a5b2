//! Resizing the SSDs while the cache serves (`tiercache resize`): each SSD
//! named (both by default) gets the new size; the policy's SSD capacity
//! follows the smaller SSD ([`crate::open::policy_ssd_pages`]).
//!
//! Each SSD's size lives in its store's superblock, written by the store's
//! crash-consistent resize (a checkpoint first when shrinking, then both
//! superblock copies, each synced; the newer valid one wins), so a crash at
//! any write recovers that SSD at its old size or its new one. The two SSDs
//! are resized one after the other: a crash between them leaves one at its
//! new size and the other at its old, which is a valid pair (the policy
//! takes the smaller); `resize` again completes it.
//!
//! - **grow**: an SSD file is extended first (a block device must hold the
//!   new size already), then, under the cache's lock with every record
//!   committed, the superblock records the new layout; the new slots are
//!   taken only after that, and the policy's capacity grows;
//! - **shrink**: under the lock, the policy's capacity drops first (its
//!   least recently used pages leave both SSDs, a dirty one written back
//!   to the backing device, flushed, before its unmap is committed, as for
//!   any victim), and writes take only slots below the new end from then
//!   on. The pages past the new end are then moved below it, a batch per
//!   lock hold while requests are served in between: each is read and
//!   written again into a free slot with the same dirty state, and the
//!   unmap of its old slot goes into the same commit as its new mapping, so
//!   a crash finds it in one slot or the other, and a dirty page never has
//!   fewer than two copies (its other copy, in DRAM or on the other SSD,
//!   is untouched). Last, under the lock, everything is committed, the
//!   store checkpoints the table (no page past the new end) and records
//!   the new layout, and only then is an SSD file cut (a block device keeps
//!   its size; its tail is no longer used).
//!
//! FLUSH and FUA requests take the lock like every request and mean what
//! they always mean; a request waits at most for one batch of evictions or
//! moves, or the final commit and superblock writes: after each hold the
//! resize pauses as long as it held the lock (the lock is not fair), and
//! while it holds it an inline request goes to the request threads.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tiercache_runtime::resize::MetadataWrites;
use tiercache_store::Layout;

use super::{CacheError, Fault, State, ThreeLevel};
use crate::open::policy_ssd_pages;
use crate::pair::{Role, PAGE};

pub use tiercache_runtime::resize::STOP_AT_ENV;

/// Pages evicted, or moved below the new end, per hold of the lock.
const BATCH: usize = 256;
/// The shortest and the longest pause between two holds of the lock.
const PAUSE_MIN: Duration = Duration::from_micros(200);
const PAUSE_MAX: Duration = Duration::from_millis(20);

/// One SSD's part of a resize.
#[derive(Clone, Copy)]
struct Step {
    role: Role,
    old: Layout,
    new: Layout,
}

impl State {
    fn ssd_ref(&self, role: Role) -> &crate::ssd::Ssd {
        match role {
            Role::RoSsd => &self.ro,
            Role::WoSsd => &self.wo,
        }
    }

    /// A fault during a resize as one line; an SSD fault degrades the cache.
    fn resize_fault(&mut self, f: Fault) -> CacheError {
        match f {
            Fault::Ssd(role, why) => {
                let e = self.degrade(role, &why).err();
                CacheError(format!(
                    "the {} failed ({why}); the cache runs degraded{}",
                    role.label(),
                    e.map(|e| format!(" ({e})")).unwrap_or_default()
                ))
            }
            Fault::Other(e) => CacheError(e),
        }
    }

    /// Move page `p` of SSD `role` below its usable end if it lies past
    /// it (a commit first when no slot is free). Returns whether it moved.
    fn move_page(
        &mut self,
        role: Role,
        p: tiercache_tica_policy::Page,
    ) -> Result<bool, CacheError> {
        let r = self.ensure_slot(role).and_then(|_| {
            self.ssd(role)
                .move_below_usable(p)
                .map_err(|e| Fault::Ssd(role, e.0))
        });
        r.map_err(|f| self.resize_fault(f))
    }

    /// The policy's SSD capacity for the SSDs' sizes now: each SSD at
    /// `slots(role)` slots.
    fn capacity_for(&self, slots: impl Fn(Role) -> usize) -> usize {
        policy_ssd_pages(slots(Role::RoSsd).min(slots(Role::WoSsd)))
    }

    /// Set the policy's capacity to fit the SSDs' usable slots, evicting
    /// (and writing back) its least recently used pages when it shrinks;
    /// the victims' unmaps are committed after the backing device is flushed.
    fn set_capacity(&mut self, pages: usize) -> Result<u64, CacheError> {
        let before = self.tica.wo_len();
        let mut ops = Vec::new();
        self.tica.set_ssd_pages(pages, &mut ops);
        if ops.is_empty() {
            return Ok(0);
        }
        let r = self.exec(&ops, None).and_then(|_| self.commit_all());
        self.gc_dram();
        match r {
            Ok(()) => Ok((before - self.tica.wo_len()) as u64),
            Err(f) => {
                // Victims whose write-back failed go back into the policy.
                let mut none = Vec::new();
                self.tica.set_ssd_pages(before.max(pages), &mut none);
                self.resync_policy();
                Err(match f {
                    Fault::Other(e) => CacheError(format!(
                        "the pages the smaller SSDs have no room for cannot be written back now ({e}); the sizes are unchanged"
                    )),
                    f => self.resize_fault(f),
                })
            }
        }
    }
}

impl ThreeLevel {
    /// Resize the SSD `device` names (a path of either SSD), or both, to
    /// `size` bytes (see the module doc). Answers what changed; refuses
    /// with one line what cannot be done, having changed nothing.
    pub fn resize(&self, size: u64, device: Option<&Path>) -> Result<Value, CacheError> {
        let _one = self.resizing.lock().unwrap_or_else(|e| e.into_inner());
        let started = Instant::now();
        let steps = self.plan_resize(size, device)?;
        if steps.is_empty() {
            let s = self.lock();
            let (ro, wo) = (s.ro.slots(), s.wo.slots());
            return Ok(json!({
                "ok": true,
                "message": format!("nothing to do: the SSDs already hold {ro} (RO-SSD) and {wo} (WO-SSD) pages at {size} bytes"),
                "devices": [], "ro_slots": ro, "wo_slots": wo, "slots": wo, "old_slots": wo,
                "ssd_pages": s.tica.config().ssd_pages, "moved_pages": 0, "evicted_pages": 0,
                "seconds": started.elapsed().as_secs_f64(), "paused_seconds": 0.0, "metadata_writes": 0,
            }));
        }
        let writes = MetadataWrites::from_env();
        let after_write = || writes.done();
        let mut longest_hold = Duration::ZERO;
        let mut moved = 0u64;
        let mut evicted = 0u64;
        let grows: Vec<Step> = steps
            .iter()
            .copied()
            .filter(|s| s.new.slots > s.old.slots)
            .collect();
        let shrinks: Vec<Step> = steps
            .iter()
            .copied()
            .filter(|s| s.new.slots < s.old.slots)
            .collect();
        for st in &grows {
            longest_hold = longest_hold.max(self.grow(st, &after_write)?);
        }
        if !shrinks.is_empty() {
            let (hold, m, e) = self.shrink(&shrinks, &after_write)?;
            longest_hold = longest_hold.max(hold);
            moved += m;
            evicted += e;
        }
        let s = self.lock();
        let ssd_pages = s.tica.config().ssd_pages;
        let devices: Vec<Value> = steps
            .iter()
            .map(|st| {
                let x = s.ssd_ref(st.role);
                json!({
                    "role": st.role, "path": x.name, "old_slots": st.old.slots,
                    "slots": x.slots(), "device_bytes": x.layout().dev_size,
                })
            })
            .collect();
        let (ro, wo) = (s.ro.slots(), s.wo.slots());
        drop(s);
        let changed: Vec<String> = steps
            .iter()
            .map(|st| {
                format!(
                    "{} from {} to {} pages",
                    st.role.label(),
                    st.old.slots,
                    st.new.slots
                )
            })
            .collect();
        let message = format!(
            "resized {} in {:.3} s (requests waited at most {:.3} s); the policy caches {ssd_pages} pages{}",
            changed.join(", "),
            started.elapsed().as_secs_f64(),
            longest_hold.as_secs_f64(),
            match (moved, evicted) {
                (0, 0) => String::new(),
                (m, e) => format!(
                    "; {m} pages moved below the new end, {e} least recently used pages evicted"
                ),
            }
        );
        tracing::info!("{message}");
        Ok(json!({
            "ok": true,
            "message": message,
            "devices": devices,
            "ro_slots": ro,
            "wo_slots": wo,
            "slots": wo,
            "old_slots": steps.iter().find(|s| s.role == Role::WoSsd).map_or(wo as u32, |s| s.old.slots),
            "ssd_pages": ssd_pages,
            "moved_pages": moved,
            "evicted_pages": evicted,
            "seconds": started.elapsed().as_secs_f64(),
            "paused_seconds": longest_hold.as_secs_f64(),
            "metadata_writes": writes.count(),
        }))
    }

    /// The SSDs `device` names (both when `None`).
    fn resize_targets(&self, device: Option<&Path>) -> Result<Vec<Role>, CacheError> {
        let Some(dev) = device else {
            return Ok(vec![Role::RoSsd, Role::WoSsd]);
        };
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let want = canon(dev);
        for role in [Role::RoSsd, Role::WoSsd] {
            if canon(&self.info.path_of(role)) == want {
                return Ok(vec![role]);
            }
        }
        Err(CacheError(format!(
            "{} is not an SSD of this cache (its RO-SSD is {}, its WO-SSD {})",
            dev.display(),
            self.info.ro_ssd,
            self.info.wo_ssd
        )))
    }

    /// Each SSD's old and new layout, or why the resize cannot be done
    /// (nothing changed).
    fn plan_resize(&self, size: u64, device: Option<&Path>) -> Result<Vec<Step>, CacheError> {
        let roles = self.resize_targets(device)?;
        let s = self.lock();
        Self::check_open(&s)?;
        if let Some(d) = &s.degraded {
            return Err(CacheError(format!(
                "the {} failed and the cache runs degraded: it cannot be resized; format the pair again",
                d.failed.label()
            )));
        }
        if !size.is_multiple_of(PAGE) {
            return Err(CacheError(format!(
                "size {size} is not a multiple of 4 KiB"
            )));
        }
        let mut steps = Vec::new();
        for role in roles {
            let old = *s.ssd_ref(role).layout();
            let new = old.resized(size).map_err(|e| {
                CacheError(format!(
                    "the {}: {}",
                    role.label(),
                    match e {
                        tiercache_store::StoreError::InvalidParams(why) => why,
                        e => e.to_string(),
                    }
                ))
            })?;
            if new.slots != old.slots {
                steps.push(Step { role, old, new });
            }
        }
        let slots_after = |role: Role| {
            steps
                .iter()
                .find(|st| st.role == role)
                .map_or(s.ssd_ref(role).slots(), |st| st.new.slots as usize)
        };
        let smaller = slots_after(Role::RoSsd).min(slots_after(Role::WoSsd));
        if smaller < 2 {
            return Err(CacheError(format!(
                "the SSDs would hold {smaller} pages: too small for a cache"
            )));
        }
        let largest = [Role::RoSsd, Role::WoSsd]
            .into_iter()
            .map(|r| {
                steps
                    .iter()
                    .find(|st| st.role == r)
                    .map_or(s.ssd_ref(r).layout().dev_size, |st| st.new.dev_size)
            })
            .max()
            .unwrap_or(size);
        crate::memory::check_fits("a", largest, self.info.dram_bytes)
            .map_err(|e| CacheError(format!("{e:#}")))?;
        Ok(steps)
    }

    /// Grow one SSD; returns how long the lock was held.
    fn grow(&self, st: &Step, after_write: &dyn Fn()) -> Result<Duration, CacheError> {
        let dev = std::sync::Arc::clone(&self.lock().ssd_ref(st.role).dev);
        dev.set_len(st.new.dev_size)
            .map_err(|e| CacheError(format!("cannot grow the {}: {e}", st.role.label())))?;
        after_write();
        let _slow = super::inline::SlowIo::enter(&self.slow);
        let mut s = self.lock();
        let held = Instant::now();
        let r = Self::check_open(&s)
            .and_then(|_| s.commit_all().map_err(|f| s.resize_fault(f)))
            .and_then(|_| {
                s.ssd(st.role).resize(st.new, after_write).map_err(|e| {
                    let why = e.0.clone();
                    s.resize_fault(Fault::Ssd(st.role, why))
                })
            });
        if let Err(e) = r {
            drop(s);
            // The superblock keeps the old size: give the file back.
            let _ = dev.set_len(st.old.dev_size);
            return Err(e);
        }
        let cap = s.capacity_for(|r| s.ssd_ref(r).slots());
        s.set_capacity(cap)?;
        Ok(held.elapsed())
    }

    /// Shrink the SSDs of `steps`; returns the longest hold of the lock,
    /// the pages moved and the pages evicted.
    fn shrink(
        &self,
        steps: &[Step],
        after_write: &dyn Fn(),
    ) -> Result<(Duration, u64, u64), CacheError> {
        let mut longest = Duration::ZERO;
        let mut evicted = 0;
        let r = self
            .lower_capacity(steps, &mut evicted, &mut longest)
            .and_then(|_| self.move_and_record(steps, after_write, &mut longest));
        if r.is_err() {
            // Nothing recorded: the SSDs keep their sizes and the policy
            // its capacity.
            let mut s = self.lock();
            if s.degraded.is_none() && !s.closed {
                for st in steps {
                    let old = s.ssd_ref(st.role).slots();
                    s.ssd(st.role).set_usable(old);
                }
                let cap = s.capacity_for(|r| s.ssd_ref(r).slots());
                let _ = s.set_capacity(cap);
            }
        }
        let moved = r?;
        for st in steps {
            let dev = std::sync::Arc::clone(&self.lock().ssd_ref(st.role).dev);
            match dev.set_len(st.new.dev_size) {
                Ok(()) => after_write(),
                Err(e) => tracing::warn!(
                    "resize: the {} now uses {} bytes, but cutting its file failed: {e}",
                    st.role.label(),
                    st.new.dev_size
                ),
            }
        }
        Ok((longest, moved, evicted))
    }

    /// Lower the policy's capacity to the new sizes, a batch of victims
    /// per hold of the lock, then let writes take only slots below the new
    /// ends. Adds the pages evicted to `evicted`.
    fn lower_capacity(
        &self,
        steps: &[Step],
        evicted: &mut u64,
        longest: &mut Duration,
    ) -> Result<(), CacheError> {
        let new_of = |role: Role| steps.iter().find(|st| st.role == role);
        loop {
            let done = self.step(longest, |s| {
                Self::check_open(s)?;
                if s.degraded.is_some() {
                    return Err(CacheError(
                        "an SSD failed during the resize; the cache runs degraded".into(),
                    ));
                }
                let cap = s.capacity_for(|r| {
                    new_of(r).map_or(s.ssd_ref(r).slots(), |st| st.new.slots as usize)
                });
                if s.tica.config().ssd_pages > cap {
                    let step = s.tica.wo_len().saturating_sub(BATCH).max(cap);
                    *evicted += s.set_capacity(step)?;
                    return Ok(false);
                }
                for st in steps {
                    s.ssd(st.role).set_usable(st.new.slots as usize);
                }
                Ok(true)
            })?;
            if done {
                return Ok(());
            }
        }
    }

    /// Move the pages past each new end below it, a batch per hold of the
    /// lock, then commit and record the new layouts. Returns the pages moved.
    fn move_and_record(
        &self,
        steps: &[Step],
        after_write: &dyn Fn(),
        longest: &mut Duration,
    ) -> Result<u64, CacheError> {
        let mut moved = 0u64;
        for st in steps {
            let end = st.new.slots as usize;
            let pages = self.lock().ssd_ref(st.role).pages_past(end);
            for batch in pages.chunks(BATCH) {
                self.step(longest, |s| {
                    Self::check_open(s)?;
                    if s.degraded.is_some() {
                        return Err(CacheError(
                            "an SSD failed during the resize; the cache runs degraded".into(),
                        ));
                    }
                    for &p in batch {
                        moved += s.move_page(st.role, p)? as u64;
                    }
                    Ok(())
                })?;
            }
        }
        self.step(longest, |s| {
            Self::check_open(s)?;
            // Pages that came past the end meanwhile (none should: writes
            // take slots below it) move now.
            for st in steps {
                for p in s.ssd_ref(st.role).pages_past(st.new.slots as usize) {
                    moved += s.move_page(st.role, p)? as u64;
                }
            }
            s.commit_all().map_err(|f| s.resize_fault(f))?;
            for st in steps {
                s.ssd(st.role).resize(st.new, after_write).map_err(|e| {
                    let why = e.0.clone();
                    s.resize_fault(Fault::Ssd(st.role, why))
                })?;
            }
            Ok(())
        })?;
        Ok(moved)
    }

    /// One step of a resize under the lock: marked as slow I/O first (an
    /// inline request goes to the request threads instead of waiting on a
    /// runtime worker), then, after it, a pause as long as the hold (within
    /// [`PAUSE_MIN`]..[`PAUSE_MAX`]), so that the requests waiting get the
    /// lock (it is not fair: the next step would take it again at once).
    fn step<R>(&self, longest: &mut Duration, f: impl FnOnce(&mut State) -> R) -> R {
        let held;
        let r = {
            let _slow = super::inline::SlowIo::enter(&self.slow);
            let mut s = self.lock();
            let t = Instant::now();
            let r = f(&mut s);
            held = t.elapsed();
            r
        };
        *longest = (*longest).max(held);
        std::thread::sleep(held.clamp(PAUSE_MIN, PAUSE_MAX));
        r
    }
}

/// The device a `resize` control request names (`"device"`), if any.
pub fn requested_device(request: &Value) -> Option<PathBuf> {
    request["device"].as_str().map(PathBuf::from)
}
