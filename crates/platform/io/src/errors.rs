//! Device errors as `stats` reports them, the same for every design: read
//! and write errors counted per device ([`IoErrors`]), by a wrapper around
//! the device ([`CountErrors`]) or by a design that runs I/O on the raw
//! descriptor itself, and reported as `device_errors` with a status that
//! is not `ok` while any was counted ([`DeviceErrors`]).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::{BlockDev, RawTarget, RemoteStatus};

/// Failed reads and failed writes (writes, FUA writes, flushes, trims,
/// zeroing) of one device.
#[derive(Debug, Default)]
pub struct IoErrors {
    read: AtomicU64,
    write: AtomicU64,
}

impl IoErrors {
    /// Count one failed read (`write == false`) or write.
    pub fn record(&self, write: bool) {
        let c = if write { &self.write } else { &self.read };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Count `r` as a failed read or write if it is an error; returns it.
    pub fn track<T>(&self, write: bool, r: io::Result<T>) -> io::Result<T> {
        if r.is_err() {
            self.record(write);
        }
        r
    }

    /// Failed reads so far.
    pub fn reads(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Failed writes so far.
    pub fn writes(&self) -> u64 {
        self.write.load(Ordering::Relaxed)
    }
}

/// A device whose failed reads and writes are counted in an [`IoErrors`].
/// The raw descriptor stays available to the fast paths ([`read_cached`],
/// [`write_buffered`]), which report their failures through
/// [`BlockDev::note_error`]; an engine that submits I/O on the descriptor
/// itself (io_uring) bypasses the count, and its user records failures.
///
/// [`read_cached`]: crate::read_cached
/// [`write_buffered`]: crate::write_buffered
pub struct CountErrors {
    inner: Arc<dyn BlockDev>,
    errors: Arc<IoErrors>,
}

impl CountErrors {
    /// Wrap `inner`; returns the wrapped device and its counters.
    pub fn wrap(inner: Arc<dyn BlockDev>) -> (Arc<dyn BlockDev>, Arc<IoErrors>) {
        let errors = Arc::new(IoErrors::default());
        let dev = CountErrors {
            inner,
            errors: Arc::clone(&errors),
        };
        (Arc::new(dev), errors)
    }
}

impl BlockDev for CountErrors {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.errors.track(false, self.inner.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.errors.track(true, self.inner.write_at(buf, offset))
    }
    fn write_at_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.errors
            .track(true, self.inner.write_at_fua(buf, offset))
    }
    fn flush(&self) -> io::Result<()> {
        self.errors.track(true, self.inner.flush())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.errors.track(true, self.inner.trim(offset, len))
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.errors
            .track(true, self.inner.write_zeroes(offset, len))
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn remote_status(&self) -> Option<RemoteStatus> {
        self.inner.remote_status()
    }
    fn raw_target(&self) -> Option<RawTarget> {
        self.inner.raw_target()
    }
    fn note_error(&self, write: bool) {
        self.errors.record(write);
    }
}

/// The devices' roles: the key `device_errors` reports a device under, and
/// what the status and `stats` call it.
pub const ROLES: [(&str, &str); 6] = [
    ("cache", "cache device"),
    ("backing", "backing device"),
    ("ro_ssd", "RO-SSD"),
    ("wo_ssd", "WO-SSD"),
    ("fast", "fast tier"),
    ("slow", "slow tier"),
];

/// What `stats` calls the device of `role` (a key of [`ROLES`]).
pub fn role_label(role: &str) -> &str {
    ROLES
        .iter()
        .find(|(k, _)| *k == role)
        .map_or(role, |(_, label)| label)
}

/// The error counts of every device of a design, by role (a key of
/// [`ROLES`]), for `stats`.
#[derive(Clone, Default)]
pub struct DeviceErrors(Vec<(&'static str, Arc<IoErrors>)>);

impl DeviceErrors {
    /// No device yet.
    pub fn new() -> DeviceErrors {
        DeviceErrors::default()
    }

    /// Add a device's counters under `role`.
    pub fn add(&mut self, role: &'static str, errors: Arc<IoErrors>) {
        self.0.push((role, errors));
    }

    /// Wrap `dev` in a [`CountErrors`] counted under `role`.
    pub fn count(&mut self, role: &'static str, dev: Arc<dyn BlockDev>) -> Arc<dyn BlockDev> {
        let (dev, errors) = CountErrors::wrap(dev);
        self.add(role, errors);
        dev
    }

    /// Failed reads and writes of every device.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, e)| e.reads() + e.writes()).sum()
    }

    /// `{"ROLE": {"read": N, "write": N}, ...}`.
    pub fn json(&self) -> serde_json::Value {
        let m: serde_json::Map<String, serde_json::Value> = self
            .0
            .iter()
            .map(|(role, e)| {
                (
                    role.to_string(),
                    serde_json::json!({"read": e.reads(), "write": e.writes()}),
                )
            })
            .collect();
        serde_json::Value::Object(m)
    }

    /// The status `stats` reports: the design's own (`ok` or why it is
    /// degraded), or, when the design says `ok` but a device failed, a
    /// `degraded: ...` status naming the errors.
    pub fn status(&self, design_status: &str) -> String {
        if design_status != "ok" || self.total() == 0 {
            return design_status.to_string();
        }
        let failed: Vec<String> = self
            .0
            .iter()
            .filter(|(_, e)| e.reads() + e.writes() > 0)
            .map(|(role, e)| {
                format!(
                    "{} on the {}",
                    read_write(e.reads(), e.writes()),
                    role_label(role)
                )
            })
            .collect();
        format!("degraded: device errors: {}", failed.join(", "))
    }
}

/// `2 read errors and 1 write error`.
fn read_write(reads: u64, writes: u64) -> String {
    let n = |k: u64, what: &str| format!("{k} {what} error{}", if k == 1 { "" } else { "s" });
    match (reads, writes) {
        (r, 0) => n(r, "read"),
        (0, w) => n(w, "write"),
        (r, w) => format!("{} and {}", n(r, "read"), n(w, "write")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultRule, FaultyDev, MemDev, OpKinds};

    #[test]
    fn counts_failed_reads_and_writes_and_says_so_in_the_status() {
        let faulty = Arc::new(FaultyDev::new(Arc::new(MemDev::new("m", 1 << 16)), 1));
        let mut errors = DeviceErrors::new();
        let cache = errors.count("cache", Arc::new(MemDev::new("m", 1 << 16)));
        let backing = errors.count("backing", faulty.clone());
        assert_eq!(errors.status("ok"), "ok");
        faulty.add_rule(FaultRule::always(OpKinds::READ)).unwrap();
        let mut b = [0u8; 512];
        assert!(backing.read_at(&mut b, 0).is_err());
        assert!(backing.read_at(&mut b, 512).is_err());
        assert!(backing.write_at(&b, 0).is_ok());
        faulty.clear_rules();
        faulty.add_rule(FaultRule::always(OpKinds::WRITE)).unwrap();
        assert!(backing.write_at(&b, 0).is_err());
        cache.read_at(&mut b, 0).unwrap();
        assert_eq!(
            errors.json(),
            serde_json::json!({"cache": {"read": 0, "write": 0}, "backing": {"read": 2, "write": 1}})
        );
        assert_eq!(
            errors.status("ok"),
            "degraded: device errors: 2 read errors and 1 write error on the backing device"
        );
        // A design's own status stays.
        assert_eq!(errors.status("degraded"), "degraded");
    }
}
