//! The request recorder on the three-level cache (`serve --record`):
//! every read, write, trim and flush is recorded where the policy takes
//! it, in that order, with its offset and length (no class: TICA has
//! none), inline reads included; nothing before the recording starts or
//! after it stops.

use std::sync::Arc;

use tiercache_block::IoKind;
use tiercache_runtime::{RecordSpec, Recorder};
use tiercache_tica_live::{open, OpenOptions, PAGE};

#[test]
fn every_request_is_recorded_in_the_order_the_policy_takes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let backing = dir.join("backing.img");
    std::fs::write(&backing, vec![0u8; (1024 * PAGE) as usize]).unwrap();
    tiercache_tica_live::format(&tiercache_tica_live::FormatOptions {
        ro_ssd: dir.join("ro.img"),
        wo_ssd: dir.join("wo.img"),
        backing,
        dram_bytes: 16 * PAGE,
        policy: tiercache_tica_policy::Policy::Adaptive,
        create_size: Some(2 << 20),
        force: false,
        max_size: None,
    })
    .unwrap();
    let c = open(&OpenOptions {
        ssd: dir.join("wo.img"),
        ..Default::default()
    })
    .unwrap();
    let rec = Arc::new(Recorder::default());
    c.attach_recorder(Arc::clone(&rec));
    c.write(0, &[1u8; 4096], false).unwrap(); // before the recording: not recorded
    let path = dir.join("rec.trace");
    rec.start(RecordSpec {
        path: path.clone(),
        max_bytes: 1 << 20,
        keep: 1,
    })
    .unwrap();
    c.write(PAGE, &[2u8; 8192], false).unwrap();
    c.write(10 * PAGE + 100, &[3u8; 50], true).unwrap();
    c.read(0, 3 * PAGE as usize).unwrap();
    c.set_inline(true);
    let mut buf = vec![0u8; PAGE as usize];
    assert!(
        c.read_inline(PAGE, &mut buf).is_some_and(|r| r.is_ok()),
        "a DRAM hit is served inline"
    );
    assert_eq!(buf, vec![2u8; 4096]);
    c.trim(2 * PAGE, 2 * PAGE).unwrap();
    c.flush().unwrap();
    rec.stop().unwrap();
    c.read(0, 512).unwrap(); // after: not recorded
    let got: Vec<(IoKind, u64, u32)> = tiercache_trace::open(&path, None, &Default::default())
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            assert_eq!(r.class, None);
            (r.kind, r.offset, r.len)
        })
        .collect();
    let want = vec![
        (IoKind::Write, PAGE, 8192),
        (IoKind::Write, 10 * PAGE + 100, 50),
        (IoKind::Read, 0, 3 * PAGE as u32),
        (IoKind::Read, PAGE, PAGE as u32),
        (IoKind::Trim, 2 * PAGE, 2 * PAGE as u32),
        (IoKind::Flush, 0, 0),
    ];
    assert_eq!(got, want);
    c.shutdown(false).unwrap();
}
