//! The request recorder (`serve --record FILE`, `tiercache record`): the
//! requests a design's policy takes, written as a native trace
//! ([`tiercache_trace::native`]), so that `tiercache sim --trace FILE --like
//! CACHE` and `tiercache mrc --trace FILE` run on the served workload.
//!
//! - **What**: one record per request where the design's policy takes it,
//!   in the order it takes them, with the class the design gave it (a
//!   design records there itself, [`crate::Design::attach_recorder`]; a
//!   design that cannot is refused recording). Time is ns since the
//!   recording started.
//! - **Bounded, with rotation**: FILE grows to at most `max_bytes`; then
//!   FILE.{keep-1} becomes FILE.{keep} (the old FILE.{keep} is deleted), ...,
//!   FILE becomes FILE.1, and a new FILE starts. The recording takes at most
//!   `(keep + 1) x max_bytes` of disk; each file is a whole native trace,
//!   its times continuing the previous file's. Every reader of traces reads
//!   FILE together with its rotated files, oldest first, as one trace
//!   ([`tiercache_trace::rotated_set`]); FILE.n alone reads that file only.
//! - **Memory**: the open file's write buffer ([`BUFFER_BYTES`], 65,536
//!   requests), whatever the request rate or the recording's length; a
//!   request adds 16 bytes to it (32 after more than 4.29 s without a
//!   request) and allocates nothing. The buffer is written to the file when
//!   full (one write of 1 MiB, on the request path, every 65,536 requests);
//!   a rotated file is synced on a thread of its own.
//! - **Failure**: a file that cannot be written stops the recording (the
//!   error is in `stats` under `recording`); requests are never failed by it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use tiercache_block::{Class, IoKind};
use tiercache_trace::native::{NativeWriter, MAGIC, RECORD_LEN};
use tiercache_trace::Record;

/// `--record-max` when not given.
pub const DEFAULT_MAX: &str = "1GiB";
/// `--record-keep` when not given: FILE and FILE.1.
pub const DEFAULT_KEEP: u32 = 1;
/// Smallest `--record-max`.
pub const MIN_MAX_BYTES: u64 = 4096;
/// The recorder's memory: the native writer's buffer.
pub const BUFFER_BYTES: u64 = 1 << 20;

/// Where and how much to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSpec {
    /// FILE: the newest requests.
    pub path: PathBuf,
    /// Largest size of one file, in bytes.
    pub max_bytes: u64,
    /// Older files kept beside FILE (FILE.1 ... FILE.keep).
    pub keep: u32,
}

impl RecordSpec {
    /// Check that the recording can start (before any device is opened):
    /// FILE's directory exists, FILE is absent or a native trace (an earlier
    /// recording, which is replaced), `max_bytes` is at least [`MIN_MAX_BYTES`].
    pub fn check(&self) -> Result<()> {
        let p = &self.path;
        if self.max_bytes < MIN_MAX_BYTES {
            bail!(
                "--record-max {}: give at least {MIN_MAX_BYTES} bytes (4KiB)",
                self.max_bytes
            );
        }
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                bail!(
                    "recording to {}: directory {} does not exist",
                    p.display(),
                    dir.display()
                );
            }
        }
        if p.exists() && !replaceable(p) {
            bail!(
                "recording to {}: a file that is not a tiercache trace is there; refusing to replace it (remove it or name another file)",
                p.display()
            );
        }
        Ok(())
    }

    /// FILE.n (FILE itself for 0): the names a reader of the trace
    /// ([`tiercache_trace::open`]) reads as one recording.
    pub fn file(&self, n: u32) -> PathBuf {
        tiercache_trace::rotated_file(&self.path, n)
    }
}

/// An empty file, or a native trace (an earlier recording).
fn replaceable(p: &Path) -> bool {
    use std::io::Read;
    let Ok(meta) = std::fs::metadata(p) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    if meta.len() == 0 {
        return true;
    }
    let mut magic = [0u8; 8];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == MAGIC
}

/// The recording in progress.
struct Sink {
    spec: RecordSpec,
    out: NativeWriter,
    start: Instant,
    requests: u64,
    rotations: u64,
    /// Rotated files being flushed and synced.
    closing: Vec<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct State {
    sink: Option<Sink>,
    /// Why the last recording stopped by itself.
    error: Option<String>,
}

/// The server's recorder: off until [`Recorder::start`].
#[derive(Default)]
pub struct Recorder {
    on: AtomicBool,
    state: Mutex<State>,
}

impl Recorder {
    /// Whether a recording is running.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Record one request (a no-op when no recording runs). Called by the
    /// design where its policy takes the request, in that order.
    #[inline]
    pub fn record(&self, kind: IoKind, offset: u64, len: u64, class: Option<Class>) {
        if self.on.load(Ordering::Relaxed) {
            self.record_slow(kind, offset, len, class);
        }
    }

    #[cold]
    fn record_slow(&self, kind: IoKind, offset: u64, len: u64, class: Option<Class>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = st.sink.as_mut() else {
            return;
        };
        let time_ns = s.start.elapsed().as_nanos() as u64;
        // NBD requests are below 4 GiB; a longer one would be split.
        let (mut off, mut left) = (offset, len);
        let mut failed = None;
        loop {
            let n = left.min(u64::from(u32::MAX)) as u32;
            let r = Record {
                time_ns,
                offset: off,
                len: n,
                kind,
                class,
            };
            if let Err(e) = s.put(&r) {
                failed = Some(e);
                break;
            }
            off += u64::from(n);
            left -= u64::from(n);
            if left == 0 {
                break;
            }
        }
        s.requests += 1;
        if let Some(e) = failed {
            let msg = format!("recording to {} stopped: {e:#}", s.spec.path.display());
            tracing::warn!("{msg}");
            eprintln!("tiercache: warning: {msg}");
            self.on.store(false, Ordering::Relaxed);
            st.sink = None;
            st.error = Some(msg);
        }
    }

    /// Start recording to `spec.path`; refused while a recording runs.
    pub fn start(&self, spec: RecordSpec) -> Result<Value> {
        spec.check()?;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = &st.sink {
            bail!(
                "already recording to {} (stop it first)",
                s.spec.path.display()
            );
        }
        // Rotated files of an earlier recording to the same FILE would read
        // as part of this one.
        for n in 1.. {
            let f = spec.file(n);
            if !(f.exists() && replaceable(&f)) {
                break;
            }
            std::fs::remove_file(&f).with_context(|| format!("removing {}", f.display()))?;
        }
        let out = NativeWriter::create(&spec.path)
            .with_context(|| format!("recording to {}", spec.path.display()))?;
        st.sink = Some(Sink {
            spec,
            out,
            start: Instant::now(),
            requests: 0,
            rotations: 0,
            closing: Vec::new(),
        });
        st.error = None;
        self.on.store(true, Ordering::Relaxed);
        let v = status(&st);
        Ok(v)
    }

    /// Stop recording: the files are complete and synced on return.
    pub fn stop(&self) -> Result<Value> {
        let sink = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            self.on.store(false, Ordering::Relaxed);
            st.sink.take()
        };
        let Some(s) = sink else {
            bail!("no recording is running");
        };
        let mut v = s.json();
        for h in s.closing {
            let _ = h.join();
        }
        let path = s.spec.path.clone();
        s.out
            .finish()
            .with_context(|| format!("finishing {}", path.display()))?;
        v["recording"] = json!(false);
        Ok(v)
    }

    /// `stats`' `recording`: the recording running (or why the last one
    /// stopped by itself).
    pub fn status(&self) -> Value {
        status(&self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The control command `{"cmd":"record","action":"start","path":FILE,
    /// "max_bytes":N,"keep":K}`, `{"action":"stop"}` or `{"action":"status"}`.
    pub fn control(&self, req: &Value, can_record: bool) -> Value {
        let r = match req["action"].as_str().unwrap_or("status") {
            "status" => Ok(self.status()),
            "stop" => self.stop(),
            "start" if !can_record => Err(anyhow::anyhow!(
                "this design cannot record its requests (azor, oodt and tica can)"
            )),
            "start" => match (req["path"].as_str(), req["max_bytes"].as_u64()) {
                (Some(p), Some(m)) => self.start(RecordSpec {
                    path: p.into(),
                    max_bytes: m,
                    keep: req["keep"]
                        .as_u64()
                        .map_or(DEFAULT_KEEP, |k| k.min(u64::from(u32::MAX)) as u32),
                }),
                _ => Err(anyhow::anyhow!(
                    "record start needs \"path\" and \"max_bytes\""
                )),
            },
            other => Err(anyhow::anyhow!(
                "record: unknown action '{other}' (allowed: start, stop, status)"
            )),
        };
        match r {
            Ok(mut v) => {
                v["ok"] = json!(true);
                v
            }
            Err(e) => json!({"ok": false, "error": format!("{e:#}")}),
        }
    }
}

fn status(st: &State) -> Value {
    match &st.sink {
        Some(s) => s.json(),
        None => json!({"recording": false, "error": st.error}),
    }
}

impl Sink {
    fn json(&self) -> Value {
        let files: Vec<String> = (0..=self.spec.keep)
            .map(|n| self.spec.file(n))
            .filter(|f| f.exists())
            .map(|f| f.display().to_string())
            .collect();
        json!({
            "recording": true,
            "path": self.spec.path.display().to_string(),
            "requests": self.requests,
            "bytes": self.out.bytes(),
            "max_bytes": self.spec.max_bytes,
            "keep": self.spec.keep,
            "rotations": self.rotations,
            "files": files,
        })
    }

    /// Append one record, rotating first if it could pass `max_bytes`.
    fn put(&mut self, r: &Record) -> Result<()> {
        // A record may need a time-base record before it.
        if self.out.bytes() + 2 * RECORD_LEN as u64 > self.spec.max_bytes {
            self.rotate()?;
        }
        Ok(self.out.write(r)?)
    }

    /// FILE.{k} -> FILE.{k+1} down to FILE -> FILE.1 (or FILE deleted with
    /// keep 0); a new FILE. The old writer is finished on a thread.
    fn rotate(&mut self) -> Result<()> {
        let spec = &self.spec;
        if spec.keep == 0 {
            std::fs::remove_file(&spec.path)
                .with_context(|| format!("removing {}", spec.path.display()))?;
        }
        for n in (0..spec.keep).rev() {
            let (from, to) = (spec.file(n), spec.file(n + 1));
            if from.exists() {
                std::fs::rename(&from, &to)
                    .with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
            }
        }
        let new = NativeWriter::create(&spec.path)?;
        let old = std::mem::replace(&mut self.out, new);
        self.closing.retain(|h| !h.is_finished());
        self.closing.push(std::thread::spawn(move || {
            if let Err(e) = old.finish() {
                tracing::warn!("finishing a rotated recording: {e}");
            }
        }));
        self.rotations += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(p: &Path) -> Vec<Record> {
        tiercache_trace::open(p, None, &Default::default())
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }

    #[test]
    fn records_in_order_with_classes_and_rotates_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let spec = RecordSpec {
            path: dir.path().join("t.trace"),
            max_bytes: MIN_MAX_BYTES,
            keep: 2,
        };
        let rec = Recorder::default();
        rec.record(IoKind::Read, 0, 4096, None); // off: not recorded
        rec.start(spec.clone()).unwrap();
        let n = 1000u64;
        for i in 0..n {
            let (kind, class) = match i % 3 {
                0 => (IoKind::Read, Some(Class::Data)),
                1 => (IoKind::Write, Some(Class::Metadata)),
                _ => (IoKind::Trim, Some(Class::Journal)),
            };
            rec.record(kind, i * 4096, 4096 + i, class);
        }
        let v = rec.stop().unwrap();
        assert_eq!(v["requests"], n);
        rec.record(IoKind::Read, 0, 4096, None); // stopped: not recorded
        assert!(!spec.file(3).exists(), "only keep=2 older files");
        let mut older = Vec::new();
        for f in (0..=2).rev().map(|k| spec.file(k)) {
            assert!(std::fs::metadata(&f).unwrap().len() <= spec.max_bytes);
        }
        for f in [spec.file(2), spec.file(1)] {
            older.extend(read_all(&f));
        }
        // FILE reads as the files kept, oldest first.
        let all = read_all(&spec.path);
        assert!(all.len() > older.len() && all[..older.len()] == older[..]);
        // The newest (keep + 1) files hold the last requests, in order.
        let first = n - all.len() as u64;
        assert!(all.len() > 2 * (MIN_MAX_BYTES as usize / 16 - 2));
        for (j, r) in all.iter().enumerate() {
            let i = first + j as u64;
            assert_eq!((r.offset, r.len as u64), (i * 4096, 4096 + i));
            assert_eq!(
                r.kind,
                [IoKind::Read, IoKind::Write, IoKind::Trim][i as usize % 3]
            );
            let classes = [Class::Data, Class::Metadata, Class::Journal];
            assert_eq!(r.class, Some(classes[i as usize % 3]));
        }
        assert!(all.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        // A second recording to the same FILE replaces the first one's files.
        rec.start(spec.clone()).unwrap();
        rec.record(IoKind::Write, 8192, 512, Some(Class::Data));
        rec.stop().unwrap();
        assert!(!spec.file(1).exists());
        let r = read_all(&spec.path);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].class, Some(Class::Data));
    }

    #[test]
    fn refuses_to_replace_a_file_that_is_not_a_trace() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notes.txt");
        std::fs::write(&p, "keep me").unwrap();
        let rec = Recorder::default();
        let e = rec
            .start(RecordSpec {
                path: p.clone(),
                max_bytes: 1 << 20,
                keep: 1,
            })
            .unwrap_err();
        assert!(format!("{e:#}").contains("not a tiercache trace"), "{e:#}");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "keep me");
        let v = rec.control(&json!({"cmd": "record", "action": "stop"}), true);
        assert_eq!(v["ok"], false);
        let v = rec.control(
            &json!({"cmd": "record", "action": "start", "path": dir.path().join("x").to_str().unwrap(), "max_bytes": 1 << 20}),
            false,
        );
        assert!(
            v["error"].as_str().unwrap().contains("cannot record"),
            "{v}"
        );
    }
}
