//! The one kill -9 crash harness of the live designs. A [`CrashDesign`] says
//! how to format a design and what to check of it; [`crash_rounds`] runs the
//! loop every design shares: start `tiercache serve`, check its stats, verify
//! every block against the client's ledger, run a random pipelined load and
//! kill -9 the server at a random point of it (after a random number of
//! acknowledged writes, requests still in flight); after the last kill a load
//! without a crash, then `tiercache detach` (and the backing file alone must
//! hold the newest data) or, for a design that refuses detach, SIGTERM.
//!
//! `TIERCACHE_CRASH_ROUNDS` overrides the rounds, `TIERCACHE_CRASH_SEED` the
//! seed, and `TIERCACHE_CRASH_KEEP=1` keeps the files for a post-mortem.
//! The last lines give the soak figures `scripts/soak.sh` collects: rounds,
//! blocks verified, and the restart-to-ready time distribution.

use super::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Range;

/// The default of [`CrashDesign::kill_writes`].
pub const KILL_WRITES: Range<u64> = 500..7500;
/// The default of [`CrashDesign::final_writes`].
pub const FINAL_WRITES: u64 = 2500;
/// The longest a round's load may take to reach its kill point.
const KILL_BOUND: Duration = Duration::from_secs(300);

/// A per-round check of the stats a (re)started server reports: a note for
/// the round's log line, or why the round fails.
pub type StartCheck<'a> = Box<dyn Fn(&mut CrashRun, &Value) -> Result<String, String> + 'a>;
/// A step with the client connected, after the restart's verification.
pub type ClientStep<'a> = Box<dyn Fn(&mut CrashRun, &mut NbdClient) -> Result<(), String> + 'a>;
/// A step of the run with no server argument (after a kill, after the final stop).
pub type RunStep<'a> = Box<dyn Fn(&mut CrashRun) -> Result<(), String> + 'a>;

/// One design under the crash harness. File names are relative to the test's
/// temporary directory.
pub struct CrashDesign<'a> {
    /// Checked 4 KiB blocks of the export.
    pub blocks: u64,
    /// The file that holds version 0 of every block before `format` (the
    /// backing device); after detach it alone must hold the newest data.
    pub backing: &'a str,
    /// When set, the backing file is created sparse with this many bytes
    /// instead, and version 0 of every block of the export (whatever its
    /// size: a design that adds capacity) is written through the server
    /// after `format`; `blocks` is then ignored.
    pub backing_bytes: Option<u64>,
    /// `tiercache format` in the given directory; returns what it printed.
    pub format: Box<dyn Fn(&Path) -> String + 'a>,
    /// What `serve --cache` names, round after round (cycled).
    pub serve: &'a [&'a str],
    /// End with `tiercache detach` and check the backing file; otherwise
    /// (a design that refuses detach) end with SIGTERM.
    pub detach: bool,
    /// The load of every round.
    pub shape: LoadShape,
    /// The kill -9 comes once this many writes of the round's load were
    /// acknowledged (uniform), with the load's requests still in flight.
    pub kill_writes: Range<u64>,
    /// Acknowledged writes of the final load, without a crash.
    pub final_writes: u64,
    /// Stats check after every start (round 0 is the fresh one).
    pub on_start: StartCheck<'a>,
    /// After the verification of every round, before its load.
    pub before_load: ClientStep<'a>,
    /// After each kill -9.
    pub after_kill: RunStep<'a>,
    /// Final stats check before the detach or SIGTERM: a note for the summary.
    pub before_stop: StartCheck<'a>,
    /// Final checks once the server stopped cleanly.
    pub after_stop: RunStep<'a>,
}

impl Default for CrashDesign<'_> {
    fn default() -> Self {
        CrashDesign {
            blocks: 4096,
            backing: "backing.img",
            backing_bytes: None,
            format: Box::new(|_| String::new()),
            serve: &["cache.img"],
            detach: true,
            shape: LoadShape::default(),
            kill_writes: KILL_WRITES,
            final_writes: FINAL_WRITES,
            on_start: Box::new(|_, _| Ok(String::new())),
            before_load: Box::new(|_, _| Ok(())),
            after_kill: Box::new(|_| Ok(())),
            before_stop: Box::new(|_, _| Ok(String::new())),
            after_stop: Box::new(|_| Ok(())),
        }
    }
}

/// The state of one crash test, as the checks see it.
pub struct CrashRun {
    pub label: String,
    pub seed: u64,
    pub rounds: u64,
    /// The current round (`rounds` is the last one, which ends cleanly).
    pub round: u64,
    pub dir: PathBuf,
    pub sock: PathBuf,
    pub log: PathBuf,
    /// What `serve --cache` names this round.
    pub serve: PathBuf,
    pub ledger: Ledger,
    pub rng: Rng,
    /// Counters the checks keep across rounds (printed at the end).
    pub tally: BTreeMap<&'static str, f64>,
}

impl CrashRun {
    /// Fail the test with the label, the seed and the tail of the server log.
    pub fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!(
            "[{}] seed {}: {msg}\n--- server log (tail) ---\n{}",
            self.label,
            self.seed,
            tail(&self.log)
        )
    }
    /// A file of the test directory, as a string for command arguments.
    pub fn file(&self, name: &str) -> String {
        file(&self.dir, name)
    }
    /// `tiercache <args…> --cache <serve>`.
    pub fn tiercache_on(&self, args: &[&str]) -> String {
        let cache = self.serve.to_str().expect("utf-8 path");
        tiercache(&[args, &["--cache", cache]].concat())
    }
    /// Add `n` to a tally.
    pub fn add(&mut self, key: &'static str, n: f64) {
        *self.tally.entry(key).or_default() += n;
    }
    /// Keep the largest `n` in a tally.
    pub fn max(&mut self, key: &'static str, n: f64) {
        let t = self.tally.entry(key).or_default();
        *t = t.max(n);
    }
    /// A tally (0 when never set).
    pub fn get(&self, key: &str) -> f64 {
        self.tally.get(key).copied().unwrap_or(0.0)
    }
    /// Start the server again, take its stats, verify every block and
    /// disconnect: the server (still running) and the stats it reported.
    pub fn restart_and_verify(&mut self, what: &str) -> (ServeProc, Value) {
        let srv = ServeProc::start(&self.serve, &self.sock, &self.log);
        let st = srv.stats();
        let mut c = self.connect();
        verify_all(&mut c, &mut self.ledger).unwrap_or_else(|e| self.fail(format!("{what}: {e}")));
        c.disconnect();
        (srv, st)
    }
    fn connect(&self) -> NbdClient {
        let c =
            NbdClient::connect(&self.sock).unwrap_or_else(|e| self.fail(format!("connect: {e}")));
        assert_eq!(
            c.size,
            self.ledger.blocks.len() as u64 * BLOCK as u64,
            "[{}] export size is the backing size",
            self.label
        );
        c
    }
    fn note_in_log(&self, line: &str) {
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .and_then(|mut f| writeln!(f, "{line}"));
    }
}

/// A file of `dir`, as a string for command arguments.
pub fn file(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().expect("utf-8 path").to_string()
}

/// `tiercache` with `args` split at white space, where every `*.img` name
/// (alone or in a comma-separated list) is a file of `dir`; returns what it printed.
pub fn tiercache_in(dir: &Path, args: &str) -> String {
    let args: Vec<String> = args
        .split_whitespace()
        .map(|w| {
            let in_dir = |n: &str| {
                if n.ends_with(".img") {
                    file(dir, n)
                } else {
                    n.to_string()
                }
            };
            w.split(',').map(in_dir).collect::<Vec<_>>().join(",")
        })
        .collect();
    tiercache(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Write version 0 of every block of the export served from `serve`, flush,
/// stop with SIGTERM; the number of 4 KiB blocks.
fn prefill(dir: &Path, serve: &str) -> u64 {
    let (sock, log) = (dir.join("nbd.sock"), dir.join("prefill.log"));
    let mut srv = ServeProc::start(&dir.join(serve), &sock, &log);
    let mut c = NbdClient::connect(&sock).expect("connect to prefill");
    let blocks = c.size / BLOCK as u64;
    for first in (0..blocks).step_by(16) {
        let data: Vec<u8> = (first..(first + 16).min(blocks))
            .flat_map(|b| make_block(b, 0))
            .collect();
        c.write(first * BLOCK as u64, &data, false)
            .expect("prefill write")
            .expect("prefill write status");
    }
    c.flush()
        .expect("prefill flush")
        .expect("prefill flush status");
    c.disconnect();
    let _ = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status();
    assert!(srv.wait_exit().success(), "prefill server: {}", tail(&log));
    blocks
}

/// Run `rounds` kill -9 rounds of `design` (each: start, stats check, verify,
/// load, kill -9), then a final round that ends cleanly; panics with the
/// seed on any violation. The environment overrides rounds and seed.
pub fn crash_rounds(design: CrashDesign, label: &str, rounds: u64, seed: u64) {
    let rounds = env_u64("TIERCACHE_CRASH_ROUNDS").unwrap_or(rounds);
    let seed = env_u64("TIERCACHE_CRASH_SEED").unwrap_or(seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_path_buf();
    let _keep = if std::env::var_os("TIERCACHE_CRASH_KEEP").is_some() {
        eprintln!("[{label}] files kept in {}", tmp.keep().display());
        None
    } else {
        Some(tmp)
    };
    let blocks = match design.backing_bytes {
        None => {
            init_backing(&dir.join(design.backing), design.blocks);
            design.blocks
        }
        Some(n) => {
            let f = std::fs::File::create(dir.join(design.backing)).expect("backing");
            f.set_len(n).expect("backing size");
            0
        }
    };
    let formatted = (design.format)(&dir);
    eprintln!(
        "[{label}] seed {seed}, {rounds} rounds: {}",
        formatted.trim()
    );
    let blocks = match design.backing_bytes {
        None => blocks,
        Some(_) => prefill(&dir, design.serve[0]),
    };
    let mut run = CrashRun {
        label: label.to_string(),
        seed,
        rounds,
        round: 0,
        sock: dir.join("nbd.sock"),
        log: dir.join("serve.log"),
        serve: dir.join(design.serve[0]),
        dir,
        ledger: Ledger::new(blocks),
        rng: Rng(seed),
        tally: BTreeMap::new(),
    };
    let shape = design.shape;
    let mut restart_ms: Vec<f64> = Vec::new();
    let mut blocks_verified = 0u64;
    let mut srv = loop {
        let round = run.round;
        run.serve = run
            .dir
            .join(design.serve[round as usize % design.serve.len()]);
        let t0 = Instant::now();
        let mut srv = ServeProc::start(&run.serve, &run.sock, &run.log);
        let st = srv.stats();
        if round > 0 {
            restart_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        let note = (design.on_start)(&mut run, &st)
            .unwrap_or_else(|e| run.fail(format!("round {round}: {e}")));
        let mut c = run.connect();
        let newer = verify_all(&mut c, &mut run.ledger)
            .unwrap_or_else(|e| run.fail(format!("round {round} ({note}): after restart: {e}")));
        run.add("unflushed blocks survived", newer as f64);
        blocks_verified += design.blocks;
        eprintln!("[{label}] round {round}: {note}; {newer} blocks newer than their last flush");
        (design.before_load)(&mut run, &mut c)
            .unwrap_or_else(|e| run.fail(format!("round {round}: {e}")));
        if round == rounds {
            // The last round: a load without a crash.
            let until = Until::WritesAcked(run.ledger.writes_acked + design.final_writes);
            match run_load(&mut c, &mut run.ledger, &mut run.rng, shape, until) {
                Ok(LoadEnd::Done) => {}
                Ok(LoadEnd::Broken(e)) => run.fail(format!(
                    "final load: connection broke: {e}; server state: {}",
                    srv.debug()
                )),
                Err(e) => run.fail(format!("final load: {e}")),
            }
            c.disconnect();
            break srv;
        }
        // Load, and kill -9 at a random point of it: once a random number
        // of its writes were acknowledged.
        let kill_after = design.kill_writes.start
            + run
                .rng
                .below(design.kill_writes.end - design.kill_writes.start);
        let kill_at = run.ledger.writes_acked + kill_after;
        let acked = std::sync::Arc::clone(&run.ledger.writes_acked_shared);
        let pid = srv.child.id();
        let killer = std::thread::spawn(move || {
            let reached = poll_for(KILL_BOUND, || {
                (acked.load(std::sync::atomic::Ordering::Relaxed) >= kill_at).then_some(())
            });
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            reached.is_some()
        });
        // The load's bound is far beyond the kill: only a hung load reaches it.
        let until = Instant::now() + KILL_BOUND + Duration::from_secs(30);
        match run_load(&mut c, &mut run.ledger, &mut run.rng, shape, until) {
            Ok(LoadEnd::Broken(_)) => {}
            Ok(LoadEnd::Done) => run.fail("load ended before the kill"),
            Err(e) => run.fail(format!("round {round}: during load: {e}")),
        }
        if !killer.join().expect("killer thread") {
            run.fail(format!(
                "round {round}: {kill_after} writes were not acknowledged within {} s",
                KILL_BOUND.as_secs()
            ));
        }
        srv.kill9();
        run.note_in_log(&format!(
            "=== killed after {kill_after} acknowledged writes (round {round}) ==="
        ));
        (design.after_kill)(&mut run)
            .unwrap_or_else(|e| run.fail(format!("round {round}: after the kill: {e}")));
        run.round += 1;
    };
    let st = srv.stats();
    let note = (design.before_stop)(&mut run, &st)
        .unwrap_or_else(|e| run.fail(format!("before the final stop: {e}")));
    let how = if design.detach {
        run.tiercache_on(&["detach"]);
        "detach"
    } else {
        let _ = Command::new("kill")
            .args(["-TERM", &srv.child.id().to_string()])
            .status();
        "SIGTERM"
    };
    let status = srv.wait_exit();
    if !status.success() {
        run.fail(format!("server after {how} exited with {status}"));
    }
    if design.detach {
        check_file_latest(&run.dir.join(design.backing), &run.ledger)
            .unwrap_or_else(|e| run.fail(format!("after detach: {e}")));
    }
    (design.after_stop)(&mut run).unwrap_or_else(|e| run.fail(format!("after {how}: {e}")));
    let l = &run.ledger;
    eprintln!(
        "[{label}] soak: {rounds} kill -9 rounds, {blocks_verified} blocks verified after restarts \
         (plus the backing file after {how}), 0 failures; restart to ready (spawn, recovery, \
         stats answered) ms: {}",
        distribution(&mut restart_ms)
    );
    eprintln!(
        "[{label}] done: {} writes acked, {} flushes, {} reads checked live ({} overlapped a write \
         and mixed two versions) over {rounds} kills; {:?}; {note}",
        l.writes_acked, l.flushes_done, l.reads_checked, l.reads_mixed, run.tally
    );
}

/// `p50 X p90 Y p99 Z max W` of `v` (sorted in place), or `none`.
fn distribution(v: &mut [f64]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!(
        "p50 {:.0} p90 {:.0} p99 {:.0} max {:.0} (n {})",
        q(0.5),
        q(0.9),
        q(0.99),
        v[v.len() - 1],
        v.len()
    )
}
