//! The simulation loops.
//!
//! Timed: an event loop over simulated nanoseconds. Requests arrive at their
//! trace timestamps (open loop) or whenever fewer than `queue_depth` are in
//! flight (closed loop). Each op the core emits starts once its dependencies
//! completed; the device model of its device says when it completes. A
//! request completes when its foreground ops have; background ops (fills,
//! cleaning) keep the devices busy without delaying their requester.
//!
//! Untimed (`--no-timing`): requests are submitted back to back and every op
//! is taken as done at once, which is all the cache's decisions need. Both
//! loops count the same ops (hits, fills, `hdd_ops`, `ssd_write_ops` ...):
//! timing changes response times only.

use crate::report::{Latency, SimReport};
use hdrhistogram::Histogram;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use tiercache_azor_policy::cleaning::CleaningScheduler;
use tiercache_azor_policy::{
    CacheConfig, ConfigError, Dev, Engine, IoKind, Op, OpId, Purpose, ReqId, Request, Source,
};
use tiercache_model::{DeviceModel, ModelOp, Profile};
use tiercache_trace::Record;

/// How requests are issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// At the trace's timestamps.
    Open,
    /// As fast as the devices allow, with this many requests in flight.
    Closed { queue_depth: u32 },
}

/// Everything one simulation run needs besides the trace.
#[derive(Clone, Debug)]
pub struct SimOptions {
    pub cache: CacheConfig,
    /// Run the timing model (otherwise cache behaviour only).
    pub timing: bool,
    pub replay: Replay,
    pub profile: Profile,
    /// Also replay the trace on the backing device alone, for `baseline` and `speedup`.
    pub baseline: bool,
}

impl SimOptions {
    /// Defaults: timing on, closed loop at queue depth 1, the paper-default profile.
    pub fn new(cache: CacheConfig) -> Self {
        SimOptions {
            cache,
            timing: true,
            replay: Replay::Closed { queue_depth: 1 },
            profile: Profile::default(),
            baseline: true,
        }
    }
}

/// What can stop a run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Trace(#[from] tiercache_trace::TraceError),
    #[error("device profile: {0}")]
    Profile(String),
}

/// Something the timed loop can drive: the cache engine, or the uncached backing device.
trait Driven {
    /// Time passes up to `vt` (virtual ns) before the next request arrives.
    fn advance(&mut self, vt: u64, out: &mut Vec<Op>);
    fn submit(&mut self, req: &Request, out: &mut Vec<Op>);
    fn complete(&mut self, op: &Op, out: &mut Vec<Op>);
    /// The background work a request grants once it is submitted.
    fn background(&mut self, out: &mut Vec<Op>);
}

/// The requests' virtual time for the cleaning scheduler: the trace's
/// timestamps (the first request is at 0), or [`UNTIMED_REQUEST_NS`] per
/// request for a trace without them. The same in the timed and the untimed
/// loop, so cleaning (and every counter) does not depend on the timing model.
#[derive(Default)]
struct VirtualClock {
    timed: bool,
    last: u64,
    index: u64,
}

/// Virtual time between two requests of a trace without timestamps: 100 µs.
pub const UNTIMED_REQUEST_NS: u64 = 100_000;

impl VirtualClock {
    fn at(&mut self, r: &Record) -> u64 {
        self.timed |= r.time_ns > 0;
        let t = if self.timed {
            r.time_ns
        } else {
            self.index * UNTIMED_REQUEST_NS
        };
        self.index += 1;
        self.last = self.last.max(t);
        self.last
    }
}

/// The engine with the cleaning scheduler both drivers share
/// (`tiercache_azor_policy::cleaning::CleaningScheduler`), in virtual time.
struct Cached<'a> {
    engine: &'a mut Engine,
    sched: CleaningScheduler,
}

impl<'a> Cached<'a> {
    fn new(engine: &'a mut Engine) -> Self {
        let sched = CleaningScheduler::new(
            engine.config().cleaning,
            engine.geometry().slots as u64,
            engine.dirty_target_lines() as u64,
        );
        Cached { engine, sched }
    }
}

impl Driven for Cached<'_> {
    fn advance(&mut self, vt: u64, out: &mut Vec<Op>) {
        while self.sched.next_tick_ns() <= vt {
            let t = self.sched.next_tick_ns();
            let plan = self.sched.tick(
                t,
                self.engine.dirty_lines() as u64,
                self.engine.dirty_target_lines() as u64,
            );
            if plan.lines > 0 {
                self.engine.clean_at_most(plan.lines, out);
            }
        }
    }
    fn submit(&mut self, req: &Request, out: &mut Vec<Op>) {
        self.engine.submit(req, out);
    }
    fn complete(&mut self, op: &Op, out: &mut Vec<Op>) {
        self.engine.complete(op, out);
    }
    fn background(&mut self, out: &mut Vec<Op>) {
        let n = self
            .sched
            .after_request(self.engine.stats().dirty_evictions);
        if n > 0 {
            self.engine.clean(n, false, out);
        }
    }
}

/// The backing device alone: one op per request.
struct Uncached {
    next: OpId,
}

impl Driven for Uncached {
    fn submit(&mut self, req: &Request, out: &mut Vec<Op>) {
        self.next += 1;
        out.push(Op {
            id: self.next,
            dev: Dev::Backing,
            kind: req.kind,
            offset: req.offset,
            len: req.len,
            req: req.id,
            buf_off: 0,
            src: if req.kind == IoKind::Write {
                Source::Request
            } else {
                Source::None
            },
            deps: [0, 0],
            foreground: true,
            purpose: match req.kind {
                IoKind::Read => Purpose::ReadMiss,
                IoKind::Write => Purpose::WriteBacking,
                IoKind::Trim => Purpose::Trim,
                IoKind::Flush => Purpose::Flush,
            },
            fua: req.fua,
        });
    }
    fn complete(&mut self, _op: &Op, _out: &mut Vec<Op>) {}
    fn background(&mut self, _out: &mut Vec<Op>) {}
    fn advance(&mut self, _vt: u64, _out: &mut Vec<Op>) {}
}

fn request(id: ReqId, r: &Record) -> Request {
    Request {
        id,
        kind: r.kind,
        offset: r.offset,
        len: r.len as u64,
        class: r.class.unwrap_or_default(),
        fua: false,
    }
}

/// Replay `records` through a cache configured by `opts`.
///
/// `progress` is called every 65,536 requests with the number processed so
/// far. The baseline replay (when asked for) needs the trace twice, so it
/// takes a second iterator from `reopen`.
pub fn run<I, F>(
    records: I,
    reopen: F,
    opts: &SimOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<SimReport, SimError>
where
    I: Iterator<Item = Result<Record, tiercache_trace::TraceError>>,
    F: FnOnce() -> Result<I, tiercache_trace::TraceError>,
{
    let mut engine = Engine::new(opts.cache.clone())?;
    // The timed loop moves no data: the engine's choices (and so every
    // counter) are then those of the untimed run.
    engine.set_model_only(true);
    if !opts.timing {
        engine.set_count_only(true);
        let mut out = Vec::with_capacity(64);
        let mut id = 0u64;
        let mut clock = VirtualClock::default();
        let mut cached = Cached::new(&mut engine);
        for r in records {
            let r = r?;
            id += 1;
            cached.advance(clock.at(&r), &mut out);
            cached.submit(&request(id, &r), &mut out);
            cached.background(&mut out);
            out.clear();
            if id & 0xffff == 0 {
                progress(id);
            }
        }
        return Ok(SimReport::from_engine(&engine, None, None));
    }
    let timed = {
        let mut cached = Cached::new(&mut engine);
        timed_loop(records, &mut cached, opts, progress)?
    };
    let baseline = if opts.baseline {
        let again = reopen()?;
        Some(timed_loop(
            again,
            &mut Uncached { next: 0 },
            opts,
            &mut |_| {},
        )?)
    } else {
        None
    };
    Ok(SimReport::from_engine(&engine, Some(timed), baseline))
}

/// Event queue entry: completion time, then op id for a deterministic order.
type Event = Reverse<(u64, OpId)>;

/// Items keyed by a monotonically increasing id, stored in a ring from the
/// oldest live id: O(1) without hashing, since ids complete roughly in order.
struct Ring<T> {
    base: u64,
    items: std::collections::VecDeque<Option<T>>,
    live: usize,
}

impl<T> Ring<T> {
    fn new() -> Self {
        Ring {
            base: 1,
            items: std::collections::VecDeque::new(),
            live: 0,
        }
    }
    fn insert(&mut self, id: u64, v: T) {
        if self.items.is_empty() {
            self.base = id;
        }
        debug_assert!(id >= self.base, "ids are monotonic");
        let i = (id - self.base) as usize;
        while self.items.len() <= i {
            self.items.push_back(None);
        }
        debug_assert!(self.items[i].is_none());
        self.items[i] = Some(v);
        self.live += 1;
    }
    fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let i = id.checked_sub(self.base)? as usize;
        self.items.get_mut(i)?.as_mut()
    }
    fn remove(&mut self, id: u64) -> Option<T> {
        let i = id.checked_sub(self.base)? as usize;
        let v = self.items.get_mut(i)?.take();
        if v.is_some() {
            self.live -= 1;
            while let Some(None) = self.items.front() {
                self.items.pop_front();
                self.base += 1;
            }
        }
        v
    }
    fn len(&self) -> usize {
        self.live
    }
    fn is_empty(&self) -> bool {
        self.live == 0
    }
}

/// An op the loop knows about: not yet started while `waiting > 0`.
struct Pending {
    op: Op,
    waiting: u32,
    /// Ops waiting for this one.
    waiters: Vec<OpId>,
}

struct Loop<'a> {
    ssd: Box<dyn DeviceModel>,
    hdd: Box<dyn DeviceModel>,
    heap: BinaryHeap<Event>,
    /// Ops emitted and not yet completed.
    ops: Ring<Pending>,
    /// Per request: arrival time and foreground ops left.
    reqs: Ring<(u64, u32)>,
    hist: &'a mut Histogram<u64>,
    sum_ns: u128,
    completed: u64,
    last_ns: u64,
}

impl Loop<'_> {
    fn register(&mut self, op: Op, now: u64) {
        let mut n = 0u32;
        for d in op.waits_for() {
            if let Some(p) = self.ops.get_mut(d) {
                p.waiters.push(op.id);
                n += 1;
            }
        }
        let id = op.id;
        self.ops.insert(
            id,
            Pending {
                op,
                waiting: n,
                waiters: Vec::new(),
            },
        );
        if n == 0 {
            self.start(id, now);
        }
    }

    fn start(&mut self, id: OpId, now: u64) {
        let op = &self.ops.get_mut(id).expect("started op is known").op;
        let m = ModelOp::new(op.kind, op.offset, op.len);
        let done = match op.dev {
            Dev::Cache => self.ssd.submit(now, &m),
            Dev::Backing => self.hdd.submit(now, &m),
        };
        self.heap.push(Reverse((done.max(now), id)));
    }

    /// Complete op `id` at `now`.
    fn finish(&mut self, id: OpId, now: u64, drv: &mut dyn Driven, out: &mut Vec<Op>) {
        let Pending { op, waiters, .. } = self.ops.remove(id).expect("completed op is known");
        self.last_ns = self.last_ns.max(now);
        drv.complete(&op, out);
        for o in out.drain(..) {
            self.register(o, now);
        }
        for w in waiters {
            let p = self.ops.get_mut(w).expect("waiter is known");
            p.waiting -= 1;
            if p.waiting == 0 {
                self.start(w, now);
            }
        }
        if op.foreground {
            let e = self
                .reqs
                .get_mut(op.req)
                .expect("request of a foreground op");
            e.1 -= 1;
            if e.1 == 0 {
                let (arrival, _) = self.reqs.remove(op.req).expect("request");
                self.record(now - arrival);
            }
        }
    }

    fn record(&mut self, ns: u64) {
        self.completed += 1;
        self.sum_ns += ns as u128;
        // Latencies are recorded in ns; the histogram auto-resizes.
        let _ = self.hist.record(ns.max(1));
    }
}

fn timed_loop<I>(
    records: I,
    drv: &mut dyn Driven,
    opts: &SimOptions,
    progress: &mut dyn FnMut(u64),
) -> Result<Latency, SimError>
where
    I: Iterator<Item = Result<Record, tiercache_trace::TraceError>>,
{
    let p = &opts.profile;
    let ssd = p
        .ssd_model()
        .map_err(|e| SimError::Profile(e.to_string()))?;
    let hdd = p
        .hdd_model()
        .map_err(|e| SimError::Profile(e.to_string()))?;
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let mut l = Loop {
        ssd: Box::new(ssd),
        hdd: Box::new(hdd),
        heap: BinaryHeap::new(),
        ops: Ring::new(),
        reqs: Ring::new(),
        hist: &mut hist,
        sum_ns: 0,
        completed: 0,
        last_ns: 0,
    };
    let mut records = records.peekable();
    let mut out = Vec::with_capacity(64);
    let mut now = 0u64;
    let mut id = 0u64;
    let mut first_arrival = None;
    let mut clock = VirtualClock::default();
    loop {
        // Next arrival time, if a request may be issued.
        let arrival = match opts.replay {
            Replay::Open => match records.peek() {
                Some(Ok(r)) => Some(r.time_ns.max(now)),
                Some(Err(_)) => Some(now),
                None => None,
            },
            Replay::Closed { queue_depth } => {
                if (l.reqs.len() as u32) < queue_depth.max(1) && records.peek().is_some() {
                    Some(now)
                } else {
                    None
                }
            }
        };
        let event = l.heap.peek().map(|Reverse((t, _))| *t);
        match (arrival, event) {
            (Some(a), e) if e.is_none_or(|t| a <= t) => {
                let r = records.next().expect("peeked")?;
                now = a;
                first_arrival.get_or_insert(now);
                id += 1;
                let req = request(id, &r);
                drv.advance(clock.at(&r), &mut out);
                let cleaning = out.len();
                drv.submit(&req, &mut out);
                let fg = out[cleaning..].iter().filter(|o| o.foreground).count() as u32;
                drv.background(&mut out);
                if fg == 0 {
                    l.record(0);
                } else {
                    l.reqs.insert(id, (now, fg));
                }
                for o in out.drain(..) {
                    l.register(o, now);
                }
                if id & 0xffff == 0 {
                    progress(id);
                }
            }
            (_, Some(t)) => {
                let Reverse((t2, op)) = l.heap.pop().expect("peeked");
                debug_assert_eq!(t, t2);
                now = t;
                l.finish(op, now, drv, &mut out);
            }
            (None, None) => break,
            (Some(_), None) => unreachable!("handled by the first arm"),
        }
    }
    debug_assert!(
        l.ops.is_empty() && l.reqs.is_empty(),
        "every op and request completed"
    );
    let start = first_arrival.unwrap_or(0);
    let elapsed = l.last_ns.saturating_sub(start).max(1);
    let (sum, n) = (l.sum_ns, l.completed);
    let hdd_busy = l.hdd.busy_ns();
    let ssd_busy = l.ssd.busy_ns();
    Ok(Latency {
        requests: n,
        mean_us: if n == 0 {
            0.0
        } else {
            sum as f64 / n as f64 / 1000.0
        },
        p50_us: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
        max_us: hist.max() as f64 / 1000.0,
        elapsed_s: elapsed as f64 / 1e9,
        hdd_utilization: (hdd_busy as f64 / elapsed as f64).min(1.0),
        ssd_utilization: (ssd_busy as f64 / elapsed as f64).min(1.0),
    })
}
