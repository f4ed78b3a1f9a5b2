//! Online policy changes (`tiercache set`): the write policy, the dirty
//! target and the sequential cutoff of a running cache, recorded in the
//! superblock so that a restart keeps them.
//!
//! A write policy change keeps the crash rules (see `live`'s doc):
//! - leaving write-back first writes every dirty line back while requests
//!   keep being served (progress is reported), then pauses new requests,
//!   waits for every op in flight, cleans what the last requests dirtied,
//!   commits, and only then switches: every other policy expects the
//!   backing device to hold every line, and in-place overwrites without a
//!   commit (rule 3b) stop at the switch;
//! - entering write-back switches with no op in flight and records the new
//!   policy in the superblock before in-place overwrites start, so that a
//!   crash after any of them recovers as a write-back cache (every valid
//!   sub-block made dirty);
//! - the superblock is written (both copies, synced) before requests resume.
//!
//! The eviction policy cannot change online: the replacement state (ARC's
//! ghost lists, S3-FIFO's queues, LRU order) exists only for the policy the
//! cache was opened with.

use super::{policy_index, LiveCache, LiveError};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_azor_policy::eviction::EvictionKind;
use tiercache_azor_policy::WritePolicy;

/// What `tiercache set` asked for.
#[derive(Debug, Clone, Default)]
pub struct PolicyChange {
    pub write_policy: Option<WritePolicy>,
    /// A share of the lines, 0.0 to 1.0.
    pub dirty_target: Option<f64>,
    pub seq_cutoff: Option<u64>,
    pub eviction: Option<EvictionKind>,
}

impl PolicyChange {
    /// Parse the `set` control request; errors say what is allowed.
    pub fn from_request(r: &Value) -> Result<PolicyChange, String> {
        let mut c = PolicyChange::default();
        if let Some(v) = r.get("write_policy") {
            let s = v.as_str().ok_or("write_policy: expected a string")?;
            c.write_policy = Some(s.parse()?);
        }
        if let Some(v) = r.get("dirty_target") {
            let t = v.as_f64().filter(|t| (0.0..=1.0).contains(t));
            c.dirty_target = Some(t.ok_or("dirty_target: expected a share from 0.0 to 1.0")?);
        }
        if let Some(v) = r.get("seq_cutoff") {
            let b = v.as_u64().filter(|b| *b > 0);
            c.seq_cutoff = Some(b.ok_or("seq_cutoff: expected a size of at least 1 byte")?);
        }
        if let Some(v) = r.get("eviction") {
            let s = v.as_str().ok_or("eviction: expected a string")?;
            c.eviction = Some(s.parse()?);
        }
        Ok(c)
    }
}

/// Dirty lines at most left for the pause (pre-cleaning stops there).
const PRECLEAN_DONE: usize = 256;
/// Pre-cleaning gives up getting below [`PRECLEAN_DONE`] after this long
/// (a write load faster than cleaning); the pause then cleans the rest.
const PRECLEAN_MAX: Duration = Duration::from_secs(30);
/// Interval of progress reports.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

impl LiveCache {
    /// Apply `ch` (see the module doc). `progress` gets a JSON object with a
    /// `message` per step of a long change. Returns what changed.
    pub async fn change_policy(
        self: &Arc<Self>,
        ch: &PolicyChange,
        progress: &(dyn Fn(Value) + Send + Sync),
    ) -> Result<Value, LiveError> {
        let _one = self.set_lock.lock().await;
        self.check_change(ch)?;
        let old = self.write_policy();
        let mut cleaned = 0;
        let switch = ch.write_policy.filter(|p| *p != old);
        {
            let mut c = self.core.lock().expect("core");
            if let Some(t) = ch.dirty_target {
                c.engine.set_dirty_target(t).map_err(|e| LiveError(e.0))?;
            }
            if let Some(b) = ch.seq_cutoff {
                c.engine.set_seq_cutoff(b).map_err(|e| LiveError(e.0))?;
            }
        }
        if let Some(new) = switch {
            if old == WritePolicy::WriteBack {
                cleaned += self.preclean(progress).await?;
            }
            cleaned += self.switch_write_policy(old, new, progress).await?;
        } else {
            self.persist_policy()?;
        }
        let cfg = self.core.lock().expect("core").engine.config().clone();
        let mut changed = Vec::new();
        if let Some(n) = switch {
            changed.push(format!("write policy {old} -> {n}"));
        }
        if let Some(t) = ch.dirty_target {
            changed.push(format!("dirty target {:.1} %", t * 100.0));
        }
        if let Some(b) = ch.seq_cutoff {
            changed.push(format!("sequential cutoff {b} B"));
        }
        if changed.is_empty() {
            changed.push("nothing changed (the policy was already in force)".into());
        }
        Ok(json!({
            "ok": true,
            "message": format!(
                "{}{}; recorded in the superblock",
                changed.join(", "),
                if cleaned > 0 { format!(" ({cleaned} dirty lines written back first)") } else { String::new() }
            ),
            "cleaned_lines": cleaned,
            "dirty_lines": self.core.lock().expect("core").engine.dirty_lines(),
            "policy": {
                "write_policy": cfg.write_policy.to_string(),
                "dirty_target": cfg.dirty_target,
                "eviction": cfg.eviction.to_string(),
                "admission": cfg.admission.kind.to_string(),
                "seq_cutoff": cfg.admission.seq_cutoff_bytes,
            },
        }))
    }

    /// Refuse, before anything changes, what cannot be done online.
    fn check_change(&self, ch: &PolicyChange) -> Result<(), LiveError> {
        if self.is_stopping() {
            return Err(LiveError("the cache is shutting down".into()));
        }
        let c = self.core.lock().expect("core");
        if c.engine.is_degraded() {
            return Err(LiveError(
                "the cache device is failing (degraded): its policy cannot change; detach the cache".into(),
            ));
        }
        let cfg = c.engine.config();
        if let Some(e) = ch.eviction.filter(|e| *e != cfg.eviction) {
            return Err(LiveError(format!(
                "the eviction policy cannot change while serving (from {} to {e}): its replacement state (recency order, ghost lists, queues) exists only for the policy the cache was opened with; format the cache again with --eviction {e}",
                cfg.eviction
            )));
        }
        if ch.seq_cutoff.is_some()
            && cfg.admission.kind != tiercache_azor_policy::admission::AdmissionKind::SeqCutoff
        {
            return Err(LiveError(format!(
                "the sequential cutoff applies only to seq-cutoff admission, and this cache admits with {} (chosen at format)",
                cfg.admission.kind
            )));
        }
        Ok(())
    }

    /// Write dirty lines back while serving, until few are left.
    async fn preclean(
        self: &Arc<Self>,
        progress: &(dyn Fn(Value) + Send + Sync),
    ) -> Result<u64, LiveError> {
        let started = Instant::now();
        let mut last = Instant::now();
        let mut total = 0u64;
        loop {
            let dirty = self.core.lock().expect("core").engine.dirty_lines();
            if last.elapsed() >= PROGRESS_EVERY || dirty <= PRECLEAN_DONE {
                last = Instant::now();
                progress(json!({
                    "phase": "cleaning", "dirty_lines": dirty, "cleaned_lines": total,
                    "message": format!("leaving write-back: {dirty} lines dirty, {total} written back"),
                }));
            }
            if dirty <= PRECLEAN_DONE || started.elapsed() >= PRECLEAN_MAX {
                return Ok(total);
            }
            if self.is_stopping() {
                return Err(LiveError(
                    "the cache is shutting down; the write policy is unchanged".into(),
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
                    "the backing device failed writeback; the write policy is unchanged ({dirty} lines still dirty)"
                )));
            }
            if n == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    /// Pause requests, drain, (clean,) switch, record, resume. Returns the
    /// lines cleaned during the pause.
    async fn switch_write_policy(
        self: &Arc<Self>,
        old: WritePolicy,
        new: WritePolicy,
        progress: &(dyn Fn(Value) + Send + Sync),
    ) -> Result<u64, LiveError> {
        self.set_paused(true);
        let r = self.switch_paused(old, new, progress).await;
        self.set_paused(false);
        r
    }

    async fn switch_paused(
        self: &Arc<Self>,
        old: WritePolicy,
        new: WritePolicy,
        progress: &(dyn Fn(Value) + Send + Sync),
    ) -> Result<u64, LiveError> {
        // Every op submitted before the pause completes (a write-back write
        // is then logged dirty, and cleaned below).
        while !self.core.lock().expect("core").signals.is_empty() {
            if self.is_stopping() {
                return Err(LiveError(
                    "the cache is shutting down; the write policy is unchanged".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut cleaned = 0;
        if old == WritePolicy::WriteBack {
            let before = self.stats.forced_cleaned_lines.load(Ordering::Relaxed);
            self.flush_all().await?;
            cleaned = self.stats.forced_cleaned_lines.load(Ordering::Relaxed) - before;
            progress(json!({
                "phase": "switching", "dirty_lines": 0, "cleaned_lines": cleaned,
                "message": format!("leaving write-back: every dirty line written back; switching to {new}"),
            }));
        }
        {
            let mut c = self.core.lock().expect("core");
            c.engine.set_write_policy(new);
            c.fast_overwrite = false;
            self.write_policy
                .store(policy_index(new), Ordering::Release);
        }
        self.commit(true).await?;
        if let Err(e) = self.persist_policy() {
            // Not recorded: keep serving as before rather than diverge from the superblock.
            let mut c = self.core.lock().expect("core");
            c.engine.set_write_policy(old);
            self.write_policy
                .store(policy_index(old), Ordering::Release);
            c.fast_overwrite = old == WritePolicy::WriteBack;
            return Err(e);
        }
        if new == WritePolicy::WriteBack {
            // The superblock durably says write-back (and "open"): a crash
            // now recovers with every valid sub-block dirty (rule 3b).
            self.core.lock().expect("core").fast_overwrite = true;
        }
        Ok(cleaned)
    }

    pub(super) fn set_paused(&self, on: bool) {
        self.core.lock().expect("core").paused = on;
        self.pause.send_replace(on);
    }

    /// Record the engine's policy in the superblock (durable on return).
    fn persist_policy(&self) -> Result<(), LiveError> {
        let cfg = self.core.lock().expect("core").engine.config().clone();
        let blob = crate::policy_json(&cfg);
        self.store
            .lock()
            .expect("store")
            .set_policy(blob)
            .map_err(|e| LiveError(format!("recording the policy in the superblock: {e}")))
    }
}
