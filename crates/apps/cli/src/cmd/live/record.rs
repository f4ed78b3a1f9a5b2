//! The request recorder's options: `serve --record FILE` and
//! `tiercache record --cache C start FILE|stop|status` (the control
//! socket's `record` command; the recorder is `tiercache_runtime::record`).

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;
use tiercache_runtime::record::{DEFAULT_KEEP, DEFAULT_MAX};
use tiercache_runtime::RecordSpec;

use super::ctl::CtlArgs;

/// How large each file grows and how many are kept.
#[derive(Args, Debug, Clone)]
pub struct Bounds {
    /// Largest size of one recording file (at least 4KiB). When FILE would
    /// pass it, FILE becomes FILE.1 (FILE.1 becomes FILE.2, ..., up to
    /// FILE.KEEP; the oldest beyond is deleted) and a new FILE starts: the
    /// recording takes at most (KEEP + 1) x SIZE of disk.
    #[arg(long = "record-max", value_name = "SIZE", default_value = DEFAULT_MAX)]
    pub max: String,
    /// Older recording files kept beside FILE (FILE.1 ... FILE.KEEP; 0: FILE only).
    #[arg(long = "record-keep", value_name = "KEEP", default_value_t = DEFAULT_KEEP)]
    pub keep: u32,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max: DEFAULT_MAX.into(),
            keep: DEFAULT_KEEP,
        }
    }
}

impl Bounds {
    fn spec(&self, path: PathBuf) -> Result<RecordSpec> {
        let max_bytes = tiercache_sim::units::parse_bytes(&self.max)
            .map_err(|e| anyhow::anyhow!("--record-max {}: {e}", self.max))?;
        Ok(RecordSpec {
            path,
            max_bytes,
            keep: self.keep,
        })
    }
}

/// `serve`'s recording options.
#[derive(Args, Debug, Clone, Default)]
pub struct RecordArgs {
    /// Record every request the cache serves, from the first, into FILE as
    /// a native trace (time, offset, length, kind, class), in the order the
    /// policy takes them: `tiercache sim --trace FILE --like CACHE` then
    /// counts exactly what the cache counted (SSD cache only). A file
    /// already there must be an earlier recording (it is replaced). Stop
    /// or restart it with `tiercache record`.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub bounds: Bounds,
}

impl RecordArgs {
    /// The recording `serve` starts with, if any.
    pub fn spec(&self) -> Result<Option<RecordSpec>> {
        self.record
            .clone()
            .map(|p| self.bounds.spec(absolute(p)))
            .transpose()
    }
}

/// `tiercache record start FILE|stop|status`: start, stop or show the
/// request recording of a running server.
#[derive(Args, Debug)]
pub struct RecordCmdArgs {
    /// start: record into FILE (rotated as --record-max and --record-keep
    /// say); stop: finish the files (complete when this returns); status:
    /// the recording in progress.
    #[arg(value_enum)]
    pub action: RecordAction,
    /// With start: the newest requests go here; older ones to FILE.1, FILE.2, ...
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub bounds: Bounds,
    #[command(flatten)]
    pub ctl: CtlArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordAction {
    Start,
    Stop,
    Status,
}

/// The server runs elsewhere: a relative FILE is this command's.
fn absolute(p: PathBuf) -> PathBuf {
    std::path::absolute(&p).unwrap_or(p)
}

/// `tiercache record ...`.
pub fn run(a: RecordCmdArgs) -> Result<()> {
    let req = match (a.action, &a.file) {
        (RecordAction::Start, Some(file)) => {
            let s = a.bounds.spec(absolute(file.clone()))?;
            serde_json::json!({"cmd": "record", "action": "start",
                "path": s.path.display().to_string(), "max_bytes": s.max_bytes, "keep": s.keep})
        }
        (RecordAction::Start, None) => bail!("record start needs the FILE to record into"),
        (_, Some(f)) => bail!(
            "record {}: takes no FILE (got {})",
            if a.action == RecordAction::Stop {
                "stop"
            } else {
                "status"
            },
            f.display()
        ),
        (RecordAction::Stop, None) => serde_json::json!({"cmd": "record", "action": "stop"}),
        (RecordAction::Status, None) => serde_json::json!({"cmd": "record", "action": "status"}),
    };
    let v = super::runtime()?.block_on(tiercache_runtime::control::request_value(
        &a.ctl.socket(),
        &req,
    ))?;
    if a.ctl.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    if v["ok"] != serde_json::Value::Bool(true) {
        bail!(
            "record failed: {}",
            v["error"].as_str().unwrap_or("no reason given")
        );
    }
    if !a.ctl.json {
        println!("{}", describe(&v));
    }
    Ok(())
}

/// One line for a person.
fn describe(v: &serde_json::Value) -> String {
    let Some(path) = v["path"].as_str() else {
        return match v["error"].as_str() {
            Some(e) => format!("not recording ({e})"),
            None => "not recording".into(),
        };
    };
    let files: Vec<&str> = v["files"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str()).collect())
        .unwrap_or_default();
    let verb = match v["recording"].as_bool() {
        Some(true) => "recording",
        _ => "recorded",
    };
    format!(
        "{verb} {} requests into {path} (files: {})",
        v["requests"],
        files.join(", ")
    )
}
