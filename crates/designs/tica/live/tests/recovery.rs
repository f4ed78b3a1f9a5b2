//! The live three-level cache on real files: metadata and recovery after a
//! clean shutdown and after a crash (the cache dropped without shutdown, as
//! kill -9 leaves it), the two-copies rule for dirty data, device failures
//! injected with `FaultyDev`, and refusals of bad input.

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
    let r = format(&o).unwrap();
    assert!(r.ro_slots > 500 && r.ro_slots == r.wo_slots, "{r:?}");
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

struct Faulty {
    ro: Arc<FaultyDev>,
    wo: Arc<FaultyDev>,
}

fn open(f: &Files) -> (Arc<ThreeLevel>, Faulty) {
    let ro = Arc::new(FaultyDev::new(dev(&f.ro), 1));
    let wo = Arc::new(FaultyDev::new(dev(&f.wo), 2));
    let c = open_with_devices(ro.clone(), wo.clone(), dev(&f.backing), &f.backing).unwrap();
    (c, Faulty { ro, wo })
}

/// Page contents naming the page and a version.
fn block(p: u64, v: u64) -> Vec<u8> {
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

/// A mixed load over `pages` pages; returns the model (version per page, 0 = never written).
fn load(
    c: &ThreeLevel,
    model: &mut [u64],
    rng: &mut Rng,
    ops: usize,
    pages: u64,
    version: &mut u64,
) {
    for _ in 0..ops {
        let p = rng.below(pages);
        if rng.below(3) == 0 {
            let got = c.read(p * PAGE, PAGE as usize).unwrap();
            assert_eq!(got, expect(p, model[p as usize]), "page {p}");
        } else {
            *version += 1;
            c.write(p * PAGE, &block(p, *version), false).unwrap();
            model[p as usize] = *version;
        }
        if rng.below(50) == 0 {
            c.flusher_step(16).unwrap();
        }
    }
}

fn expect(p: u64, v: u64) -> Vec<u8> {
    if v == 0 {
        vec![0u8; PAGE as usize]
    } else {
        block(p, v)
    }
}

fn check_all(c: &ThreeLevel, model: &[u64]) {
    for (p, &v) in model.iter().enumerate() {
        let got = c.read(p as u64 * PAGE, PAGE as usize).unwrap();
        assert!(got == expect(p as u64, v), "page {p}: expected version {v}");
    }
}

fn check_backing(f: &Files, model: &[u64]) {
    let data = std::fs::read(&f.backing).unwrap();
    for (p, &v) in model.iter().enumerate() {
        let got = &data[p * PAGE as usize..(p + 1) * PAGE as usize];
        assert!(
            got == expect(p as u64, v),
            "backing page {p}: expected version {v}"
        );
    }
}

#[test]
fn dirty_data_is_always_on_two_devices() {
    for policy in [Policy::Adaptive, Policy::Ef, Policy::Wed] {
        let f = files(policy);
        let (c, _) = open(&f);
        let mut model = vec![0u64; PAGES as usize];
        let (mut rng, mut v) = (Rng(7), 0);
        for _ in 0..20 {
            load(&c, &mut model, &mut rng, 300, PAGES, &mut v);
            let single = c.single_copy_dirty_pages();
            assert!(
                single.is_empty(),
                "{policy}: dirty pages on one device: {single:?}"
            );
        }
        let st = c.stats_json();
        assert!(
            st["writebacks"].as_u64().unwrap() > 0,
            "the WO-SSD filled up: {st}"
        );
        assert!(
            st["ro_ssd_writes"].as_u64().unwrap() > 0,
            "the flusher ran: {st}"
        );
        check_all(&c, &model);
        c.shutdown(false).unwrap();
    }
}

#[test]
fn clean_restart_keeps_both_ssds() {
    let f = files(Policy::Adaptive);
    let mut model = vec![0u64; PAGES as usize];
    let (mut rng, mut v) = (Rng(11), 0);
    {
        let (c, _) = open(&f);
        load(&c, &mut model, &mut rng, 1500, 600, &mut v);
        c.shutdown(false).unwrap();
        assert!(
            c.write(0, &[1], false).is_err(),
            "a shut down cache refuses requests"
        );
    }
    let (c, _) = open(&f);
    let st = c.stats_json();
    assert_eq!(st["recovery"]["clean_shutdown"], true, "{st}");
    assert!(
        st["recovery"]["ro_pages"].as_u64().unwrap() > 0,
        "RO-SSD kept: {st}"
    );
    assert_eq!(st["recovery"]["written_back"], 0, "{st}");
    check_all(&c, &model);
    // Reads of flushed pages are RO-SSD hits after the restart.
    assert!(c.stats_json()["ro_ssd_hits"].as_u64().unwrap() > 0);
    c.shutdown(true).unwrap();
    check_backing(&f, &model);
}

/// The RO-SSD's metadata is volatile while the cache runs (no records; an
/// unmapped slot is reused at once, for any page): after a clean restart
/// and more writes, a crash must leave its table untrusted, and a clean
/// shutdown must write a table that matches its data.
#[test]
fn the_ro_ssd_table_is_trusted_only_after_a_clean_shutdown() {
    let f = files(Policy::Adaptive);
    let mut model = vec![0u64; PAGES as usize];
    let (mut rng, mut v) = (Rng(17), 0);
    {
        let (c, _) = open(&f);
        load(&c, &mut model, &mut rng, 1500, 600, &mut v);
        c.shutdown(false).unwrap();
    }
    {
        let (c, _) = open(&f);
        let st = c.stats_json();
        assert!(st["recovery"]["ro_pages"].as_u64().unwrap() > 0, "{st}");
        // Rewrites move pages between RO-SSD slots without records.
        load(&c, &mut model, &mut rng, 2000, 600, &mut v);
        c.flush().unwrap();
        c.stop_background();
    }
    {
        let (c, _) = open(&f);
        let st = c.stats_json();
        assert_eq!(st["recovery"]["clean_shutdown"], false, "{st}");
        assert_eq!(st["recovery"]["ro_pages"], 0, "{st}");
        check_all(&c, &model);
        load(&c, &mut model, &mut rng, 2000, 600, &mut v);
        c.shutdown(false).unwrap();
    }
    let (c, _) = open(&f);
    let st = c.stats_json();
    assert_eq!(st["recovery"]["clean_shutdown"], true, "{st}");
    assert!(st["recovery"]["ro_pages"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(st["recovery"]["written_back"], 0, "{st}");
    check_all(&c, &model);
    assert!(c.stats_json()["ro_ssd_hits"].as_u64().unwrap() > 0);
    c.shutdown(true).unwrap();
    check_backing(&f, &model);
}

#[test]
fn crash_restart_recovers_every_flushed_write_from_the_wo_ssd() {
    let f = files(Policy::Adaptive);
    let mut model = vec![0u64; PAGES as usize];
    let (mut rng, mut v) = (Rng(13), 0);
    for round in 0..5 {
        let (c, _) = open(&f);
        if round > 0 {
            let st = c.stats_json();
            assert_eq!(st["recovery"]["clean_shutdown"], false, "{st}");
            assert_eq!(
                st["recovery"]["ro_pages"], 0,
                "the RO-SSD is not trusted after a crash"
            );
            assert!(
                st["recovery"]["wo_pages"].as_u64().unwrap() > 0,
                "warm restart: {st}"
            );
            assert!(c.single_copy_dirty_pages().is_empty());
        }
        check_all(&c, &model);
        load(&c, &mut model, &mut rng, 800, PAGES, &mut v);
        c.flush().unwrap();
        // "kill -9": stop the flusher and drop everything without a shutdown.
        c.stop_background();
        drop(c);
    }
    let (c, _) = open(&f);
    check_all(&c, &model);
    c.shutdown(true).unwrap();
    check_backing(&f, &model);
}

#[test]
fn partial_and_unaligned_writes_read_back() {
    let f = files(Policy::Wed);
    let (c, _) = open(&f);
    let mut shadow = vec![0u8; (64 * PAGE) as usize];
    let mut rng = Rng(17);
    for i in 0..400u64 {
        let off = rng.below(shadow.len() as u64 - 1);
        let len = 1 + rng.below((3 * PAGE).min(shadow.len() as u64 - off));
        let data: Vec<u8> = (0..len).map(|k| (i + k) as u8).collect();
        c.write(off, &data, i % 7 == 0).unwrap();
        shadow[off as usize..(off + len) as usize].copy_from_slice(&data);
        let off = rng.below(shadow.len() as u64 - 1);
        let len = 1 + rng.below(2 * PAGE).min(shadow.len() as u64 - off - 1);
        assert_eq!(
            c.read(off, len as usize).unwrap(),
            &shadow[off as usize..(off + len) as usize]
        );
    }
    c.trim(0, 8 * PAGE).unwrap();
    c.shutdown(true).unwrap();
    let backing = std::fs::read(&f.backing).unwrap();
    assert_eq!(
        &backing[8 * PAGE as usize..64 * PAGE as usize],
        &shadow[8 * PAGE as usize..]
    );
}

fn fail_during_load(role: Role, removal: bool) {
    let f = files(Policy::Adaptive);
    let (c, fl) = open(&f);
    let mut model = vec![0u64; PAGES as usize];
    let (mut rng, mut v) = (Rng(23), 0);
    load(&c, &mut model, &mut rng, 1500, PAGES, &mut v);
    let d = match role {
        Role::RoSsd => &fl.ro,
        Role::WoSsd => &fl.wo,
    };
    if removal {
        d.fail_all();
    } else {
        d.add_rule(FaultRule::always(OpKinds::ALL).with_probability(0.5))
            .unwrap();
    }
    load(&c, &mut model, &mut rng, 1500, PAGES, &mut v);
    let st = c.stats_json();
    assert_eq!(st["degraded"], true, "{st}");
    let failed = serde_json::to_value(role).unwrap();
    assert_eq!(st["failed_device"], failed, "{st}");
    assert!(
        st["status"].as_str().unwrap().contains(role.label()),
        "{st}"
    );
    assert!(c.degraded().unwrap().lost == 0);
    c.flush().unwrap();
    check_all(&c, &model);
    // The backing device alone is complete once the failure was handled.
    check_backing(&f, &model);
    c.shutdown(false).unwrap();
    drop(c);
    // The pair is not trusted again.
    let e = open_with_devices(dev(&f.ro), dev(&f.wo), dev(&f.backing), &f.backing)
        .err()
        .expect("a degraded pair must not open");
    assert!(format!("{e:#}").contains("Format the pair again"), "{e:#}");
}

#[test]
fn ro_ssd_errors_lose_nothing() {
    fail_during_load(Role::RoSsd, false);
}
#[test]
fn ro_ssd_removal_loses_nothing() {
    fail_during_load(Role::RoSsd, true);
}
#[test]
fn wo_ssd_errors_lose_nothing() {
    fail_during_load(Role::WoSsd, false);
}
#[test]
fn wo_ssd_removal_loses_nothing() {
    fail_during_load(Role::WoSsd, true);
}

#[test]
fn bad_input_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("odd.img"), vec![0u8; 10_000]).unwrap();
    let mut o = FormatOptions {
        ro_ssd: p("ro.img"),
        wo_ssd: p("wo.img"),
        backing: p("odd.img"),
        dram_bytes: 1 << 20,
        policy: Policy::Ef,
        create_size: Some(4 << 20),
        force: false,
        max_size: None,
    };
    let e = format(&o).unwrap_err().to_string();
    assert!(e.contains("multiple of 4 KiB"), "{e}");
    std::fs::write(p("b.img"), vec![0u8; 1 << 20]).unwrap();
    o.backing = p("b.img");
    o.wo_ssd = p("ro.img");
    let e = format(&o).unwrap_err().to_string();
    assert!(e.contains("different devices"), "{e}");
    o.wo_ssd = p("wo.img");
    o.dram_bytes = 100;
    assert!(format(&o).unwrap_err().to_string().contains("too small"));
    o.dram_bytes = 1 << 20;
    format(&o).unwrap();
    // A second format without --force refuses to overwrite the caches.
    assert!(format(&o).is_err());
    // Swapped roles are refused at open.
    let e = open_with_devices(
        dev(&p("wo.img")),
        dev(&p("ro.img")),
        dev(&p("b.img")),
        &p("b.img"),
    )
    .err()
    .unwrap();
    assert!(format!("{e:#}").contains("roles"), "{e:#}");
    // An SSD of another pair is refused.
    o.ro_ssd = p("ro2.img");
    o.wo_ssd = p("wo2.img");
    format(&o).unwrap();
    let e = open_with_devices(
        dev(&p("ro.img")),
        dev(&p("wo2.img")),
        dev(&p("b.img")),
        &p("b.img"),
    )
    .err()
    .unwrap();
    assert!(format!("{e:#}").contains("not formatted together"), "{e:#}");
    // Out-of-range requests are errors, not panics.
    let c = open_with_devices(
        dev(&p("ro.img")),
        dev(&p("wo.img")),
        dev(&p("b.img")),
        &p("b.img"),
    )
    .unwrap();
    assert!(c.read((1 << 20) - 10, 20).is_err());
    assert!(c.write(u64::MAX - 1, &[0; 4], false).is_err());
    c.shutdown(false).unwrap();
}
