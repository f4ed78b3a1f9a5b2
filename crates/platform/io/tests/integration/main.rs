//! The integration tests of this crate, in one test binary (one build and
//! one link instead of one per file); each module is one former test file.

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod emulated_hdd;
mod engines;
mod faulty;
mod file_dev;
mod nbd_pipeline;
mod page_cache_folios;
