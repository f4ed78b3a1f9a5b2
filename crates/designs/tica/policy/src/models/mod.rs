//! Per-run models: energy (eq. 2), hardware cost (Table I), endurance
//! (lifetime at the device's rated full-device writes), reliability (eqs.
//! 3-5) and the combined benefit of Fig. 16.

pub mod cost;
pub mod energy;
pub mod reliability;

/// Seconds in a Julian year.
pub const YEAR_S: f64 = 365.25 * 24.0 * 3600.0;

/// Years until `endurance_writes_per_gb` full-device writes of a
/// `capacity_bytes` device, at the write rate observed over `elapsed_s`.
/// `None` when nothing was written (unbounded) or the endurance is 0.
pub fn lifetime_years(
    endurance_writes_per_gb: f64,
    capacity_bytes: u64,
    bytes_written: u64,
    elapsed_s: f64,
) -> Option<f64> {
    if bytes_written == 0 || elapsed_s <= 0.0 || endurance_writes_per_gb <= 0.0 {
        return None;
    }
    let budget = endurance_writes_per_gb * capacity_bytes as f64;
    let rate = bytes_written as f64 / elapsed_s;
    Some(budget / rate / YEAR_S)
}

/// One architecture's figures for [`benefit`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    pub mean_response_us: f64,
    /// Shortest SSD lifetime, years (larger is better).
    pub lifetime_years: f64,
    pub cost_usd: f64,
    pub energy_joules: f64,
}

/// Fig. 16: per architecture, the product of performance (1 / response
/// time), endurance (lifetime), 1 / cost and 1 / energy, each normalised to
/// the best architecture, so the ideal is 1.
pub fn benefit(rows: &[Figures]) -> Vec<f64> {
    let inv = |v: f64| if v > 0.0 { 1.0 / v } else { 0.0 };
    let perf: Vec<f64> = rows.iter().map(|r| inv(r.mean_response_us)).collect();
    let endu: Vec<f64> = rows.iter().map(|r| r.lifetime_years).collect();
    let cost: Vec<f64> = rows.iter().map(|r| inv(r.cost_usd)).collect();
    let power: Vec<f64> = rows.iter().map(|r| inv(r.energy_joules)).collect();
    let norm = |v: &[f64], i: usize| {
        let m = v.iter().cloned().fold(0.0, f64::max);
        if m > 0.0 {
            v[i] / m
        } else {
            1.0
        }
    };
    (0..rows.len())
        .map(|i| norm(&perf, i) * norm(&endu, i) * norm(&cost, i) * norm(&power, i))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_of_a_device_written_once_a_day() {
        // 1171 full writes of a 100 GB device, written at 100 GB per day:
        // 1171 days = 3.206 years.
        let y = lifetime_years(1171.0, 100_000_000_000, 100_000_000_000, 86_400.0).unwrap();
        assert!((y - 1171.0 / 365.25).abs() < 1e-9);
        assert_eq!(lifetime_years(1171.0, 1, 0, 1.0), None);
    }

    #[test]
    fn benefit_is_one_for_the_best_in_every_figure() {
        let a = Figures {
            mean_response_us: 100.0,
            lifetime_years: 10.0,
            cost_usd: 5.0,
            energy_joules: 2.0,
        };
        let b = Figures {
            mean_response_us: 200.0, // half the performance
            lifetime_years: 5.0,     // half the lifetime
            cost_usd: 5.0,
            energy_joules: 4.0, // half the power efficiency
        };
        let v = benefit(&[a, b]);
        assert!((v[0] - 1.0).abs() < 1e-12);
        assert!((v[1] - 0.125).abs() < 1e-12);
    }
}
