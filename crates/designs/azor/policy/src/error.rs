//! The error of a configuration the core refuses: its own module, so that
//! the configuration and each part it validates (admission, cleaning) name
//! it without importing one another.

use std::fmt;

/// A configuration the core refuses, with a message saying what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for ConfigError {}
