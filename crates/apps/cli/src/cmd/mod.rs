//! One module per subcommand.

pub mod classify;
pub mod compressibility;
pub mod demo;
pub mod live;
pub mod mrc;
pub mod plot_cmd;
pub mod replay;
pub mod reproduce;
pub mod sim;
pub mod trace;
