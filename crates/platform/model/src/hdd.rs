//! Hard disk model: one actuator, seek curve, rotation, transfer, overhead.
//!
//! Service time of an operation (each term rounded to the nearest ns):
//! - **sequential** (starts exactly where the previous read or write ended):
//!   `command_overhead + len / transfer_rate`, no seek and no rotation (the
//!   head is already there and the track buffer streams on);
//! - **otherwise**: `command_overhead + seek(d) + rotation + len / transfer_rate`,
//!   where `d` is the distance in cylinders between the cylinder where the
//!   previous operation ended and the cylinder of `offset`, and `rotation` is
//!   the *expected* rotational latency, half a revolution (60 000 / rpm / 2 ms).
//!   Rotation is not position-aware: every non-sequential access waits the
//!   datasheet "average latency", which keeps the model deterministic and
//!   independent of absolute time;
//! - **trim / flush**: `command_overhead` only; the head does not move (a
//!   disk has no use for discards, and no write cache is modelled).
//!
//! Offsets map linearly to cylinders (`offset * cylinders / capacity_bytes`,
//! offsets past the end map to the last cylinder). One actuator: operations
//! are served one at a time, in submission order. Not modelled: zoned
//! transfer rates, on-disk cache and command reordering (NCQ).

use serde::{Deserialize, Serialize};

use crate::profile::{check_at_least, check_positive, ProfileError};
use crate::queue::Units;
use crate::stats::DeviceStats;
use crate::{transfer_ns, DeviceModel, IoKind, ModelOp};

/// Hard disk parameters (TOML section `[hdd]`).
///
/// Defaults: a 7200 rpm SATA disk like the Western Digital WD5001AALS
/// (Caviar Black 500 GB) behind Azor's experiments (Azor thesis, section 3:
/// "twelve 500-GB Western Digital WD5001AALS-00L3B2 SATA-II disks").
/// Azor Table 1.1 gives the HDD's transfer rates, response time (12.6 ms)
/// and IOPS (150/150); TICA Table I and FlashTier Table IV list no HDD, so
/// the seek times come from WD's Caviar Black datasheet.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HddParams {
    /// Spindle speed, revolutions per minute. Default 7200 (WD5001AALS).
    pub rpm: f64,
    /// Capacity in bytes. Default 500 107 862 016 (976 773 168 sectors of
    /// 512 B, the standard LBA count of a 500 GB drive).
    pub capacity_bytes: u64,
    /// Number of cylinders (seek positions). Default 150 000, an estimate:
    /// 500 GB / (4 surfaces x 833 kB per track, i.e. 100 MB/s / 120 rev/s).
    pub cylinders: u64,
    /// Average seek time in ms, weighted over all seek distances as in
    /// datasheets (uniformly random start and end positions). Default 8.9 ms
    /// (WD Caviar Black datasheet read seek; manufacturer value, not in the
    /// shared papers).
    pub avg_seek_ms: f64,
    /// Seek to the adjacent cylinder, ms. Default 2.0 ms (WD Caviar Black
    /// datasheet track-to-track; manufacturer value, not in the shared papers).
    pub track_to_track_seek_ms: f64,
    /// Seek across the whole stroke, ms. Default 21.0 ms (WD Caviar Black
    /// datasheet full stroke; manufacturer value, not in the shared papers).
    pub full_stroke_seek_ms: f64,
    /// Media transfer rate for reads, MB/s (MB = 10^6 B). Default 100 MB/s
    /// (Azor thesis Table 1.1, HDD throughput R/W 100/90 MB/s).
    pub read_transfer_mb_s: f64,
    /// Media transfer rate for writes, MB/s. Default 90 MB/s (Azor Table 1.1).
    pub write_transfer_mb_s: f64,
    /// Fixed controller/command cost per operation, ms. Default 0.1 ms (an
    /// assumption: WD does not publish it). With the defaults a random 4 KiB
    /// read costs 0.1 + 8.9 + 4.167 + 0.041 = 13.2 ms, within 5 % of Azor
    /// Table 1.1's measured HDD response time of 12.6 ms.
    pub command_overhead_ms: f64,
}

impl Default for HddParams {
    fn default() -> Self {
        HddParams {
            rpm: 7200.0,
            capacity_bytes: 500_107_862_016,
            cylinders: 150_000,
            avg_seek_ms: 8.9,
            track_to_track_seek_ms: 2.0,
            full_stroke_seek_ms: 21.0,
            read_transfer_mb_s: 100.0,
            write_transfer_mb_s: 90.0,
            command_overhead_ms: 0.1,
        }
    }
}

impl HddParams {
    /// Check every parameter and that a seek curve can be fitted.
    pub fn validate(&self) -> Result<(), ProfileError> {
        check_positive("hdd.rpm", self.rpm)?;
        if self.cylinders < 2 {
            return Err(ProfileError::invalid(
                "hdd.cylinders",
                format!("must be at least 2, got {}", self.cylinders),
            ));
        }
        if self.capacity_bytes < self.cylinders {
            return Err(ProfileError::invalid(
                "hdd.capacity_bytes",
                format!(
                    "must be at least hdd.cylinders ({}), got {}",
                    self.cylinders, self.capacity_bytes
                ),
            ));
        }
        check_positive("hdd.track_to_track_seek_ms", self.track_to_track_seek_ms)?;
        check_positive("hdd.avg_seek_ms", self.avg_seek_ms)?;
        check_positive("hdd.full_stroke_seek_ms", self.full_stroke_seek_ms)?;
        check_positive("hdd.read_transfer_mb_s", self.read_transfer_mb_s)?;
        check_positive("hdd.write_transfer_mb_s", self.write_transfer_mb_s)?;
        check_at_least("hdd.command_overhead_ms", self.command_overhead_ms, 0.0)?;
        SeekCurve::fit(self).map(|_| ())
    }
}

/// Seek time as a function of distance, the classic two-part curve
/// (Ruemmler and Wilkes, "An introduction to disk drive modeling", 1994):
/// `settle + a * sqrt(x)` for short seeks (acceleration-limited) and
/// `b + c * x` for long seeks (coast at maximum speed), with
/// `x = d / (cylinders - 1)` the normalized distance and `seek(0) = 0`.
///
/// The four coefficients and the knee are fitted so that
/// `seek(1 cylinder) = track_to_track`, `seek(full stroke) = full_stroke`,
/// the two parts meet at the knee with equal slope (a smooth curve), and the
/// average over uniformly random start and end positions (distance density
/// `2 (1 - x)`, the datasheet weighting) equals `avg_seek`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeekCurve {
    /// Normalized distance where the sqrt part hands over to the linear part.
    pub knee: f64,
    /// Settle term of the short-seek part, ns.
    pub settle_ns: f64,
    /// Coefficient of `sqrt(x)`, ns.
    pub sqrt_ns: f64,
    /// Intercept of the long-seek part, ns.
    pub linear_base_ns: f64,
    /// Slope of the long-seek part, ns per full stroke.
    pub linear_slope_ns: f64,
    /// `1 / (cylinders - 1)`.
    inv_max_distance: f64,
}

impl SeekCurve {
    /// Fit the curve to `params` (see the type docs). Fails with a message
    /// when no increasing, smooth curve matches the three seek times.
    pub fn fit(params: &HddParams) -> Result<SeekCurve, ProfileError> {
        let t2t = params.track_to_track_seek_ms * 1e6;
        let avg = params.avg_seek_ms * 1e6;
        let full = params.full_stroke_seek_ms * 1e6;
        let inv_max = 1.0 / (params.cylinders - 1) as f64;
        if !(t2t < avg && avg < full) {
            return Err(ProfileError::invalid(
                "hdd.avg_seek_ms",
                format!(
                    "need track_to_track_seek_ms < avg_seek_ms < full_stroke_seek_ms, got {} / {} / {}",
                    params.track_to_track_seek_ms, params.avg_seek_ms, params.full_stroke_seek_ms
                ),
            ));
        }
        // Slope mismatch at the knee (left minus right); the knee is a root.
        let mismatch = |k: f64| {
            solve_coefficients(t2t, avg, full, inv_max, k)
                .map(|[_, a, _, c]| a / (2.0 * k.sqrt()) - c)
        };
        // Scan knees on a log grid from one cylinder to the full stroke and
        // refine each sign change by bisection; keep the first physical fit.
        const STEPS: usize = 400;
        let lo_log = inv_max.max(1e-9).ln();
        let knee_at = |i: usize| (lo_log * (1.0 - i as f64 / STEPS as f64)).exp().min(0.999);
        let mut prev: Option<(f64, f64)> = None;
        for i in 1..=STEPS {
            let k = knee_at(i);
            let Some(m) = mismatch(k) else {
                prev = None;
                continue;
            };
            if let Some((pk, pm)) = prev {
                if pm.signum() != m.signum() {
                    let (mut a, mut b, mut ma) = (pk, k, pm);
                    for _ in 0..100 {
                        let mid = 0.5 * (a + b);
                        match mismatch(mid) {
                            Some(mm) if mm.signum() == ma.signum() => {
                                a = mid;
                                ma = mm;
                            }
                            Some(_) => b = mid,
                            None => break,
                        }
                    }
                    let knee = 0.5 * (a + b);
                    if let Some([s, a, b, c]) = solve_coefficients(t2t, avg, full, inv_max, knee) {
                        if s >= 0.0 && a >= 0.0 && c >= 0.0 {
                            return Ok(SeekCurve {
                                knee,
                                settle_ns: s,
                                sqrt_ns: a,
                                linear_base_ns: b,
                                linear_slope_ns: c,
                                inv_max_distance: inv_max,
                            });
                        }
                    }
                }
            }
            prev = Some((k, m));
        }
        let linear_avg = params.track_to_track_seek_ms
            + (params.full_stroke_seek_ms - params.track_to_track_seek_ms) / 3.0;
        Err(ProfileError::invalid(
            "hdd.avg_seek_ms",
            format!(
                "no smooth increasing seek curve through track_to_track_seek_ms={} and \
                 full_stroke_seek_ms={} averages {} ms; a straight line averages {:.3} ms, \
                 real drives lie somewhat above that",
                params.track_to_track_seek_ms,
                params.full_stroke_seek_ms,
                params.avg_seek_ms,
                linear_avg
            ),
        ))
    }

    /// Seek time in ns for a distance of `d` cylinders (0 for `d == 0`).
    #[inline]
    pub fn seek_ns(&self, d: u64) -> f64 {
        if d == 0 {
            return 0.0;
        }
        let x = (d as f64 * self.inv_max_distance).min(1.0);
        if x < self.knee {
            self.settle_ns + self.sqrt_ns * x.sqrt()
        } else {
            self.linear_base_ns + self.linear_slope_ns * x
        }
    }
}

/// Solve the linear system for `[settle, a, b, c]` at knee `k`:
/// seek(x1) = t2t, seek(1) = full, continuity at `k`, weighted mean = avg.
fn solve_coefficients(t2t: f64, avg: f64, full: f64, x1: f64, k: f64) -> Option<[f64; 4]> {
    let k15 = k.powf(1.5);
    let k25 = k.powf(2.5);
    let mut m = [
        [1.0, x1.sqrt(), 0.0, 0.0, t2t],
        [0.0, 0.0, 1.0, 1.0, full],
        [1.0, k.sqrt(), -1.0, -k, 0.0],
        [
            // ∫0^k 2(1-x) dx, ∫0^k 2 sqrt(x) (1-x) dx, ∫k^1 2(1-x) dx, ∫k^1 2x(1-x) dx
            2.0 * k - k * k,
            4.0 / 3.0 * k15 - 4.0 / 5.0 * k25,
            (1.0 - k) * (1.0 - k),
            1.0 / 3.0 - k * k + 2.0 / 3.0 * k * k * k,
            avg,
        ],
    ];
    // Gaussian elimination with partial pivoting.
    for col in 0..4 {
        let pivot = (col..4).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        if m[pivot][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, pivot);
        for row in 0..4 {
            if row != col {
                let f = m[row][col] / m[col][col];
                let pivot_row = m[col];
                for (v, p) in m[row].iter_mut().zip(pivot_row).skip(col) {
                    *v -= f * p;
                }
            }
        }
    }
    let x = [
        m[0][4] / m[0][0],
        m[1][4] / m[1][1],
        m[2][4] / m[2][2],
        m[3][4] / m[3][3],
    ];
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Hard disk timing model (see the module docs for the formula).
#[derive(Clone, Debug)]
pub struct HddModel {
    params: HddParams,
    curve: SeekCurve,
    overhead_ns: u64,
    half_rotation_ns: u64,
    read_ns_per_byte: f64,
    write_ns_per_byte: f64,
    /// Byte offset where the last read or write ended (head position).
    head_offset: u64,
    /// Cylinder of `head_offset`.
    head_cylinder: u64,
    /// Whether `head_offset` ends a stream a next op can continue.
    streaming: bool,
    unit: Units,
    stats: DeviceStats,
}

impl HddModel {
    /// Build the model; fails if `params` are invalid or no seek curve fits.
    pub fn new(params: HddParams) -> Result<Self, ProfileError> {
        params.validate()?;
        let curve = SeekCurve::fit(&params)?;
        Ok(HddModel {
            overhead_ns: (params.command_overhead_ms * 1e6).round() as u64,
            half_rotation_ns: (30_000.0 / params.rpm * 1e6).round() as u64,
            read_ns_per_byte: 1e3 / params.read_transfer_mb_s,
            write_ns_per_byte: 1e3 / params.write_transfer_mb_s,
            curve,
            params,
            head_offset: 0,
            head_cylinder: 0,
            streaming: false,
            unit: Units::new(1),
            stats: DeviceStats::default(),
        })
    }

    /// The parameters this model was built from.
    pub fn params(&self) -> &HddParams {
        &self.params
    }

    /// The fitted seek curve.
    pub fn seek_curve(&self) -> &SeekCurve {
        &self.curve
    }

    /// Cylinder holding byte `offset` (offsets past the end: last cylinder).
    #[inline]
    pub fn cylinder_of(&self, offset: u64) -> u64 {
        let (cyls, cap) = (self.params.cylinders, self.params.capacity_bytes);
        let c = match offset.checked_mul(cyls) {
            Some(p) => p / cap,
            None => (offset as u128 * cyls as u128 / cap as u128) as u64,
        };
        c.min(cyls - 1)
    }

    /// Seek time in ns (rounded) between the cylinders of two byte offsets.
    #[inline]
    pub fn seek_ns_between(&self, from_offset: u64, to_offset: u64) -> u64 {
        let d = self
            .cylinder_of(from_offset)
            .abs_diff(self.cylinder_of(to_offset));
        self.curve.seek_ns(d).round() as u64
    }

    /// Expected rotational latency (half a revolution), ns.
    pub fn rotation_ns(&self) -> u64 {
        self.half_rotation_ns
    }

    /// Service time of `op` given the current head position, ns; does not
    /// change state.
    #[inline]
    pub fn service_ns(&self, op: &ModelOp) -> u64 {
        let ns_per_byte = match op.kind {
            IoKind::Read => self.read_ns_per_byte,
            IoKind::Write => self.write_ns_per_byte,
            IoKind::Trim | IoKind::Flush => return self.overhead_ns,
        };
        let transfer = transfer_ns(op.len, ns_per_byte);
        let positioning = if self.streaming && op.offset == self.head_offset {
            0
        } else {
            let d = self.head_cylinder.abs_diff(self.cylinder_of(op.offset));
            self.curve.seek_ns(d).round() as u64 + self.half_rotation_ns
        };
        self.overhead_ns
            .saturating_add(positioning)
            .saturating_add(transfer)
    }
}

impl DeviceModel for HddModel {
    fn submit(&mut self, now_ns: u64, op: &ModelOp) -> u64 {
        let dur = self.service_ns(op);
        self.stats.record(op);
        if matches!(op.kind, IoKind::Read | IoKind::Write) {
            self.head_offset = op.offset.saturating_add(op.len);
            self.head_cylinder = self.cylinder_of(self.head_offset);
            self.streaming = true;
        }
        self.unit.serve_one(now_ns, dur)
    }

    fn busy_ns(&self) -> u64 {
        self.unit.busy_ns()
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            busy_ns: self.unit.busy_ns(),
            ..self.stats
        }
    }

    fn name(&self) -> &str {
        "hdd"
    }
}
