//! One module per subcommand.

pub mod classify;
pub mod demo;
pub mod live;
pub mod sim;
pub mod trace;
