//! Deterministic simulation of the tiered volume's request path (issue
//! 17, item 2): the real `TieredVolume` (routing, block claims, migrations
//! and exchanges run in the test's thread by `migrate_now`, checkpoints,
//! recovery) on in-memory tiers behind a volatile write cache (`CrashDev`)
//! and an error injector (`FaultyDev`), driven by the seeded steps of
//! `tiercache_fuzz::dst`: writes (some FUA), reads, flushes, planning
//! rounds, stretches of injected EIO on both tiers, and power losses at
//! random steps (unflushed writes dropped, kept in order up to a point, or
//! torn per 512-byte sector), each followed by recovery and a check of
//! every sector against the model. Both capacity modes.
//!
//! Long run: `TIERCACHE_DST_CASES=100000 cargo test -p tiercache-oodt-live --test dst`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tiercache_fuzz::dst::devices::{power_loss, SimDev};
use tiercache_fuzz::dst::{self, Fault, System, Target, UNIT};
use tiercache_fuzz::Rng;
use tiercache_io::{BlockDev, MemDev};
use tiercache_oodt_live::superblock::{Capacity, Layout, Superblock, TierRecord};
use tiercache_oodt_live::{initial_table, initialize, TieredVolume, VolumeConfig};
use tiercache_oodt_policy::policy::PolicyKind;
use tiercache_store::BackingIdentity;

const UNITS: u64 = 256; // a 1 MiB volume
const TIER_BLOCK: u32 = 16 << 10;
const PER_BLOCK: u64 = TIER_BLOCK as u64 / UNIT as u64;

struct Vol {
    sb: Superblock,
    tiers: [SimDev; 2],
    vol: Arc<TieredVolume>,
    rt: tokio::runtime::Runtime,
}

fn open(sb: &Superblock, tiers: &[SimDev; 2]) -> anyhow::Result<Arc<TieredVolume>> {
    let devs: Vec<Arc<dyn BlockDev>> = vec![tiers[0].faulty.clone(), tiers[1].faulty.clone()];
    TieredVolume::open(sb.clone(), devs)
}

fn id(path: &str, size: u64) -> BackingIdentity {
    BackingIdentity {
        path: path.into(),
        size,
        fingerprint: 0,
        file_id: None,
        serial: None,
        sampled: None,
        times: None,
    }
}

fn new_volume(capacity: Capacity, seed: u64) -> Vol {
    let blocks = UNITS / PER_BLOCK;
    let bs = u64::from(TIER_BLOCK);
    let sum = capacity == Capacity::Sum;
    let slow_len = if sum {
        (blocks - 10) * bs
    } else {
        UNITS * UNIT as u64
    };
    let layout_of = |fast_len| {
        if sum {
            Layout::compute_sum(fast_len, slow_len, TIER_BLOCK)
                .ok()
                .map(|x| x.0)
        } else {
            Layout::compute(fast_len, blocks, TIER_BLOCK).ok()
        }
    };
    let fast_len = (1..)
        .map(|n| n * bs)
        .find(|&l| layout_of(l).is_some_and(|x| x.fast_slots == 12))
        .unwrap();
    let layout = layout_of(fast_len).unwrap();
    let fast = Arc::new(MemDev::new("fast", fast_len as usize));
    let init: Vec<u8> = (0..slow_len / UNIT as u64)
        .flat_map(|u| dst::unit(u, 0))
        .collect();
    let slow = Arc::new(MemDev::from_vec("slow", init));
    let cfg = VolumeConfig {
        plan_every: 1 << 30,
        idle_ms: 1 << 30,
        max_moves_per_round: 3,
        migrate_rate: 1 << 40,
        ..VolumeConfig::new(PolicyKind::Oodt)
    };
    let sb = Superblock {
        uuid: [5; 16],
        block_bytes: TIER_BLOCK,
        volume_bytes: UNITS * UNIT as u64,
        capacity,
        config: serde_json::to_string(&cfg).unwrap(),
        tiers: vec![
            TierRecord {
                identity: id("fast", fast_len),
            },
            TierRecord {
                identity: id("slow", slow_len),
            },
        ],
        layout,
    };
    let dev: Arc<dyn BlockDev> = fast.clone();
    initialize(&dev, &sb).unwrap();
    if sum {
        let table = initial_table(&sb).unwrap();
        for b in 0..blocks {
            let loc = table.lookup(b).unwrap();
            if loc.tier == 0 {
                for i in 0..PER_BLOCK {
                    let off = layout.data_offset + loc.slot * bs + i * UNIT as u64;
                    fast.write_at(&dst::unit(b * PER_BLOCK + i, 0), off)
                        .unwrap();
                }
            }
        }
    }
    let tiers = [SimDev::new(fast, seed), SimDev::new(slow, seed ^ 1)];
    let vol = open(&sb, &tiers).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    Vol { sb, tiers, vol, rt }
}

impl System for Vol {
    fn inject(&mut self, target: Target, fault: Fault) -> bool {
        let i = match target {
            Target::Cache => 0,
            Target::Backing => 1,
        };
        self.tiers[i].inject(fault);
        true
    }
    fn units(&self) -> u64 {
        UNITS
    }
    fn write(&mut self, first: u64, data: &[u8], fua: bool) -> std::io::Result<()> {
        self.rt
            .block_on(self.vol.write(first * UNIT as u64, data, fua))
    }
    fn read(&mut self, first: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.rt.block_on(self.vol.read(first * UNIT as u64, buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.rt.block_on(self.vol.flush())
    }
    fn background(&mut self, _rng: &mut Rng) {
        if let Ok(n) = self.vol.migrate_now() {
            MIGRATIONS.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    fn set_faults(&mut self, p: f64, _seed: u64) {
        for t in &self.tiers {
            t.set_eio(p);
        }
    }
    fn crash(&mut self, seed: u64) -> Result<String, String> {
        let mut what = power_loss(&mut self.tiers, seed)?;
        self.vol = open(&self.sb, &self.tiers).map_err(|e| format!("{e:#}"))?;
        let r = self.vol.recovery();
        what += &format!(
            "; recovery: {} log records, {} completed, {} rolled back",
            r.log_records, r.completed, r.rolled_back
        );
        Ok(what)
    }
}

/// Migrations (or exchanges) completed by planning rounds, all tests.
static MIGRATIONS: AtomicU64 = AtomicU64::new(0);

fn run(capacity: Capacity, name: &str) {
    let t = dst::run(name, 12, 400, 40, |seed| new_volume(capacity, seed));
    let m = MIGRATIONS.load(Ordering::Relaxed);
    eprintln!("dst {name}: {m} migrations so far");
    assert!(
        t.crashes >= t.cases && t.failed_ops > 0 && t.writes > 0,
        "{t:?}"
    );
    assert!(m > 0, "no planning round moved a block");
}

#[test]
fn dst_tiered_volume_slow() {
    run(Capacity::Slow, "tiered-slow");
}

#[test]
fn dst_tiered_volume_sum() {
    run(Capacity::Sum, "tiered-sum");
}

/// The fault matrix on both capacity modes: fast tier
/// ("cache") EIO on read, on write, ENOSPC, removal, slow; slow tier
/// ("backing") EIO on read and on write. Acknowledged data lost: 0.
#[test]
fn fault_matrix_tiered_volume() {
    dst::fault_matrix("tier (slow)", 150, |seed| new_volume(Capacity::Slow, seed));
    dst::fault_matrix("tier (sum)", 150, |seed| new_volume(Capacity::Sum, seed));
}
