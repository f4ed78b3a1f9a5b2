//! The SSD cache (Azor) as a [`Design`] of the live runtime.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};
use tiercache_azor_policy::IoKind;
use tiercache_runtime::{async_trait, Design, Error, Result, WriteBack};

use crate::live::{LiveCache, LiveError};

/// A [`LiveCache`] served by the live runtime.
pub struct SsdCache {
    pub cache: Arc<LiveCache>,
    pub backing: PathBuf,
}

fn conv(e: LiveError) -> Error {
    Error::io(e.0)
}

impl SsdCache {
    /// The error of a write or trim: NBD_ESHUTDOWN once the cache is stopping.
    fn conv_write(&self, e: LiveError) -> Error {
        if self.cache.is_stopping() {
            Error::shutdown(e.0)
        } else {
            conv(e)
        }
    }
    fn dirty(&self) -> u64 {
        self.cache.core.lock().expect("core").engine.dirty_lines() as u64
    }
    fn cleaned(&self) -> u64 {
        self.cache.stats.cleaned_lines.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Design for SsdCache {
    fn name(&self) -> &'static str {
        "azor"
    }
    fn description(&self) -> String {
        "tiercache: SSD cache in front of a slower device".into()
    }
    fn size(&self) -> u64 {
        self.cache.size()
    }
    fn backing_path(&self) -> PathBuf {
        self.backing.clone()
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let data = self
            .cache
            .request(IoKind::Read, offset, buf.len() as u64, None, false)
            .await
            .map_err(conv)?;
        buf.copy_from_slice(&data);
        Ok(())
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        self.cache
            .write_owned(offset, data, fua)
            .await
            .map_err(|e| self.conv_write(e))
    }
    async fn flush(&self) -> Result<()> {
        self.cache
            .request(IoKind::Flush, 0, 0, None, false)
            .await
            .map_err(conv)?;
        Ok(())
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.cache
            .request(IoKind::Trim, offset, len, None, false)
            .await
            .map_err(|e| self.conv_write(e))?;
        Ok(())
    }
    async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.cache
            .write_zeroes(offset, len, fua)
            .await
            .map_err(|e| self.conv_write(e))
    }
    async fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        // A read whose data is dropped fills the cache like any read miss.
        let mut off = offset;
        let end = offset + len;
        while off < end {
            let n = (end - off).min(4 << 20);
            self.cache
                .request(IoKind::Read, off, n, None, false)
                .await
                .map_err(conv)?;
            off += n;
        }
        Ok(())
    }
    async fn command(&self, cmd: &str, request: &Value) -> Option<Value> {
        if cmd != "resize" {
            return None;
        }
        let Some(size) = request["size"].as_u64() else {
            return Some(
                json!({"ok": false, "error": "resize: expected \"size\": the new cache device size in bytes"}),
            );
        };
        Some(match self.cache.resize(size).await {
            Ok(v) => v,
            Err(e) => json!({"ok": false, "error": e.0}),
        })
    }
    async fn stats(&self) -> Value {
        stats_json(&self.cache)
    }
    async fn debug(&self) -> Value {
        self.cache.debug_state()
    }
    async fn set_policy(&self, request: &Value, progress: &(dyn Fn(Value) + Send + Sync)) -> Value {
        if let Some(v) = request.get("what_if") {
            return crate::whatif::set(&self.cache, v, request);
        }
        let ch = match crate::live::PolicyChange::from_request(request) {
            Ok(c) => c,
            Err(e) => return json!({"ok": false, "error": e}),
        };
        match self.cache.change_policy(&ch, progress).await {
            Ok(v) => v,
            Err(e) => json!({"ok": false, "error": e.0}),
        }
    }
    fn attach_recorder(&self, recorder: Arc<tiercache_runtime::Recorder>) -> bool {
        let _ = self.cache.recorder.set(recorder);
        true
    }
    fn metrics(&self, stats: &Value, m: &mut tiercache_runtime::MetricSet) {
        crate::metrics::fill(&self.cache, stats, m)
    }
    async fn write_back(&self) -> Result<WriteBack> {
        let before = self.cleaned();
        self.cache.flush_all().await.map_err(conv)?;
        Ok(WriteBack {
            written_back: self.cleaned() - before,
            dirty_left: self.dirty(),
            unit: "lines",
        })
    }
    async fn detach(&self) -> Result<WriteBack> {
        let before = self.cleaned();
        self.cache.flush_all().await.map_err(conv)?;
        let left = self.dirty();
        if left == 0 {
            self.cache.shutdown_detached().await.map_err(conv)?;
        }
        Ok(WriteBack {
            written_back: self.cleaned() - before,
            dirty_left: left,
            unit: "lines",
        })
    }
    async fn shutdown(&self) -> Result<()> {
        self.cache.shutdown().await.map_err(conv)
    }
}

/// Statistics of the core and the live cache as JSON.
pub fn stats_json(cache: &LiveCache) -> Value {
    let (core, dirty, used, slots, degraded, cfg, target, what_if) = {
        let c = cache.core.lock().expect("core");
        let e = &c.engine;
        (
            e.stats().clone(),
            e.dirty_lines(),
            e.mapping().used(),
            e.geometry().slots,
            e.is_degraded(),
            e.config().clone(),
            e.dirty_target_lines(),
            crate::whatif::json(c.whatif.as_deref()),
        )
    };
    let live = cache.stats.snapshot();
    let live_stats = &cache.stats;
    let levels: Vec<&str> = [
        cfg.admission.twolbs_metadata.then_some("metadata"),
        cfg.admission.twolbs_frequency.then_some("frequency"),
    ]
    .into_iter()
    .flatten()
    .collect();
    json!({
        "status": live_stats.device_errors.status(match (cache.metadata_failure(), degraded) {
            (Some(_), _) => "degraded: cache metadata store failed, FLUSH and FUA fail until the cache is reopened",
            (None, true) => "degraded: cache device failing, not caching new data",
            (None, false) => "ok",
        }),
        "device_errors": live_stats.device_errors.json(),
        // Why the metadata store went fail-stop in write-back mode (null while it works).
        "metadata_error": cache.metadata_failure(),
        "policy": {
            "line_size": cfg.line_bytes, "sub_block": cfg.sub_block_bytes,
            "assoc": cfg.assoc.to_string(), "eviction": cfg.eviction.to_string(),
            "write_policy": cfg.write_policy.to_string(), "write_allocate": cfg.write_allocate,
            "admission": cfg.admission.kind.to_string(),
            "seq_cutoff": cfg.admission.seq_cutoff_bytes,
            "nhit_threshold": cfg.admission.nhit_threshold,
            "nhit_trigger": cfg.admission.nhit_trigger,
            "2lbs_levels": levels,
            "2lbs_window": cfg.admission.twolbs_window,
            "dirty_target": cfg.dirty_target,
            "clean_rate": cfg.cleaning.pressure_lines,
            "timed_cleaning": if cfg.cleaning.timed { "on" } else { "off" },
        },
        // The whole configuration, as `tiercache format` recorded it and
        // `sim --like` reads it (`cache_bytes` is `slots` whole lines).
        "config": cfg,
        "dirty_target_lines": target,
        "filesystem": cache.filesystem(),
        "slots": slots,
        "occupied_lines": used,
        "occupancy": used as f64 / slots as f64,
        "dirty_lines": dirty,
        "hits": core.hits, "misses": core.misses(), "hit_ratio": core.hit_ratio(),
        "read_hits": core.read_hits, "read_misses": core.read_accesses - core.read_hits,
        "write_hits": core.write_hits, "write_misses": core.write_accesses - core.write_hits,
        "metadata_hits": core.metadata_hits, "metadata_misses": core.metadata_accesses - core.metadata_hits,
        "data_hits": core.read_hits - core.metadata_hits.min(core.read_hits),
        "fills": core.fills, "evictions": core.evictions, "dirty_evictions": core.dirty_evictions,
        "writebacks": core.writebacks,
        "admission_rejects": core.admission_rejects,
        "backing": tiercache_runtime::remote::backing_json(cache.backing.as_ref()),
        // Why the cache started cold at open (null: it kept its contents).
        "cold_start": cache.cold_start(),
        // The hit ratio at other sizes (`crate::whatif`).
        "what_if": what_if,
        "live": live,
    })
}
