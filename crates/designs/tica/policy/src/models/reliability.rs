//! Reliability block diagrams (eqs. 3-5) with exponential device lifetimes.
//!
//! - eq. 3: `R(t) = exp(-t / MTTF)`, unreliability `U = 1 - R`.
//! - eq. 4, TICA: dirty data is lost when the WO-SSD fails together with the
//!   device holding the other copy: the RO-SSD (weight `alpha`, the share of
//!   dirty-page residency after the flush) or DRAM (weight `1 - alpha`):
//!   `U = U_wo * (alpha * U_ro + (1 - alpha) * U_dram)`.
//! - eq. 5, uCache and S-RAC: both mirrored WO-SSDs fail: `U = U_wo^2`.

/// Eq. 3: reliability of a device with `mttf_hours` after `hours`.
pub fn reliability(mttf_hours: f64, hours: f64) -> f64 {
    (-hours / mttf_hours).exp()
}

/// Eq. 4: unreliability of TICA.
pub fn tica_unreliability(u_wo: f64, u_ro: f64, u_dram: f64, alpha: f64) -> f64 {
    u_wo * (alpha * u_ro + (1.0 - alpha) * u_dram)
}

/// Eq. 5: unreliability of a RAID-1 pair.
pub fn mirror_unreliability(u_wo: f64) -> f64 {
    u_wo * u_wo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_reliability_and_rbd_by_hand() {
        // One MTTF: R = 1/e.
        assert!((reliability(2.0e6, 2.0e6) - (-1f64).exp()).abs() < 1e-15);
        // One year of 2M-hour devices: U = 1 - exp(-8766 / 2e6).
        let u = 1.0 - reliability(2.0e6, 8766.0);
        assert!((u - 0.0043735).abs() < 1e-6);
        assert!((mirror_unreliability(u) - u * u).abs() < 1e-18);
        // alpha = 1: TICA is a WO-SSD + RO-SSD pair; alpha = 0: WO + DRAM.
        assert_eq!(tica_unreliability(u, 0.5, 0.25, 1.0), u * 0.5);
        assert_eq!(tica_unreliability(u, 0.5, 0.25, 0.0), u * 0.25);
    }
}
