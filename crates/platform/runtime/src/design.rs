//! The contract between the live runtime and a design (the SSD cache, the
//! log-structured cache, the tiered volume, the three-level cache): the block
//! operations the NBD export forwards, and the lifecycle the control socket
//! and signals drive. A design keeps its own on-disk format and policy; the
//! runtime owns everything around it.

use serde_json::Value;
use std::path::PathBuf;

use crate::error::Result;

/// What `flush` and `detach` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteBack {
    /// Units (lines, blocks or pages: see `unit`) written back to the backing device.
    pub written_back: u64,
    /// Units still dirty afterwards (0 when everything acknowledged is on the backing device).
    pub dirty_left: u64,
    /// The unit of the counts: "lines", "blocks" or "pages".
    pub unit: &'static str,
}

/// A live design, as the runtime drives it. Every method may be called from
/// any task; the block operations run concurrently.
#[async_trait::async_trait]
pub trait Design: Send + Sync + 'static {
    /// The design's name in `stats` (`cache`, `log-structured`, `tier`, `tica`).
    fn name(&self) -> &'static str;
    /// One line for NBD_INFO_DESCRIPTION and the log.
    fn description(&self) -> String;
    /// Exported size in bytes.
    fn size(&self) -> u64;
    /// The device that holds every block once the design is detached.
    fn backing_path(&self) -> PathBuf;
    /// Advertise NBD_CMD_CACHE (prefetch).
    fn can_prefetch(&self) -> bool {
        true
    }

    /// Read `buf.len()` bytes at `offset`.
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()>;
    /// Write `data` at `offset` (stable on return with `fua`).
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()>;
    /// The export may offer write batches ([`Design::write_batch_now`]).
    fn batches_writes(&self) -> bool {
        false
    }
    /// Store plain writes received together, on the calling task and without
    /// waiting, if the design can: one result per write, in order (the NBD
    /// layer's `Backend::write_batch_now`). `None` (the default): nothing
    /// was done, each runs as a single write.
    fn write_batch_now(&self, writes: &[(u64, &[u8])]) -> Option<Vec<Result<()>>> {
        let _ = writes;
        None
    }
    /// Make every completed write stable (NBD FLUSH).
    async fn flush(&self) -> Result<()>;
    /// Discard a range (NBD TRIM).
    async fn trim(&self, offset: u64, len: u64) -> Result<()>;
    /// Make a range read back as zeros (NBD WRITE_ZEROES; stable on return
    /// with `fua`). The default writes zero buffers of at most 1 MiB through
    /// [`Design::write`]; a design may pass the zeroing on to its backing device.
    async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<()> {
        const PIECE: u64 = 1 << 20;
        let mut done = 0u64;
        while done < len {
            let n = PIECE.min(len - done);
            self.write(offset + done, vec![0u8; n as usize], false)
                .await?;
            done += n;
        }
        if fua {
            self.flush().await?;
        }
        Ok(())
    }
    /// Prefetch a range (NBD CACHE).
    async fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// Counters and state for `tiercache stats`.
    async fn stats(&self) -> Value;
    /// State to diagnose a stuck request (`tiercache debug`); defaults to `stats`.
    async fn debug(&self) -> Value {
        self.stats().await
    }
    /// Write every dirty block back to the backing device and commit
    /// (`tiercache flush`), while serving.
    async fn write_back(&self) -> Result<WriteBack>;
    /// Why this design cannot be detached, if it cannot (checked before the
    /// server stops accepting requests, so a refused detach changes nothing).
    fn detach_refusal(&self) -> Option<String> {
        None
    }
    /// Detach, after every request has been answered: write everything back,
    /// close the metadata marked clean. Succeeds only if the backing device
    /// then holds every acknowledged write (`dirty_left == 0`).
    async fn detach(&self) -> Result<WriteBack>;
    /// Clean shutdown after every request has been answered: make the
    /// metadata durable and mark it clean (dirty data stays in the cache).
    async fn shutdown(&self) -> Result<()>;
    /// The design's metrics for `/metrics` (`serve --metrics`): counters and
    /// gauges mapped from `stats` (its [`Design::stats`] answer of this
    /// scrape), plus histograms `stats` only summarises. The runtime adds
    /// request latency, errors, uptime and `tiercache_info`.
    fn metrics(&self, stats: &Value, m: &mut crate::metrics::MetricSet) {
        let _ = (stats, m);
    }
    /// Change the policy of the running design (`tiercache set`): `request`
    /// holds the fields to change (`write_policy`, `dirty_target`,
    /// `seq_cutoff`, `eviction`); `progress` gets one line per step of a
    /// long change (cleaning before leaving write-back). Answers
    /// `{"ok":true,...}` with the policy now in force, or `{"ok":false,
    /// "error":WHY}` naming what cannot change online and why. Designs
    /// without online changes refuse.
    async fn set_policy(&self, request: &Value, progress: &(dyn Fn(Value) + Send + Sync)) -> Value {
        let _ = (request, progress);
        serde_json::json!({
            "ok": false,
            "error": format!(
                "the {} design cannot change its policy while serving (format it again with the new policy)",
                self.name()
            ),
        })
    }
    /// Record requests (`serve --record`, `tiercache record`): keep
    /// `recorder` and call [`crate::Recorder::record`] for every request
    /// where the policy takes it, in the order it takes them, with the class
    /// it gave. `false` (the default): this design cannot record, and
    /// recording is refused.
    fn attach_recorder(&self, recorder: std::sync::Arc<crate::Recorder>) -> bool {
        let _ = recorder;
        false
    }
    /// A design's own control command (`{"cmd": NAME, ...}`), if it has it.
    async fn command(&self, cmd: &str, request: &Value) -> Option<Value> {
        let _ = (cmd, request);
        None
    }
}
