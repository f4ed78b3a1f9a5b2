//! The log-structured cache as a design of the live runtime: a
//! [`SyncStore`] served on request threads (the store does synchronous
//! device I/O under its lock), with the control command `resize`.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tiercache_runtime::{Design, Error, OnBlockingPool, Result, SyncStore, WriteBack};

use crate::cache::{CacheError, LogCache};

/// A [`LogCache`] as the runtime serves it (`LogStructured::new(cache)`):
/// the block operations on request threads ([`OnBlockingPool`]) and the
/// `resize` control command (`{"cmd": "resize", "size": BYTES}`,
/// [`LogCache::resize`]).
pub struct LogStructured(OnBlockingPool<LogCache>);

impl LogStructured {
    /// Serve `cache` with the default number of request threads.
    pub fn new(cache: Arc<LogCache>) -> Self {
        LogStructured(OnBlockingPool::new(cache))
    }
    /// Serve `cache` with `threads` request threads.
    pub fn with_threads(cache: Arc<LogCache>, threads: usize) -> std::io::Result<Self> {
        OnBlockingPool::with_threads(cache, threads).map(LogStructured)
    }
    /// The served cache.
    pub fn store(&self) -> &Arc<LogCache> {
        self.0.store()
    }
}

#[tiercache_runtime::async_trait]
impl Design for LogStructured {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn description(&self) -> String {
        self.0.description()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn backing_path(&self) -> PathBuf {
        self.0.backing_path()
    }
    fn can_prefetch(&self) -> bool {
        self.0.can_prefetch()
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.0.read(offset, buf).await
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        self.0.write(offset, data, fua).await
    }
    fn batches_writes(&self) -> bool {
        self.0.batches_writes()
    }
    fn write_batch_now(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        self.0.write_batch_now(writes)
    }
    async fn flush(&self) -> Result<()> {
        self.0.flush().await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.0.trim(offset, len).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        self.0.write_zeroes(offset, len, fua).await
    }
    async fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        self.0.prefetch(offset, len).await
    }
    async fn stats(&self) -> Value {
        self.0.stats().await
    }
    async fn write_back(&self) -> Result<WriteBack> {
        self.0.write_back().await
    }
    async fn detach(&self) -> Result<WriteBack> {
        self.0.detach().await
    }
    async fn shutdown(&self) -> Result<()> {
        self.0.shutdown().await
    }
    fn metrics(&self, stats: &Value, m: &mut tiercache_runtime::MetricSet) {
        self.0.metrics(stats, m)
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
        let cache = Arc::clone(self.store());
        let r = tokio::task::spawn_blocking(move || cache.resize(size)).await;
        Some(match r {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => json!({"ok": false, "error": e.0}),
            Err(e) => json!({"ok": false, "error": format!("the resize failed: {e}")}),
        })
    }
}

fn conv(e: CacheError) -> Error {
    Error::io(e.0)
}

impl SyncStore for LogCache {
    fn name(&self) -> &'static str {
        "flashtier"
    }
    fn description(&self) -> String {
        format!("tiercache: log-structured {} cache", self.write_policy())
    }
    fn size(&self) -> u64 {
        LogCache::size(self)
    }
    fn backing_path(&self) -> PathBuf {
        LogCache::backing_path(self).to_path_buf()
    }
    fn unit(&self) -> &'static str {
        "blocks"
    }
    fn can_prefetch(&self) -> bool {
        true
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        LogCache::read(self, offset, len).map_err(conv)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        LogCache::write(self, offset, data, fua).map_err(conv)
    }
    fn read_inline(&self, offset: u64, buf: &mut [u8]) -> Option<Result<()>> {
        self.read_fast(offset, buf).then_some(Ok(()))
    }
    fn write_inline(&self, offset: u64, data: &[u8], fua: bool) -> Option<Result<()>> {
        self.write_fast(offset, data, fua).map(|r| r.map_err(conv))
    }
    fn batches_writes(&self) -> bool {
        self.takes_write_batches()
    }
    fn write_batch_inline(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        self.write_batch_fast(writes)
            .map(|rs| rs.into_iter().map(|r| r.map_err(conv)).collect())
    }
    fn flush(&self) -> Result<()> {
        LogCache::flush(self).map_err(conv)
    }
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        LogCache::trim(self, offset, len).map_err(conv)
    }
    fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        LogCache::prefetch(self, offset, len).map_err(conv)
    }
    fn stats(&self) -> Value {
        self.stats_json()
    }
    fn metrics(&self, stats: &Value, m: &mut tiercache_runtime::MetricSet) {
        metrics(stats, m)
    }
    fn dirty(&self) -> u64 {
        self.stats_json()["dirty_blocks"].as_u64().unwrap_or(0)
    }
    fn write_back_all(&self) -> Result<u64> {
        LogCache::write_back_all(self).map_err(conv)
    }
    fn close(&self, detach: bool) -> Result<()> {
        self.shutdown(detach).map_err(conv)
    }
}

/// `/metrics` of the log-structured cache, mapped from its `stats` JSON:
/// `hits_total{op}`/`misses_total{op}` from `read_hits`..`write_misses`
/// (requests are not classified), `dirty_lines` from `dirty_blocks`,
/// `bypasses_total{reason="no-room-or-degraded"}` from `bypassed_blocks`,
/// `silent_evictions_total` and `evictions_total{victim="clean"}` from
/// `cleaning.silent_evictions`, `cleaned_lines_total{path}` from
/// `cleaning.cleaning_written_back` (segment cleaning) and the rest of
/// `cleaning.written_back` (write-back), `device_errors_total{device}` from
/// `errors`. The unit is the 4 KiB block.
fn metrics(s: &Value, m: &mut tiercache_runtime::MetricSet) {
    let n = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    for (op, h, mi) in [
        ("read", "/read_hits", "/read_misses"),
        ("write", "/write_hits", "/write_misses"),
    ] {
        m.counter(
            "hits",
            "Block accesses served from the cache, by operation.",
            &[("op", op)],
            n(h),
        );
        m.counter(
            "misses",
            "Block accesses that needed the backing device, by operation.",
            &[("op", op)],
            n(mi),
        );
    }
    m.gauge_at(
        "dirty_lines",
        "Cached 4 KiB blocks the backing device lacks.",
        &[],
        s,
        "/dirty_blocks",
    );
    m.gauge_at(
        "occupied_lines",
        "Cached 4 KiB blocks.",
        &[],
        s,
        "/mapped_blocks",
    );
    m.gauge_at(
        "slots",
        "4 KiB blocks the cache can hold.",
        &[],
        s,
        "/slots",
    );
    m.counter(
        "bypasses",
        "Blocks written around the cache, by reason.",
        &[("reason", "no-room-or-degraded")],
        n("/bypassed_blocks"),
    );
    cleaning_metrics(s, m);
    let help = "Device I/O errors, by device.";
    m.counter(
        "device_errors",
        help,
        &[("device", "cache")],
        n("/errors/cache"),
    );
    m.counter(
        "device_errors",
        help,
        &[("device", "backing")],
        n("/errors/backing"),
    );
    m.gauge(
        "degraded",
        "1 when the cache stopped caching new data after device errors.",
        &[],
        (s["status"] == "degraded") as u8 as f64,
    );
}

/// The cleaning part of [`metrics`]: silent evictions, moved dirty blocks,
/// blocks written back by path.
fn cleaning_metrics(s: &Value, m: &mut tiercache_runtime::MetricSet) {
    let n = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let silent = n("/cleaning/silent_evictions");
    m.counter(
        "silent_evictions",
        "Clean blocks dropped by segment cleaning (the backing device has them).",
        &[],
        silent,
    );
    m.counter(
        "evictions",
        "Blocks evicted, by the victim's state.",
        &[("victim", "clean")],
        silent,
    );
    m.counter_at(
        "moved_dirty_blocks",
        "Dirty blocks segment cleaning moved to a new segment.",
        &[],
        s,
        "/cleaning/moved_dirty_blocks",
    );
    m.counter_at(
        "segments_cleaned",
        "Segments reclaimed by cleaning.",
        &[],
        s,
        "/cleaning/segments_cleaned",
    );
    let (seg, all) = (
        n("/cleaning/cleaning_written_back"),
        n("/cleaning/written_back"),
    );
    let help = "Dirty blocks written back, by path: segment-cleaning, or write-back (dirty target, flush, detach).";
    m.counter("cleaned_lines", help, &[("path", "segment-cleaning")], seg);
    m.counter(
        "cleaned_lines",
        help,
        &[("path", "write-back")],
        all.saturating_sub(seg),
    );
}
