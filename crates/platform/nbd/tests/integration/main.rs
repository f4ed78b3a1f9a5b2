//! The integration tests of this crate, in one test binary (one build and
//! one link instead of one per file); each module is one former test file.

#[path = "../common/mod.rs"]
mod common;

mod limits;
mod robustness;
mod tls_haggle;
