//! One module per subcommand.

pub mod sim;
pub mod trace;
