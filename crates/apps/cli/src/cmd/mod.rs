//! One module per subcommand.

pub mod classify;
pub mod demo;
pub mod live;
pub mod ls_live;
pub mod modes;
pub mod plot_cmd;
pub mod reproduce;
pub mod sim;
pub mod tica_live;
pub mod tier_live;
pub mod trace;
