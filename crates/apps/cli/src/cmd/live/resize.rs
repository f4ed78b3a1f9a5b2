//! `tiercache resize`: grow or shrink the cache of a running server.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

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
associative; a degraded cache.

The log-structured cache (--design flashtier) adds segments or retires
them: a shrink evicts the clean blocks of the retired segments and moves
or writes back their dirty ones, one segment at a time while requests are
served, then records the new size (docs/designs/log-structured.md).

The three-level cache (--design tica) resizes each SSD to --size, or
only the one --device names; the policy caches as many pages as the
smaller SSD holds, less a reserve. A shrink first evicts the least recently
used pages the smaller capacity has no room for (a dirty one written back),
then moves the pages past the new end below it, 256 at a time while
requests are served, then records the new size and cuts the file; dirty
pages keep two copies throughout. The SSDs are resized one after the
other: a crash in between leaves one at its new size. Measured under fio
(4 KiB random reads and writes at queue depth 32, both SSD files on tmpfs,
2 cores): growing both from 1 GiB to
2 GiB took 0.02 to 0.05 s; shrinking them back 11 to 15 s (262 144 pages
evicted, 210 000 to 260 000 moved), the lock held at most 0.16 s at a time
and fio's slowest request 0.4 to 0.8 s (docs/designs/tica.md, Resizing
while serving).

The tiered volume (--design oodt) resizes its fast tier; --size is the
fast tier's new size, metadata included. The exported size stays what it
is, because NBD clients learn the size only when they connect: only a
volume of --capacity slow resizes (a volume of capacity sum exports the
fast tier's blocks too, and is refused). Growing: a fast-tier file is
extended, the superblock records the new size, and the new slots are used
by the next migrations. Shrinking: the blocks in the slots past the new
end are moved home to the slow tier, one logged migration each, while
requests are served (none waits for the resize), then the new size is
recorded and the file cut. Migrations wait while a resize runs. Measured
under fio (4 KiB random reads and writes at queue depth 32, 1 MiB blocks,
both tiers files on a virtio disk, 2 cores): growing the fast tier from
256 MiB to 1.25 GiB took 0.02 to 0.03 s; shrinking it back 19.9 to 20.8 s,
moving about 1020 blocks home (docs/designs/tiered-volume.md, Resizing the
fast tier).

Measured under fio (4 KiB random reads and writes at queue depth 32, a
write-back cache file of 4 KiB lines on tmpfs, 2 cores): growing 1 GiB to
2 GiB took 0.3 s, all of it paused; shrinking 2 GiB to 1 GiB took 10 to 12
s, writing back about 1 GiB of dirty lines, with requests paused 0.5 to
0.7 s (docs/designs/ssd-cache.md, Resizing while serving).

Examples:
  tiercache resize --cache cache.img --size 2GiB
  tiercache resize --cache cache.img --size 512MiB --json
  tiercache resize --cache wo.img --size 4GiB --device ro.img")]
pub struct ResizeArgs {
    #[command(flatten)]
    pub ctl: CtlArgs,
    /// New size of the cache device (e.g. 2GiB): the data region ends there.
    #[arg(long, value_name = "SIZE")]
    pub size: String,
    /// Which cache device to resize, for a design with several: one SSD of
    /// a three-level cache (--design tica) [default: each of its cache
    /// devices, each to --size].
    #[arg(long, value_name = "DEV")]
    pub device: Option<PathBuf>,
}

/// `tiercache resize --cache DEV --size N`.
pub fn resize(a: ResizeArgs) -> Result<()> {
    let size = tiercache_sim::units::parse_bytes(&a.size)
        .map_err(|e| anyhow::anyhow!("--size {}: {e}", a.size))?;
    let mut req = serde_json::json!({"cmd": "resize", "size": size});
    if let Some(d) = &a.device {
        if tiercache_tica_live::detect(d).is_none() {
            bail!(
                "resize refused: {} is not an SSD of a three-level cache (--device names one SSD of a --design tica cache)",
                d.display()
            );
        }
        req["device"] = serde_json::json!(std::path::absolute(d)?);
    }
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
            bail!("resize refused: this design cannot be resized while it serves (only the SSD cache, the log-structured cache, the three-level cache and the tiered volume can)");
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
