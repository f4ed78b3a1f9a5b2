//! `tiercache trace compressibility IMAGE`: how the compressed
//! log-structured layout (`format --layout log-structured --compress`)
//! would store an image's blocks, by the layout's own encoder
//! (`tiercache_flashtier_live::compress::encode`): the distribution of
//! stored sizes in 512-byte units (8 = raw), the mean ratio, the effective
//! capacity factor, and the codec's measured speed on this machine. The
//! `--out` file is a compressibility model for `sim --compress`.

use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tiercache_flashtier_live::compress::{decode, encode, Codec, RAW_UNITS, UNIT};
use tiercache_flashtier_policy::sizes::{SizeModel, SLOT_RATIO};
use tiercache_sim::units::parse_bytes;

const BLOCK: usize = 4096;

#[derive(Args, Debug)]
pub struct CompressibilityArgs {
    /// A file, a block device, or a directory (its regular files, each
    /// padded to whole blocks as a file system stores them).
    pub image: PathBuf,
    /// Codec, as `format --compress`: lz4, zstd, zstd:LEVEL (1-22).
    #[arg(long, default_value = "lz4")]
    pub codec: String,
    /// Block size (the compressed layout stores 4 KiB blocks).
    #[arg(long, default_value = "4KiB")]
    pub block_size: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the result as a model file for `sim --compress
    /// --compressibility FILE`.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// Counts and times over the blocks seen.
#[derive(Default)]
struct Tally {
    counts: [u64; RAW_UNITS as usize],
    compress: Duration,
    decompress: Duration,
    files: u64,
}

impl Tally {
    fn blocks(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Encode and decode the whole blocks of `buf` (a multiple of 4 KiB),
    /// block numbers from `lba`.
    fn add(&mut self, codec: Codec, lba: u64, buf: &[u8]) -> Result<()> {
        let t = Instant::now();
        let recs: Vec<_> = buf
            .chunks_exact(BLOCK)
            .enumerate()
            .map(|(i, b)| encode(codec, lba + i as u64, b))
            .collect();
        self.compress += t.elapsed();
        let mut out = vec![0u8; BLOCK];
        let t = Instant::now();
        for (i, r) in recs.iter().enumerate() {
            decode(&r.bytes, r.units, lba + i as u64, &mut out)
                .map_err(|e| anyhow::anyhow!("the encoder's own record: {e}"))?;
        }
        self.decompress += t.elapsed();
        for r in &recs {
            self.counts[r.units as usize - 1] += 1;
        }
        Ok(())
    }
}

/// Read `r` to its end in 1 MiB chunks (the last block zero-padded).
fn scan(
    r: &mut impl Read,
    codec: Codec,
    tally: &mut Tally,
    done: &mut u64,
    progress: &mut Progress,
) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let mut n = 0;
        while n < buf.len() {
            match r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if n == 0 {
            return Ok(());
        }
        let whole = n.next_multiple_of(BLOCK);
        buf[n..whole].fill(0);
        tally.add(codec, tally.blocks(), &buf[..whole])?;
        *done += n as u64;
        progress.set(*done);
        if n < buf.len() {
            return Ok(());
        }
    }
}

/// The regular files under `dir`, in name order (symbolic links are not
/// followed), with their sizes.
fn files_under(dir: &Path, out: &mut Vec<(PathBuf, u64)>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading directory {}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let t = e.file_type()?;
        if t.is_dir() {
            files_under(&e.path(), out)?;
        } else if t.is_file() {
            out.push((e.path(), e.metadata()?.len()));
        }
    }
    Ok(())
}

/// Bytes of a file or block device (a block device's metadata says 0).
fn size_of(p: &Path) -> Result<u64> {
    use std::io::Seek;
    let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
    Ok(f.seek(std::io::SeekFrom::End(0))?)
}

pub fn run(a: CompressibilityArgs) -> Result<()> {
    let codec: Codec = a
        .codec
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--codec: {}", e.trim_start_matches("--compress ")))?;
    if !codec.is_on() {
        bail!("--codec off: nothing to measure (allowed: lz4, zstd, zstd:LEVEL with LEVEL 1..22)");
    }
    let bs = parse_bytes(&a.block_size).map_err(|e| anyhow::anyhow!("--block-size: {e}"))?;
    if bs != BLOCK as u64 {
        bail!(
            "--block-size {}: the compressed layout stores 4 KiB blocks (allowed: 4KiB)",
            a.block_size
        );
    }
    let meta = std::fs::metadata(&a.image)
        .with_context(|| format!("image {} does not exist", a.image.display()))?;
    let mut tally = Tally::default();
    let mut done = 0u64;
    if meta.is_dir() {
        let mut files = Vec::new();
        files_under(&a.image, &mut files)?;
        let total: u64 = files.iter().map(|f| f.1).sum();
        let mut progress = Progress::new("compressing", Some(total));
        for (p, _) in &files {
            // A file that went away or cannot be read is skipped, not fatal.
            let Ok(mut f) = std::fs::File::open(p) else {
                continue;
            };
            scan(&mut f, codec, &mut tally, &mut done, &mut progress)
                .with_context(|| format!("reading {}", p.display()))?;
            tally.files += 1;
        }
        progress.finish();
    } else {
        let total = size_of(&a.image)?;
        let mut f = std::fs::File::open(&a.image)?;
        let mut progress = Progress::new("compressing", Some(total));
        scan(&mut f, codec, &mut tally, &mut done, &mut progress)
            .with_context(|| format!("reading {}", a.image.display()))?;
        progress.finish();
    }
    let blocks = tally.blocks();
    if blocks == 0 {
        bail!("{}: no data to measure (empty)", a.image.display());
    }
    let fractions: [f64; RAW_UNITS as usize] =
        std::array::from_fn(|i| tally.counts[i] as f64 / blocks as f64);
    let model = SizeModel::new(fractions).map_err(anyhow::Error::msg)?;
    let mean = model.mean_units();
    let ratio = f64::from(RAW_UNITS) / mean;
    let bytes = blocks as f64 * BLOCK as f64;
    let secs = |d: Duration| d.as_secs_f64().max(1e-9);
    let stored: u64 = (0..RAW_UNITS as usize)
        .map(|i| tally.counts[i] * (i as u64 + 1) * UNIT as u64)
        .sum();
    let v = json!({
        "image": a.image.display().to_string(),
        "codec": codec.to_string(),
        "block_size": BLOCK,
        "unit_bytes": UNIT,
        "blocks": blocks,
        "files": if meta.is_dir() { Some(tally.files) } else { None },
        "bytes": blocks * BLOCK as u64,
        "stored_bytes": stored,
        "counts": (1..=RAW_UNITS).map(|u| (u.to_string(), json!(tally.counts[u as usize - 1]))).collect::<serde_json::Map<_, _>>(),
        "distribution": (1..=RAW_UNITS).map(|u| (u.to_string(), json!(fractions[u as usize - 1]))).collect::<serde_json::Map<_, _>>(),
        "raw_share": fractions[RAW_UNITS as usize - 1],
        "mean_units": mean,
        "ratio": ratio,
        "capacity_factor": ratio.min(f64::from(SLOT_RATIO)),
        "model": model.spec(),
        "compress_mb_s": bytes / secs(tally.compress) / 1e6,
        "decompress_mb_s": bytes / secs(tally.decompress) / 1e6,
        "compress_us_per_block": secs(tally.compress) * 1e6 / blocks as f64,
        "decompress_us_per_block": secs(tally.decompress) * 1e6 / blocks as f64,
    });
    if let Some(out) = &a.out {
        std::fs::write(out, serde_json::to_string_pretty(&v)? + "\n")
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{}: {} blocks of 4 KiB{}, codec {codec}",
        a.image.display(),
        blocks,
        if meta.is_dir() {
            format!(" in {} files", tally.files)
        } else {
            String::new()
        }
    );
    println!("stored size (units of 512 B; 8 = raw):");
    for u in 1..=RAW_UNITS {
        let i = u as usize - 1;
        println!(
            "  {u} {:>12} {:>6.2} %",
            tally.counts[i],
            fractions[i] * 100.0
        );
    }
    println!(
        "mean {mean:.2} units: ratio {ratio:.2}, effective capacity {:.2}x (the layout holds at most {SLOT_RATIO}x)",
        ratio.min(f64::from(SLOT_RATIO))
    );
    println!(
        "speed on this machine: compress {:.0} MB/s ({:.2} us/block), decompress {:.0} MB/s ({:.2} us/block)",
        v["compress_mb_s"].as_f64().unwrap_or(0.0),
        v["compress_us_per_block"].as_f64().unwrap_or(0.0),
        v["decompress_mb_s"].as_f64().unwrap_or(0.0),
        v["decompress_us_per_block"].as_f64().unwrap_or(0.0)
    );
    if let Some(out) = &a.out {
        println!(
            "model written to {} (sim --mode ssc --ftl log --compress {codec} --compressibility {})",
            out.display(),
            out.display()
        );
    }
    Ok(())
}
