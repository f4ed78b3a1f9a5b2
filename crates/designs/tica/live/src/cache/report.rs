//! Reporting: dirty pages held on a single copy and the JSON stats.

use super::{SingleCopyPage, ThreeLevel};
use crate::pair::PAGE;
use crate::ssd::Ssd;
use serde_json::{json, Value};
use tiercache_tica_policy::Architecture;
use tiercache_tica_policy::Mode;

impl ThreeLevel {
    /// Dirty pages (newer than the backing device) held by fewer than two
    /// devices, each with the devices that hold it: empty unless a device
    /// failed and the cache is degraded (then nothing is dirty either).
    pub fn single_copy_dirty_pages(&self) -> Vec<SingleCopyPage> {
        let s = self.lock();
        s.dirty_pages()
            .into_iter()
            .filter_map(|p| {
                let mut on = Vec::new();
                if s.dram.get(&p).is_some_and(|d| d.dirty) {
                    on.push("dram");
                }
                if s.ro.get(p).is_some() {
                    on.push("ro_ssd");
                }
                if s.wo.get(p).is_some() {
                    on.push("wo_ssd");
                }
                (on.len() < 2).then_some(SingleCopyPage {
                    page: p,
                    held_by: on,
                })
            })
            .collect()
    }

    /// Counters and state as JSON (`tiercache stats --json`).
    pub fn stats_json(&self) -> Value {
        let s = self.lock();
        let st = s.tica.stats();
        let reads = st.read_pages.max(1);
        let c = s.counters;
        let status = match &s.degraded {
            None => s.device_errors.status("ok"),
            Some(d) => format!(
                "degraded: {} failed ({}); write-through to the backing device, {} dirty pages written back{}",
                d.failed.label(),
                d.reason,
                d.written_back,
                if d.lost > 0 { format!(", {} LOST", d.lost) } else { String::new() }
            ),
        };
        let dram = s.tica.dram();
        let level = |x: &Ssd| {
            json!({
                "path": x.name, "slots": x.slots(), "used_pages": x.used(), "dirty_pages": x.dirty(),
                "page_writes": x.writes, "page_reads": x.reads, "commits": x.commits, "checkpoints": x.checkpoints,
                "rewrites_in_place": x.rewrites_in_place,
                "sequential_slot_writes": x.sequential_slot_writes,
                "batched_page_writes": x.batched_page_writes,
                "batch_device_writes": x.batch_device_writes,
            })
        };
        let dirty = s.dirty_pages().len();
        json!({
            "mode": "tica",
            "status": status,
            "backing": tiercache_runtime::remote::backing_json(s.backing.as_ref()),
            "degraded": s.degraded.is_some(),
            "failed_device": s.degraded.as_ref().map(|d| d.failed),
            "policy": {
                "tica_policy": s.tica.config().policy,
                "current_mode": match s.tica.mode() { Mode::Ef => "ef", Mode::Wed => "wed" },
                "dram_pages": s.tica.config().dram_pages,
                "ssd_pages": s.tica.config().ssd_pages,
                "page_bytes": PAGE,
                "timed_flush": if self.info.timed_flush { "on" } else { "off" },
                "flush_per_request": s.flusher.config().per_request,
            },
            "read_pages": st.read_pages,
            "write_pages": st.write_pages,
            "hits": {"dram": st.dram_hits, "ro_ssd": st.ro_ssd_hits, "wo_ssd": st.wo_ssd_hits},
            "dram_hits": st.dram_hits, "ro_ssd_hits": st.ro_ssd_hits, "wo_ssd_hits": st.wo_ssd_hits,
            "misses": st.misses,
            "hit_ratio": (st.dram_hits + st.ro_ssd_hits + st.wo_ssd_hits) as f64 / reads as f64,
            "ro_ssd_writes": s.ro.writes,
            "wo_ssd_writes": s.wo.writes,
            "ssd_writes": s.ro.writes + s.wo.writes,
            "writebacks": st.writebacks,
            "promotions": st.promotions,
            "flusher_pages": c.flusher_pages,
            "backing_reads": c.backing_reads,
            "backing_writes": c.backing_writes,
            "flushes": c.flushes,
            "errors": c.errors,
            "device_errors": s.device_errors.json(),
            "inline_requests": {"reads": c.inline_reads, "writes": c.inline_writes},
            "degraded_io": {"dram_reads": c.degraded_dram_reads, "backing_reads": c.degraded_backing_reads, "writes": c.degraded_writes},
            "dram": {"pages": s.dram.len(), "read_pages": dram.read_len(), "write_pages": dram.write_len(), "write_cap": dram.write_cap()},
            "ro_ssd": level(&s.ro),
            "wo_ssd": level(&s.wo),
            "dirty_pages": dirty,
            "occupied_lines": s.wo.used(),
            "dirty_lines": dirty,
            "slots": s.wo.slots(),
            "recovery": self.recovery,
            "live": {"recovery_ms": self.recovery.duration_ms},
        })
    }
}
