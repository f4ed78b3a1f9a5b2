//! An emulated hard disk: a fast device slowed down to HDD timing.

use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tiercache_model::{DeviceModel, DeviceStats, HddModel, IoKind, ModelOp, Profile, ProfileError};

use crate::{check_range, Access, BlockDev, RawTarget};

/// **Emulation**, not a disk: wraps a fast [`BlockDev`] (a file, an SSD,
/// memory) and makes every operation take as long as the HDD model of
/// `tiercache-model` says a real 7200 rpm disk would.
///
/// Each op is submitted to the [`HddModel`] at the wall-clock time since the
/// emulator was created (ns); the model queues ops FIFO on one actuator, as a
/// single-head disk without command reordering, and returns the completion
/// time. The op then runs on the inner device and the caller sleeps until
/// that time (never less; more if the inner device is slower). Concurrent
/// callers therefore wait behind each other exactly as the model predicts.
/// Timing is as good as the OS's sleep precision (tens of microseconds),
/// small against HDD service times of milliseconds.
pub struct EmulatedHdd {
    inner: Arc<dyn BlockDev>,
    name: String,
    model: Mutex<HddModel>,
    start: Instant,
}

impl EmulatedHdd {
    /// Wrap `inner` with `model` as is: byte offsets map to cylinders over the
    /// model's `capacity_bytes`, so a device much smaller than that capacity
    /// sees only short seeks.
    pub fn new(inner: Arc<dyn BlockDev>, model: HddModel) -> EmulatedHdd {
        let name = format!("emulated-hdd({})", inner.name());
        EmulatedHdd {
            inner,
            name,
            model: Mutex::new(model),
            start: Instant::now(),
        }
    }

    /// Wrap `inner` with the default profile's 7200 rpm disk as is (see
    /// [`new`](Self::new)): the one HDD every `--emulate-hdd` of the CLI and
    /// the designs' open options puts behind a backing device or slow tier.
    pub fn default_disk(inner: Arc<dyn BlockDev>) -> Result<EmulatedHdd, ProfileError> {
        Ok(EmulatedHdd::new(inner, Profile::default().hdd_model()?))
    }

    /// Wrap `inner` with the HDD of `profile`, stretched over the device: the
    /// model's capacity is set to the device length, so random offsets on the
    /// device cost datasheet-average seeks (a random 4 KiB read about
    /// 13.2 ms with the default profile). Fails if the device is smaller than
    /// the model's cylinder count or the profile is invalid.
    pub fn from_profile(
        inner: Arc<dyn BlockDev>,
        profile: &Profile,
    ) -> Result<EmulatedHdd, ProfileError> {
        let mut params = profile.hdd.clone();
        params.capacity_bytes = inner.len();
        let model = HddModel::new(params)?;
        Ok(EmulatedHdd::new(inner, model))
    }

    /// The model's counters (ops, bytes, busy time) so far.
    pub fn stats(&self) -> DeviceStats {
        self.model
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats()
    }

    /// The wrapped device.
    pub fn inner(&self) -> &Arc<dyn BlockDev> {
        &self.inner
    }

    /// Run `io` on the inner device and return when the model says `op`
    /// completes.
    fn timed<T>(&self, op: ModelOp, io: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let deadline = {
            let mut model = self.model.lock().unwrap_or_else(PoisonError::into_inner);
            // Read the clock under the lock: submissions stay in time order.
            let now_ns = self.start.elapsed().as_nanos() as u64;
            let done_ns = model.submit(now_ns, &op);
            self.start + Duration::from_nanos(done_ns)
        };
        let result = io();
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        result
    }
}

impl BlockDev for EmulatedHdd {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // Bad ranges fail at once, without disk time.
        check_range(
            &self.name,
            self.len(),
            Access::Read,
            offset,
            buf.len() as u64,
        )?;
        let op = ModelOp::new(IoKind::Read, offset, buf.len() as u64);
        self.timed(op, || self.inner.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(
            &self.name,
            self.len(),
            Access::Write,
            offset,
            buf.len() as u64,
        )?;
        let op = ModelOp::new(IoKind::Write, offset, buf.len() as u64);
        self.timed(op, || self.inner.write_at(buf, offset))
    }
    fn write_at_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(
            &self.name,
            self.len(),
            Access::Write,
            offset,
            buf.len() as u64,
        )?;
        // The model has no write cache: a write is on the media when it completes.
        let op = ModelOp::new(IoKind::Write, offset, buf.len() as u64);
        self.timed(op, || self.inner.write_at_fua(buf, offset))
    }
    fn flush(&self) -> io::Result<()> {
        let op = ModelOp::new(IoKind::Flush, 0, 0);
        self.timed(op, || self.inner.flush())
    }
    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range(&self.name, self.len(), Access::Trim, offset, len)?;
        let op = ModelOp::new(IoKind::Trim, offset, len);
        self.timed(op, || self.inner.trim(offset, len))
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn raw_target(&self) -> Option<RawTarget> {
        None
    }
}
