//! Power loss during migrations, in process: both tiers sit behind
//! [`CrashDev`] (a volatile write cache), clients write self-checking
//! sectors, flush and read while the migration worker moves blocks; at a
//! random moment both devices lose power at once (unflushed writes lost or
//! torn per 512-byte sector), and the volume is reopened. Every sector must
//! hold a version that was written, no older than what the last completed
//! FLUSH (or FUA write) covered; reads while running never go back behind
//! what was acknowledged. Across the rounds recovery must both complete
//! switched migrations and roll back unswitched ones. Both capacity modes:
//! `slow` (homes on the slow tier, single-block migrations) and `sum` (every
//! block in one slot of either tier, all moves are two-block exchanges, four
//! log records each).
//!
//! Half the rounds run fast-tier-only requests inline on the runtime's
//! workers ([`TieredVolume::force_inline_fast`]), the path a buffered local
//! fast tier takes, the others on the request threads.
//!
//! `TIERVOL_POWER_ROUNDS` and `TIERVOL_POWER_SEED` override rounds and seed.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tiercache_io::{BlockDev, CrashDev, CrashMode, MemDev};
use tiercache_oodt_live::superblock::{Capacity, Layout, Superblock, TierRecord};
use tiercache_oodt_live::{initialize, TieredVolume, VolumeConfig};
use tiercache_oodt_policy::policy::PolicyKind;
use tiercache_store::BackingIdentity;

const SECTOR: usize = 512;
const UNIT: usize = 4096;
const PER_UNIT: usize = UNIT / SECTOR;
const UNITS: u64 = 1024; // 4 MiB volume
const TIER_BLOCK: u32 = 16 << 10;

/// Both tiers' power: once off, every operation fails. `trip` turns it off
/// right before the n-th write into the migration log region (so the power
/// fails at a chosen step of a migration: before its Begin, Switch or Done).
struct Gate {
    inner: Arc<CrashDev>,
    off: Arc<RwLock<bool>>,
    trip: Option<(std::ops::Range<u64>, std::sync::atomic::AtomicU64)>,
}

fn powered_off() -> io::Error {
    io::Error::other("powered off")
}

impl Gate {
    fn run<T>(&self, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let g = self.off.read().unwrap();
        if *g {
            return Err(powered_off());
        }
        f()
    }
}

impl BlockDev for Gate {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.run(|| self.inner.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some((range, left)) = &self.trip {
            if range.contains(&offset) && left.fetch_sub(1, Ordering::SeqCst) == 1 {
                *self.off.write().unwrap() = true;
            }
        }
        self.run(|| self.inner.write_at(buf, offset))
    }
    fn flush(&self) -> io::Result<()> {
        self.run(|| self.inner.flush())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.run(|| self.inner.trim(offset, len))
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// One unit at `version`: every sector says which unit, sector and version
/// it is, and carries a checksum, so tearing shows sector by sector.
fn make_unit(unit: u64, version: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(UNIT);
    for s in 0..PER_UNIT {
        let start = v.len();
        v.extend_from_slice(b"TVSECTOR");
        v.extend_from_slice(&unit.to_le_bytes());
        v.extend_from_slice(&(s as u64).to_le_bytes());
        v.extend_from_slice(&version.to_le_bytes());
        let mut r = Rng(unit ^ version.rotate_left(20) ^ (s as u64) << 50);
        while v.len() - start < SECTOR - 8 {
            v.extend_from_slice(&r.next().to_le_bytes());
        }
        let c = fnv(&v[start..]);
        v.extend_from_slice(&c.to_le_bytes());
    }
    v
}

/// The version of each sector of `unit`, or what is wrong.
fn parse_unit(unit: u64, data: &[u8]) -> Result<[u64; PER_UNIT], String> {
    let mut out = [0; PER_UNIT];
    for (s, sec) in data.chunks(SECTOR).enumerate() {
        let u = |i: usize| u64::from_le_bytes(sec[i..i + 8].try_into().unwrap());
        if &sec[..8] != b"TVSECTOR" {
            return Err(format!(
                "unit {unit} sector {s}: no magic ({:02x?})",
                &sec[..16]
            ));
        }
        if u(8) != unit || u(16) != s as u64 {
            return Err(format!(
                "unit {unit} sector {s}: holds unit {} sector {} (misdirected)",
                u(8),
                u(16)
            ));
        }
        let version = u(24);
        if fnv(&sec[..SECTOR - 8]) != u(SECTOR - 8) {
            return Err(format!(
                "unit {unit} sector {s}: corrupt (version {version})"
            ));
        }
        out[s] = version;
    }
    Ok(out)
}

#[derive(Clone, Default)]
struct UnitState {
    /// Versions read back at the last verification, per sector.
    base: [u64; PER_UNIT],
    /// Versions written since.
    issued: Vec<u64>,
    acked: u64,
    /// Per sector: the version a completed FLUSH or FUA covered.
    durable: [u64; PER_UNIT],
    next: u64,
    writing: bool,
}

struct Ledger {
    units: Vec<UnitState>,
    writes: u64,
    flushes: u64,
    reads: u64,
}

impl Ledger {
    fn allowed(&self, unit: u64, s: usize, v: u64, floor: u64) -> Result<(), String> {
        let st = &self.units[unit as usize];
        if v < floor {
            return Err(format!(
                "unit {unit} sector {s}: version {v} is older than {floor} (stale; durable {:?}, acked {})",
                st.durable, st.acked
            ));
        }
        if v != st.base[s] && !st.issued.contains(&v) {
            return Err(format!(
                "unit {unit} sector {s}: version {v} was never written (base {}, issued {:?})",
                st.base[s], st.issued
            ));
        }
        Ok(())
    }
}

/// The volume of the test, formatted on fresh media: 12 fast slots; a
/// `slow` volume of the slow tier's 4 MiB, or a `sum` one of 12 + 246 slots
/// minus 2 scratch = the same 4 MiB. Version 0 of every unit is in place.
fn new_media(capacity: Capacity) -> (Arc<MemDev>, Arc<MemDev>, Superblock) {
    let blocks = UNITS * UNIT as u64 / u64::from(TIER_BLOCK);
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
    assert_eq!(layout.fast_slots, 12);
    let fast = Arc::new(MemDev::new("fast", fast_len as usize));
    let mut init = Vec::with_capacity(slow_len as usize);
    for u in 0..slow_len / UNIT as u64 {
        init.extend_from_slice(&make_unit(u, 0));
    }
    let slow = Arc::new(MemDev::from_vec("slow", init));
    let id = |path: &str, size| BackingIdentity {
        path: path.into(),
        size,
        fingerprint: 0,
        file_id: None,
        serial: None,
        sampled: None,
        times: None,
    };
    let cfg = VolumeConfig {
        plan_every: 24,
        idle_ms: 5,
        max_moves_per_round: 6,
        migrate_rate: 1 << 30,
        ..VolumeConfig::new(PolicyKind::Oodt)
    };
    let sb = Superblock {
        uuid: [1; 16],
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
        // The initial mapping: blocks 0..244 on slow slots 0..244 (version
        // 0 is there), blocks 245..255 on fast slots 0..10.
        let table = tiercache_oodt_live::initial_table(&sb).unwrap();
        for b in 0..blocks {
            let loc = table.lookup(b).unwrap();
            assert_eq!(loc.tier == 1, b < blocks - 11, "block {b} at {loc:?}");
            if loc.tier == 0 {
                let per = bs / UNIT as u64;
                for i in 0..per {
                    let off = layout.data_offset + loc.slot * bs + i * UNIT as u64;
                    fast.write_at(&make_unit(b * per + i, 0), off).unwrap();
                }
            }
        }
    }
    (fast, slow, sb)
}

/// Read every unit, check it against the ledger, make it the new base,
/// then FLUSH: what was read is durable.
async fn verify_all(vol: &Arc<TieredVolume>, ledger: &Mutex<Ledger>) -> Result<(), String> {
    let mut buf = vec![0u8; 16 * UNIT];
    for first in (0..UNITS).step_by(16) {
        vol.read(first * UNIT as u64, &mut buf)
            .await
            .map_err(|e| format!("verify read at unit {first}: {e}"))?;
        let mut l = ledger.lock().unwrap();
        for (i, chunk) in buf.chunks(UNIT).enumerate() {
            let u = first + i as u64;
            let vs = parse_unit(u, chunk)?;
            for (s, &v) in vs.iter().enumerate() {
                let floor = l.units[u as usize].durable[s];
                l.allowed(u, s, v, floor)?;
            }
            let st = &mut l.units[u as usize];
            st.base = vs;
            st.issued.clear();
            st.acked = *vs.iter().min().unwrap();
            st.writing = false;
        }
    }
    vol.flush()
        .await
        .map_err(|e| format!("verify flush: {e}"))?;
    for st in &mut ledger.lock().unwrap().units {
        st.durable = st.base;
    }
    Ok(())
}

/// One client: random writes (1 to 4 units, some FUA), reads and flushes,
/// a share of them on a hot window of 48 units.
async fn client(
    vol: Arc<TieredVolume>,
    ledger: Arc<Mutex<Ledger>>,
    seed: u64,
    hot: u64,
    stop: Arc<AtomicBool>,
    off: Arc<RwLock<bool>>,
) -> Result<(), String> {
    let mut rng = Rng(seed);
    while !stop.load(Ordering::Relaxed) {
        let n = 1 + rng.below(4);
        let first = if rng.below(10) < 7 {
            (hot + rng.below(48)) % (UNITS - n)
        } else {
            rng.below(UNITS - n)
        };
        let r = rng.below(100);
        let result = if r < 4 {
            let snap: Vec<u64> = ledger
                .lock()
                .unwrap()
                .units
                .iter()
                .map(|s| s.acked)
                .collect();
            vol.flush().await.map(|()| {
                let mut l = ledger.lock().unwrap();
                l.flushes += 1;
                for (st, a) in l.units.iter_mut().zip(snap) {
                    for d in &mut st.durable {
                        *d = (*d).max(a);
                    }
                }
            })
        } else if r < 30 {
            let acked: Vec<u64> = {
                let l = ledger.lock().unwrap();
                (first..first + n)
                    .map(|u| l.units[u as usize].acked)
                    .collect()
            };
            let mut buf = vec![0u8; n as usize * UNIT];
            match vol.read(first * UNIT as u64, &mut buf).await {
                Ok(()) => {
                    let mut l = ledger.lock().unwrap();
                    l.reads += 1;
                    for (i, chunk) in buf.chunks(UNIT).enumerate() {
                        let u = first + i as u64;
                        let vs = parse_unit(u, chunk).map_err(|e| format!("live read: {e}"))?;
                        for (s, &v) in vs.iter().enumerate() {
                            l.allowed(u, s, v, acked[i])
                                .map_err(|e| format!("live read: {e}"))?;
                        }
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        } else {
            let fua = rng.below(30) == 0;
            let (data, versions) = {
                let mut l = ledger.lock().unwrap();
                if (first..first + n).any(|u| l.units[u as usize].writing) {
                    continue;
                }
                let mut data = Vec::new();
                let mut versions = Vec::new();
                for u in first..first + n {
                    let st = &mut l.units[u as usize];
                    st.next += 1;
                    let v = st.next;
                    st.issued.push(v);
                    st.writing = true;
                    versions.push(v);
                    data.extend_from_slice(&make_unit(u, v));
                }
                (data, versions)
            };
            let res = vol.write(first * UNIT as u64, &data, fua).await;
            let mut l = ledger.lock().unwrap();
            for (i, v) in versions.into_iter().enumerate() {
                let st = &mut l.units[(first + i as u64) as usize];
                st.writing = false;
                if res.is_ok() {
                    st.acked = st.acked.max(v);
                    if fua {
                        for d in &mut st.durable {
                            *d = (*d).max(v);
                        }
                    }
                }
            }
            if res.is_ok() {
                l.writes += 1;
            }
            res
        };
        if let Err(e) = result {
            if *off.read().unwrap() {
                return Ok(()); // the power went off under it
            }
            return Err(format!("request failed with the power on: {e}"));
        }
    }
    Ok(())
}

#[test]
fn power_loss_during_migrations_never_loses_or_stales_flushed_data() {
    power_rounds(Capacity::Slow, 0x71e2_0005);
}

#[test]
fn power_loss_during_exchanges_of_a_sum_volume_never_loses_or_stales_flushed_data() {
    power_rounds(Capacity::Sum, 0x71e2_0006);
}

fn power_rounds(capacity: Capacity, seed: u64) {
    let rounds: u64 = std::env::var("TIERVOL_POWER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("TIERVOL_POWER_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(seed);
    let (fast, slow, sb) = new_media(capacity);
    let ledger = Arc::new(Mutex::new(Ledger {
        units: (0..UNITS)
            .map(|_| UnitState {
                next: 0,
                ..UnitState::default()
            })
            .collect(),
        writes: 0,
        flushes: 0,
        reads: 0,
    }));
    let mut rng = Rng(seed);
    let (mut after_switch, mut rolled_back, mut migrations) = (0usize, 0usize, 0u64);
    let (mut exchanges, mut inline) = (0u64, 0u64);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for round in 0..=rounds {
        let off = Arc::new(RwLock::new(false));
        let fast_c = Arc::new(CrashDev::new(fast.clone()));
        let slow_c = Arc::new(CrashDev::new(slow.clone()));
        // Odd rounds lose power at a random time, even ones at a random
        // migration-log write (3 per migration, 4 per exchange; the open's
        // checkpoint and verification write none).
        let log = sb.layout.log_offset..sb.layout.log_offset + sb.layout.log_bytes;
        let trip = (round % 2 == 0).then(|| (log, (1 + rng.below(30)).into()));
        let devs: Vec<Arc<dyn BlockDev>> = vec![
            Arc::new(Gate {
                inner: Arc::clone(&fast_c),
                off: Arc::clone(&off),
                trip,
            }),
            Arc::new(Gate {
                inner: Arc::clone(&slow_c),
                off: Arc::clone(&off),
                trip: None,
            }),
        ];
        let vol = TieredVolume::open(sb.clone(), devs)
            .unwrap_or_else(|e| panic!("seed {seed} round {round}: open: {e:#}"));
        // Rounds 2-3 of every 4 run fast-tier-only requests inline on the
        // runtime's workers (the path a buffered local fast tier takes).
        vol.force_inline_fast(round % 4 >= 2);
        let rec = vol.recovery().clone();
        after_switch += rec.completed_after_switch;
        rolled_back += rec.rolled_back;
        rt.block_on(verify_all(&vol, &ledger))
            .unwrap_or_else(|e| panic!("seed {seed} round {round}: after recovery {rec:?}: {e}"));
        if round == rounds {
            vol.shutdown().unwrap();
            break;
        }
        vol.start_background();
        let stop = Arc::new(AtomicBool::new(false));
        let hot = (round * 97) % UNITS;
        let tasks: Vec<_> = (0..3)
            .map(|i| {
                rt.spawn(client(
                    Arc::clone(&vol),
                    Arc::clone(&ledger),
                    rng.next() ^ i,
                    hot,
                    Arc::clone(&stop),
                    Arc::clone(&off),
                ))
            })
            .collect();
        let run_for = Duration::from_millis(if round % 2 == 0 {
            5000
        } else {
            40 + rng.below(160)
        });
        let t0 = Instant::now();
        while t0.elapsed() < run_for && !*off.read().unwrap() {
            std::thread::sleep(Duration::from_millis(2));
        }
        // Power off both tiers at once, then lose their volatile caches.
        *off.write().unwrap() = true;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            rt.block_on(t)
                .unwrap()
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
        }
        let stats = vol.stats_json();
        migrations += stats["migrations"].as_u64().unwrap();
        exchanges += stats["exchanges"].as_u64().unwrap();
        inline += stats["inline_requests"].as_u64().unwrap();
        let mode = CrashMode::Torn { seed: rng.next() };
        fast_c.crash(mode).unwrap();
        slow_c.crash(mode).unwrap();
        let _ = vol.shutdown(); // fails: the devices are off
        eprintln!(
            "round {round}: recovery {rec:?}; power lost after {:?}: {} migrations",
            t0.elapsed(),
            stats["migrations"]
        );
    }
    let l = ledger.lock().unwrap();
    eprintln!(
        "{rounds} power losses: {migrations} migrations, {} writes, {} flushes, {} reads checked; recovery completed {after_switch} switched and rolled back {rolled_back} unswitched migrations",
        l.writes, l.flushes, l.reads
    );
    assert!(migrations > 0, "no migration ran");
    assert!(
        inline > 0,
        "no request ran inline in the rounds that force it"
    );
    if capacity == Capacity::Sum {
        assert!(exchanges > 0, "no exchange ran");
    }
    assert!(
        after_switch > 0 && rolled_back > 0,
        "both recovery paths must run: {after_switch} completed after the switch, {rolled_back} rolled back"
    );
}
