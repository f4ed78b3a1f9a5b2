//! Debugging state: per-op phase tracking and the `debug` control
//! command's JSON snapshot of the cache's internal state.

use super::LiveCache;
use std::sync::atomic::Ordering;
use tiercache_azor_policy::Op;

impl LiveCache {
    /// Run one op: wait for its dependencies, do the I/O, report it.
    pub(super) fn phase(&self, op: &Op, what: &'static str) {
        if !self.track_phases.load(Ordering::Relaxed) {
            return;
        }
        self.phases
            .lock()
            .expect("phases")
            .insert(op.id, (*op, what));
    }

    /// Keep track of what each op in flight waits for (the `debug` command's
    /// `ops`); also on with `TIERCACHE_DEBUG_OPS=1`.
    pub fn set_op_tracking(&self, on: bool) {
        self.track_phases.store(on, Ordering::Relaxed);
        if !on {
            // Entries of ops that finish untracked would never be removed.
            self.phases.lock().expect("phases").clear();
        }
    }

    /// Ops in flight and the barriers they may wait on, for the `debug` control command.
    pub fn debug_state(&self) -> serde_json::Value {
        let ph: Vec<String> = {
            let p = self.phases.lock().expect("phases");
            let mut v: Vec<_> = p.values().collect();
            v.sort_by_key(|(o, _)| o.id);
            v.iter()
                .map(|(o, w)| {
                    format!(
                        "{w}: {o:?} waits_for={:?}",
                        o.waits_for().collect::<Vec<_>>()
                    )
                })
                .collect()
        };
        let c = self.core.lock().expect("core");
        serde_json::json!({
            "ops_tracked": self.track_phases.load(Ordering::Relaxed),
            "committed_gen": self.committed_gen(),
            "appended_gen": c.appended_gen,
            "pending_records": c.pending.len(),
            "signals": c.signals.len(),
            "slot_gen": format!("{:?}", c.slot_gen),
            "pending_unmap": format!("{:?}", c.pending_unmap),
            "wb_slots": format!("{:?}", c.wb_slots),
            "ops": ph,
        })
    }
}
