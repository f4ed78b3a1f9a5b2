//! Recovery time of a cache with at least a million mapped blocks (the
//! goal: under one second; FlashTier reports 2.4 s for 102 GB), and the
//! unified map's host memory per cached block (goal at most 8 bytes).
//!
//! Ignored by default (it writes 4 GiB); run with
//! `cargo test --release -p tiercache-flashtier-live --test recovery_time -- --ignored --nocapture`.
//! `TIERCACHE_LS_BLOCKS` sets the number of blocks (default 1,000,000) and
//! `TIERCACHE_LS_DIR` the directory for the two files (default: a temp dir).
//! Before each reopen the cache file's pages are dropped from the page cache
//! (posix_fadvise DONTNEED through python3, when present), so the reads are
//! cold.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tiercache_flashtier_live::cache::{MapBytesPerBlock, Occupancy};
use tiercache_flashtier_live::{format, open_with_devices, FormatOptions, WritePolicy, BLOCK};
use tiercache_io::{BlockDev, FileDev, FileDevOptions};

fn dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
}

fn drop_page_cache(p: &Path) -> bool {
    std::process::Command::new("python3")
        .args([
            "-c",
            "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)",
        ])
        .arg(p)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
#[ignore = "writes 4 GiB; run explicitly (see the module documentation)"]
fn recovery_of_a_million_blocks() {
    let blocks: u64 = std::env::var("TIERCACHE_LS_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let tmp = tempfile::tempdir_in(
        std::env::var("TIERCACHE_LS_DIR")
            .unwrap_or_else(|_| std::env::temp_dir().display().to_string()),
    )
    .unwrap();
    let cache = tmp.path().join("cache.img");
    let backing = tmp.path().join("backing.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(2 * blocks * BLOCK)
        .unwrap();
    // Room for the blocks plus 3% (segments' summaries, reserve, metadata).
    let cache_bytes = (blocks * BLOCK) / 100 * 104 + (64 << 20);
    let sb = format(&FormatOptions {
        cache: cache.clone(),
        backing: backing.clone(),
        create_size: Some(cache_bytes),
        write_policy: WritePolicy::WriteBack,
        dirty_target: 1.0,
        seg_bytes: 1 << 20,
        force: false,
        max_size: None,
        compress: Default::default(),
    })
    .unwrap();
    assert!(
        sb.slots() > blocks + 4 * 254,
        "cache too small: {} slots",
        sb.slots()
    );
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let t = Instant::now();
    // Every other 1 MiB extent of the backing device, 256 blocks per write.
    let mut buf = vec![0u8; 256 * BLOCK as usize];
    let mut done = 0u64;
    let mut i = 0u64;
    while done < blocks {
        let n = 256.min(blocks - done);
        for (k, b) in buf.chunks_mut(BLOCK as usize).enumerate() {
            b[..8].copy_from_slice(&(i * 512 + k as u64).to_le_bytes());
        }
        c.write(i * 512 * BLOCK, &buf[..(n * BLOCK) as usize], false)
            .unwrap();
        done += n;
        i += 1;
    }
    c.flush().unwrap();
    let write_s = t.elapsed().as_secs_f64();
    let Occupancy { mapped, dirty } = c.occupancy();
    let MapBytesPerBlock {
        mapped: per_block,
        full: per_block_full,
    } = c.map_bytes_per_block();
    let st = c.stats_json();
    assert_eq!(mapped, blocks);
    eprintln!(
        "wrote {blocks} blocks ({:.1} GiB) in {write_s:.1} s; {} checkpoints; map {} bytes: {per_block:.2} B per cached block \
         ({per_block_full:.2} B per block when full, {} B entries)",
        (blocks * BLOCK) as f64 / (1u64 << 30) as f64,
        st["metadata"]["checkpoints"],
        st["map"]["bytes"],
        st["map"]["entry_bytes"]
    );
    assert!(per_block <= 8.0, "{per_block} B per cached block");
    // A crash: drop the cache without shutdown, reopen cold.
    drop(c);
    let cold = drop_page_cache(&cache);
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let r = c.recovery().clone();
    eprintln!(
        "after a crash ({} page cache): recovered {} blocks ({} dirty) in {:.1} ms: {} from the checkpoint, \
         {} segments / {} entries replayed",
        if cold { "cold" } else { "warm" },
        r.mapped_blocks,
        r.dirty_blocks,
        r.duration.as_secs_f64() * 1000.0,
        r.checkpoint_entries,
        r.replayed_segments,
        r.replayed_entries
    );
    assert_eq!((r.mapped_blocks, r.dirty_blocks), (mapped, dirty));
    let probe = c.read(7 * 512 * BLOCK + 5 * BLOCK, BLOCK as usize).unwrap();
    assert_eq!(
        u64::from_le_bytes(probe[..8].try_into().unwrap()),
        7 * 512 + 5
    );
    c.shutdown(false).unwrap();
    drop(c);
    let cold = drop_page_cache(&cache);
    let c = open_with_devices(dev(&cache), dev(&backing), &backing).unwrap();
    let r2 = c.recovery().clone();
    eprintln!(
        "after a clean shutdown ({} page cache): {} blocks in {:.1} ms",
        if cold { "cold" } else { "warm" },
        r2.mapped_blocks,
        r2.duration.as_secs_f64() * 1000.0
    );
    assert_eq!(r2.mapped_blocks, blocks);
}
