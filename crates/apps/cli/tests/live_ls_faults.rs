//! Fault tests of the live log-structured cache, in process: the cache and
//! backing files are wrapped in `FaultyDev`s that inject EIO by rule, the
//! cache is opened with `open_with_devices` and exported over NBD on a Unix
//! socket, and a client checks every block against what it wrote
//! (self-checking versioned blocks and the ledger of `common`).
//!
//! What must hold: a failed cache read of clean data is served from the
//! backing device (of dirty data: EIO, never stale data); cache write errors
//! send writes around the cache (every request still succeeds when the
//! metadata area works) and repeated errors degrade the cache visibly; after
//! a crash no bypassed write is shadowed by an older logged copy; backing
//! errors reach the client as EIO for that request only.

mod common;

use common::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tiercache_io::{BlockDev, FaultRule, FaultyDev, FileDev, FileDevOptions, OpKinds};
use tiercache_log_structured::{open_with_devices, LogCache, Superblock};
use tiercache_nbd::{Server, ServerHandle};
use tiercache_runtime::export::Export;

/// 16 MiB of data in front of a 6 MiB cache.
const BLOCKS: u64 = 4096;

struct Fixture {
    rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
    cache_path: PathBuf,
    backing: PathBuf,
    sock: PathBuf,
    cache_fault: Arc<FaultyDev>,
    backing_fault: Arc<FaultyDev>,
    cache: Option<Arc<LogCache>>,
    handle: Option<ServerHandle>,
}

fn open(p: &PathBuf) -> Arc<dyn BlockDev> {
    Arc::new(FileDev::open(p, FileDevOptions::default()).expect("open device"))
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let backing = dir.path().join("backing.img");
        let cache_path = dir.path().join("cache.img");
        init_backing(&backing, BLOCKS);
        tiercache(&[
            "format",
            "--layout",
            "log-structured",
            "--segment-size",
            "256KiB",
            "--cache",
            cache_path.to_str().unwrap(),
            "--backing",
            backing.to_str().unwrap(),
            "--size",
            "6MiB",
        ]);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let mut f = Fixture {
            rt,
            sock: dir.path().join("nbd.sock"),
            _dir: dir,
            cache_fault: Arc::new(FaultyDev::new(open(&cache_path), 7)),
            backing_fault: Arc::new(FaultyDev::new(open(&backing), 11)),
            cache_path,
            backing,
            cache: None,
            handle: None,
        };
        f.start();
        f
    }

    /// Open the cache (recovering it) behind the faulty devices and serve it.
    fn start(&mut self) {
        let _ = std::fs::remove_file(&self.sock);
        let cache = open_with_devices(
            self.cache_fault.clone(),
            self.backing_fault.clone(),
            &self.backing,
        )
        .expect("open cache");
        self.cache = Some(Arc::clone(&cache));
        let export: Arc<dyn tiercache_nbd::Backend> = Arc::new(Export {
            design: Arc::new(tiercache_log_structured::LogStructured::new(cache)),
            read_only: false,
        });
        let sock = self.sock.clone();
        self.handle = Some(self.rt.block_on(async move {
            Server::new([("tiercache", export)])
                .expect("server")
                .serve_unix(&sock)
                .await
                .expect("listen")
        }));
    }

    /// A crash: stop serving and drop the cache without a shutdown.
    fn crash(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
        self.cache = None;
    }

    fn lc(&self) -> &LogCache {
        self.cache.as_ref().expect("the cache is open")
    }

    fn client(&self) -> NbdClient {
        NbdClient::connect(&self.sock).expect("connect")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            self.rt.block_on(h.shutdown());
        }
    }
}

fn write_blocks(c: &mut NbdClient, ledger: &mut Ledger, blocks: impl IntoIterator<Item = u64>) {
    for b in blocks {
        let s = &mut ledger.blocks[b as usize];
        let v = s.next;
        s.next += 1;
        s.issued.push(v);
        c.write(b * BLOCK as u64, &make_block(b, v), false)
            .expect("socket")
            .unwrap_or_else(|e| panic!("write of block {b} failed with NBD error {e}"));
        s.acked = v;
    }
}

fn read_version(c: &mut NbdClient, b: u64) -> Result<u64, u32> {
    let d = c.read(b * BLOCK as u64, BLOCK).expect("socket")?;
    Ok(parse_block(b, &d).unwrap_or_else(|e| panic!("block {b}: {e}")))
}

#[test]
fn cache_read_errors_serve_clean_data_from_backing_and_never_stale_dirty_data() {
    let f = Fixture::new();
    let mut c = f.client();
    let mut ledger = Ledger::new(BLOCKS);
    write_blocks(&mut c, &mut ledger, 0..32);
    c.flush().unwrap().unwrap();
    for b in 100..160 {
        assert_eq!(read_version(&mut c, b), Ok(0)); // cached clean
    }
    f.cache_fault
        .add_rule(FaultRule::always(OpKinds::READ))
        .unwrap();
    for b in 100..160 {
        assert_eq!(
            read_version(&mut c, b),
            Ok(0),
            "clean block {b} from the backing device"
        );
    }
    assert_eq!(
        read_version(&mut c, 5),
        Err(5),
        "a dirty block whose copy fails is EIO, not stale"
    );
    f.cache_fault.clear_rules();
    for b in 0..32 {
        assert_eq!(read_version(&mut c, b), Ok(ledger.blocks[b as usize].acked));
    }
    let st = f.lc().stats_json();
    assert!(st["errors"]["cache"].as_u64().unwrap() >= 2, "{st}");
}

#[test]
fn bad_cache_sectors_send_writes_around_and_a_crash_keeps_them() {
    let mut f = Fixture::new();
    let sb = Superblock::read(open(&f.cache_path).as_ref()).unwrap();
    // The first half of the segment area goes bad for writes; metadata stays good.
    let bad = sb.seg_off..sb.seg_off + sb.nsegs as u64 / 2 * sb.seg_bytes;
    f.cache_fault
        .add_rule(FaultRule::always(OpKinds::WRITE).in_range(bad))
        .unwrap();
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(0xbad5);
    let mut c = f.client();
    let until = Instant::now() + Duration::from_secs(2);
    match run_load(&mut c, &mut ledger, &mut rng, LoadShape::default(), until) {
        Ok(LoadEnd::Done) => {}
        other => panic!("load under bad cache sectors: {other:?}"),
    }
    c.flush()
        .unwrap()
        .expect("FLUSH succeeds: the metadata area works");
    let st = f.lc().stats_json();
    assert_eq!(st["status"], "degraded", "{st}");
    assert!(st["bypassed_blocks"].as_u64().unwrap() > 0, "{st}");
    verify_all(&mut c, &mut ledger).expect("every block is the newest acknowledged");
    c.disconnect();
    // A crash, then recovery (the bad sectors healed): nothing stale, nothing lost.
    f.crash();
    f.cache_fault.clear_rules();
    f.start();
    let mut c = f.client();
    verify_all(&mut c, &mut ledger).expect("after the crash");
    c.disconnect();
}

#[test]
fn backing_errors_fail_only_their_request() {
    let f = Fixture::new();
    let mut c = f.client();
    f.backing_fault
        .add_rule(
            FaultRule::always(OpKinds::READ).in_range(1000 * BLOCK as u64..1010 * BLOCK as u64),
        )
        .unwrap();
    assert_eq!(
        read_version(&mut c, 1005),
        Err(5),
        "an uncached block on a bad backing range"
    );
    assert_eq!(
        read_version(&mut c, 2000),
        Ok(0),
        "the server keeps serving"
    );
    f.backing_fault.clear_rules();
    assert_eq!(read_version(&mut c, 1005), Ok(0));
    // A failed backing flush fails the write-back of everything (`tiercache flush`); a retry succeeds.
    let mut ledger = Ledger::new(BLOCKS);
    write_blocks(&mut c, &mut ledger, 0..600);
    f.backing_fault
        .add_rule(FaultRule::always(OpKinds::FLUSH))
        .unwrap();
    let e = f
        .lc()
        .write_back_all()
        .expect_err("a failed backing flush is reported");
    assert!(e.0.contains("backing"), "{e}");
    f.backing_fault.clear_rules();
    f.lc().write_back_all().expect("write-back after the fault");
    c.flush().unwrap().expect("flush after the fault");
    assert_eq!(f.lc().stats_json()["dirty_blocks"], 0);
    for b in 0..600 {
        assert_eq!(read_version(&mut c, b), Ok(ledger.blocks[b as usize].acked));
    }
    assert!(f.lc().stats_json()["errors"]["backing"].as_u64().unwrap() >= 2);
}
