//! The tiered volume as a [`Design`] of the live runtime.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use tiercache_runtime::{async_trait, blocking, Design, Result, WriteBack};

use crate::volume::TieredVolume;

/// A [`TieredVolume`] served by the live runtime.
pub struct Tiered(pub Arc<TieredVolume>);

#[async_trait]
impl Design for Tiered {
    fn name(&self) -> &'static str {
        "oodt"
    }
    fn description(&self) -> String {
        "tiercache: OODT tiered volume (fast and slow tier)".into()
    }
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn backing_path(&self) -> PathBuf {
        PathBuf::from(&self.0.superblock().tiers[1].identity.path)
    }
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        Ok(self.0.read(offset, buf).await?)
    }
    async fn write(&self, offset: u64, data: Vec<u8>, fua: bool) -> Result<()> {
        Ok(self.0.write_vec(offset, data, fua).await?)
    }
    async fn flush(&self) -> Result<()> {
        Ok(self.0.flush().await?)
    }
    async fn trim(&self, offset: u64, len: u64) -> Result<()> {
        Ok(self.0.trim(offset, len).await?)
    }
    async fn stats(&self) -> Value {
        self.0.stats_json()
    }
    fn metrics(&self, stats: &Value, m: &mut tiercache_runtime::MetricSet) {
        metrics(stats, m)
    }
    fn attach_recorder(&self, recorder: Arc<tiercache_runtime::Recorder>) -> bool {
        self.0.attach_recorder(recorder);
        true
    }
    async fn write_back(&self) -> Result<WriteBack> {
        // Every block has one home (a tier); nothing is dirty: flush makes it durable.
        self.0.flush().await?;
        Ok(WriteBack {
            written_back: 0,
            dirty_left: 0,
            unit: "blocks",
        })
    }
    fn detach_refusal(&self) -> Option<String> {
        self.0.evacuation_refusal()
    }
    async fn detach(&self) -> Result<WriteBack> {
        if let Some(why) = self.detach_refusal() {
            return Err(tiercache_runtime::Error::not_supported(why));
        }
        let v = Arc::clone(&self.0);
        let moved = blocking(move || Ok(v.evacuate()?)).await?;
        Ok(WriteBack {
            written_back: moved,
            dirty_left: 0,
            unit: "blocks",
        })
    }
    /// `resize` (`{"cmd":"resize","size":BYTES}`): the fast tier to `size`
    /// bytes of device; the exported size stays (see `volume::resize`).
    async fn command(&self, cmd: &str, request: &Value) -> Option<Value> {
        if cmd != "resize" {
            return None;
        }
        let Some(size) = request["size"].as_u64() else {
            return Some(
                json!({"ok": false, "error": "resize: expected \"size\": the new size of the fast tier in bytes"}),
            );
        };
        if request.get("device").is_some_and(|d| !d.is_null()) {
            return Some(
                json!({"ok": false, "error": "resize: a tiered volume resizes its fast tier only (no --device)"}),
            );
        }
        let v = Arc::clone(&self.0);
        // Long (a shrink moves blocks home): off the request threads.
        let r = tokio::task::spawn_blocking(move || v.resize(size)).await;
        Some(match r {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => json!({"ok": false, "error": e}),
            Err(e) => json!({"ok": false, "error": format!("resize: {e}")}),
        })
    }
    async fn shutdown(&self) -> Result<()> {
        let v = Arc::clone(&self.0);
        blocking(move || Ok(v.shutdown()?)).await
    }
}

/// `/metrics` of the tiered volume, mapped from its `stats` JSON:
/// `tier_accesses_total{tier,op}` from `tiers[i].{read,write}_hits` (a
/// fast-tier access is a "hit"), `hits_total{op}`/`misses_total{op}` as the
/// fast and slow tier's accesses, `migrations_total{direction}` from
/// `promotions`/`demotions`, `migrated_bytes_total`,
/// `migration_errors_total`, `migrations_in_flight`, and
/// `tier_slots{tier}` and `tier_used_blocks{tier}` from `tiers[i].slots`
/// and `tiers[i].used_slots`.
fn metrics(s: &Value, m: &mut tiercache_runtime::MetricSet) {
    let n = |p: &str| s.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    for (i, tier) in ["fast", "slow"].iter().enumerate() {
        for op in ["read", "write"] {
            let v = n(&format!("/tiers/{i}/{op}_hits"));
            m.counter(
                "tier_accesses",
                "Block accesses served by each tier, by operation.",
                &[("tier", tier), ("op", op)],
                v,
            );
            let (name, help) = if i == 0 {
                (
                    "hits",
                    "Block accesses served by the fast tier, by operation.",
                )
            } else {
                (
                    "misses",
                    "Block accesses served by the slow tier, by operation.",
                )
            };
            m.counter(name, help, &[("op", op)], v);
        }
        m.gauge(
            "tier_slots",
            "Blocks each tier has room for (the fast tier's changes with a resize).",
            &[("tier", tier)],
            n(&format!("/tiers/{i}/slots")) as f64,
        );
        m.gauge(
            "tier_used_blocks",
            "Blocks each tier holds.",
            &[("tier", tier)],
            n(&format!("/tiers/{i}/used_slots")) as f64,
        );
    }
    let help = "Completed migrations, by direction.";
    m.counter(
        "migrations",
        help,
        &[("direction", "promotion")],
        n("/promotions"),
    );
    m.counter(
        "migrations",
        help,
        &[("direction", "demotion")],
        n("/demotions"),
    );
    m.counter_at(
        "migrated_bytes",
        "Bytes copied by migrations.",
        &[],
        s,
        "/migrated_bytes",
    );
    m.counter_at(
        "migration_errors",
        "Migrations that failed on a device error.",
        &[],
        s,
        "/migration_errors",
    );
    m.gauge_at(
        "migrations_in_flight",
        "Migrations running now.",
        &[],
        s,
        "/migrations_in_flight",
    );
    m.counter_at(
        "planner_rounds",
        "Rounds of the migration planner.",
        &[],
        s,
        "/planner_rounds",
    );
    m.gauge(
        "degraded",
        "1 when migrations stopped after a device error.",
        &[],
        s["status"]
            .as_str()
            .is_some_and(|x| x.starts_with("degraded: migrations stopped")) as u8 as f64,
    );
}
