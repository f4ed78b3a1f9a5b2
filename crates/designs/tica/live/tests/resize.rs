//! Resizing the SSDs of a live three-level cache (`ThreeLevel::resize`):
//! a grow makes the new slots usable, a shrink moves the pages past the new
//! end below it (dirty ones keep two copies throughout) and cuts the files,
//! the policy's capacity follows the smaller SSD, every write survives a
//! crash (the cache dropped without shutdown, as kill -9 leaves it) after
//! either, and impossible resizes are refused with one line, nothing changed.

use std::path::Path;

use tiercache_tica_live::{open, OpenOptions, ThreeLevel, PAGE};

const MIB: u64 = 1 << 20;

fn block(p: u64, v: u64) -> Vec<u8> {
    let mut b = vec![0u8; PAGE as usize];
    for (i, chunk) in b.chunks_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&p.to_le_bytes());
        chunk[8..].copy_from_slice(&(v ^ i as u64).to_le_bytes());
    }
    b
}

fn open_at(ssd: &Path) -> std::sync::Arc<ThreeLevel> {
    open(&OpenOptions {
        ssd: ssd.to_path_buf(),
        ..Default::default()
    })
    .unwrap()
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

/// Every page of `want` reads back its newest version.
fn verify(c: &ThreeLevel, want: &[u64]) {
    for (p, &v) in want.iter().enumerate() {
        let p = p as u64;
        let got = c.read(p * PAGE, PAGE as usize).unwrap();
        let expect = if v == 0 {
            vec![0u8; PAGE as usize]
        } else {
            block(p, v)
        };
        assert!(got == expect, "page {p}: not version {v}");
    }
}

/// Format a pair of 2 MiB SSDs that may grow to 8 MiB, over 16 MiB of backing data.
fn pair(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (ro, wo, backing) = (
        dir.join("ro.img"),
        dir.join("wo.img"),
        dir.join("backing.img"),
    );
    std::fs::write(&backing, vec![0u8; (16 * MIB) as usize]).unwrap();
    tiercache_tica_live::format(&tiercache_tica_live::FormatOptions {
        ro_ssd: ro.clone(),
        wo_ssd: wo.clone(),
        backing,
        dram_bytes: 32 * PAGE,
        policy: tiercache_tica_policy::Policy::Adaptive,
        create_size: Some(2 * MIB),
        force: false,
        max_size: Some(8 * MIB),
    })
    .unwrap();
    (ro, wo)
}

#[test]
fn grow_and_shrink_keep_every_write_and_survive_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let (ro, wo) = pair(tmp.path());
    let pages = 4096u64;
    let mut want = vec![0u64; pages as usize];
    let c = open_at(&wo);
    let small = c.stats_json()["wo_ssd"]["slots"].as_u64().unwrap();
    let mut v = 1;
    let mut write = |c: &ThreeLevel, want: &mut Vec<u64>, range: std::ops::Range<u64>| {
        for p in range {
            c.write(p * PAGE, &block(p, v), false).unwrap();
            want[p as usize] = v;
        }
        v += 1;
    };
    write(&c, &mut want, 0..400);
    c.flush().unwrap();
    // Grow both SSDs: the new slots are used, the policy caches more.
    let g = c.resize(8 * MIB, None).unwrap();
    assert_eq!(g["ok"], true, "{g}");
    let st = c.stats_json();
    let big = st["wo_ssd"]["slots"].as_u64().unwrap();
    assert!(big > 3 * small, "{small} -> {big}");
    assert_eq!(st["ro_ssd"]["slots"].as_u64(), Some(big));
    assert_eq!(
        st["policy"]["ssd_pages"].as_u64(),
        Some(tiercache_tica_live::policy_ssd_pages(big as usize) as u64)
    );
    assert_eq!((file_len(&ro), file_len(&wo)), (8 * MIB, 8 * MIB));
    write(&c, &mut want, 200..1600);
    c.flush().unwrap();
    assert!(
        c.stats_json()["wo_ssd"]["used_pages"].as_u64().unwrap() > small,
        "the grown SSD holds more pages than it had slots before"
    );
    verify(&c, &want);
    // Shrink only the RO-SSD: its pages past the end move, the policy
    // follows the smaller SSD.
    let r = c.resize(3 * MIB, Some(&ro)).unwrap();
    assert_eq!(r["ok"], true, "{r}");
    let st = c.stats_json();
    let ro_slots = st["ro_ssd"]["slots"].as_u64().unwrap();
    assert!(ro_slots < big && st["wo_ssd"]["slots"].as_u64() == Some(big));
    assert_eq!(
        st["policy"]["ssd_pages"].as_u64(),
        Some(tiercache_tica_live::policy_ssd_pages(ro_slots as usize) as u64)
    );
    assert_eq!((file_len(&ro), file_len(&wo)), (3 * MIB, 8 * MIB));
    assert!(c.single_copy_dirty_pages().is_empty());
    verify(&c, &want);
    // Shrink both back: pages past the new ends move below them.
    write(&c, &mut want, 1000..1500);
    let s = c.resize(2 * MIB, None).unwrap();
    assert_eq!(s["ok"], true, "{s}");
    assert!(s["moved_pages"].as_u64().unwrap() > 0, "{s}");
    let st = c.stats_json();
    assert_eq!(st["wo_ssd"]["slots"].as_u64(), Some(small));
    assert!(st["wo_ssd"]["used_pages"].as_u64().unwrap() < small);
    assert_eq!((file_len(&ro), file_len(&wo)), (2 * MIB, 2 * MIB));
    assert!(c.single_copy_dirty_pages().is_empty());
    verify(&c, &want);
    // A crash after the shrink (no shutdown): every flushed write is back,
    // at the new size.
    write(&c, &mut want, 3000..3100);
    c.flush().unwrap();
    drop(c);
    let c = open_at(&ro);
    assert_eq!(c.stats_json()["wo_ssd"]["slots"].as_u64(), Some(small));
    verify(&c, &want);
    // Grow again and crash: the new size and every flushed write.
    c.resize(6 * MIB, None).unwrap();
    write(&c, &mut want, 0..1200);
    c.flush().unwrap();
    let grown = c.stats_json()["wo_ssd"]["slots"].as_u64().unwrap();
    drop(c);
    let c = open_at(&wo);
    assert_eq!(c.stats_json()["wo_ssd"]["slots"].as_u64(), Some(grown));
    verify(&c, &want);
    c.shutdown(false).unwrap();
}

#[test]
fn impossible_resizes_are_refused_with_one_line_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (ro, wo) = pair(tmp.path());
    let c = open_at(&wo);
    for p in 0..100u64 {
        c.write(p * PAGE, &block(p, 1), false).unwrap();
    }
    let before = c.stats_json();
    let refused = |size: u64, dev: Option<&Path>, why: &str| {
        let e = c.resize(size, dev).unwrap_err();
        assert!(e.0.contains(why), "{size}: {}", e.0);
        assert!(!e.0.contains('\n'), "one line: {}", e.0);
        let st = c.stats_json();
        for k in ["ro_ssd", "wo_ssd"] {
            assert_eq!(st[k]["slots"], before[k]["slots"], "{why}");
        }
        assert_eq!(st["policy"]["ssd_pages"], before["policy"]["ssd_pages"]);
        assert_eq!((file_len(&ro), file_len(&wo)), (2 * MIB, 2 * MIB));
    };
    refused(64 * MIB, None, "--max-size");
    refused(5_000_000, None, "not a multiple of 4 KiB");
    refused(4096, None, "holds no line");
    refused(
        4 * MIB,
        Some(&tmp.path().join("other.img")),
        "is not an SSD of this cache",
    );
    // The same size: nothing to do, nothing changed.
    let same = c.resize(2 * MIB, None).unwrap();
    assert_eq!(same["ok"], true);
    assert!(
        same["message"]
            .as_str()
            .unwrap()
            .starts_with("nothing to do"),
        "{same}"
    );
    assert_eq!(same["metadata_writes"], 0);
    for p in 0..100u64 {
        assert_eq!(c.read(p * PAGE, PAGE as usize).unwrap(), block(p, 1));
    }
}

/// A shrink that must write dirty pages back (the smaller SSDs have no
/// room for them) is refused with one line while the backing device fails
/// writes: the sizes and the policy's capacity are unchanged, and every
/// write still reads back; once the device works again the shrink succeeds.
#[test]
fn a_shrink_is_refused_while_dirty_pages_cannot_be_written_back() {
    use std::sync::Arc;
    use tiercache_io::{BlockDev, FaultRule, FaultyDev, FileDev, FileDevOptions, OpKinds};
    let tmp = tempfile::tempdir().unwrap();
    let (ro, wo) = pair(tmp.path());
    let dev = |p: &Path| -> Arc<dyn BlockDev> {
        Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
    };
    let backing_path = tmp.path().join("backing.img");
    let backing = Arc::new(FaultyDev::new(dev(&backing_path), 3));
    let c =
        tiercache_tica_live::open_with_devices(dev(&ro), dev(&wo), backing.clone(), &backing_path)
            .unwrap();
    c.resize(8 * MIB, None).unwrap();
    let mut want = vec![0u64; 2000];
    for p in 0..1500u64 {
        c.write(p * PAGE, &block(p, 7), false).unwrap();
        want[p as usize] = 7;
    }
    c.flush().unwrap();
    let before = c.stats_json();
    backing.add_rule(FaultRule::always(OpKinds::WRITE)).unwrap();
    let e = c.resize(2 * MIB, None).unwrap_err();
    assert!(
        e.0.contains("cannot be written back now") && !e.0.contains('\n'),
        "{}",
        e.0
    );
    let st = c.stats_json();
    for k in ["ro_ssd", "wo_ssd"] {
        assert_eq!(st[k]["slots"], before[k]["slots"]);
    }
    assert_eq!(st["policy"]["ssd_pages"], before["policy"]["ssd_pages"]);
    assert_eq!((file_len(&ro), file_len(&wo)), (8 * MIB, 8 * MIB));
    assert_eq!(st["degraded"], false, "{st}");
    assert!(c.single_copy_dirty_pages().is_empty());
    verify(&c, &want);
    backing.clear_rules();
    c.resize(2 * MIB, None).unwrap();
    assert_eq!((file_len(&ro), file_len(&wo)), (2 * MIB, 2 * MIB));
    verify(&c, &want);
}

/// A degraded cache (an SSD failed) is not resized: refused with one line.
#[test]
fn a_degraded_cache_is_not_resized() {
    use std::sync::Arc;
    use tiercache_io::{BlockDev, FaultRule, FaultyDev, FileDev, FileDevOptions, OpKinds};
    let tmp = tempfile::tempdir().unwrap();
    let (ro, wo) = pair(tmp.path());
    let dev = |p: &Path| -> Arc<dyn BlockDev> {
        Arc::new(FileDev::open(p, FileDevOptions::default()).unwrap())
    };
    let backing_path = tmp.path().join("backing.img");
    let wo_dev = Arc::new(FaultyDev::new(dev(&wo), 5));
    let c = tiercache_tica_live::open_with_devices(
        dev(&ro),
        wo_dev.clone(),
        dev(&backing_path),
        &backing_path,
    )
    .unwrap();
    c.write(0, &block(0, 1), false).unwrap();
    wo_dev.add_rule(FaultRule::always(OpKinds::WRITE)).unwrap();
    c.write(PAGE, &block(1, 1), false).unwrap();
    assert!(c.degraded().is_some(), "the WO-SSD failed");
    let e = c.resize(4 * MIB, None).unwrap_err();
    assert!(e.0.contains("degraded") && !e.0.contains('\n'), "{}", e.0);
    assert_eq!((file_len(&ro), file_len(&wo)), (2 * MIB, 2 * MIB));
}
