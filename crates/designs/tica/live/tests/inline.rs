//! Requests served inline (on the caller's thread, `cache::inline`) and the
//! background thread's commits with the data synced outside the lock:
//! concurrent inline and request-thread calls give every page its last
//! written bytes, survive a crash after FLUSH, keep dirty data on two
//! devices; a request that cannot run inline leaves no trace; a failed sync
//! outside the lock fails its SSD like a failed commit; the flusher's
//! RO-SSD copies carry the last versions when the WO-SSD fails.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tiercache_io::{BlockDev, FaultRule, FaultyDev, FileDev, FileDevOptions, OpKinds};
use tiercache_tica_live::{format, open_with_devices, FormatOptions, Role, ThreeLevel, PAGE};
use tiercache_tica_policy::Policy;

/// 8 MiB of backing data (2048 pages); SSDs of 4 MiB hold 768 pages each.
const PAGES: u64 = 2048;

struct Files {
    _dir: tempfile::TempDir,
    ro: PathBuf,
    wo: PathBuf,
    backing: PathBuf,
}

fn files(policy: Policy) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let backing = p("backing.img");
    std::fs::write(&backing, vec![0u8; (PAGES * PAGE) as usize]).unwrap();
    let o = FormatOptions {
        ro_ssd: p("ro.img"),
        wo_ssd: p("wo.img"),
        backing: backing.clone(),
        dram_bytes: 64 * PAGE,
        policy,
        create_size: Some(4 << 20),
        force: false,
        max_size: None,
    };
    format(&o).unwrap();
    Files {
        ro: p("ro.img"),
        wo: p("wo.img"),
        backing,
        _dir: dir,
    }
}

fn dev(p: &Path) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
}

/// The cache on plain files (their SSD pages can be read inline).
fn open(f: &Files) -> Arc<ThreeLevel> {
    open_with_devices(dev(&f.ro), dev(&f.wo), dev(&f.backing), &f.backing).unwrap()
}

/// Page contents naming the page and a version (0: the backing's zeros).
fn block(p: u64, v: u64) -> Vec<u8> {
    if v == 0 {
        return vec![0u8; PAGE as usize];
    }
    let mut b = vec![0u8; PAGE as usize];
    for (i, chunk) in b.chunks_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&p.to_le_bytes());
        chunk[8..].copy_from_slice(&(v ^ i as u64).to_le_bytes());
    }
    b
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Read through the inline path when it takes the request, else the
/// request-thread path.
fn read(c: &ThreeLevel, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    match c.read_inline(offset, &mut buf) {
        Some(r) => {
            r.unwrap();
            buf
        }
        None => c.read(offset, len).unwrap(),
    }
}

fn write(c: &ThreeLevel, offset: u64, data: &[u8], fua: bool) {
    match c.write_inline(offset, data, fua) {
        Some(r) => r.unwrap(),
        None => c.write(offset, data, fua).unwrap(),
    }
}

fn stat(c: &ThreeLevel, ptr: &str) -> u64 {
    c.stats_json()
        .pointer(ptr)
        .and_then(|v| v.as_u64())
        .unwrap()
}

/// Four threads, each owning the pages `p % 4 == t` of the first `span`
/// pages, write (one or two pages, sometimes FUA, sometimes a batch of
/// pages as `write_batch_inline`), read back (one page or a
/// partial range) and FLUSH, half of their calls inline, while the
/// background thread flushes and commits. Returns every page's last version.
fn concurrent_load(c: &Arc<ThreeLevel>, span: u64, rounds: usize) -> Vec<u64> {
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let c = Arc::clone(c);
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9 + t);
                let mut model = vec![0u64; span as usize];
                let mut v = 0u64;
                for _ in 0..rounds {
                    let p = rng.below(span / 4) * 4 + t;
                    match rng.below(12) {
                        10 | 11 => {
                            // A batch of 2-4 of this thread's pages, as the
                            // NBD layer offers pipelined writes.
                            let mut pages = vec![p];
                            while pages.len() < 2 + rng.below(3) as usize {
                                let q = rng.below(span / 4) * 4 + t;
                                if !pages.contains(&q) {
                                    pages.push(q);
                                }
                            }
                            let data: Vec<(u64, Vec<u8>)> = pages
                                .iter()
                                .map(|&q| {
                                    v += 1;
                                    model[q as usize] = v;
                                    (q * PAGE, block(q, v))
                                })
                                .collect();
                            let writes: Vec<(u64, &[u8])> =
                                data.iter().map(|(o, d)| (*o, &d[..])).collect();
                            match c.write_batch_inline(&writes) {
                                Some(rs) => {
                                    assert_eq!(rs.len(), writes.len());
                                    rs.into_iter().for_each(|r| r.unwrap());
                                }
                                None => writes.iter().for_each(|(o, d)| write(&c, *o, d, false)),
                            }
                        }
                        0..=4 => {
                            v += 1;
                            let fua = rng.below(20) == 0;
                            if rng.below(2) == 0 {
                                write(&c, p * PAGE, &block(p, v), fua);
                            } else {
                                c.write(p * PAGE, &block(p, v), fua).unwrap();
                            }
                            model[p as usize] = v;
                        }
                        5..=8 => {
                            let want = block(p, model[p as usize]);
                            if rng.below(4) == 0 {
                                // A partial read inside the page.
                                let (a, n) = (100usize, 700usize);
                                let got = read(&c, p * PAGE + a as u64, n);
                                assert_eq!(got, want[a..a + n], "page {p}, part");
                            } else {
                                let got = if rng.below(2) == 0 {
                                    read(&c, p * PAGE, PAGE as usize)
                                } else {
                                    c.read(p * PAGE, PAGE as usize).unwrap()
                                };
                                assert!(got == want, "thread {t}: page {p}");
                            }
                        }
                        _ => c.flush().unwrap(),
                    }
                }
                model
            })
        })
        .collect();
    let mut model = vec![0u64; span as usize];
    for (t, h) in handles.into_iter().enumerate() {
        let m = h.join().unwrap();
        for p in (t..span as usize).step_by(4) {
            model[p] = m[p];
        }
    }
    model
}

#[test]
fn inline_and_thread_requests_agree_and_survive_a_crash_after_flush() {
    for policy in [Policy::Adaptive, Policy::Wed] {
        let f = files(policy);
        let model = {
            let c = open(&f);
            c.start_background();
            // Past the SSDs' 768 pages: victims, commits for slots, and
            // requests that must leave the inline path.
            let model = concurrent_load(&c, 1200, 3000);
            for (p, &v) in model.iter().enumerate() {
                assert!(read(&c, p as u64 * PAGE, PAGE as usize) == block(p as u64, v));
            }
            assert!(
                c.single_copy_dirty_pages().is_empty(),
                "{policy}: {:?}",
                c.single_copy_dirty_pages()
            );
            let st = c.stats_json();
            assert!(stat(&c, "/inline_requests/reads") > 0, "{st}");
            assert!(stat(&c, "/inline_requests/writes") > 0, "{st}");
            assert!(stat(&c, "/wo_ssd/batched_page_writes") > 0, "{st}");
            assert!(stat(&c, "/ro_ssd/batched_page_writes") > 0, "{st}");
            assert!(stat(&c, "/writebacks") > 0, "the WO-SSD filled: {st}");
            assert!(!st["degraded"].as_bool().unwrap(), "{st}");
            c.flush().unwrap();
            c.stop_background();
            // Dropped without shutdown: a crash.
            model
        };
        let c = open(&f);
        for (p, &v) in model.iter().enumerate() {
            assert!(
                c.read(p as u64 * PAGE, PAGE as usize).unwrap() == block(p as u64, v),
                "{policy}: page {p} after the crash: expected version {v}"
            );
        }
        c.shutdown(true).unwrap();
    }
}

#[test]
fn a_request_that_cannot_run_inline_leaves_no_trace() {
    let f = files(Policy::Adaptive);
    let c = open(&f);
    c.write(0, &block(0, 1), false).unwrap();
    let before = c.stats_json();
    let mut buf = vec![0u8; PAGE as usize];
    // A miss (page 9 was never read or written) needs the backing device.
    assert!(c.read_inline(9 * PAGE, &mut buf).is_none());
    // A range with a hit and a miss.
    let mut two = vec![0u8; 2 * PAGE as usize];
    assert!(c.read_inline(0, &mut two).is_none());
    // Partial pages, FUA writes.
    assert!(c.write_inline(0, &[7u8; 512], false).is_none());
    assert!(c.write_inline(PAGE, &block(1, 1), true).is_none());
    assert_eq!(c.stats_json(), before, "nothing changed");
    // A hit runs inline; turned off, nothing does.
    assert!(c.read_inline(0, &mut buf).is_some_and(|r| r.is_ok()));
    assert_eq!(buf, block(0, 1));
    assert!(c.write_inline(PAGE, &block(1, 2), false).is_some());
    c.set_inline(false);
    let before = c.stats_json();
    assert!(c.read_inline(0, &mut buf).is_none());
    assert!(c.write_inline(PAGE, &block(1, 3), false).is_none());
    assert_eq!(c.stats_json(), before);
    c.set_inline(true);
    assert_eq!(c.read(PAGE, PAGE as usize).unwrap(), block(1, 2));
    assert_eq!(stat(&c, "/inline_requests/reads"), 1);
    assert_eq!(stat(&c, "/inline_requests/writes"), 1);
    c.shutdown(false).unwrap();
    // A closed cache serves nothing inline either.
    assert!(c.read_inline(0, &mut buf).is_none());
}

#[test]
fn a_failed_sync_outside_the_lock_fails_the_ssd() {
    let f = files(Policy::Adaptive);
    let wo = Arc::new(FaultyDev::new(dev(&f.wo), 3));
    let c = open_with_devices(dev(&f.ro), wo.clone(), dev(&f.backing), &f.backing).unwrap();
    let mut model = vec![0u64; 300];
    for (p, m) in model.iter_mut().enumerate() {
        write(&c, p as u64 * PAGE, &block(p as u64, 5), false);
        *m = 5;
    }
    // Every flush of the WO-SSD fails from now on; the background thread's
    // sync (records waiting for a second) meets it first.
    wo.add_rule(FaultRule::always(OpKinds::FLUSH)).unwrap();
    c.start_background();
    let t0 = std::time::Instant::now();
    while c.degraded().is_none() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the background thread never synced"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let d = c.degraded().unwrap();
    assert_eq!(d.failed, Role::WoSsd, "{d:?}");
    assert_eq!(d.lost, 0, "{d:?}");
    assert!(wo.injected().flushes > 0);
    // Degraded: nothing inline, every page still reads its last version,
    // and the backing device alone holds it.
    let mut buf = vec![0u8; PAGE as usize];
    assert!(c.read_inline(0, &mut buf).is_none());
    for (p, &v) in model.iter().enumerate() {
        assert!(read(&c, p as u64 * PAGE, PAGE as usize) == block(p as u64, v));
    }
    c.flush().unwrap();
    c.stop_background();
    let data = std::fs::read(&f.backing).unwrap();
    for (p, &v) in model.iter().enumerate() {
        assert!(data[p * PAGE as usize..(p + 1) * PAGE as usize] == block(p as u64, v)[..]);
    }
}

/// The flusher's copies (written to the RO-SSD straight from DRAM,
/// `exec_flushes`) hold each page's last bytes: after the WO-SSD fails, the
/// pages that left DRAM are written back from their RO-SSD copies alone, and
/// every page reads (and lands on the backing device as) its last version.
#[test]
fn flushed_copies_on_the_ro_ssd_carry_the_last_versions_when_the_wo_ssd_fails() {
    let f = files(Policy::Adaptive);
    let wo = Arc::new(FaultyDev::new(dev(&f.wo), 5));
    let c = open_with_devices(dev(&f.ro), wo.clone(), dev(&f.backing), &f.backing).unwrap();
    let mut model = vec![0u64; 400];
    let mut rng = Rng(0x5eed);
    for round in 1..=3u64 {
        for (p, m) in model.iter_mut().enumerate() {
            if round == 1 || rng.below(2) == 0 {
                *m = round * 10 + p as u64 % 7;
                write(&c, p as u64 * PAGE, &block(p as u64, *m), false);
            }
        }
        c.flusher_step(64).unwrap();
    }
    while c.flusher_step(64).unwrap() > 0 {}
    c.flush().unwrap();
    assert!(
        stat(&c, "/flusher_pages") > 300,
        "{}",
        stat(&c, "/flusher_pages")
    );
    wo.fail_all();
    // The FLUSH meets the failed WO-SSD: the cache degrades and writes every
    // dirty page back from DRAM or the RO-SSD.
    let _ = c.flush();
    let d = c.degraded().expect("the WO-SSD failure was not noticed");
    assert_eq!(d.failed, Role::WoSsd, "{d:?}");
    assert_eq!(d.lost, 0, "{d:?}");
    c.flush().unwrap();
    for (p, &v) in model.iter().enumerate() {
        assert!(
            read(&c, p as u64 * PAGE, PAGE as usize) == block(p as u64, v),
            "page {p}"
        );
    }
    let data = std::fs::read(&f.backing).unwrap();
    for (p, &v) in model.iter().enumerate() {
        assert!(
            data[p * PAGE as usize..(p + 1) * PAGE as usize] == block(p as u64, v)[..],
            "backing page {p}"
        );
    }
}

/// DRAM page buffers are reused (a flushed page's buffer goes to the next
/// page DRAM takes, `recycle_dram`): a reused buffer holds only its new
/// page's bytes. Pages written and flushed, then read misses (the backing's
/// zeros) and rewrites fill DRAM with reused buffers; every later read, from
/// DRAM or the RO-SSD copy written from it, returns the last version.
#[test]
fn reused_dram_buffers_hold_only_their_new_pages() {
    let f = files(Policy::Ef);
    let c = open(&f);
    let mut model = vec![0u64; 600];
    for (p, m) in model.iter_mut().enumerate().take(300) {
        *m = 1 + p as u64 % 5;
        write(&c, p as u64 * PAGE, &block(p as u64, *m), false);
    }
    assert!(stat(&c, "/flusher_pages") >= 250, "the writes were flushed");
    // Read misses (zeros) and rewrites take the flushed pages' buffers.
    for p in 300..600u64 {
        assert!(read(&c, p * PAGE, PAGE as usize) == block(p, 0), "miss {p}");
        if p % 3 == 0 {
            let q = p - 300;
            model[q as usize] = 9;
            write(&c, q * PAGE, &block(q, 9), false);
        }
    }
    for (p, &v) in model.iter().enumerate().rev() {
        assert!(
            read(&c, p as u64 * PAGE, PAGE as usize) == block(p as u64, v),
            "page {p}"
        );
    }
    assert!(stat(&c, "/hits/dram") > 0, "some reads were DRAM hits");
}

/// A batch whose held pages fail to reach an SSD (the write at the end of
/// the batch) fails that SSD like a failed single write: the cache writes
/// every dirty page back from its other copy and runs degraded, the
/// batch's writes succeed (served that way), and every page, the batch's
/// too, reads its last version from the backing device alone.
#[test]
fn a_batch_whose_ssd_write_fails_degrades_and_loses_nothing() {
    for failing in [Role::WoSsd, Role::RoSsd] {
        let f = files(Policy::Adaptive);
        let wo = Arc::new(FaultyDev::new(dev(&f.wo), 5));
        let ro = Arc::new(FaultyDev::new(dev(&f.ro), 6));
        let c = open_with_devices(ro.clone(), wo.clone(), dev(&f.backing), &f.backing).unwrap();
        let mut model = vec![0u64; 64];
        for (p, m) in model.iter_mut().enumerate() {
            write(&c, p as u64 * PAGE, &block(p as u64, 1), false);
            *m = 1;
        }
        c.flush().unwrap();
        let bad = if failing == Role::WoSsd { &wo } else { &ro };
        bad.add_rule(FaultRule::always(OpKinds::WRITE)).unwrap();
        let data: Vec<(u64, Vec<u8>)> = [3u64, 4, 5, 40]
            .iter()
            .map(|&p| {
                model[p as usize] = 2;
                (p * PAGE, block(p, 2))
            })
            .collect();
        let writes: Vec<(u64, &[u8])> = data.iter().map(|(o, d)| (*o, &d[..])).collect();
        let rs = c.write_batch_inline(&writes).expect("the batch runs");
        assert!(rs.iter().all(|r| r.is_ok()), "{failing:?}: {rs:?}");
        let d = c.degraded().expect("degraded");
        assert_eq!((d.failed, d.lost), (failing, 0), "{d:?}");
        assert!(bad.injected().writes > 0);
        for (p, &v) in model.iter().enumerate() {
            assert!(
                c.read(p as u64 * PAGE, PAGE as usize).unwrap() == block(p as u64, v),
                "{failing:?}: page {p}"
            );
        }
        c.flush().unwrap();
        let back = std::fs::read(&f.backing).unwrap();
        for (p, &v) in model.iter().enumerate() {
            assert!(
                back[p * PAGE as usize..(p + 1) * PAGE as usize] == block(p as u64, v)[..],
                "{failing:?}: page {p} on the backing device"
            );
        }
    }
}
