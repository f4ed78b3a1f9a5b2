//! Whole-image classification (`tiercache classify IMAGE`).

use std::fmt;
use std::fs::File;

use serde::Serialize;
use tiercache_block::Class;

use crate::error::{FsMetaError, Result};
use crate::layout::{read, Filesystem, Layout};
use crate::sniff::Sniffer;

/// Per-block classification of a whole filesystem image. Serializes to
/// `{"filesystem", "block_size", "blocks", "metadata": [[first, count], ...],
/// "journal": [[first, count], ...]}` in filesystem blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClassifyReport {
    /// Filesystem found ("ext4" or "xfs").
    pub filesystem: Filesystem,
    /// Filesystem block size in bytes.
    pub block_size: u32,
    /// Filesystem size in blocks.
    pub blocks: u64,
    /// Metadata runs `[first_block, count]`, sorted and merged.
    pub metadata: Vec<[u64; 2]>,
    /// Journal/log runs `[first_block, count]`, sorted and merged.
    pub journal: Vec<[u64; 2]>,
}

impl ClassifyReport {
    /// Number of metadata blocks.
    pub fn metadata_blocks(&self) -> u64 {
        self.metadata.iter().map(|r| r[1]).sum()
    }
    /// Number of journal blocks.
    pub fn journal_blocks(&self) -> u64 {
        self.journal.iter().map(|r| r[1]).sum()
    }
    /// Number of data blocks (everything else).
    pub fn data_blocks(&self) -> u64 {
        self.blocks - self.metadata_blocks() - self.journal_blocks()
    }
    /// Class of `block` according to this report.
    pub fn class_of(&self, block: u64) -> Class {
        let hit = |runs: &[[u64; 2]]| {
            let i = runs.partition_point(|r| r[0] <= block);
            i > 0 && block - runs[i - 1][0] < runs[i - 1][1]
        };
        if hit(&self.journal) {
            Class::Journal
        } else if hit(&self.metadata) {
            Class::Metadata
        } else {
            Class::Data
        }
    }
}

impl fmt::Display for ClassifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |n: u64| 100.0 * n as f64 / self.blocks.max(1) as f64;
        writeln!(
            f,
            "filesystem: {} ({} blocks of {} bytes)",
            self.filesystem, self.blocks, self.block_size
        )?;
        let (m, j, d) = (
            self.metadata_blocks(),
            self.journal_blocks(),
            self.data_blocks(),
        );
        writeln!(
            f,
            "metadata:   {m:>12} blocks ({:.2} %) in {} runs",
            pct(m),
            self.metadata.len()
        )?;
        writeln!(
            f,
            "journal:    {j:>12} blocks ({:.2} %) in {} runs",
            pct(j),
            self.journal.len()
        )?;
        write!(f, "data:       {d:>12} blocks ({:.2} %)", pct(d))
    }
}

/// Classify every block of the ext4 or XFS image at `path`, whose
/// filesystem starts at byte `partition_offset`: static layout plus content
/// sniffing of each block (all-zero blocks outside the layout are data),
/// with ext4 checksums verified against the image's own inodes (so ext4
/// images stored as files inside it are data).
pub fn classify_image(
    path: impl AsRef<std::path::Path>,
    partition_offset: u64,
) -> Result<ClassifyReport> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|cause| FsMetaError::Open {
        path: path.display().to_string(),
        cause,
    })?;
    let file_len = file
        .metadata()
        .map_err(|cause| FsMetaError::Io { offset: 0, cause })?
        .len();
    let layout = Layout::detect(&file, partition_offset)?;
    let bs = layout.block_size as u64;
    let present = (file_len.saturating_sub(partition_offset) / bs).min(layout.blocks);
    // Checksum mode: learn every in-use inode's seed first.
    let mut sniffer = Sniffer::with_checksums(&layout);
    let mut blk = vec![0u8; bs as usize];
    for (first, count) in sniffer.used_inode_table_runs() {
        for b in first..(first + count).min(present) {
            read(&file, partition_offset + b * bs, &mut blk)?;
            sniffer.learn(b, &blk);
        }
    }

    let mut meta: Vec<[u64; 2]> = Vec::new();
    let mut jour: Vec<[u64; 2]> = Vec::new();
    let push = |runs: &mut Vec<[u64; 2]>, b: u64| match runs.last_mut() {
        Some(r) if r[0] + r[1] == b => r[1] += 1,
        _ => runs.push([b, 1]),
    };
    const CHUNK: u64 = 256;
    let mut buf = vec![0u8; (CHUNK * bs) as usize];
    let mut b = 0;
    while b < layout.blocks {
        let n = CHUNK.min(layout.blocks - b);
        let readable = present.saturating_sub(b).min(n);
        if readable > 0 {
            read(
                &file,
                partition_offset + b * bs,
                &mut buf[..(readable * bs) as usize],
            )?;
        }
        for i in 0..n {
            let blk = b + i;
            let class = layout.class_of(blk).or_else(|| {
                (i < readable)
                    .then(|| sniffer.sniff(blk, &buf[(i * bs) as usize..((i + 1) * bs) as usize]))
                    .flatten()
            });
            match class {
                Some(Class::Metadata) => push(&mut meta, blk),
                Some(Class::Journal) => push(&mut jour, blk),
                _ => {}
            }
        }
        b += n;
    }
    Ok(ClassifyReport {
        filesystem: layout.filesystem,
        block_size: layout.block_size,
        blocks: layout.blocks,
        metadata: meta,
        journal: jour,
    })
}
