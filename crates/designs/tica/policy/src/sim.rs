//! Timed replay of a trace through a three-level architecture.
//!
//! Requests are split into `page_bytes` pages; each page's ops come from the
//! policy. Foreground ops are submitted to the device models stage by stage
//! (a stage starts when the previous one completed) and the request
//! completes with its last foreground op; background ops (WED copies,
//! admissions, TRIMs of victims) are submitted at the request's arrival and
//! only occupy the devices. After each request the flusher
//! ([`FlushScheduler`], shared with the live cache) starts DRAM-to-RO-SSD
//! copies at the request's completion time, and idle ticks of the trace's
//! virtual time start more; a flush completes (and frees its DRAM slot) when
//! the RO-SSD model says so, or, with [`SimConfig::sync_flushes`], before
//! the next request (as the live cache completes them).
//!
//! Replay is open (arrivals at trace timestamps) or closed at queue depth 1
//! (each request arrives when the previous one completed).

mod report;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;
use tiercache_block::IoKind;
use tiercache_model::{DeviceModel, DramModel, HddModel, ModelOp, SsdModel};
use tiercache_trace::Record;

use crate::baselines::srac::Srac;
use crate::baselines::ucache::UCache;
use crate::flusher::{FlushConfig, FlushScheduler};
use crate::profile::LevelsProfile;
use crate::tica::{Tica, TicaConfig};
use crate::{Architecture, Dev, LevelStats, Op, OpKind, Policy};
use report::report;

/// Which architecture to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Tica(Policy),
    UCache,
    Srac,
}

impl Arch {
    /// Short name: tica-ef, tica-wed, tica-a, ucache, srac.
    pub fn name(&self) -> &'static str {
        match self {
            Arch::Tica(Policy::Ef) => "tica-ef",
            Arch::Tica(Policy::Wed) => "tica-wed",
            Arch::Tica(Policy::Adaptive) => "tica-a",
            Arch::UCache => "ucache",
            Arch::Srac => "srac",
        }
    }
}

/// How requests arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// At the trace's timestamps.
    Open,
    /// Each request when the previous one completed.
    Closed,
}

/// Configuration of one run.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub arch: Arch,
    /// Page (cache line) size in bytes, a power of two >= 512.
    pub page_bytes: u32,
    /// DRAM size in pages (>= 2).
    pub dram_pages: u64,
    /// Size of each SSD in pages (>= 1).
    pub ssd_pages: u64,
    pub profile: LevelsProfile,
    pub replay: Replay,
    /// The DRAM-to-RO-SSD flusher (flushes in flight after each request;
    /// idle ticks in virtual time).
    pub flush: FlushConfig,
    /// Flushes complete before the next request arrives (the live cache's
    /// rule: it copies a page under its lock); no idle ticks. Decisions are
    /// then a function of the request sequence alone (`sim --no-timing`).
    pub sync_flushes: bool,
    /// Mission time for the reliability model, hours.
    pub mission_hours: f64,
    /// Check after every page access that each dirty page is on two
    /// devices; a violation stops the run with an error (slow: tests).
    pub check_dirty_copies: bool,
}

impl SimConfig {
    /// Defaults: 4 KiB pages, closed replay, 4 flushes in flight, one year.
    pub fn new(arch: Arch, dram_pages: u64, ssd_pages: u64) -> SimConfig {
        SimConfig {
            arch,
            page_bytes: 4096,
            dram_pages,
            ssd_pages,
            profile: LevelsProfile::default(),
            replay: Replay::Closed,
            flush: FlushConfig::default(),
            sync_flushes: false,
            mission_hours: 8766.0,
            check_dirty_copies: false,
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Trace(#[from] tiercache_trace::TraceError),
    #[error("dirty page {page} is only on {devices:?} after request {request}")]
    SinglePointOfFailure {
        page: u64,
        devices: Vec<Dev>,
        request: u64,
    },
}

/// Results of a run. Hit ratios are shares of read pages.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LevelsReport {
    pub mode: String,
    pub page_bytes: u32,
    pub dram_bytes: u64,
    /// Size of each SSD.
    pub ssd_bytes: u64,
    pub requests: u64,
    pub read_pages: u64,
    pub write_pages: u64,
    pub hit_ratio: f64,
    pub dram_hit_ratio: f64,
    pub ro_ssd_hit_ratio: f64,
    pub wo_ssd_hit_ratio: f64,
    /// Page writes to all SSDs (both mirrors in the baselines).
    pub ssd_writes: u64,
    pub ro_ssd_writes: u64,
    /// Page writes to the WO-SSD (TICA) or to both WO-SSDs (baselines).
    pub wo_ssd_writes: u64,
    /// Pages read from / written to the HDD.
    pub hdd_reads: u64,
    pub hdd_writes: u64,
    pub writebacks: u64,
    pub promotions: u64,
    /// DRAM pages the flusher copied to the RO-SSD during the run (the
    /// live cache's `flusher_pages`).
    pub flusher_pages: u64,
    /// Dirty DRAM pages copied to the RO-SSD after the last request (the
    /// final drain; included in `ro_ssd_writes`, not in `flusher_pages`).
    pub drained_pages: u64,
    /// Share of page accesses made in WED mode (TICA).
    pub wed_share: f64,
    pub mean_response_us: f64,
    pub p99_response_us: f64,
    /// Simulated time from the first arrival to the last completion.
    pub elapsed_s: f64,
    pub energy_joules: f64,
    pub cost_usd: f64,
    /// Probability of losing dirty data within `mission_hours` (eqs. 3-5).
    pub unreliability: f64,
    pub mission_hours: f64,
    /// Eq. 4's alpha: share of dirty residency whose second copy is on the
    /// RO-SSD (TICA; 1 for the mirrored baselines, whose pair is symmetric).
    pub alpha: f64,
    /// Years until the RO-SSD / WO-SSD wear out at this write rate (null:
    /// not written, or not present).
    pub ro_ssd_lifetime_years: Option<f64>,
    pub wo_ssd_lifetime_years: Option<f64>,
    pub stats: LevelStats,
}

struct Devices {
    dram: DramModel,
    ro: SsdModel,
    wo: SsdModel,
    wo2: SsdModel,
    hdd: HddModel,
}

impl Devices {
    fn submit(&mut self, dev: Dev, now: u64, op: &ModelOp) -> u64 {
        match dev {
            Dev::Dram => self.dram.submit(now, op),
            Dev::RoSsd => self.ro.submit(now, op),
            Dev::WoSsd => self.wo.submit(now, op),
            Dev::WoSsdMirror => self.wo2.submit(now, op),
            Dev::Hdd => self.hdd.submit(now, op),
        }
    }
}

fn model_op(op: &Op, page_bytes: u64) -> ModelOp {
    let kind = match op.kind {
        OpKind::Read => IoKind::Read,
        OpKind::Write => IoKind::Write,
        OpKind::Trim | OpKind::WaitFlush => IoKind::Trim,
    };
    ModelOp::new(kind, op.page.saturating_mul(page_bytes), page_bytes)
}

/// Replay `records` through `cfg.arch`.
pub fn run<I>(records: I, cfg: &SimConfig) -> Result<LevelsReport, SimError>
where
    I: IntoIterator<Item = tiercache_trace::Result<Record>>,
{
    let (dram_pages, ssd_pages) = check_config(cfg)?;
    let arch: Box<dyn Architecture> = match cfg.arch {
        Arch::Tica(p) => Box::new(Tica::new(TicaConfig::new(dram_pages, ssd_pages, p))),
        Arch::UCache => Box::new(UCache::new(dram_pages, ssd_pages)),
        Arch::Srac => Box::new(Srac::new(dram_pages, ssd_pages)),
    };
    let mut r = Replayer {
        cfg,
        arch,
        dev: build_devices(&cfg.profile)?,
        pb: u64::from(cfg.page_bytes),
        ops: Vec::new(),
        flush_ops: Vec::new(),
        stage_ops: Vec::new(),
        flushes: BinaryHeap::new(),
        flush_at: FxHashMap::default(),
        flusher: FlushScheduler::new(cfg.flush),
        flusher_pages: 0,
        drained_pages: 0,
        resp_us: Vec::new(),
        clock: 0,
        first: None,
        last_done: 0,
        requests: 0,
    };
    for rec in records {
        r.request(&rec?)?;
    }
    let elapsed_ns = r.last_done.saturating_sub(r.first.unwrap_or(0)).max(1);
    r.drain_flusher();
    let mut rep = report(cfg, &*r.arch, &r.dev, r.requests, r.resp_us, elapsed_ns);
    rep.flusher_pages = r.flusher_pages;
    rep.drained_pages = r.drained_pages;
    Ok(rep)
}

/// Reject page, DRAM and SSD sizes and profiles the models cannot run, before
/// anything is built; returns the DRAM and SSD sizes in pages.
fn check_config(cfg: &SimConfig) -> Result<(usize, usize), SimError> {
    if !cfg.page_bytes.is_power_of_two() || cfg.page_bytes < 512 {
        return Err(SimError::Config(format!(
            "page size {} B is not allowed (a power of two of at least 512 B)",
            cfg.page_bytes
        )));
    }
    if cfg.dram_pages < 2 || cfg.ssd_pages < 1 {
        return Err(SimError::Config(format!(
            "DRAM of {} pages and SSDs of {} pages are too small (at least 2 and 1 pages of {} B)",
            cfg.dram_pages, cfg.ssd_pages, cfg.page_bytes
        )));
    }
    cfg.profile.validate().map_err(SimError::Config)?;
    let dram_pages =
        usize::try_from(cfg.dram_pages).map_err(|_| SimError::Config("DRAM too large".into()))?;
    let ssd_pages =
        usize::try_from(cfg.ssd_pages).map_err(|_| SimError::Config("SSD too large".into()))?;
    Ok((dram_pages, ssd_pages))
}

/// Build the device models of every level from the profile (both WO-SSD
/// mirrors are built; TICA uses one).
fn build_devices(p: &LevelsProfile) -> Result<Devices, SimError> {
    let cfgerr = |e: tiercache_model::ProfileError| SimError::Config(e.to_string());
    Ok(Devices {
        dram: DramModel::new(p.dram.clone()).map_err(cfgerr)?,
        ro: SsdModel::new(p.ro_ssd.clone()).map_err(cfgerr)?,
        wo: SsdModel::new(p.wo_ssd.clone()).map_err(cfgerr)?,
        wo2: SsdModel::new(p.wo_ssd.clone()).map_err(cfgerr)?,
        hdd: HddModel::new(p.hdd.clone()).map_err(cfgerr)?,
    })
}

/// State of one replay: the architecture, the device models, the flusher and
/// the clock, advanced one request at a time.
struct Replayer<'a> {
    cfg: &'a SimConfig,
    arch: Box<dyn Architecture>,
    dev: Devices,
    /// Page size in bytes.
    pb: u64,
    /// Ops of the current request (reused buffer).
    ops: Vec<Op>,
    /// Ops of the flushes being started (reused buffer).
    flush_ops: Vec<Op>,
    /// Foreground ops of the current stage (reused buffer).
    stage_ops: Vec<Op>,
    /// Flush completions: (time, page, generation).
    flushes: BinaryHeap<Reverse<(u64, u64, u64)>>,
    /// Completion time of the latest flush of each page in flight.
    flush_at: FxHashMap<u64, u64>,
    flusher: FlushScheduler,
    flusher_pages: u64,
    drained_pages: u64,
    resp_us: Vec<f64>,
    /// Closed loop: next arrival.
    clock: u64,
    first: Option<u64>,
    last_done: u64,
    requests: u64,
}

impl Replayer<'_> {
    /// Replay one request: its page ops, foreground stages, background ops
    /// and the flushes it lets start; records its response time.
    fn request(&mut self, rec: &Record) -> Result<(), SimError> {
        let arrival = match self.cfg.replay {
            Replay::Open => rec.time_ns.max(self.first.unwrap_or(0)),
            Replay::Closed => self.clock,
        };
        self.first.get_or_insert(arrival);
        self.complete_flushes(arrival);
        self.ticks(arrival);
        self.page_ops(rec)?;
        let done = self.foreground(arrival);
        self.background(arrival);
        self.start_flushes(done);
        if self.cfg.check_dirty_copies {
            check(&*self.arch, self.requests)?;
        }
        self.resp_us.push((done - arrival) as f64 / 1000.0);
        self.last_done = self.last_done.max(done);
        self.clock = done;
        self.requests += 1;
        Ok(())
    }

    /// Flushes that completed by `now` free their DRAM slots.
    fn complete_flushes(&mut self, now: u64) {
        while let Some(Reverse((t, pg, gen))) = self.flushes.peek().copied() {
            if t > now {
                break;
            }
            self.flushes.pop();
            if self.flush_at.get(&pg) == Some(&t) {
                self.flush_at.remove(&pg);
            }
            self.arch.flush_done(pg, gen);
        }
    }

    /// Ask the policy for the ops of each page of `rec` (into `self.ops`),
    /// checking dirty copies after every page when configured.
    fn page_ops(&mut self, rec: &Record) -> Result<(), SimError> {
        self.ops.clear();
        let blocks = rec.blocks(self.cfg.page_bytes);
        match rec.kind {
            IoKind::Read | IoKind::Write => {
                for pg in blocks {
                    self.arch
                        .access(pg, rec.kind == IoKind::Write, &mut self.ops);
                    if self.cfg.check_dirty_copies {
                        check(&*self.arch, self.requests)?;
                    }
                }
            }
            IoKind::Trim => {
                for pg in blocks {
                    self.arch.trim(pg, &mut self.ops);
                }
            }
            IoKind::Flush => {}
        }
        Ok(())
    }

    /// Submit the foreground ops stage by stage (each starts when the
    /// previous one completed); returns when the request completes.
    fn foreground(&mut self, arrival: u64) -> u64 {
        let mut done = arrival;
        let mut stage_start = arrival;
        let max_stage = self
            .ops
            .iter()
            .filter(|o| o.fg)
            .map(|o| o.stage)
            .max()
            .unwrap_or(0);
        for s in 0..=max_stage {
            let end = self.stage(s, stage_start);
            stage_start = end;
            done = done.max(end);
        }
        done
    }

    /// Submit the foreground ops of stage `s` at `stage_start`, waiting for
    /// flushes they depend on; returns when the stage completes.
    fn stage(&mut self, s: u8, stage_start: u64) -> u64 {
        let pb = self.pb;
        let mut end = stage_start;
        self.stage_ops.clear();
        for o in self.ops.iter().filter(|o| o.fg && o.stage == s) {
            if o.kind == OpKind::WaitFlush {
                let t = self.flush_at.remove(&o.page).unwrap_or(stage_start);
                end = end.max(t);
            } else {
                self.stage_ops.push(*o);
            }
        }
        // Contiguous pages of one request go to a device as one op.
        let stage_ops = &mut self.stage_ops;
        stage_ops.sort_by_key(|o| (o.dev, o.kind as u8, o.page));
        let mut i = 0;
        while i < stage_ops.len() {
            let o = stage_ops[i];
            let mut n = 1;
            while i + n < stage_ops.len()
                && matches!(o.kind, OpKind::Read | OpKind::Write)
                && stage_ops[i + n].dev == o.dev
                && stage_ops[i + n].kind == o.kind
                && stage_ops[i + n].page == o.page + n as u64
            {
                n += 1;
            }
            let mut m = model_op(&o, pb);
            m.len = pb * n as u64;
            end = end.max(self.dev.submit(o.dev, stage_start, &m));
            i += n;
        }
        end
    }

    /// Background ops occupy the devices from the request's arrival but do
    /// not delay its completion.
    fn background(&mut self, arrival: u64) {
        for o in self.ops.iter().filter(|o| !o.fg) {
            let t = self.dev.submit(o.dev, arrival, &model_op(o, self.pb));
            self.last_done = self.last_done.max(t);
        }
    }

    /// The flusher's ticks due by `now` (virtual time); none with
    /// `sync_flushes`.
    fn ticks(&mut self, now: u64) {
        if self.cfg.sync_flushes {
            return;
        }
        while self.flusher.next_tick_ns() <= now {
            let t = self.flusher.next_tick_ns();
            self.complete_flushes(t);
            let n = self.flusher.tick(t);
            if n > 0 {
                self.flush_ops.clear();
                let in_flight = self.arch.flushes_in_flight();
                let started = self.arch.start_flushes(in_flight + n, &mut self.flush_ops);
                self.submit_flushes(started, t);
            }
        }
    }

    /// Start the DRAM-to-RO-SSD flushes the scheduler allows after the
    /// request completed at `done`.
    fn start_flushes(&mut self, done: u64) {
        self.flush_ops.clear();
        let started = self
            .flusher
            .after_request(&mut *self.arch, &mut self.flush_ops);
        self.submit_flushes(started, done);
    }

    /// Submit the ops of `started` flushes at `at`, recording when each
    /// completes (or completing each at once with `sync_flushes`).
    fn submit_flushes(&mut self, started: Vec<(u64, u64)>, at: u64) {
        self.flusher_pages += started.len() as u64;
        for (pg, gen) in started {
            let mut t = at;
            for o in self.flush_ops.iter().filter(|o| o.page == pg) {
                t = self.dev.submit(o.dev, t, &model_op(o, self.pb));
            }
            self.last_done = self.last_done.max(t);
            if self.cfg.sync_flushes {
                self.arch.flush_done(pg, gen);
            } else {
                self.flush_at.insert(pg, t);
                self.flushes.push(Reverse((t, pg, gen)));
            }
        }
    }

    /// Drain the flusher: in-flight flushes complete, pending dirty pages are
    /// copied to the RO-SSD (counted as writes, after the measured interval).
    fn drain_flusher(&mut self) {
        while let Some(Reverse((_, pg, gen))) = self.flushes.pop() {
            self.arch.flush_done(pg, gen);
        }
        loop {
            self.flush_ops.clear();
            let started = self.arch.start_flushes(usize::MAX, &mut self.flush_ops);
            if started.is_empty() {
                break;
            }
            for o in &self.flush_ops {
                self.dev
                    .submit(o.dev, self.last_done, &model_op(o, self.pb));
            }
            self.drained_pages += started.len() as u64;
            for (pg, gen) in started {
                self.arch.flush_done(pg, gen);
            }
        }
    }
}

/// Fail the run if a dirty page is not on two distinct devices (the design's
/// no-single-point-of-failure invariant).
fn check(arch: &dyn Architecture, request: u64) -> Result<(), SimError> {
    for (page, devices) in arch.dirty_copies() {
        let mut d = devices.clone();
        d.sort();
        d.dedup();
        if d.len() < 2 {
            return Err(SimError::SinglePointOfFailure {
                page,
                devices,
                request,
            });
        }
    }
    Ok(())
}
