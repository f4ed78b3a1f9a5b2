//! The three-level (TICA) cache as a design of the live runtime: a
//! [`SyncStore`] served on request threads (the cache does synchronous
//! device I/O under its lock), all-hit reads and cheap writes inline on the
//! runtime's worker (`cache::inline`), and its own control command
//! `resize` (`{"cmd":"resize","size":BYTES[,"device":PATH]}`: each SSD, or
//! the one `device` names, to `size` bytes; `cache::resize`).

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tiercache_runtime::{Design, Error, OnBlockingPool, Result, SyncStore, WriteBack};

use crate::cache::{CacheError, ThreeLevel};

/// A [`ThreeLevel`] cache as the runtime serves it (`Tica::new(cache)`):
/// the request threads of [`OnBlockingPool`], plus `resize`.
pub struct Tica {
    pool: OnBlockingPool<ThreeLevel>,
}

impl Tica {
    /// Serve `cache` on [`tiercache_runtime::SyncWorkers::default_threads`]
    /// request threads. Panics only if the OS refuses to start a thread;
    /// see [`Self::with_threads`].
    pub fn new(cache: Arc<ThreeLevel>) -> Self {
        Tica {
            pool: OnBlockingPool::new(cache),
        }
    }

    /// Serve `cache` on `threads` request threads.
    pub fn with_threads(cache: Arc<ThreeLevel>, threads: usize) -> std::io::Result<Self> {
        Ok(Tica {
            pool: OnBlockingPool::with_threads(cache, threads)?,
        })
    }

    /// The cache.
    pub fn store(&self) -> &Arc<ThreeLevel> {
        self.pool.store()
    }
}

#[tiercache_runtime::async_trait]
impl Design for Tica {
    fn name(&self) -> &'static str {
        self.pool.name()
    }
    fn description(&self) -> String {
        self.pool.description()
    }
    fn size(&self) -> u64 {
        self.pool.size()
    }
    fn backing_path(&self) -> PathBuf {
        self.pool.backing_path()
    }
    fn can_prefetch(&self) -> bool {
        self.pool.can_prefetch()
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.pool.read(offset, buf).await
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        self.pool.write(offset, data, fua).await
    }
    fn batches_writes(&self) -> bool {
        self.pool.batches_writes()
    }
    fn write_batch_now(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        self.pool.write_batch_now(writes)
    }
    async fn flush(&self) -> Result<()> {
        self.pool.flush().await
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        self.pool.trim(offset, len).await
    }
    async fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        self.pool.prefetch(offset, len).await
    }
    async fn stats(&self) -> Value {
        self.pool.stats().await
    }
    fn metrics(&self, stats: &Value, m: &mut tiercache_runtime::MetricSet) {
        self.pool.metrics(stats, m)
    }
    async fn write_back(&self) -> Result<WriteBack> {
        self.pool.write_back().await
    }
    async fn detach(&self) -> Result<WriteBack> {
        self.pool.detach().await
    }
    async fn shutdown(&self) -> Result<()> {
        self.pool.shutdown().await
    }
    fn attach_recorder(&self, recorder: Arc<tiercache_runtime::Recorder>) -> bool {
        self.store().attach_recorder(recorder);
        true
    }
    async fn command(&self, cmd: &str, request: &Value) -> Option<Value> {
        if cmd != "resize" {
            return None;
        }
        let Some(size) = request["size"].as_u64() else {
            return Some(
                json!({"ok": false, "error": "resize: expected \"size\": the new size of each SSD in bytes"}),
            );
        };
        let device = crate::cache::resize::requested_device(request);
        let cache = Arc::clone(self.store());
        // Long (it moves pages a batch at a time): off the request threads.
        let r = tokio::task::spawn_blocking(move || cache.resize(size, device.as_deref())).await;
        Some(match r {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => json!({"ok": false, "error": e.0}),
            Err(e) => json!({"ok": false, "error": format!("resize: {e}")}),
        })
    }
}

fn conv(e: CacheError) -> Error {
    Error::io(e.0)
}

impl SyncStore for ThreeLevel {
    fn name(&self) -> &'static str {
        "tica"
    }
    fn description(&self) -> String {
        "tiercache: TICA three-level cache (DRAM, RO-SSD, WO-SSD)".into()
    }
    fn size(&self) -> u64 {
        ThreeLevel::size(self)
    }
    fn backing_path(&self) -> PathBuf {
        ThreeLevel::backing_path(self).to_path_buf()
    }
    fn unit(&self) -> &'static str {
        "pages"
    }
    fn read(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        ThreeLevel::read(self, offset, len).map_err(conv)
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        ThreeLevel::write(self, offset, data, fua).map_err(conv)
    }
    fn read_inline(&self, offset: u64, buf: &mut [u8]) -> Option<Result<()>> {
        ThreeLevel::read_inline(self, offset, buf).map(|r| r.map_err(conv))
    }
    fn write_inline(&self, offset: u64, data: &[u8], fua: bool) -> Option<Result<()>> {
        ThreeLevel::write_inline(self, offset, data, fua).map(|r| r.map_err(conv))
    }
    fn batches_writes(&self) -> bool {
        true
    }
    fn write_batch_inline(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        ThreeLevel::write_batch_inline(self, writes)
            .map(|rs| rs.into_iter().map(|r| r.map_err(conv)).collect())
    }
    fn flush(&self) -> Result<()> {
        ThreeLevel::flush(self).map_err(conv)
    }
    fn trim(&self, offset: u64, len: u64) -> Result<()> {
        ThreeLevel::trim(self, offset, len).map_err(conv)
    }
    fn stats(&self) -> Value {
        self.stats_json()
    }
    fn metrics(&self, stats: &Value, m: &mut tiercache_runtime::MetricSet) {
        metrics(stats, m)
    }
    fn dirty(&self) -> u64 {
        self.stats_json()["dirty_pages"].as_u64().unwrap_or(0)
    }
    fn write_back_all(&self) -> Result<u64> {
        ThreeLevel::write_back_all(self).map_err(conv)
    }
    fn close(&self, detach: bool) -> Result<()> {
        self.shutdown(detach).map_err(conv)
    }
}

/// `/metrics` of the three-level cache, mapped from its `stats` JSON:
/// `hits_total{op="read",level}` from `hits.{dram,ro_ssd,wo_ssd}`,
/// `misses_total{op="read"}` from `misses`, `dirty_lines` from
/// `dirty_pages`, `ssd_page_writes_total{device}` from
/// `{ro,wo}_ssd.page_writes`, `writebacks_total`, `promotions_total`,
/// `flusher_pages_total`, `device_errors_total{device="any"}` from `errors`.
/// The unit is the 4 KiB page.
fn metrics(s: &Value, m: &mut tiercache_runtime::MetricSet) {
    let n = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    for level in ["dram", "ro_ssd", "wo_ssd"] {
        m.counter(
            "hits",
            "Page reads served by a level of the cache, by level.",
            &[("op", "read"), ("level", level)],
            n(&format!("/hits/{level}")),
        );
    }
    m.counter(
        "misses",
        "Page reads that needed the backing device.",
        &[("op", "read")],
        n("/misses"),
    );
    m.gauge_at(
        "dirty_lines",
        "Dirty 4 KiB pages (newer than the backing device).",
        &[],
        s,
        "/dirty_pages",
    );
    m.gauge_at(
        "slots",
        "4 KiB pages the write-optimized SSD holds.",
        &[],
        s,
        "/slots",
    );
    for d in ["ro_ssd", "wo_ssd"] {
        m.counter(
            "ssd_page_writes",
            "Pages written to each SSD.",
            &[("device", d)],
            n(&format!("/{d}/page_writes")),
        );
    }
    m.counter_at(
        "writebacks",
        "Dirty pages written to the backing device.",
        &[],
        s,
        "/writebacks",
    );
    m.counter_at(
        "promotions",
        "Pages promoted into the read-optimized SSD.",
        &[],
        s,
        "/promotions",
    );
    m.counter(
        "cleaned_lines",
        "Dirty pages copied by the flusher, by path.",
        &[("path", "flusher")],
        n("/flusher_pages"),
    );
    m.counter(
        "device_errors",
        "Device I/O errors (any device of the cache).",
        &[("device", "any")],
        n("/errors"),
    );
    m.gauge(
        "degraded",
        "1 when an SSD failed and the cache runs write-through.",
        &[],
        s["degraded"].as_bool().unwrap_or(false) as u8 as f64,
    );
}
