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

use crate::common;

use common::crash::tiercache_in;
use common::inproc::{dev, read_version, write_blocks, InProcess};
use common::*;
use std::sync::Arc;
use tiercache_flashtier_live::{open_with_devices, LogCache, LogStructured, Superblock};
use tiercache_io::{FaultRule, FaultyDev, OpKinds};

/// 16 MiB of data in front of a 6 MiB cache.
const BLOCKS: u64 = 4096;

struct Fixture {
    served: InProcess,
    cache_fault: Arc<FaultyDev>,
    backing_fault: Arc<FaultyDev>,
    cache: Option<Arc<LogCache>>,
}

impl Fixture {
    fn new() -> Fixture {
        let served = InProcess::new();
        init_backing(&served.path("backing.img"), BLOCKS);
        let args = "format --layout log-structured --segment-size 256KiB --size 6MiB";
        tiercache_in(
            served.dir.path(),
            &format!("{args} --cache cache.img --backing backing.img"),
        );
        let mut f = Fixture {
            cache_fault: served.faulty("cache.img", 7),
            backing_fault: served.faulty("backing.img", 11),
            served,
            cache: None,
        };
        f.start();
        f
    }

    /// Open the cache (recovering it) behind the faulty devices and serve it.
    fn start(&mut self) {
        let (c, b) = (self.cache_fault.clone(), self.backing_fault.clone());
        let backing = self.served.path("backing.img");
        let design = self.served.serve(|| {
            let cache = open_with_devices(c, b, &backing).expect("open cache");
            Arc::new(LogStructured::new(cache))
        });
        self.cache = Some(Arc::clone(design.store()));
    }

    /// A crash: stop serving and drop the cache without a shutdown.
    fn crash(&mut self) {
        self.served.stop();
        self.cache = None;
    }

    fn lc(&self) -> &LogCache {
        self.cache.as_ref().expect("the cache is open")
    }

    fn client(&self) -> NbdClient {
        self.served.client()
    }
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
    let sb = Superblock::read(dev(&f.served.path("cache.img")).as_ref()).unwrap();
    // The first half of the segment area goes bad for writes; metadata stays good.
    let bad = sb.seg_off..sb.seg_off + sb.nsegs as u64 / 2 * sb.seg_bytes;
    f.cache_fault
        .add_rule(FaultRule::always(OpKinds::WRITE).in_range(bad))
        .unwrap();
    let mut ledger = Ledger::new(BLOCKS);
    let mut rng = Rng(0xbad5);
    let mut c = f.client();
    let until = Until::WritesAcked(1500);
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
