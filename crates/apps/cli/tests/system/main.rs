//! The CLI's system tests, in one test binary: one build and one link
//! instead of one per file. Each module is one group of tests;
//! `scripts/system_tests.py` runs each module as its own process,
//! several at a time (`cargo test -p tiercache-cli --test system
//! live_crash::` runs one module).

#[path = "../common/mod.rs"]
mod common;
#[macro_use]
#[path = "../clients_util/mod.rs"]
mod clients_util;
#[path = "../doc_blocks/mod.rs"]
mod doc_blocks;
#[path = "../pki/mod.rs"]
mod pki;

mod completions;
mod conformance;
mod conformance_ssc_tier;
mod examples;
mod first_contact;
mod live_cleaning;
mod live_clients;
mod live_crash;
mod live_detach;
mod live_faults;
mod live_format_policy;
mod live_ls_clients;
mod live_ls_compress;
mod live_ls_crash;
mod live_ls_faults;
mod live_ls_resize;
mod live_ls_tier_metadata;
mod live_metadata_memory;
mod live_operate;
mod live_record;
mod live_remote;
mod live_resize;
mod live_runtime;
mod live_tica_crash;
mod live_tica_faults;
mod live_tica_resize;
mod live_tier;
mod live_tier_crash;
mod live_tier_resize;
mod live_tls;
mod mrc;
mod replay;
mod reproduce_azor;
mod reproduce_oodt;
mod sim_cli;
mod sim_compress;
mod sim_like;
mod sim_reference;
mod user_reports;
