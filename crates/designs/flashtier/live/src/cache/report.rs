//! Reporting: counters, occupancy, map size and the JSON stats.

use super::State;
use super::{Counters, Res};
use super::{LogCache, MapBytesPerBlock, Occupancy};
use crate::cleaning::SegState;
use serde_json::{json, Value};

impl LogCache {
    /// Clean segments until `n` are free (tests and benchmarks).
    pub fn clean_segments(&self, n: usize) -> Res<()> {
        let mut st = self.lock()?;
        st.ensure_free(self, n)
    }

    /// The counters.
    pub fn counters(&self) -> Counters {
        let mut c = all_counters(&self.st.lock().unwrap_or_else(|e| e.into_inner()));
        c.read_hits += self.fast_read_blocks();
        c
    }

    /// Blocks mapped and dirty blocks.
    pub fn occupancy(&self) -> Occupancy {
        let st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        Occupancy {
            mapped: st.map.len() as u64,
            dirty: st.map.dirty() as u64,
        }
    }

    /// Host memory of the map per mapped block (bytes), and at a full cache.
    pub fn map_bytes_per_block(&self) -> MapBytesPerBlock {
        let st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let m = st.map.memory_bytes() as f64;
        MapBytesPerBlock {
            mapped: m / st.map.len().max(1) as f64,
            full: m / st.sb.slots() as f64,
        }
    }

    /// `tiercache stats --json`.
    pub fn stats_json(&self) -> Value {
        let st = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let mut c = all_counters(&st);
        c.read_hits += self.fast_read_blocks();
        let count = |s: SegState| st.segs.iter().filter(|x| x.state == s).count();
        let (hits, misses) = (c.read_hits + c.write_hits, c.read_misses + c.write_misses);
        let r = &self.recovery;
        let m = st.map.memory_bytes() as f64;
        json!({
            "mode": "log-structured",
            "status": self.device_errors.status(match (&st.degraded, st.closed) { (_, true) => "closed", (Some(_), _) => "degraded", _ => "ok" }),
            "device_errors": self.device_errors.json(),
            "degraded_reason": st.degraded,
            "write_policy": self.policy.to_string(),
            "backing": tiercache_runtime::remote::backing_json(self.backing.as_ref()),
            "backing_path": self.backing_path.display().to_string(),
            "size": self.size,
            "slots": st.sb.slots(),
            "mapped_blocks": st.map.len(),
            "dirty_blocks": st.map.dirty(),
            "occupancy": st.map.len() as f64 / st.sb.slots() as f64,
            "hits": hits,
            "misses": misses,
            "hit_ratio": if hits + misses > 0 { hits as f64 / (hits + misses) as f64 } else { 0.0 },
            "read_hits": c.read_hits,
            "read_misses": c.read_misses,
            "write_hits": c.write_hits,
            "write_misses": c.write_misses,
            "fills": c.fills,
            "appended_blocks": c.appended_blocks,
            "bypassed_blocks": c.bypassed,
            "flushes": c.flushes,
            "background": self.background_json(&st),
            "fast_path": self.fast_json(),
            "compression": self.compression_json(&st),
            "segments": {
                "total": st.sb.nsegs,
                "bytes": st.sb.seg_bytes,
                "data_blocks": self.data_blocks,
                "free": count(SegState::Free),
                "open": count(SegState::Open),
                "sealed": count(SegState::Sealed),
                "opened": c.segments_opened,
                "announced": st.announced.len(),
            },
            "cleaning": {
                "segments_cleaned": c.segments_cleaned,
                "silent_evictions": c.silent_evictions,
                "moved_dirty_blocks": c.moved_dirty,
                "cleaning_written_back": c.cleaning_written_back,
                "written_back": c.written_back,
            },
            "metadata": {
                "summary_writes": c.summary_writes,
                "checkpoints": c.checkpoints,
                "epoch": st.epoch,
                "journal_records": st.journal_next,
                "summaries_pending": st.sealed.len(),
            },
            "map": {
                "bytes": st.map.memory_bytes(),
                "dirty_index_bytes": st.map.dirty_index_bytes(),
                "entry_bytes": st.map.entry_bytes(),
                "capacity": st.map.capacity(),
                "bytes_per_cached_block": m / st.map.len().max(1) as f64,
                "bytes_per_block_full": m / st.sb.slots() as f64,
            },
            "metadata_memory": crate::memory::metadata_memory(&st.sb).map_or(serde_json::Value::Null, |b| json!({
                "bound_bytes": b.total(),
                "bound_per_slot": b.per_slot(),
            })),
            "errors": { "cache": c.cache_errors, "backing": c.backing_errors },
            "recovery": {
                "ms": r.duration.as_secs_f64() * 1000.0,
                "clean_shutdown": r.clean_shutdown,
                "checkpoint_epoch": r.checkpoint_epoch,
                "checkpoint_entries": r.checkpoint_entries,
                "replayed_segments": r.replayed_segments,
                "replayed_entries": r.replayed_entries,
                "dropped_clean": r.dropped_clean,
                "mapped_blocks": r.mapped_blocks,
                "dirty_blocks": r.dirty_blocks,
                "cold_start": r.cold_start,
            },
        })
    }
}

/// The store's counters: the policy's decision counters and the live store's own.
fn all_counters(st: &State) -> Counters {
    let p = st.counters;
    Counters {
        read_hits: p.read_hits,
        read_misses: p.read_misses,
        write_hits: p.write_hits,
        write_misses: p.write_misses,
        fills: p.fills,
        appended_blocks: p.appended_blocks,
        segments_opened: p.segments_opened,
        segments_cleaned: p.segments_cleaned,
        silent_evictions: p.silent_evictions,
        moved_dirty: p.moved_dirty,
        cleaning_written_back: p.cleaning_written_back,
        written_back: p.written_back,
        ..st.stats
    }
}

impl LogCache {
    /// The `compression` part of the stats: the codec, blocks stored raw
    /// and compressed since the cache was opened, and the cached blocks'
    /// bytes now: raw (4 KiB each) against stored (their records).
    fn compression_json(&self, st: &State) -> Value {
        let c = &st.stats;
        let (mut logical, mut stored) = (0u64, 0u64);
        if self.geo.is_compressed() {
            for (_, e) in st.map.iter() {
                logical += crate::segment::BLOCK;
                stored += self.slot_units(st, e.slot) as u64 * crate::compress::UNIT as u64;
            }
        } else {
            logical = st.map.len() as u64 * crate::segment::BLOCK;
            stored = logical;
        }
        let data_bytes = st.sb.nsegs as u64 * self.geo.phys_blocks() as u64 * crate::segment::BLOCK;
        json!({
            "codec": self.codec.to_string(),
            "stored_compressed_blocks": c.stored_compressed,
            "stored_compressed_bytes": c.stored_compressed_bytes,
            "stored_raw_blocks": c.stored_raw,
            "stored_raw_bytes": c.stored_raw * crate::segment::BLOCK,
            "cached_bytes": logical,
            "cached_stored_bytes": stored,
            "ratio": if stored > 0 { logical as f64 / stored as f64 } else { 1.0 },
            "data_area_bytes": data_bytes,
            "checksum_errors": c.checksum_errors,
        })
    }
}
