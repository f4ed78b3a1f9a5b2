//! Filesystem-aware request classes for the live cache (ext4 and XFS), so
//! metadata-first admission (2LBS) works on unmodified hosts over NBD.
//!
//! - The layout classifier (`tiercache-fsmeta`) is attached at start and
//!   re-attached whenever a write touches the first MiB of the device (a new
//!   `mkfs`); it reads the device *through the cache*, so it sees current data.
//! - Writes are classified by layout and by their content, on a blocking
//!   thread (a layout re-parse reads the device).
//! - Reads are classified by layout and by what the last write or read-miss
//!   fill of each block sniffed as metadata (remembered per 4 KiB block).
//! - A transport that tags requests itself (ublk's `UBLK_IO_F_META`) would
//!   pass its flag as the `hint` of [`tiercache_fsmeta::ClassSource::classify`]
//!   and skip the sniffing: see the fsmeta crate docs.

use crate::live::LiveCache;
use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, Weak};
use tiercache_azor_policy::{Class, IoKind};
use tiercache_fsmeta::{ClassSource, FsClassifier, ReadAt};

/// Reads the live device through the cache, from a blocking thread.
pub struct CacheReader {
    cache: Weak<LiveCache>,
    rt: tokio::runtime::Handle,
}

impl ReadAt for CacheReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let cache = self
            .cache
            .upgrade()
            .ok_or_else(|| std::io::Error::other("cache closed"))?;
        if offset.saturating_add(buf.len() as u64) > cache.size() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end of the device",
            ));
        }
        let data = self
            .rt
            .block_on(cache.request_with_class(
                IoKind::Read,
                offset,
                buf.len() as u64,
                None,
                false,
                Some(Class::Metadata),
            ))
            .map_err(|e| std::io::Error::other(e.0))?;
        buf.copy_from_slice(&data);
        Ok(())
    }
}

/// Classification state of one export.
#[derive(Default)]
pub struct FsState {
    classifier: Option<FsClassifier<CacheReader>>,
    /// 4 KiB blocks whose last seen content was metadata or journal.
    sniffed: FxHashMap<u64, Class>,
}

const SNIFF_BLOCK: u64 = 4096;

impl FsState {
    /// Class of a read: layout, or what the block last held.
    pub fn read_class(&mut self, offset: u64, len: u64) -> Class {
        let mut class = match &mut self.classifier {
            Some(c) => c.classify(offset, len, None, None),
            None => Class::Data,
        };
        if class == Class::Data {
            for b in offset / SNIFF_BLOCK..(offset + len.max(1)).div_ceil(SNIFF_BLOCK) {
                match self.sniffed.get(&b) {
                    Some(Class::Metadata) => return Class::Metadata,
                    Some(Class::Journal) => class = Class::Journal,
                    _ => {}
                }
            }
        }
        class
    }

    /// Remember the sniffed class of each whole 4 KiB block of `data` at `offset`.
    pub fn learn(&mut self, offset: u64, data: &[u8]) {
        let Some(c) = &self.classifier else { return };
        let bs = c.layout().block_size as u64;
        let first = offset.div_ceil(SNIFF_BLOCK);
        let end = (offset + data.len() as u64) / SNIFF_BLOCK;
        for b in first..end {
            let lo = (b * SNIFF_BLOCK - offset) as usize;
            let blk = &data[lo..lo + SNIFF_BLOCK as usize];
            let fsb = b * SNIFF_BLOCK / bs;
            let cls = if bs == SNIFF_BLOCK {
                c.classify_block(fsb, Some(blk))
            } else {
                Class::Data
            };
            if cls == Class::Data {
                self.sniffed.remove(&b);
            } else {
                self.sniffed.insert(b, cls);
            }
        }
    }
}

/// Try to attach a classifier (from a blocking thread). Returns whether a filesystem was found.
pub fn attach(cache: &Arc<LiveCache>, fs: &Mutex<FsState>, rt: tokio::runtime::Handle) -> bool {
    let reader = CacheReader {
        cache: Arc::downgrade(cache),
        rt,
    };
    match FsClassifier::attach(reader, 0) {
        Ok(c) => {
            let name = format!("{:?}", c.layout().filesystem).to_lowercase();
            tracing::info!(
                "classifying blocks of the {name} filesystem on the device (metadata first)"
            );
            let mut s = fs.lock().expect("fs");
            *cache.fs_name.lock().expect("fs name") = Some(name);
            s.classifier = Some(c);
            s.sniffed.clear();
            true
        }
        Err(e) => {
            tracing::debug!("no filesystem to classify: {e}");
            let mut s = fs.lock().expect("fs");
            s.classifier = None;
            *cache.fs_name.lock().expect("fs name") = None;
            false
        }
    }
}

/// Class of a write (layout and content), from a blocking thread.
pub fn write_class(fs: &Mutex<FsState>, offset: u64, data: &[u8]) -> Class {
    let mut s = fs.lock().expect("fs");
    let class = match &mut s.classifier {
        Some(c) => c.classify(offset, data.len() as u64, Some(data), None),
        None => return Class::Data,
    };
    s.learn(offset, data);
    class
}

#[cfg(test)]
mod tests {
    use crate::{format_cache, open_cache, OpenOptions};
    use std::sync::Arc;
    use tiercache_azor_policy::{CacheConfig, IoKind};

    /// Regression (2026-11-26: `tiercache reproduce azor` hung for good in
    /// PostMark on XFS through a cache with `--fs-classify auto`; even
    /// `tiercache stats` got no answer): a write to a filesystem's critical
    /// block makes the classifier parse the layout again, reading it through
    /// the cache while it holds the classification lock. Requests that took
    /// that lock on the runtime's two workers blocked both, and the parse's
    /// read needed them (its backing device, an emulated HDD, was served by
    /// the same process). Requests waiting for the classification lock must
    /// leave the workers free: here, with the lock held, eight classified
    /// reads queue and a plain task must still run; after the release every
    /// read finishes.
    #[test]
    fn requests_waiting_for_the_classification_lock_leave_the_workers_free() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let d = tempfile::tempdir().unwrap();
        let backing = d.path().join("backing.img");
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let cache = d.path().join("cache.img");
        format_cache(
            &cache,
            &backing,
            &CacheConfig::default(),
            Some(16 << 20),
            false,
        )
        .unwrap();
        let live = {
            let _g = rt.enter();
            let o = open_cache(&OpenOptions {
                cache,
                backing: None,
                emulate_hdd: false,
                direct: false,
            })
            .unwrap();
            o.cache.start_background();
            // Classification on (no filesystem here: reads still look up
            // their class under the lock, as on a formatted device).
            o.cache.enable_classification();
            o.cache
        };
        std::thread::sleep(std::time::Duration::from_millis(200));
        let fs = live.fs.lock().unwrap();
        let reads: Vec<_> = (0..8u64)
            .map(|i| {
                let live = Arc::clone(&live);
                rt.spawn(async move {
                    live.request(IoKind::Read, i * 4096, 4096, None, false)
                        .await
                        .map(|d| d.len())
                })
            })
            .collect();
        // Let the reads reach the lock (on the workers, before the fix).
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move { tx.send(()).unwrap() });
        let ran = rx.recv_timeout(std::time::Duration::from_secs(10));
        drop(fs);
        assert!(
            ran.is_ok(),
            "no runtime worker was free while the classification lock was held"
        );
        let n: usize = rt.block_on(async {
            let mut n = 0;
            for r in reads {
                n += r.await.unwrap().unwrap();
            }
            n
        });
        assert_eq!(n, 8 * 4096);
    }
}
