//! What every fio run of the tests shares. Standalone (std only), so that
//! `clients_util` includes it too.

/// The fio option that keeps fio from writing its verify state file
/// (`<job>-<n>-verify.state`) into the working directory.
pub const FIO_NO_STATE: &str = "--verify_state_save=0";
