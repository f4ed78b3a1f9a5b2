//! `tiercache classify`: filesystem-aware block classification of an image.

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use tiercache_sim::units::parse_offset;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
tiercache classify fs.img\n  \
tiercache classify fs.img --offset 0B --json\n  \
tiercache classify /dev/sdb --offset 1MiB")]
pub struct ClassifyArgs {
    /// Image file or block device holding ext4 or XFS.
    pub image: PathBuf,
    /// Byte offset of the filesystem (a partition's start), e.g. 1MiB.
    #[arg(long, default_value = "0")]
    pub offset: String,
    /// Print JSON: filesystem, block_size, blocks, metadata and journal extents in filesystem blocks.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ClassifyArgs) -> Result<()> {
    let off = parse_offset(&a.offset).map_err(|e| anyhow::anyhow!("--offset: {e}"))?;
    let report = tiercache_fsmeta::classify_image(&a.image, off)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{report}");
    }
    Ok(())
}
