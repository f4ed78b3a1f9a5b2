//! Power losses during the handling of an SSD failure: the WO-SSD fails, the
//! cache writes dirty pages back, flushes the backing device and records the
//! failure on the surviving RO-SSD. A wrapper around the RO-SSD snapshots
//! the three files before and after every write it receives from then on,
//! with that write torn (its first sector only) and whole: each snapshot is
//! a state a power loss can leave. Each is put back into the files and
//! opened: the pair must either open and serve every flushed write, or be
//! refused as a pair that ran degraded, with the backing device complete.
//! (Regression: the note used to be written by a forced store format, whose
//! torn state left no valid checkpoint and a pair that opened neither way;
//! found by the EIO DST, seed 0xd57 case 428.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tiercache_io::{BlockDev, FaultyDev, FileDev, FileDevOptions};
use tiercache_tica_live::{open_with_devices, ThreeLevel, PAGE};

/// 1 MiB of backing data; SSDs of 2 MiB.
mod common;

const PAGES: u64 = 256;

fn dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
}

/// Page contents naming the page and a version (version 0: zeroes).
fn block(p: u64, v: u64) -> Vec<u8> {
    if v == 0 {
        return vec![0u8; PAGE as usize];
    }
    let mut b = vec![0u8; PAGE as usize];
    for chunk in b.chunks_mut(16) {
        chunk[..8].copy_from_slice(&p.to_le_bytes());
        chunk[8..].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// Snapshots the files (RO-SSD, WO-SSD, backing) around every write to the
/// wrapped device while `armed`: after the write's first sector, and after
/// the whole write.
struct WritePoints {
    inner: Arc<dyn BlockDev>,
    armed: Arc<AtomicBool>,
    paths: Vec<PathBuf>,
    snapshots: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
}

impl WritePoints {
    fn snapshot(&self) {
        let files = self
            .paths
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        self.snapshots.lock().unwrap().push(files);
    }
}

impl BlockDev for WritePoints {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.armed.load(Ordering::Relaxed) && buf.len() > 512 {
            self.inner.write_at(&buf[..512], offset)?;
            self.snapshot();
        }
        self.inner.write_at(buf, offset)?;
        if self.armed.load(Ordering::Relaxed) {
            self.snapshot();
        }
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> std::io::Result<()> {
        self.inner.trim(offset, len)
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[test]
fn power_loss_while_recording_a_failed_peer_leaves_a_pair_that_opens_or_is_refused_as_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let (ro, wo, backing) = common::new_pair(dir.path(), PAGES, 16, 2 << 20);
    let paths = vec![ro.clone(), wo.clone(), backing.clone()];
    let armed = Arc::new(AtomicBool::new(false));
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    let ro_dev = Arc::new(WritePoints {
        inner: dev(&ro),
        armed: armed.clone(),
        paths: paths.clone(),
        snapshots: snapshots.clone(),
    });
    let wo_dev = Arc::new(FaultyDev::new(dev(&wo), 7));
    let c: Arc<ThreeLevel> =
        open_with_devices(ro_dev, wo_dev.clone(), dev(&backing), &backing).unwrap();
    // Dirty pages on both SSDs (the flusher's copies) and in DRAM, flushed.
    let mut model = vec![0u64; PAGES as usize];
    for round in 1..=3u64 {
        for pg in (0..PAGES).step_by(round as usize + 1) {
            c.write(pg * PAGE, &block(pg, round), false).unwrap();
            model[pg as usize] = round;
        }
        c.flusher_step(64).unwrap();
    }
    c.flush().unwrap();
    // The WO-SSD fails; the next FLUSH runs the whole failure handling.
    armed.store(true, Ordering::Relaxed);
    wo_dev.fail_all();
    let _ = c.flush();
    c.flush().unwrap();
    assert!(c.degraded().is_some_and(|d| d.lost == 0));
    armed.store(false, Ordering::Relaxed);
    drop(c);

    let snapshots = std::mem::take(&mut *snapshots.lock().unwrap());
    assert!(snapshots.len() >= 4, "{} snapshots", snapshots.len());
    let (mut opened, mut refused) = (0, 0);
    for (i, files) in snapshots.iter().enumerate() {
        for (path, data) in paths.iter().zip(files) {
            std::fs::write(path, data).unwrap();
        }
        match open_with_devices(dev(&ro), dev(&wo), dev(&backing), &backing) {
            Ok(c) => {
                opened += 1;
                for (pg, &v) in model.iter().enumerate() {
                    let got = c.read(pg as u64 * PAGE, PAGE as usize).unwrap();
                    assert!(
                        got == block(pg as u64, v),
                        "snapshot {i}: page {pg}: expected version {v}"
                    );
                }
            }
            Err(e) => {
                let e = format!("{e:#}");
                assert!(
                    e.contains("ran degraded"),
                    "snapshot {i}: the pair neither opens nor is refused as degraded: {e}"
                );
                refused += 1;
                let data = std::fs::read(&backing).unwrap();
                for (pg, &v) in model.iter().enumerate() {
                    let got = &data[pg * PAGE as usize..(pg + 1) * PAGE as usize];
                    assert!(
                        got == block(pg as u64, v),
                        "snapshot {i}: backing page {pg}: expected version {v}"
                    );
                }
            }
        }
    }
    // The note is the last write: the final state is the refused pair.
    let last = snapshots.last().unwrap();
    for (path, data) in paths.iter().zip(last) {
        std::fs::write(path, data).unwrap();
    }
    let e = open_with_devices(dev(&ro), dev(&wo), dev(&backing), &backing)
        .err()
        .expect("the noted pair must not open");
    assert!(format!("{e:#}").contains("ran degraded"), "{e:#}");
    // Also when the failed WO-SSD no longer holds a readable superblock.
    let mut w = last[1].clone();
    w[..2 * PAGE as usize].fill(0);
    std::fs::write(&wo, &w).unwrap();
    let e = open_with_devices(dev(&ro), dev(&wo), dev(&backing), &backing)
        .err()
        .expect("the noted pair must not open");
    assert!(format!("{e:#}").contains("ran degraded"), "{e:#}");
    assert!(
        opened > 0 && refused > 0,
        "opened {opened}, refused {refused}"
    );
}
