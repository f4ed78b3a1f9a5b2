//! The request path and migrations of a tiered volume on in-memory tiers:
//! reads and writes split across blocks on both tiers return what was
//! written; blocks the planner promotes really live in fast-tier slots
//! and the others at home on the slow tier (checked on the raw devices); FLUSH, TRIM
//! and out-of-range requests behave; a clean shutdown and reopen finds
//! every block where it was.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tiercache_io::{BlockDev, MemDev};
use tiercache_oodt_live::superblock::{Layout, Superblock, TierRecord};
use tiercache_oodt_live::{initialize, TieredVolume, VolumeConfig};
use tiercache_oodt_policy::policy::PolicyKind;
use tiercache_store::BackingIdentity;

const BS: u32 = 64 << 10;
const BLOCKS: u64 = 64;

fn volume_bytes() -> u64 {
    BLOCKS * u64::from(BS)
}

fn setup() -> (Arc<MemDev>, Arc<MemDev>, Superblock) {
    let probe = Layout::compute(1 << 30, BLOCKS, BS).unwrap();
    let fast_len = probe.data_offset + 8 * u64::from(BS);
    let mut layout = Layout::compute(fast_len, BLOCKS, BS).unwrap();
    // A log of 20 records: checkpoints between the migrations of a round.
    layout.log_bytes = 20 * 64;
    let fast = Arc::new(MemDev::new("fast", fast_len as usize));
    let slow = Arc::new(MemDev::new("slow", volume_bytes() as usize));
    let id = |p: &str, size| BackingIdentity {
        path: p.into(),
        size,
        fingerprint: 0,
        file_id: None,
        serial: None,
        sampled: None,
        times: None,
    };
    let cfg = VolumeConfig {
        plan_every: 50,
        idle_ms: 10,
        ..VolumeConfig::new(PolicyKind::Frequency)
    };
    let sb = Superblock {
        uuid: [2; 16],
        block_bytes: BS,
        volume_bytes: volume_bytes(),
        capacity: tiercache_oodt_live::Capacity::Slow,
        config: serde_json::to_string(&cfg).unwrap(),
        tiers: vec![
            TierRecord {
                identity: id("fast", fast_len),
            },
            TierRecord {
                identity: id("slow", volume_bytes()),
            },
        ],
        layout,
    };
    let dev: Arc<dyn BlockDev> = fast.clone();
    initialize(&dev, &sb).unwrap();
    (fast, slow, sb)
}

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

fn open(fast: &Arc<MemDev>, slow: &Arc<MemDev>, sb: &Superblock) -> Arc<TieredVolume> {
    TieredVolume::open(sb.clone(), vec![fast.clone(), slow.clone()]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrated_blocks_live_in_fast_slots_and_every_byte_reads_back() {
    let (fast, slow, sb) = setup();
    let vol = open(&fast, &slow, &sb);
    let mut model = pattern(volume_bytes() as usize, 9);
    // Unaligned writes straddling block boundaries.
    vol.write(0, &model, false).await.unwrap();
    let (at, len) = (u64::from(BS) - 1000, 3 * BS as usize);
    let p = pattern(len, 10);
    vol.write(at, &p, true).await.unwrap();
    model[at as usize..at as usize + len].copy_from_slice(&p);
    vol.start_background();
    // A hot set of 4 blocks, read over and over: the planner promotes them.
    let hot = [5u64, 6, 40, 63];
    let t0 = Instant::now();
    while hot.iter().any(|&b| vol.location(b).unwrap().tier != 0) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "hot blocks not promoted: {}",
            vol.stats_json()
        );
        for &b in &hot {
            let mut buf = vec![0u8; 4096];
            vol.read(b * u64::from(BS) + 8192, &mut buf).await.unwrap();
        }
    }
    let st = vol.stats_json();
    assert!(st["promotions"].as_u64().unwrap() >= 4, "{st}");
    assert_eq!(st["migration_errors"], 0, "{st}");
    assert!(
        st["checkpoints"].as_u64().unwrap() > 0,
        "the small log filled: {st}"
    );
    // Each promoted block's bytes are in its fast slot on the raw device.
    for &b in &hot {
        let loc = vol.location(b).unwrap();
        let mut raw = vec![0u8; BS as usize];
        fast.read_at(&mut raw, sb.layout.data_offset + loc.slot * u64::from(BS))
            .unwrap();
        let want = &model[(b * u64::from(BS)) as usize..((b + 1) * u64::from(BS)) as usize];
        assert!(raw == want, "block {b} in fast slot {}", loc.slot);
    }
    // Writes to promoted blocks go to the fast tier; reads across both tiers.
    let p = pattern(2 * BS as usize, 11);
    let at = 5 * u64::from(BS) + 100;
    vol.write(at, &p, false).await.unwrap();
    model[at as usize..at as usize + p.len()].copy_from_slice(&p);
    let mut all = vec![0u8; volume_bytes() as usize];
    vol.read(0, &mut all).await.unwrap();
    assert!(all == model, "volume differs from the model");
    vol.flush().await.unwrap();
    // Out of range and empty requests are refused, not served.
    let mut one = [0u8; 1];
    assert!(vol.read(volume_bytes(), &mut one).await.is_err());
    assert!(vol.write(volume_bytes() - 1, &[0, 0], false).await.is_err());
    assert!(vol.trim(0, 0).await.is_err());
    // A trim leaves every other byte alone.
    vol.trim(7 * u64::from(BS), u64::from(BS)).await.unwrap();
    let mut all2 = vec![0u8; volume_bytes() as usize];
    vol.read(0, &mut all2).await.unwrap();
    let (a, b) = (7 * BS as usize, 8 * BS as usize);
    assert!(all2[..a] == model[..a] && all2[b..] == model[b..]);
    // Every block on the slow tier is at home there (raw device).
    for blk in (0..BLOCKS).filter(|&x| x != 7) {
        let loc = vol.location(blk).unwrap();
        let r = (blk * u64::from(BS)) as usize..((blk + 1) * u64::from(BS)) as usize;
        let mut raw = vec![0u8; BS as usize];
        if loc.tier == 1 {
            assert_eq!(loc.slot, blk);
            slow.read_at(&mut raw, r.start as u64).unwrap();
        } else {
            fast.read_at(&mut raw, sb.layout.data_offset + loc.slot * u64::from(BS))
                .unwrap();
        }
        assert!(raw == model[r], "block {blk} at {loc:?}");
    }
    // Clean shutdown and reopen: same mapping, same bytes.
    let before: Vec<_> = (0..BLOCKS).map(|b| vol.location(b).unwrap()).collect();
    let v2 = {
        let v = Arc::clone(&vol);
        tokio::task::spawn_blocking(move || v.shutdown())
            .await
            .unwrap()
            .unwrap();
        drop(vol);
        open(&fast, &slow, &sb)
    };
    let after: Vec<_> = (0..BLOCKS).map(|b| v2.location(b).unwrap()).collect();
    assert_eq!(before, after);
    assert_eq!(v2.recovery().log_records, 0, "clean shutdown: empty log");
    let mut all3 = vec![0u8; volume_bytes() as usize];
    v2.read(0, &mut all3).await.unwrap();
    assert!(all3[..a] == model[..a] && all3[b..] == model[b..]);
}
