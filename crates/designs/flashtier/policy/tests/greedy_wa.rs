//! The page-mapped layer's write amplification under uniform random
//! overwrites against the analytical greedy-collection result.

use tiercache_flashtier_policy::flash::{Flash, Geometry, Timing};
use tiercache_flashtier_policy::ftl::page::{greedy_uniform_wa, PageFtl};
use tiercache_flashtier_policy::ftl::Translation;
use tiercache_flashtier_policy::GcPolicy;

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Measured WA of greedy collection with `u` logical pages on 1024 blocks of
/// 64 pages, after a fill and 4 x u warm-up overwrites, over 6 x u overwrites.
fn measured_wa(u: u64) -> f64 {
    let geo = Geometry {
        packages: 1,
        planes_per_package: 4,
        blocks_per_plane: 256,
        pages_per_block: 64,
        page_bytes: 4096,
    };
    let mut f = PageFtl::new(
        Flash::new(geo, Timing::default()).unwrap(),
        GcPolicy::Greedy,
        2,
        false,
    );
    for l in 0..u {
        f.write(l, false).unwrap();
    }
    let mut s = 7u64;
    for _ in 0..4 * u {
        f.write(splitmix(&mut s) % u, false).unwrap();
    }
    let before = f.flash().stats.clone();
    for _ in 0..6 * u {
        f.write(splitmix(&mut s) % u, false).unwrap();
    }
    let st = &f.flash().stats;
    let host = st.host_page_writes - before.host_page_writes;
    let copies = st.gc_page_copies - before.gc_page_copies;
    (host + copies) as f64 / host as f64
}

#[test]
fn greedy_wa_matches_closed_form_within_5_percent() {
    let t = 1024.0 * 64.0;
    // Overprovisioning factors rho = (T - U) / U of 0.15, 0.3 and 0.6.
    for rho in [0.15f64, 0.3, 0.6] {
        let u = (t / (1.0 + rho)).floor();
        let model = greedy_uniform_wa(u, t);
        let sim = measured_wa(u as u64);
        let err = (sim - model).abs() / model;
        eprintln!(
            "rho {rho}: simulated WA {sim:.3}, closed form {model:.3}, error {:.1} %",
            err * 100.0
        );
        assert!(
            err < 0.05,
            "rho {rho}: simulated {sim:.3} vs model {model:.3}"
        );
    }
}

#[test]
fn cost_benefit_is_no_better_than_greedy_under_uniform_writes() {
    // Under uniform traffic age carries no information: cost-benefit cannot
    // beat greedy (Desnoyers 2012), and must stay within 15 % of it.
    let geo = Geometry {
        packages: 1,
        planes_per_package: 1,
        blocks_per_plane: 256,
        pages_per_block: 64,
        page_bytes: 4096,
    };
    let u = (256.0 * 64.0 / 1.3) as u64;
    let mut wa = Vec::new();
    for p in [GcPolicy::Greedy, GcPolicy::CostBenefit] {
        let mut f = PageFtl::new(Flash::new(geo, Timing::default()).unwrap(), p, 2, false);
        let mut s = 3u64;
        for l in 0..u {
            f.write(l, false).unwrap();
        }
        for _ in 0..10 * u {
            f.write(splitmix(&mut s) % u, false).unwrap();
        }
        let st = &f.flash().stats;
        wa.push((st.host_page_writes + st.gc_page_copies) as f64 / st.host_page_writes as f64);
    }
    assert!(
        wa[1] >= wa[0] * 0.99,
        "greedy {} cost-benefit {}",
        wa[0],
        wa[1]
    );
    assert!(
        wa[1] <= wa[0] * 1.15,
        "greedy {} cost-benefit {}",
        wa[0],
        wa[1]
    );
}
