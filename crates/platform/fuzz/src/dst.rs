//! Deterministic simulation of a live design's request path: a seeded
//! sequence of writes (some FUA), reads, flushes, background steps
//! (migrations, cleaning), injected I/O errors and power losses (unflushed
//! writes dropped or torn), checked against a model after every step.
//!
//! The design implements [`System`] over in-memory devices that emulate a
//! volatile write cache (`tiercache_io::CrashDev`) and inject errors
//! (`tiercache_io::FaultyDev`); the driver runs everything in the test's
//! thread, so a case is a function of its seed. Every 512-byte sector of
//! the 4 KiB units carries its unit, sector, version and a checksum, so the
//! model is checked sector by sector:
//! - a read while running returns, per sector, a version between the last
//!   one acknowledged and the newest one issued (a failed write may or may
//!   not have landed);
//! - after a power loss and recovery every sector holds a version that was
//!   written, no older than what the last completed FLUSH or FUA write
//!   covered, and never garbage.
//!
//! Environment: `TIERCACHE_DST_CASES` (cases per design; default: the
//! test's short count), `TIERCACHE_DST_SEED` (default 0xd57),
//! `TIERCACHE_DST_FROM` (first case, to replay one), `TIERCACHE_DST_STEPS`
//! (steps per case), `TIERCACHE_DST_TRACE` (print every step).

use std::io;
use std::time::Instant;

#[cfg(feature = "devices")]
pub mod devices;

use crate::Rng;

/// Bytes of one unit of the model (reads and writes are whole units).
pub const UNIT: usize = 4096;
/// Bytes of one sector: the unit of tearing and of the checks.
pub const SECTOR: usize = 512;
const PER_UNIT: usize = UNIT / SECTOR;

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Unit `u` as written in `version` (version 0: the initial contents the
/// system must start with).
pub fn unit(u: u64, version: u64) -> Vec<u8> {
    unit_filled(u, version, Fill::Random)
}

/// [`unit`] with mixed compressibility (for a compressing design): by
/// `u + version`, a third of the units have random fillers (they do not
/// compress), a third a repeated word (they compress to a few hundred
/// bytes) and a third half random, half repeated (they compress to about
/// half). The sector headers and checksums are as in [`unit`].
pub fn unit_mixed(u: u64, version: u64) -> Vec<u8> {
    let fill = match (u + version) % 3 {
        0 => Fill::Random,
        1 => Fill::Repeated,
        _ => Fill::Half,
    };
    unit_filled(u, version, fill)
}

#[derive(Clone, Copy, PartialEq)]
enum Fill {
    Random,
    Repeated,
    Half,
}

fn unit_filled(u: u64, version: u64, fill: Fill) -> Vec<u8> {
    let mut v = Vec::with_capacity(UNIT);
    for s in 0..PER_UNIT {
        let start = v.len();
        v.extend_from_slice(b"DSTSECTR");
        v.extend_from_slice(&u.to_le_bytes());
        v.extend_from_slice(&(s as u64).to_le_bytes());
        v.extend_from_slice(&version.to_le_bytes());
        let mut r = Rng(u ^ version.rotate_left(20) ^ (s as u64) << 50);
        let word = if fill == Fill::Random {
            0
        } else {
            r.next_u64()
        };
        while v.len() - start < SECTOR - 8 {
            let random = match fill {
                Fill::Random => true,
                Fill::Repeated => false,
                Fill::Half => v.len() - start < SECTOR / 2,
            };
            let w = if random { r.next_u64() } else { word };
            v.extend_from_slice(&w.to_le_bytes());
        }
        let c = fnv(&v[start..]);
        v.extend_from_slice(&c.to_le_bytes());
    }
    v
}

/// The version of each sector of unit `u`, or what is wrong with it.
pub fn parse_unit(u: u64, data: &[u8]) -> Result<[u64; PER_UNIT], String> {
    let mut out = [0; PER_UNIT];
    for (s, sec) in data.chunks(SECTOR).enumerate() {
        let f = |i: usize| u64::from_le_bytes(sec[i..i + 8].try_into().expect("8"));
        if &sec[..8] != b"DSTSECTR" {
            return Err(format!(
                "unit {u} sector {s}: garbage ({:02x?})",
                &sec[..16]
            ));
        }
        if f(8) != u || f(16) != s as u64 {
            return Err(format!(
                "unit {u} sector {s}: holds unit {} sector {} (misdirected)",
                f(8),
                f(16)
            ));
        }
        if fnv(&sec[..SECTOR - 8]) != f(SECTOR - 8) {
            return Err(format!("unit {u} sector {s}: corrupt (version {})", f(24)));
        }
        out[s] = f(24);
    }
    Ok(out)
}

/// A live design under simulation (its devices in memory).
pub trait System {
    /// Units of 4 KiB the volume exports.
    fn units(&self) -> u64;
    /// Write whole units from `first`.
    fn write(&mut self, first: u64, data: &[u8], fua: bool) -> io::Result<()>;
    /// Read whole units from `first`.
    fn read(&mut self, first: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Make every acknowledged write durable.
    fn flush(&mut self) -> io::Result<()>;
    /// One background step of the design (a migration round, cleaning,
    /// destaging), run in the caller's thread; errors are the design's
    /// business (they must not lose acknowledged data).
    fn background(&mut self, _rng: &mut Rng) {}
    /// Inject `fault` on the `target` devices (see [`fault_matrix`]); false
    /// if this system cannot. [`System::crash`] ends it.
    fn inject(&mut self, _target: Target, _fault: Fault) -> bool {
        false
    }
    /// Inject I/O errors (EIO, with the probability per op given) on the
    /// design's devices from now on; 0 stops injecting.
    fn set_faults(&mut self, probability: f64, seed: u64);
    /// Whether the units written mix compressible and incompressible data
    /// ([`unit_mixed`]; for a compressing design). Default: random data.
    fn mixed_data(&self) -> bool {
        false
    }
    /// Lose power on every device (unflushed writes dropped, kept in order
    /// or torn per sector, as `seed` picks), stop injecting errors, and
    /// reopen the design from what reached the media. `Err` if recovery
    /// refused: a failure of the case.
    fn crash(&mut self, seed: u64) -> Result<String, String>;
}

/// The model's knowledge of one sector.
#[derive(Clone, Copy, Default)]
struct Sector {
    /// Oldest version the sector may hold now (the last acknowledged one).
    lo: u64,
    /// Newest version issued.
    hi: u64,
    /// Version a completed FLUSH or FUA write made durable.
    floor: u64,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    /// Cases run.
    pub cases: u64,
    /// Steps run.
    pub steps: u64,
    /// Writes acknowledged.
    pub writes: u64,
    /// Operations that failed (injected errors).
    pub failed_ops: u64,
    /// Power losses, each followed by recovery and a full check.
    pub crashes: u64,
    /// Sectors checked after recoveries.
    pub sectors_verified: u64,
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().replace('_', "");
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

fn check_sector(
    u: u64,
    s: usize,
    v: u64,
    st: &Sector,
    floor: u64,
    when: &str,
) -> Result<(), String> {
    if v < floor {
        return Err(format!(
            "{when}: unit {u} sector {s}: version {v} is older than {floor} (acknowledged {}, durable {})",
            st.lo, st.floor
        ));
    }
    if v > st.hi {
        return Err(format!(
            "{when}: unit {u} sector {s}: version {v} was never written (newest issued {})",
            st.hi
        ));
    }
    Ok(())
}

/// Read every unit after a recovery and check it; then flush so what was
/// read is durable. The sectors checked.
fn verify_all<S: System>(sys: &mut S, model: &mut [Sector], when: &str) -> Result<u64, String> {
    let units = sys.units();
    let mut buf = vec![0u8; 16 * UNIT];
    let mut n = 0;
    for first in (0..units).step_by(16) {
        let k = 16.min(units - first) as usize;
        let buf = &mut buf[..k * UNIT];
        sys.read(first, buf)
            .map_err(|e| format!("{when}: read of units {first}.. failed: {e}"))?;
        for (i, d) in buf.chunks(UNIT).enumerate() {
            let u = first + i as u64;
            let vs = parse_unit(u, d).map_err(|e| format!("{when}: {e}"))?;
            for (s, &v) in vs.iter().enumerate() {
                let st = &mut model[u as usize * PER_UNIT + s];
                check_sector(u, s, v, st, st.floor, when)?;
                st.lo = v;
                st.hi = st.hi.max(v);
                n += 1;
            }
        }
    }
    sys.flush()
        .map_err(|e| format!("{when}: flush after recovery failed: {e}"))?;
    for st in model.iter_mut() {
        st.floor = st.lo;
    }
    Ok(n)
}

/// One case: `steps` seeded steps on a fresh system, a power loss at
/// random steps (about one in `crash_every`) and at the end, errors
/// injected in some stretches.
pub fn run_case<S: System>(
    sys: &mut S,
    rng: &mut Rng,
    steps: u64,
    crash_every: u64,
    totals: &mut Totals,
) -> Result<(), String> {
    let units = sys.units();
    let mut model = vec![Sector::default(); units as usize * PER_UNIT];
    let mut next = vec![0u64; units as usize];
    let hot = rng.below(units);
    let mut faults = false;
    let trace = std::env::var_os("TIERCACHE_DST_TRACE").is_some();
    for step in 0..steps {
        totals.steps += 1;
        let when = format!("step {step}");
        if rng.one_in(crash_every) || step + 1 == steps {
            let what = sys
                .crash(rng.next_u64())
                .map_err(|e| format!("{when}: recovery refused: {e}"))?;
            faults = false;
            totals.crashes += 1;
            if trace {
                eprintln!("{when}: power loss and recovery: {what}");
            }
            totals.sectors_verified += verify_all(
                sys,
                &mut model,
                &format!("{when}: after a power loss ({what})"),
            )?;
            continue;
        }
        if rng.one_in(25) {
            faults = !faults;
            sys.set_faults(if faults { 0.05 } else { 0.0 }, rng.next_u64());
            if trace {
                eprintln!("{when}: faults {faults}");
            }
        }
        op(sys, rng, &mut model, &mut next, hot, &when, trace, totals)?;
    }
    Ok(())
}

/// One seeded request (read, write, FLUSH or background step), checked
/// against the model and recorded in it.
#[allow(clippy::too_many_arguments)]
fn op<S: System>(
    sys: &mut S,
    rng: &mut Rng,
    model: &mut [Sector],
    next: &mut [u64],
    hot: u64,
    when: &str,
    trace: bool,
    totals: &mut Totals,
) -> Result<(), String> {
    let units = sys.units();
    let n = 1 + rng.below(4.min(units));
    let first = if rng.below(10) < 7 {
        (hot + rng.below(32)) % (units - n + 1)
    } else {
        rng.below(units - n + 1)
    };
    match rng.below(20) {
        0..=6 => {
            let mut buf = vec![0u8; n as usize * UNIT];
            match sys.read(first, &mut buf) {
                Ok(()) => {
                    for (i, d) in buf.chunks(UNIT).enumerate() {
                        let u = first + i as u64;
                        let vs = parse_unit(u, d).map_err(|e| format!("{when}: read: {e}"))?;
                        for (s, &v) in vs.iter().enumerate() {
                            let st = &model[u as usize * PER_UNIT + s];
                            check_sector(u, s, v, st, st.lo, &format!("{when}: read"))?;
                        }
                    }
                }
                Err(e) => {
                    if trace {
                        eprintln!("{when}: read {first}+{n}: {e}");
                    }
                    totals.failed_ops += 1
                }
            }
        }
        7 => match sys.flush().inspect(|()| {
            if trace {
                eprintln!("{when}: flush ok")
            }
        }) {
            Ok(()) => {
                for st in model.iter_mut() {
                    st.floor = st.lo;
                }
            }
            Err(_) => totals.failed_ops += 1,
        },
        8 | 9 => {
            if trace {
                eprintln!("{when}: background");
            }
            sys.background(rng)
        }
        _ => {
            let fua = rng.one_in(6);
            let mut data = Vec::with_capacity(n as usize * UNIT);
            let mut versions = Vec::new();
            for u in first..first + n {
                next[u as usize] += 1;
                versions.push(next[u as usize]);
                let v = next[u as usize];
                data.extend(if sys.mixed_data() {
                    unit_mixed(u, v)
                } else {
                    unit(u, v)
                });
            }
            let r = sys.write(first, &data, fua);
            if trace {
                eprintln!("{when}: write {first}+{n} v{versions:?} fua {fua}: {r:?}");
            }
            let ok = r.is_ok();
            if ok {
                totals.writes += 1;
            } else {
                totals.failed_ops += 1;
            }
            for (i, v) in versions.into_iter().enumerate() {
                let u = first as usize + i;
                for st in &mut model[u * PER_UNIT..(u + 1) * PER_UNIT] {
                    st.hi = v;
                    if ok {
                        st.lo = v;
                        if fua {
                            st.floor = v;
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Run the cases of design `name` (`TIERCACHE_DST_CASES`, else
/// `default_cases`), each on a system made by `make` from the case's seed.
/// A failure panics with the seed and case to replay.
pub fn run<S: System>(
    name: &str,
    default_cases: u64,
    default_steps: u64,
    crash_every: u64,
    make: impl FnMut(u64) -> S,
) -> Totals {
    let cases = env_u64("TIERCACHE_DST_CASES").unwrap_or(default_cases);
    let seed = env_u64("TIERCACHE_DST_SEED").unwrap_or(0xd57);
    let from = env_u64("TIERCACHE_DST_FROM").unwrap_or(0);
    let steps = env_u64("TIERCACHE_DST_STEPS").unwrap_or(default_steps);
    run_cases(name, seed, from, cases, steps, crash_every, make)
}

/// [`run`] with explicit settings (a regression test replaying one case).
pub fn run_cases<S: System>(
    name: &str,
    seed: u64,
    from: u64,
    cases: u64,
    steps: u64,
    crash_every: u64,
    mut make: impl FnMut(u64) -> S,
) -> Totals {
    let cfg = crate::Config { cases, seed, from };
    let start = Instant::now();
    let mut report = Instant::now();
    let mut totals = Totals::default();
    for i in from..from + cases {
        if report.elapsed().as_secs() >= 60 {
            report = Instant::now();
            eprintln!("dst {name}: {} cases done, {totals:?}", i - from);
        }
        let mut rng = cfg.rng(name, i);
        let mut sys = make(rng.next_u64());
        if let Err(e) = run_case(&mut sys, &mut rng, steps, crash_every, &mut totals) {
            panic!(
                "dst {name}: FAILED at case {i} (replay: TIERCACHE_DST_SEED={seed:#x} TIERCACHE_DST_FROM={i} TIERCACHE_DST_CASES=1 TIERCACHE_DST_STEPS={steps}): {e}"
            );
        }
        totals.cases += 1;
    }
    eprintln!(
        "dst {name}: {} cases of {steps} steps (seed {seed:#x}, from {from}) in {:.1} s, 0 failures: {} writes acknowledged, {} ops failed by injected errors, {} power losses, {} sectors verified after recovery",
        totals.cases,
        start.elapsed().as_secs_f64(),
        totals.writes,
        totals.failed_ops,
        totals.crashes,
        totals.sectors_verified
    );
    totals
}

/// Which devices a fault of the matrix hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The cache devices (the fast tier of the tiered volume; both SSDs of
    /// the three-level cache).
    Cache,
    /// The backing device (the slow tier of the tiered volume).
    Backing,
}

/// A fault of the matrix, injected while a load runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Reads fail with EIO (one in three).
    ReadEio,
    /// Writes fail with EIO (one in three).
    WriteEio,
    /// Writes fail with ENOSPC (every one: a full thin-provisioned device
    /// or a file on a full filesystem).
    Enospc,
    /// Every operation fails (the device was pulled).
    Removal,
    /// Every operation is delayed (a slow or stalling device).
    Slow,
}

/// What a design did under one fault of the matrix.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Steps (requests and background steps) that did not fail while the
    /// fault was on.
    pub ok: u64,
    /// Requests that failed (the client saw an error).
    pub failed: u64,
    /// Sectors checked after the fault ended and after a power loss.
    pub sectors_verified: u64,
}

/// One cell of the fault matrix: a load without faults ending in a FLUSH,
/// then `steps` seeded requests with `fault` on the `target` devices (every
/// read checked: acknowledged data or an error, never stale or garbage),
/// then the fault cleared (device back, space freed) and every unit read
/// back (nothing acknowledged missing), then a power loss and recovery:
/// every write acknowledged by a FLUSH or FUA is there. `Err` names the
/// first violation; `Ok(None)` if the system cannot inject this fault.
pub fn fault_case<S: System>(
    sys: &mut S,
    seed: u64,
    target: Target,
    fault: Fault,
    steps: u64,
) -> Result<Option<Outcome>, String> {
    let mut rng = Rng(seed);
    let units = sys.units();
    let mut model = vec![Sector::default(); units as usize * PER_UNIT];
    let mut next = vec![0u64; units as usize];
    let hot = rng.below(units);
    let trace = std::env::var_os("TIERCACHE_DST_TRACE").is_some();
    let mut t = Totals::default();
    for step in 0..steps {
        op(
            sys,
            &mut rng,
            &mut model,
            &mut next,
            hot,
            &format!("before: step {step}"),
            trace,
            &mut t,
        )?;
    }
    sys.flush()
        .map_err(|e| format!("flush before the fault: {e}"))?;
    for st in model.iter_mut() {
        st.floor = st.lo;
    }
    if !sys.inject(target, fault) {
        return Ok(None);
    }
    let mut during = Totals::default();
    for step in 0..steps {
        during.steps += 1;
        op(
            sys,
            &mut rng,
            &mut model,
            &mut next,
            hot,
            &format!("{fault:?} on {target:?}: step {step}"),
            trace,
            &mut during,
        )?;
    }
    let mut out = Outcome {
        ok: during.steps.saturating_sub(during.failed_ops),
        failed: during.failed_ops,
        ..Outcome::default()
    };
    // Power loss with the fault still on, then the device comes back.
    let what = sys
        .crash(rng.next_u64())
        .map_err(|e| format!("{fault:?} on {target:?}: recovery refused: {e}"))?;
    out.sectors_verified += verify_all(
        sys,
        &mut model,
        &format!("{fault:?} on {target:?}: after a power loss ({what})"),
    )?;
    // And the design keeps serving: a load without faults, checked.
    for step in 0..steps / 2 {
        op(
            sys,
            &mut rng,
            &mut model,
            &mut next,
            hot,
            &format!("after {fault:?} on {target:?}: step {step}"),
            trace,
            &mut t,
        )?;
    }
    sys.flush()
        .map_err(|e| format!("flush after the fault: {e}"))?;
    for st in model.iter_mut() {
        st.floor = st.lo;
    }
    let what = sys
        .crash(rng.next_u64())
        .map_err(|e| format!("recovery refused: {e}"))?;
    out.sectors_verified += verify_all(
        sys,
        &mut model,
        &format!("after {fault:?} on {target:?}: after a power loss ({what})"),
    )?;
    Ok(Some(out))
}

/// Every (target, fault) cell, in the order of the matrix's table.
pub const MATRIX: [(Target, Fault); 7] = [
    (Target::Cache, Fault::ReadEio),
    (Target::Cache, Fault::WriteEio),
    (Target::Cache, Fault::Enospc),
    (Target::Cache, Fault::Removal),
    (Target::Backing, Fault::ReadEio),
    (Target::Backing, Fault::WriteEio),
    (Target::Cache, Fault::Slow),
];

/// Run the whole matrix on fresh systems from `make` and print one line
/// per cell (`design | target | fault | acknowledged | failed | verified |
/// lost 0`). Panics on the first cell that loses acknowledged data.
pub fn fault_matrix<S: System>(design: &str, steps: u64, mut make: impl FnMut(u64) -> S) {
    for (i, (target, fault)) in MATRIX.into_iter().enumerate() {
        let seed = 0xfa17 ^ (i as u64) << 8;
        let mut sys = make(seed);
        match fault_case(&mut sys, seed, target, fault, steps) {
            Ok(Some(o)) => eprintln!(
                "fault matrix | {design} | {target:?} | {fault:?} | {} steps succeeded | {} requests failed | {} sectors verified | acknowledged lost: 0",
                o.ok, o.failed, o.sectors_verified
            ),
            Ok(None) => eprintln!("fault matrix | {design} | {target:?} | {fault:?} | not injectable here"),
            Err(e) => panic!("fault matrix: {design}: {e}"),
        }
    }
}
