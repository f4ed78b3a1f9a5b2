//! `tiercache resize`: grow or shrink the cache of a running server.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

use super::args::CtlArgs;

/// `tiercache resize`: change the size of a running cache.
#[derive(Args, Debug)]
#[command(after_help = "\
Every design resizes while it serves, and keeps serving. For all of them: a
cache grows only up to its `format --max-size` (default: its size at
format), because the metadata regions are sized at format; a cache file is
extended or cut, a block device keeps its size (a grow stops at its end, a
shrink leaves its tail unused); FLUSH and FUA mean what they always mean; a
crash at any moment recovers the old size or the new one with every
acknowledged write; `stats`, the metrics and `sim --like` show the new
size. Refused, with one line and nothing changed: a size past the device or
past `--max-size`, not a multiple of 4 KiB, or too small; a shrink while
dirty data cannot be written back (the backing device fails); a degraded
cache. Times below: fio, 4 KiB random reads and writes at queue depth 32, 2
cores; each design's page has the details.

The SSD cache (--design azor): a shrink writes dirty lines back while
requests are served, then pauses requests while the rest is written back,
drops the lines past the new end and records the new size. A cache that is
not fully associative (direct, N-way) starts again empty at its new size,
grow or shrink, every dirty line written back first: the slot count decides
each line's set. 1 GiB to 2 GiB: 0.3 s, all of it paused; 2 GiB to 1 GiB: 10 to 12 s,
about 1 GiB written back, requests paused 0.5 to 0.7 s
(docs/designs/ssd-cache.md).

The log-structured layout (--design flashtier) adds segments or retires
them: a shrink evicts the clean blocks of the retired segments and moves or
writes back their dirty ones, one segment per hold of the lock while
requests are served, then records the new size. 1 GiB to 2 GiB: 0.15 to
0.32 s; back to 1 GiB: 3.9 to 5.7 s (docs/designs/log-structured.md).

The three-level cache (--design tica) resizes each SSD to --size, or only
the one --device names; the policy caches as many pages as the smaller SSD
holds, less a reserve. A shrink first evicts the least recently used pages
the smaller capacity has no room for (a dirty one written back), then moves
the pages past the new end below it, 256 at a time while requests are
served; dirty pages keep two copies throughout. The SSDs are resized one
after the other: a crash in between leaves one at its new size, and
`resize` again completes it. Both SSDs 1 GiB to 2 GiB: 0.02 to 0.05 s; back
to 1 GiB: 11 to 15 s, the lock held at most 0.16 s at a time
(docs/designs/tica.md).

The tiered volume (--design oodt) resizes its fast tier; --size is the
fast tier's new size, metadata included. The exported size stays what it
is, because NBD clients learn the size only when they connect: only a
volume of --capacity slow resizes (a volume of capacity sum is refused). A
shrink moves the blocks past the new end home to the slow tier, one logged
migration each, while requests are served; migrations wait while a resize
runs. 256 MiB to 1.25 GiB: 0.02 to 0.03 s; back: 19.9 to 20.8 s, about
1,020 blocks of 1 MiB moved home (docs/designs/tiered-volume.md).

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
