//! `tiercache resize`: grow or shrink the cache of a running server.

use anyhow::{bail, Result};
use clap::Args;

use super::args::CtlArgs;

/// `tiercache resize`: change the size of a running cache.
#[derive(Args, Debug)]
#[command(after_help = "\
The cache keeps serving. Growing: a cache file is extended (a block device
must hold the new size), the superblock records the new size, and the new
lines are used from then on; the metadata regions are sized at format, so a
cache grows only up to its `format --max-size` (default: its size at format).
Shrinking: dirty lines are written back while requests are served, then
requests pause while the rest is written back, the lines past the new end
are dropped, the new size is recorded, and a cache file is cut to it (a
block device keeps its size; its tail is no longer used). Requests wait
during the pause, FLUSH and FUA included, and mean what they always mean. A
crash at any moment recovers the old size or the new one with every
acknowledged write. `stats`, the metrics and `sim --like` show the new size.

Refused, with nothing changed: a size past the device, or past what the
metadata regions were made for; a shrink while dirty lines cannot be
written back (the backing device fails); a cache that is not fully
associative; a degraded cache. Only the SSD cache (--design azor) resizes.

Measured under fio (4 KiB random reads and writes at queue depth 32, a
write-back cache file of 4 KiB lines on tmpfs, 2 cores): growing 1 GiB to
2 GiB took 0.3 s, all of it paused; shrinking 2 GiB to 1 GiB took 10 to 12
s, writing back about 1 GiB of dirty lines, with requests paused 0.5 to
0.7 s (docs/designs/ssd-cache.md, Resizing while serving).

Examples:
  tiercache resize --cache cache.img --size 2GiB
  tiercache resize --cache cache.img --size 512MiB --json")]
pub struct ResizeArgs {
    #[command(flatten)]
    pub ctl: CtlArgs,
    /// New size of the cache device (e.g. 2GiB): the data region ends there.
    #[arg(long, value_name = "SIZE")]
    pub size: String,
}

/// `tiercache resize --cache DEV --size N`.
pub fn resize(a: ResizeArgs) -> Result<()> {
    let size = tiercache_sim::units::parse_bytes(&a.size)
        .map_err(|e| anyhow::anyhow!("--size {}: {e}", a.size))?;
    let req = serde_json::json!({"cmd": "resize", "size": size});
    let v = super::runtime()?.block_on(tiercache_runtime::control::request_value(
        &a.ctl.socket(),
        &req,
    ))?;
    if v["ok"] != serde_json::Value::Bool(true) {
        if a.ctl.json {
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        let why = v["error"].as_str().unwrap_or("no reason given");
        if why.starts_with("unknown command 'resize'") {
            bail!("resize refused: this design cannot be resized while it serves (only the SSD cache can)");
        }
        bail!("resize refused: {why}");
    }
    if a.ctl.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{}", v["message"].as_str().unwrap_or("resized"));
    }
    Ok(())
}
