//! The error every simulation option gives: which option, and what is
//! wrong with its value.

/// A bad value of one option: which option (in its Python spelling,
/// `tier_policy`) and what is wrong, with the allowed values. Shown by the
/// CLI as `--tier-policy: ...`.
#[derive(Debug)]
pub struct BadOption {
    /// The option, with `_` (`fast_tier_size`).
    pub option: &'static str,
    /// What is wrong and what is allowed.
    pub msg: String,
}

impl std::fmt::Display for BadOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--{}: {}", self.option.replace('_', "-"), self.msg)
    }
}

impl std::error::Error for BadOption {}

/// An error about `option` (a [`BadOption`] inside an `anyhow::Error`).
pub fn bad(option: &'static str, msg: impl std::fmt::Display) -> anyhow::Error {
    BadOption {
        option,
        msg: msg.to_string(),
    }
    .into()
}
