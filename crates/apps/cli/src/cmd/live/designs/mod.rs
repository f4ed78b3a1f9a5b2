//! The design registry: which live design a device holds, and what each
//! design does for `format`, `serve`, `stats` and `check`. The live
//! commands (`super`) dispatch through it; the runtime (`tiercache-runtime`)
//! serves whatever design it opens.

pub mod log_structured;
pub mod ssd_cache;
pub mod tica;
pub mod tiered;

use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::args::ServeArgs;

/// What the live commands need of a design.
pub trait LiveDesign: Sync {
    /// The name `stats` reports as `design`.
    fn name(&self) -> &'static str;
    /// Whether `path` holds this design's superblock.
    fn detect(&self, path: &Path) -> bool;
    /// Refuse `serve` options this design cannot honour (before anything is opened).
    fn validate(&self, a: &ServeArgs) -> Result<()>;
    /// The devices `serve --cache a.cache` opens besides `a.cache`, with their roles.
    fn devices(&self, a: &ServeArgs) -> Result<Vec<(&'static str, PathBuf)>>;
    /// Open (recover) the design for serving.
    fn open(&self, a: &ServeArgs) -> Result<Arc<dyn tiercache_runtime::Design>>;
    /// `tiercache check` on a device that is not in use.
    fn check(&self, path: &Path, json: bool) -> Result<()>;
    /// `tiercache stats` for a person.
    fn print_stats(&self, v: &serde_json::Value);
}

/// Every live design, most specific superblock first (the SSD cache last: it is the default).
pub static DESIGNS: [&dyn LiveDesign; 4] = [
    &tica::Tica,
    &log_structured::LogStructured,
    &tiered::Tiered,
    &ssd_cache::SsdCache,
];

/// The design whose superblock `path` holds (the SSD cache when none matches:
/// its own open then says what is wrong).
pub fn detect(path: &Path) -> &'static dyn LiveDesign {
    DESIGNS
        .iter()
        .copied()
        .find(|d| d.detect(path))
        .unwrap_or(&ssd_cache::SsdCache)
}

/// The design named `name` in a `stats` answer.
pub fn by_name(name: &str) -> Option<&'static dyn LiveDesign> {
    DESIGNS.iter().copied().find(|d| d.name() == name)
}

/// What `check` found, printed the same way for every design: the report
/// for a person, or (`--json`) `{"ok", "design", "device", counts...,
/// "findings": [{"severity", "message"}], "report"}`.
pub struct CheckOutput<'a> {
    pub design: &'static str,
    pub device: &'a Path,
    /// Counts of the design (mapped and dirty units, ...).
    pub counts: serde_json::Value,
    pub problems: &'a [String],
    pub warnings: &'a [String],
    /// The human report.
    pub text: String,
}

impl CheckOutput<'_> {
    /// Print it; an error (non-zero exit) when there are problems.
    pub fn print(self, json: bool) -> Result<()> {
        let ok = self.problems.is_empty();
        if json {
            let findings: Vec<serde_json::Value> = self
                .problems
                .iter()
                .map(|m| serde_json::json!({"severity": "problem", "message": m}))
                .chain(
                    self.warnings
                        .iter()
                        .map(|m| serde_json::json!({"severity": "warning", "message": m})),
                )
                .collect();
            let mut v = serde_json::json!({
                "ok": ok,
                "design": self.design,
                "device": self.device.display().to_string(),
                "findings": findings,
                "report": self.text,
            });
            if let (Some(o), Some(c)) = (v.as_object_mut(), self.counts.as_object()) {
                for (k, x) in c {
                    o.insert(k.clone(), x.clone());
                }
            }
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!("{}", self.text);
        }
        if !ok {
            anyhow::bail!(
                "{} has metadata problems: {}",
                self.device.display(),
                self.problems.join("; ")
            );
        }
        Ok(())
    }
}

/// The `device errors` line of `tiercache stats`, the same for every
/// design: failed reads and writes per device (`device_errors`).
pub fn print_device_errors(v: &serde_json::Value) {
    let Some(m) = v["device_errors"].as_object() else {
        return;
    };
    let parts: Vec<String> = m
        .iter()
        .map(|(role, e)| {
            format!(
                "{} {} read, {} write",
                tiercache_io::role_label(role),
                e["read"].as_u64().unwrap_or(0),
                e["write"].as_u64().unwrap_or(0)
            )
        })
        .collect();
    println!("device errors     {}", parts.join("; "));
}

/// Say so when a cache's data region (`cache`: "cache", "fast tier", ...)
/// is larger than its backing device (`backing_role`: "backing device",
/// "slow tier"): the difference is never used, as a cache holds at most the
/// backing device's data. The same warning for every design.
pub fn warn_if_larger_than_backing(
    cache: &str,
    data_bytes: u64,
    backing_role: &str,
    backing: &Path,
) {
    let Ok(dev) = tiercache_io::FileDev::open(backing, Default::default()) else {
        return;
    };
    let bsize = tiercache_io::BlockDev::len(&dev);
    if data_bytes > bsize {
        eprintln!(
            "tiercache: warning: the {cache} holds {} of data but the {backing_role} {} has only {}: \
             the difference is never used (format a smaller --size)",
            tiercache_sim::units::format_bytes(data_bytes),
            backing.display(),
            tiercache_sim::units::format_bytes(bsize)
        );
    }
}
