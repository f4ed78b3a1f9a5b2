//! A wrapper that injects I/O errors, for tests.

use std::io;
use std::ops::{BitOr, Range};
use std::sync::{Mutex, PoisonError};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::{BlockDev, RawTarget};

/// A set of operation kinds a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpKinds(u8);

impl OpKinds {
    pub const READ: OpKinds = OpKinds(1);
    /// Plain and FUA writes.
    pub const WRITE: OpKinds = OpKinds(2);
    pub const FLUSH: OpKinds = OpKinds(4);
    pub const TRIM: OpKinds = OpKinds(8);
    /// Writes, flushes and trims.
    pub const MUTATING: OpKinds = OpKinds(2 | 4 | 8);
    pub const ALL: OpKinds = OpKinds(15);

    /// Whether every kind in `other` is in `self`.
    pub fn contains(self, other: OpKinds) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for OpKinds {
    type Output = OpKinds;
    fn bitor(self, rhs: OpKinds) -> OpKinds {
        OpKinds(self.0 | rhs.0)
    }
}

/// When an operation fails with `EIO`. An op fails if it matches any rule
/// (or the device is pulled, see [`FaultyDev::fail_all`]).
///
/// A rule matches an op when all of these hold:
/// - the op's kind is in `kinds`;
/// - `range` is `None`, or the op's byte range overlaps it (flushes have no
///   range, so a rule with a range never fails a flush);
/// - the rule has already seen `after_ops` ops that met the two conditions
///   above (they pass; the next ones fail);
/// - a draw from the device's seeded RNG falls below `probability`
///   (1.0 = always; the RNG is only drawn when `probability < 1`).
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    pub kinds: OpKinds,
    pub range: Option<Range<u64>>,
    pub after_ops: u64,
    pub probability: f64,
}

impl FaultRule {
    /// Fail every op of `kinds` (probability 1, no range, from the start).
    pub fn always(kinds: OpKinds) -> FaultRule {
        FaultRule {
            kinds,
            range: None,
            after_ops: 0,
            probability: 1.0,
        }
    }

    /// Limit the rule to ops overlapping `range` (a bad sector area).
    pub fn in_range(mut self, range: Range<u64>) -> FaultRule {
        self.range = Some(range);
        self
    }

    /// Let the first `n` matching ops pass.
    pub fn after(mut self, n: u64) -> FaultRule {
        self.after_ops = n;
        self
    }

    /// Fail a matching op only with probability `p` (0..=1).
    pub fn with_probability(mut self, p: f64) -> FaultRule {
        self.probability = p;
        self
    }
}

/// Injected fault counts by operation kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub reads: u64,
    /// Plain and FUA writes.
    pub writes: u64,
    pub flushes: u64,
    pub trims: u64,
}

impl FaultCounts {
    /// All injected faults.
    pub fn total(&self) -> u64 {
        self.reads + self.writes + self.flushes + self.trims
    }
}

struct RuleState {
    rule: FaultRule,
    seen: u64,
}

struct State {
    rules: Vec<RuleState>,
    pulled: bool,
    rng: Xoshiro256PlusPlus,
    injected: FaultCounts,
}

/// A [`BlockDev`] wrapper that fails chosen operations with `EIO`
/// (`io::Error::from_raw_os_error(EIO)`, or another errno set with
/// [`FaultyDev::set_errno`]) and can slow every op down
/// ([`FaultyDev::set_delay`]), for testing error paths.
///
/// A failed op never reaches the inner device (a failed write changes
/// nothing). Faults come from [`FaultRule`]s and from "pulling" the device
/// ([`FaultyDev::fail_all`], undone by [`FaultyDev::restore`]). Random
/// faults are reproducible: the RNG is seeded at construction and drawn once
/// per op matching a rule with `probability < 1`, in call order.
pub struct FaultyDev {
    inner: std::sync::Arc<dyn BlockDev>,
    name: String,
    state: Mutex<State>,
    /// The error injected (an `errno`; EIO unless [`FaultyDev::set_errno`]).
    errno: std::sync::atomic::AtomicI32,
    /// Microseconds every op waits first ([`FaultyDev::set_delay`]).
    delay_us: std::sync::atomic::AtomicU64,
    /// Ops between their start and their end ([`FaultyDev::kill`] waits for 0).
    in_flight: std::sync::atomic::AtomicU64,
}

impl FaultyDev {
    /// Wrap `inner`; `seed` seeds the RNG of probabilistic rules.
    pub fn new(inner: std::sync::Arc<dyn BlockDev>, seed: u64) -> FaultyDev {
        let name = format!("faulty({})", inner.name());
        FaultyDev {
            inner,
            name,
            state: Mutex::new(State {
                rules: Vec::new(),
                pulled: false,
                rng: Xoshiro256PlusPlus::seed_from_u64(seed),
                injected: FaultCounts::default(),
            }),
            errno: rustix::io::Errno::IO.raw_os_error().into(),
            delay_us: 0.into(),
            in_flight: 0.into(),
        }
    }

    /// Fail with this `errno` instead of EIO from now on (e.g. ENOSPC, as a
    /// full thin-provisioned device or a file on a full filesystem does).
    pub fn set_errno(&self, errno: i32) {
        self.errno
            .store(errno, std::sync::atomic::Ordering::Relaxed);
    }

    /// Make every op wait `delay` before it runs (a slow or stalling
    /// device); zero for none.
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.delay_us.store(
            delay.as_micros().min(u64::MAX as u128) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Add a rule. Fails if the probability is not within 0..=1 or the range
    /// is empty.
    pub fn add_rule(&self, rule: FaultRule) -> io::Result<()> {
        if !(0.0..=1.0).contains(&rule.probability) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "fault probability {} is out of range; allowed: 0.0..=1.0",
                    rule.probability
                ),
            ));
        }
        if let Some(r) = &rule.range {
            if r.start >= r.end {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("fault range {r:?} is empty; it needs start < end"),
                ));
            }
        }
        self.lock().rules.push(RuleState { rule, seen: 0 });
        Ok(())
    }

    /// Remove every rule (a pulled device stays pulled).
    pub fn clear_rules(&self) {
        self.lock().rules.clear();
    }

    /// "Pull the device": every op fails until [`FaultyDev::restore`].
    pub fn fail_all(&self) {
        self.lock().pulled = true;
    }

    /// Plug the device back in (rules stay in force).
    /// The process using the device died (kill -9): every op from now on
    /// fails, and this returns once the ops already under way have ended, as
    /// the kernel finishes a dead process's in-flight writes before anyone
    /// else opens the device. Without it an in-process "crash" would let an
    /// op still sleeping in [`FaultyDev::set_delay`] write after the restart.
    pub fn kill(&self) {
        self.fail_all();
        while self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Run one op: counted in flight, faults decided by [`Self::check`].
    fn op<T>(
        &self,
        kind: OpKinds,
        range: Option<Range<u64>>,
        f: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        use std::sync::atomic::Ordering::SeqCst;
        self.in_flight.fetch_add(1, SeqCst);
        let r = self.check(kind, range).and_then(|()| f());
        self.in_flight.fetch_sub(1, SeqCst);
        r
    }

    pub fn restore(&self) {
        self.lock().pulled = false;
    }

    /// Faults injected so far.
    pub fn injected(&self) -> FaultCounts {
        self.lock().injected
    }

    /// The wrapped device.
    pub fn inner(&self) -> &std::sync::Arc<dyn BlockDev> {
        &self.inner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decide whether this op fails; count it if so.
    fn check(&self, kind: OpKinds, range: Option<Range<u64>>) -> io::Result<()> {
        let us = self.delay_us.load(std::sync::atomic::Ordering::Relaxed);
        if us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
        let mut st = self.lock();
        let State {
            rules,
            pulled,
            rng,
            injected,
        } = &mut *st;
        let mut fail = *pulled;
        for rs in rules.iter_mut() {
            let r = &rs.rule;
            if !r.kinds.contains(kind) {
                continue;
            }
            if let Some(rr) = &r.range {
                match &range {
                    Some(op) if op.start < rr.end && rr.start < op.end.max(op.start + 1) => {}
                    _ => continue,
                }
            }
            if rs.seen < r.after_ops {
                rs.seen += 1;
                continue;
            }
            if r.probability >= 1.0 || rng.random::<f64>() < r.probability {
                fail = true;
            }
        }
        if !fail {
            return Ok(());
        }
        let counter = match kind {
            OpKinds::READ => &mut injected.reads,
            OpKinds::WRITE => &mut injected.writes,
            OpKinds::FLUSH => &mut injected.flushes,
            _ => &mut injected.trims,
        };
        *counter += 1;
        Err(io::Error::from_raw_os_error(
            self.errno.load(std::sync::atomic::Ordering::Relaxed),
        ))
    }
}

fn span(offset: u64, len: usize) -> Option<Range<u64>> {
    Some(offset..offset.saturating_add(len as u64))
}

impl BlockDev for FaultyDev {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.op(OpKinds::READ, span(offset, buf.len()), || {
            self.inner.read_at(buf, offset)
        })
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.op(OpKinds::WRITE, span(offset, buf.len()), || {
            self.inner.write_at(buf, offset)
        })
    }
    fn write_at_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.op(OpKinds::WRITE, span(offset, buf.len()), || {
            self.inner.write_at_fua(buf, offset)
        })
    }
    fn flush(&self) -> io::Result<()> {
        self.op(OpKinds::FLUSH, None, || self.inner.flush())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.op(
            OpKinds::TRIM,
            Some(offset..offset.saturating_add(len)),
            || self.inner.trim(offset, len),
        )
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn raw_target(&self) -> Option<RawTarget> {
        None
    }
}
