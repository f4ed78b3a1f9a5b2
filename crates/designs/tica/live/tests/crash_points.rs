//! Crash states taken inside requests: a wrapper around the WO-SSD snapshots
//! the three files (RO-SSD, WO-SSD, backing) at metadata syncs that happen in
//! the middle of a client write (the commits a write takes when it needs slot
//! space), which is where a kill -9 can land. Each snapshot is then put back
//! into the files and opened: every page must hold at least the version the
//! last completed FLUSH before the snapshot covered, and a version that was
//! written. (This catches a write's unmap of its page's older copy becoming
//! durable before the new copy: the last flushed version would vanish.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tiercache_io::{BlockDev, FileDev, FileDevOptions};
use tiercache_tica_live::{open_with_devices, PAGE};

mod common;

const PAGES: u64 = 128;
const SNAPSHOTS: usize = 24;

fn dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
}

fn block(p: u64, v: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE as usize];
    for chunk in b.chunks_mut(16) {
        chunk[..8].copy_from_slice(&p.to_le_bytes());
        chunk[8..].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// (page, version) a block holds, if well formed (version 0: never written).
fn parse(b: &[u8]) -> Option<(u64, u64)> {
    if b.iter().all(|&x| x == 0) {
        return Some((u64::MAX, 0));
    }
    let p = u64::from_le_bytes(b[..8].try_into().unwrap());
    let v = u64::from_le_bytes(b[8..16].try_into().unwrap());
    (block(p, v) == b).then_some((p, v))
}

struct Snapshot {
    files: Vec<Vec<u8>>,
    /// Per page: the version the last completed FLUSH covered.
    floor: Vec<u64>,
}

#[derive(Default)]
struct Shared {
    floor: Vec<u64>,
    snapshots: Vec<Snapshot>,
    paths: Vec<PathBuf>,
}

/// Snapshots the files after each sync of the wrapped device while `armed`.
struct SyncPoints {
    inner: Arc<dyn BlockDev>,
    armed: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
}

impl BlockDev for SyncPoints {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()?;
        if self.armed.load(Ordering::Relaxed) {
            let mut s = self.shared.lock().unwrap();
            if s.snapshots.len() < SNAPSHOTS {
                let files = s.paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
                let floor = s.floor.clone();
                s.snapshots.push(Snapshot { files, floor });
            }
        }
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[test]
fn crash_inside_a_write_keeps_every_flushed_version() {
    let dir = tempfile::tempdir().unwrap();
    // 64 slots per SSD (a 256 KiB log, data from 1 MiB), DRAM of 8 pages.
    let (ro, wo, backing) = common::new_pair(dir.path(), PAGES, 8, (1 << 20) + 64 * PAGE);
    let armed = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Mutex::new(Shared {
        floor: vec![0; PAGES as usize],
        snapshots: Vec::new(),
        paths: vec![ro.clone(), wo.clone(), backing.clone()],
    }));
    let wo_dev: Arc<dyn BlockDev> = Arc::new(SyncPoints {
        inner: dev(&wo),
        armed: Arc::clone(&armed),
        shared: Arc::clone(&shared),
    });
    let c = open_with_devices(dev(&ro), wo_dev, dev(&backing), &backing).unwrap();
    let mut model = vec![0u64; PAGES as usize];
    let mut version = 0u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..3000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // A hot half gets three quarters of the writes (rewrites of cached dirty pages).
        let pg = if !x.is_multiple_of(4) {
            (x >> 8) % (PAGES / 2)
        } else {
            (x >> 8) % PAGES
        };
        version += 1;
        armed.store(i > 300, Ordering::Relaxed);
        c.write(pg * PAGE, &block(pg, version), false).unwrap();
        armed.store(false, Ordering::Relaxed);
        model[pg as usize] = version;
        if i % 50 == 49 {
            c.flush().unwrap();
            shared.lock().unwrap().floor = model.clone();
        }
        if i % 7 == 0 {
            c.flusher_step(4).unwrap();
        }
    }
    c.shutdown(false).unwrap();
    drop(c);
    let snaps = std::mem::take(&mut shared.lock().unwrap().snapshots);
    assert!(
        snaps.len() >= 10,
        "writes took commits for slot space: {} snapshots",
        snaps.len()
    );
    for (k, s) in snaps.iter().enumerate() {
        for (path, bytes) in [&ro, &wo, &backing].iter().zip(&s.files) {
            std::fs::write(path, bytes).unwrap();
        }
        let c = open_with_devices(dev(&ro), dev(&wo), dev(&backing), &backing)
            .unwrap_or_else(|e| panic!("snapshot {k}: open: {e:#}"));
        for pg in 0..PAGES {
            let b = c.read(pg * PAGE, PAGE as usize).unwrap();
            let (bp, v) = parse(&b).unwrap_or_else(|| panic!("snapshot {k}: page {pg}: garbage"));
            assert!(
                v == 0 || bp == pg,
                "snapshot {k}: page {pg} holds page {bp}'s data"
            );
            assert!(
                v >= s.floor[pg as usize],
                "snapshot {k}: page {pg} holds version {v}, older than its flushed version {}",
                s.floor[pg as usize]
            );
        }
        c.stop_background();
    }
}
