//! Deterministic simulation of the three-level cache's request path
//! (issue 17, item 2): the real `ThreeLevel` cache (DRAM level, RO-SSD and
//! WO-SSD stores, the adaptive policy, flusher steps run in the test's
//! thread, commits, recovery) on in-memory RO-SSD, WO-SSD and backing
//! devices, each behind a volatile write cache (`CrashDev`) and an error
//! injector (`FaultyDev`), driven by the seeded steps of
//! `tiercache_fuzz::dst`: writes (some FUA), reads, flushes, flusher steps,
//! stretches of injected EIO on all three devices, and power losses at
//! random steps (unflushed writes dropped, kept in order up to a point, or
//! torn per 512-byte sector), each followed by recovery and a check of
//! every sector against the model.
//!
//! Long run: `TIERCACHE_DST_CASES=100000 cargo test -p tiercache-three-level --test dst`.

use std::path::PathBuf;
use std::sync::Arc;

use tiercache_fuzz::dst::{self, System, UNIT};
use tiercache_fuzz::Rng;
use tiercache_io::{CrashDev, CrashMode, FaultRule, FaultyDev, MemDev, OpKinds};
use tiercache_levels::Policy;
use tiercache_three_level::{format, open_with_devices, FormatOptions, ThreeLevel, PAGE};

const UNITS: u64 = 512; // a 2 MiB backing device
const SSD: u64 = 4 << 20;

struct Stack {
    media: Arc<MemDev>,
    cache: Arc<CrashDev>,
    faulty: Arc<FaultyDev>,
}

impl Stack {
    fn new(media: Arc<MemDev>, seed: u64) -> Stack {
        let cache = Arc::new(CrashDev::new(media.clone()));
        let faulty = Arc::new(FaultyDev::new(cache.clone(), seed));
        Stack {
            media,
            cache,
            faulty,
        }
    }
}

struct TicaSys {
    /// Inject I/O errors when the driver asks (else only power losses).
    faults: bool,
    devs: [Stack; 3],
    c: Option<Arc<ThreeLevel>>,
    path: PathBuf,
}

fn open(d: &[Stack; 3], path: &std::path::Path) -> anyhow::Result<Arc<ThreeLevel>> {
    open_with_devices(
        d[0].faulty.clone(),
        d[1].faulty.clone(),
        d[2].faulty.clone(),
        path,
    )
}

/// Formatted RO-SSD and WO-SSD images, and the backing holding version 0
/// of every unit.
fn images() -> ([Vec<u8>; 3], tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let backing: Vec<u8> = (0..UNITS).flat_map(|u| dst::unit(u, 0)).collect();
    std::fs::write(p("backing"), &backing).unwrap();
    format(&FormatOptions {
        ro_ssd: p("ro"),
        wo_ssd: p("wo"),
        backing: p("backing"),
        dram_bytes: 16 * PAGE,
        policy: Policy::Adaptive,
        create_size: Some(SSD),
        force: false,
    })
    .unwrap();
    (
        [
            std::fs::read(p("ro")).unwrap(),
            std::fs::read(p("wo")).unwrap(),
            backing,
        ],
        dir,
    )
}

fn crash_mode(seed: u64) -> CrashMode {
    match seed % 3 {
        0 => CrashMode::DropAll,
        1 => CrashMode::KeepFirst((seed >> 8) as usize % 16),
        _ => CrashMode::Torn { seed },
    }
}

fn io(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

fn stacks(media: [Arc<MemDev>; 3], seed: u64) -> [Stack; 3] {
    let [a, b, c] = media;
    [
        Stack::new(a, seed),
        Stack::new(b, seed ^ 1),
        Stack::new(c, seed ^ 2),
    ]
}

impl TicaSys {
    fn c(&self) -> std::io::Result<&Arc<ThreeLevel>> {
        self.c.as_ref().ok_or_else(|| io("the cache did not open"))
    }
}

impl System for TicaSys {
    fn units(&self) -> u64 {
        UNITS
    }
    fn write(&mut self, first: u64, data: &[u8], fua: bool) -> std::io::Result<()> {
        self.c()?.write(first * UNIT as u64, data, fua).map_err(io)
    }
    fn read(&mut self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let d = self.c()?.read(first * UNIT as u64, buf.len()).map_err(io)?;
        buf.copy_from_slice(&d);
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.c()?.flush().map_err(io)
    }
    fn background(&mut self, rng: &mut Rng) {
        if let Ok(c) = self.c() {
            let _ = c.flusher_step(1 + rng.below(16) as usize);
        }
    }
    fn set_faults(&mut self, p: f64, _seed: u64) {
        for t in &self.devs {
            t.faulty.clear_rules();
            if p > 0.0 && self.faults {
                t.faulty
                    .add_rule(FaultRule::always(OpKinds::ALL).with_probability(p))
                    .unwrap();
            }
        }
    }
    fn crash(&mut self, seed: u64) -> Result<String, String> {
        let mode = crash_mode(seed);
        let mut what = format!("{mode:?}:");
        self.c = None;
        for t in &self.devs {
            t.faulty.clear_rules();
            let r = t.cache.crash(mode).map_err(|e| e.to_string())?;
            what += &format!(" {} unflushed ops", r.unflushed_ops);
        }
        let media = [0, 1, 2].map(|i| self.devs[i].media.clone());
        self.devs = stacks(media, seed);
        self.c = Some(open(&self.devs, &self.path).map_err(|e| format!("{e:#}"))?);
        Ok(what)
    }
}

fn run(name: &str, faults: bool) -> dst::Totals {
    // The backing file stays on disk: opening checks its identity.
    let (imgs, dir) = images();
    dst::run(name, 10, 400, 40, |seed| {
        let media = [0, 1, 2].map(|i| Arc::new(MemDev::from_vec("dev", imgs[i].clone())));
        let devs = stacks(media, seed);
        let path = dir.path().join("backing");
        let c = Some(open(&devs, &path).unwrap());
        TicaSys {
            faults,
            devs,
            c,
            path,
        }
    })
}

#[test]
fn dst_three_level_power_losses() {
    let t = run("three-level", false);
    assert!(t.crashes >= t.cases && t.writes > 0, "{t:?}");
}

#[test]
#[ignore = "open bug found by this test (case 0, step 12): after injected EIO on the SSDs a power loss leaves both RO-SSD checkpoint regions damaged and recovery refuses the pair (replay with TIERCACHE_DST_TRACE=1)"]
fn dst_three_level_power_losses_and_io_errors() {
    let t = run("three-level-eio", true);
    assert!(
        t.crashes >= t.cases && t.failed_ops > 0 && t.writes > 0,
        "{t:?}"
    );
}
