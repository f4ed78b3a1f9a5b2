//! A tiered volume on real files (the way `serve` opens it): requests to
//! blocks on the fast tier run inline on the runtime's workers through the
//! page cache (counted in `inline_requests`), slow-tier requests and FUA
//! writes on the request threads. Concurrent writers mixing FUA writes and
//! FLUSH, readers checking their own writes, migrations of the blocks they
//! touch meanwhile (copied to the fast tier page by page): every byte reads back, sits
//! where the mapping says on the raw files, and survives a reopen without a
//! clean shutdown (kill -9: the page cache is the kernel's, so only the
//! mapping's recovery is exercised here; power loss is `power_loss.rs`).

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tiercache_oodt_live::{
    format_volume, open_volume, Capacity, OpenOptions, TieredVolume, VolumeConfig,
};
use tiercache_oodt_policy::policy::PolicyKind;

const BS: u32 = 64 << 10;
const BLOCKS: u64 = 32;
const UNIT: usize = 4096;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn open(fast: &Path) -> Arc<TieredVolume> {
    open_volume(&OpenOptions {
        fast: fast.to_path_buf(),
        ..Default::default()
    })
    .unwrap()
}

/// The volume's bytes of `block`, read from the raw tier files where the
/// mapping puts it.
fn raw_block(vol: &TieredVolume, fast: &Path, slow: &Path, block: u64) -> Vec<u8> {
    let loc = vol.location(block).unwrap();
    let sb = vol.superblock();
    let (file, off) = if loc.tier == 0 {
        (fast, sb.layout.data_offset + loc.slot * u64::from(BS))
    } else {
        (slow, loc.slot * u64::from(BS))
    };
    let mut buf = vec![0u8; BS as usize];
    std::fs::File::open(file)
        .unwrap()
        .read_exact_at(&mut buf, off)
        .unwrap();
    buf
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_tier_requests_run_inline_and_concurrent_fua_and_flushed_writes_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, slow) = (dir.path().join("fast.img"), dir.path().join("slow.img"));
    let size = BLOCKS * u64::from(BS);
    let mut model = pattern(size as usize, 1);
    std::fs::write(&slow, &model).unwrap();
    let cfg = VolumeConfig {
        plan_every: 64,
        idle_ms: 10,
        ..VolumeConfig::new(PolicyKind::Frequency)
    };
    format_volume(&fast, &slow, BS, &cfg, Some(2 << 20), false, Capacity::Slow).unwrap();
    // No background worker: rounds run when the test asks (`migrate_now`),
    // so dropping the volume below leaves nothing running on its files.
    let vol = open(&fast);
    // A hot set read over and over: the planner promotes it.
    let hot = [3u64, 4, 17, 30];
    let t0 = Instant::now();
    while hot.iter().any(|&b| vol.location(b).unwrap().tier != 0) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "hot blocks not promoted: {}",
            vol.stats_json()
        );
        for &b in &hot {
            let mut buf = vec![0u8; UNIT];
            vol.read(b * u64::from(BS), &mut buf).await.unwrap();
        }
        let v = Arc::clone(&vol);
        tokio::task::spawn_blocking(move || v.migrate_now())
            .await
            .unwrap()
            .unwrap();
    }
    // The promoted copies (written page by page) are the slow tier's bytes.
    for &b in &hot {
        let want = &model[(b * u64::from(BS)) as usize..((b + 1) * u64::from(BS)) as usize];
        assert!(raw_block(&vol, &fast, &slow, b) == want, "block {b}");
    }
    let inline_before = vol.stats_json()["inline_requests"].as_u64().unwrap();
    // Four writers, each on its own 4 KiB units spread over hot and cold
    // blocks; every third write FUA, a FLUSH every 16 writes; each writer
    // reads its unit back after writing it.
    let units = size / UNIT as u64;
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let vol = Arc::clone(&vol);
            tokio::spawn(async move {
                let mut mine = Vec::new();
                for i in 0..200u64 {
                    // Mostly hot blocks (inline), some cold ones (threads).
                    let block = if i % 4 == 3 {
                        (w * 7 + i) % BLOCKS
                    } else {
                        hot[(i % 3) as usize]
                    };
                    let per_block = u64::from(BS) / UNIT as u64;
                    let unit = block * per_block + (w + 4 * (i / 4)) % per_block;
                    let unit = unit - unit % 4 + w; // units differ per writer
                    assert!(unit < units);
                    let data = pattern(UNIT, 1000 + w * 1000 + i);
                    vol.write(unit * UNIT as u64, &data, i % 3 == 0)
                        .await
                        .unwrap();
                    let mut back = vec![0u8; UNIT];
                    vol.read(unit * UNIT as u64, &mut back).await.unwrap();
                    assert!(back == data, "writer {w} write {i}: unit {unit} reads back");
                    if i % 16 == 15 {
                        vol.flush().await.unwrap();
                    }
                    mine.push((unit, data));
                }
                vol.flush().await.unwrap();
                mine
            })
        })
        .collect();
    // Planner rounds while the writers run (they may move blocks under them).
    let v = Arc::clone(&vol);
    let rounds = tokio::task::spawn_blocking(move || {
        for _ in 0..5 {
            v.migrate_now().unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    for w in writers {
        for (unit, data) in w.await.unwrap() {
            let at = unit as usize * UNIT;
            model[at..at + UNIT].copy_from_slice(&data);
        }
    }
    rounds.await.unwrap();
    let st = vol.stats_json();
    assert!(
        st["inline_requests"].as_u64().unwrap() > inline_before,
        "requests to fast-tier blocks ran inline: {st}"
    );
    assert!(st["tiers"][1]["write_hits"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["migration_errors"], 0, "{st}");
    let mut all = vec![0u8; size as usize];
    vol.read(0, &mut all).await.unwrap();
    assert!(all == model, "the volume differs from the model");
    for b in 0..BLOCKS {
        let r = (b * u64::from(BS)) as usize..((b + 1) * u64::from(BS)) as usize;
        assert!(
            raw_block(&vol, &fast, &slow, b) == model[r],
            "block {b} on its tier"
        );
    }
    // No clean shutdown (as after kill -9): drop the volume, reopen.
    drop(vol);
    let vol = open(&fast);
    let mut all = vec![0u8; size as usize];
    vol.read(0, &mut all).await.unwrap();
    assert!(all == model, "after reopening, the volume differs");
    vol.shutdown().unwrap();
}
