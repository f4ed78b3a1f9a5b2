//! Energy by eq. 2: for each cache device, reads x read latency x read
//! power + writes x write latency x write power + idle time x idle power
//! (DRAM: accesses x latency x power + idle time x idle power). The HDD is
//! not part of the cache and not counted, as in the paper.

use crate::profile::DeviceSpec;

/// Activity of one device over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Activity {
    pub reads: u64,
    pub writes: u64,
    /// Latency of one page read / write on the idle device, seconds.
    pub read_latency_s: f64,
    pub write_latency_s: f64,
    /// Time the device was idle, seconds.
    pub idle_s: f64,
}

/// Joules one device used (one term of eq. 2).
pub fn device_joules(spec: &DeviceSpec, a: &Activity) -> f64 {
    a.reads as f64 * a.read_latency_s * spec.read_w
        + a.writes as f64 * a.write_latency_s * spec.write_w
        + a.idle_s * spec.idle_w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq2_term_by_hand() {
        // WO-SSD: 1000 reads of 100 us at 2.4 W = 0.24 J; 500 writes of
        // 200 us at 3.1 W = 0.31 J; 10 s idle at 1.3 W = 13 J.
        let a = Activity {
            reads: 1000,
            writes: 500,
            read_latency_s: 100e-6,
            write_latency_s: 200e-6,
            idle_s: 10.0,
        };
        let j = device_joules(&DeviceSpec::WO_SSD, &a);
        assert!((j - (0.24 + 0.31 + 13.0)).abs() < 1e-9);
    }
}
