//! Simulated devices for the designs' DST adapters (feature `devices`):
//! media in memory under a volatile write cache (`CrashDev`) under an error
//! injector (`FaultyDev`), the faults of the matrix, and the power loss that
//! ends a run of a system.

use std::sync::Arc;
use std::time::Duration;

use tiercache_io::{CrashDev, CrashMode, FaultRule, FaultyDev, MemDev, OpKinds};

use super::Fault;

/// One simulated device: `media` (what survives a power loss) under a
/// volatile write cache (`cache`) under an error injector (`faulty`, the
/// device the design is given).
pub struct SimDev {
    /// What reached the media.
    pub media: Arc<MemDev>,
    /// The volatile write cache (unflushed writes are lost or torn in a crash).
    pub cache: Arc<CrashDev>,
    /// The error injector the design does its I/O through.
    pub faulty: Arc<FaultyDev>,
}

impl SimDev {
    /// A device over `media`, its injected errors drawn with `seed`.
    pub fn new(media: Arc<MemDev>, seed: u64) -> SimDev {
        let cache = Arc::new(CrashDev::new(media.clone()));
        let faulty = Arc::new(FaultyDev::new(cache.clone(), seed));
        SimDev {
            media,
            cache,
            faulty,
        }
    }

    /// A device named `name` whose media hold `data`.
    pub fn from_vec(name: &str, data: Vec<u8>, seed: u64) -> SimDev {
        SimDev::new(Arc::new(MemDev::from_vec(name, data)), seed)
    }

    /// Put `fault` of the matrix on this device (until the next power loss).
    pub fn inject(&self, fault: Fault) {
        const ENOSPC: i32 = 28;
        let f = &self.faulty;
        let rule = |k| FaultRule::always(k).with_probability(0.34);
        let r = match fault {
            Fault::ReadEio => f.add_rule(rule(OpKinds::READ)),
            Fault::WriteEio => f.add_rule(rule(OpKinds::WRITE)),
            Fault::Enospc => {
                f.set_errno(ENOSPC);
                f.add_rule(FaultRule::always(OpKinds::WRITE))
            }
            Fault::Removal => {
                f.fail_all();
                Ok(())
            }
            Fault::Slow => {
                f.set_delay(Duration::from_micros(200));
                Ok(())
            }
        };
        r.expect("a valid fault rule");
    }

    /// Fail every operation with EIO with probability `p` from now on (0: none).
    pub fn set_eio(&self, p: f64) {
        self.faulty.clear_rules();
        if p > 0.0 {
            self.faulty
                .add_rule(FaultRule::always(OpKinds::ALL).with_probability(p))
                .expect("a valid fault rule");
        }
    }
}

/// How a power loss treats unflushed writes, picked by `seed`: all dropped,
/// the first few kept in order, or torn per 512-byte sector.
pub fn crash_mode(seed: u64) -> CrashMode {
    match seed % 3 {
        0 => CrashMode::DropAll,
        1 => CrashMode::KeepFirst((seed >> 8) as usize % 16),
        _ => CrashMode::Torn { seed },
    }
}

/// Power loss on every device of `devs` (the mode `seed` picks), then fresh
/// devices over the same media (device `i` draws its errors with
/// `seed ^ i`; no faults). What happened, for the failure message.
pub fn power_loss<const N: usize>(devs: &mut [SimDev; N], seed: u64) -> Result<String, String> {
    let mode = crash_mode(seed);
    let mut what = format!("{mode:?}:");
    for d in devs.iter() {
        d.faulty.clear_rules();
        let r = d.cache.crash(mode).map_err(|e| e.to_string())?;
        what += &format!(" {} unflushed ops", r.unflushed_ops);
    }
    *devs = std::array::from_fn(|i| SimDev::new(devs[i].media.clone(), seed ^ i as u64));
    Ok(what)
}

/// A design's error as an I/O error (for [`super::System`] methods).
pub fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}
