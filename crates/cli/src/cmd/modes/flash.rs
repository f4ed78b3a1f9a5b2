//! `tiercache sim --mode` for this family (being written).

use crate::cmd::sim::SimArgs;
use anyhow::{bail, Result};

pub fn run(a: &SimArgs) -> Result<()> {
    bail!("mode '{}' is not available in this build yet", a.mode)
}
