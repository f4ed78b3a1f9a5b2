//! Filesystem-aware classes reach the core in the live server: reads of ext4
//! metadata (by layout) and blocks last written with metadata content (by
//! sniffing) count as metadata accesses; file data does not.

use std::process::Command;
use tiercache_azor_live::{format_cache, open_cache, OpenOptions};
use tiercache_azor_policy::admission::{AdmissionConfig, AdmissionKind};
use tiercache_azor_policy::{CacheConfig, IoKind};

fn have(tool: &str) -> bool {
    Command::new(tool).arg("-V").output().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ext4_metadata_is_classified_through_the_cache() {
    if !have("mkfs.ext4") || !have("dumpe2fs") {
        eprintln!("skip: mkfs.ext4/dumpe2fs not installed (run scripts/setup.sh)");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let backing = d.path().join("fs.img");
    std::fs::File::create(&backing)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let ok = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&backing)
        .status()
        .unwrap();
    assert!(ok.success());
    // Where the first inode table is, from dumpe2fs (the ground truth).
    let out = Command::new("dumpe2fs").arg(&backing).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let itable: u64 = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Inode table at ")
                .map(|r| r.split('-').next().unwrap().trim().parse().unwrap())
        })
        .expect("inode table in dumpe2fs output");
    let cache = d.path().join("cache.img");
    let cfg = CacheConfig {
        admission: AdmissionConfig {
            kind: AdmissionKind::TwoLevel,
            ..AdmissionConfig::default()
        },
        ..CacheConfig::default()
    };
    format_cache(&cache, &backing, &cfg, Some(16 << 20), false).unwrap();
    let opened = open_cache(&OpenOptions {
        cache: cache.clone(),
        backing: None,
        emulate_hdd: false,
        direct: false,
    })
    .unwrap();
    let live = opened.cache;
    live.start_background();
    live.enable_classification();
    for _ in 0..100 {
        if live.filesystem().is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(live.filesystem().as_deref(), Some("ext4"));
    let meta = |l: &std::sync::Arc<tiercache_azor_live::live::LiveCache>| {
        let v = tiercache_azor_live::design::stats_json(l);
        (
            v["metadata_hits"].as_u64().unwrap() + v["metadata_misses"].as_u64().unwrap(),
            v["read_hits"].as_u64().unwrap(),
        )
    };
    let (m0, _) = meta(&live);
    // An inode-table block is metadata by layout.
    live.request(IoKind::Read, itable * 4096, 4096, None, false)
        .await
        .unwrap();
    let (m1, _) = meta(&live);
    assert_eq!(m1, m0 + 1, "inode table read counted as metadata");
    // A free data block far into the filesystem is data.
    let data_off = 48 << 20;
    live.request(IoKind::Read, data_off, 4096, None, false)
        .await
        .unwrap();
    assert_eq!(meta(&live).0, m1, "file data is not metadata");
    // Write an ext4 extent-tree block (magic 0xF30A, valid header) into that data area:
    // content sniffing makes later reads of it metadata.
    let mut blk = vec![0u8; 4096];
    blk[0..2].copy_from_slice(&0xF30Au16.to_le_bytes()); // eh_magic
    blk[2..4].copy_from_slice(&1u16.to_le_bytes()); // eh_entries
    blk[4..6].copy_from_slice(&340u16.to_le_bytes()); // eh_max for a 4 KiB block
    blk[6..8].copy_from_slice(&0u16.to_le_bytes()); // eh_depth
    blk[12..16].copy_from_slice(&0u32.to_le_bytes()); // first extent: logical block 0
    blk[16..18].copy_from_slice(&1u16.to_le_bytes()); // length 1
    blk[20..24].copy_from_slice(&5000u32.to_le_bytes()); // physical block
    live.request(IoKind::Write, data_off, 4096, Some(&blk), false)
        .await
        .unwrap();
    live.request(IoKind::Read, data_off, 4096, None, false)
        .await
        .unwrap();
    assert_eq!(
        meta(&live).0,
        m1 + 1,
        "a block holding an extent node reads as metadata"
    );
    // Overwriting it with file data makes it data again.
    live.request(
        IoKind::Write,
        data_off,
        4096,
        Some(&vec![0x5a; 4096]),
        false,
    )
    .await
    .unwrap();
    live.request(IoKind::Read, data_off, 4096, None, false)
        .await
        .unwrap();
    assert_eq!(meta(&live).0, m1 + 1);
    live.shutdown().await.unwrap();
}
