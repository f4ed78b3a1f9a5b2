//! Format and open on real block devices. Needs root and two scratch block
//! devices (e.g. loop devices) named by TIERCACHE_TEST_CACHE_DEV and
//! TIERCACHE_TEST_BACKING_DEV; skipped otherwise. Their contents are destroyed.

use std::fs::OpenOptions;
use std::path::Path;

use tiercache_store::{format, open, BackingIdentity, FormatParams, MetaDevice, Record};

#[test]
fn format_and_reopen_on_block_devices() {
    let (Ok(cache), Ok(back)) = (
        std::env::var("TIERCACHE_TEST_CACHE_DEV"),
        std::env::var("TIERCACHE_TEST_BACKING_DEV"),
    ) else {
        eprintln!("SKIP: set TIERCACHE_TEST_CACHE_DEV and TIERCACHE_TEST_BACKING_DEV to scratch block devices");
        return;
    };
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&cache)
        .unwrap();
    let size = f.len().unwrap();
    assert!(size > 0, "block device size comes from seeking to the end");
    let id = BackingIdentity::probe(Path::new(&back)).unwrap();
    eprintln!("cache {cache}: {size} bytes; backing identity {id:?}");
    assert!(id.file_id.is_none(), "a block device has no file identity");
    let p = FormatParams {
        line_size: 65536,
        sub_block_size: 4096,
        log_bytes: None,
        policy: "{}".into(),
        backing: id.clone(),
    };
    format(&f, &p, true).unwrap();
    let mut store = open(&f, &id).unwrap().store;
    store
        .append(Record::Map {
            slot: 1,
            line: 2,
            class: 0,
        })
        .unwrap();
    store.commit().unwrap();
    drop(store);
    let opened = open(&f, &id).unwrap();
    assert_eq!(opened.table.get(1).map(|m| m.line), Some(2));
}
