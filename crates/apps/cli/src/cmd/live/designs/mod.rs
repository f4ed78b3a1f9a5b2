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
