//! The claims of the OODT paper that the simulated main table tests, each a
//! row of oodt.md's claims table: (claim, our figure, verdict, why not).

use super::table::Table;
use super::{pct, verdict, POLICIES};

/// Why OODT does not beat the previous techniques on trace `t` as in the paper.
pub(super) fn why_prev(t: &str) -> String {
    match t {
        "postmark" => "none of our traces tags metadata and the paper credits metadata and read priority for its Postmark gain (4.3.1); this Postmark trace is large-request (mean 228 KiB) with little reuse".into(),
        "oltp" | "p3" => "the ARC traces are read-only with one request size per block, so OODT's read and randomness terms rank like a plain count; OODT's size-dependent scores reshuffle more between rounds and pay more migrations".into(),
        _ => "all-write, large sequential trace: no read or metadata term to use; migrations dominate".into(),
    }
}

/// The paper's gains over a pure HDD (Figs. 4a, 5a, 6a).
pub(super) fn claims_vs_hdd(tb: &Table, claims: &mut Vec<[String; 4]>) {
    let get = |t: &str, f: &str, p: &str| tb.get(t, f, p);
    let have = |t: &str| tb.have(t);
    let first = tb.first.clone();
    let near4 = tb.near4.clone();
    let hdd_cut = |t: &str, s: &str| get(t, s, "oodt").map(|r| 1.0 - r.norm());
    let why_hdd = "the modelled OODT moves data after seeing it; on this trace first-touch and large requests go to the HDD and migrations cost HDD time (see below); the paper's Postmark/TPC runs have small random reuse and metadata tags";
    let mut hdd_claim = |t: &str, s: &str, paper: f64, label: &str| {
        if !have(t) {
            claims.push([
                label.into(),
                "trace absent".into(),
                "n/a".into(),
                String::new(),
            ]);
            return;
        }
        if let Some(c) = hdd_cut(t, s) {
            let v = verdict(c, paper);
            claims.push([
                label.into(),
                format!("{t} at {s}: {} vs HDD only", pct(-c)),
                v.into(),
                if v == "yes" {
                    String::new()
                } else {
                    why_hdd.into()
                },
            ]);
        }
    };
    hdd_claim(
        "postmark",
        &near4,
        0.72,
        "Postmark: OODT -72 % execution time vs pure HDD with 4 % of blocks on the SSD (Fig. 4a)",
    );
    hdd_claim(
        "oltp",
        &first,
        0.43,
        "TPC-C: -43 % vs HDD with 2 % on the SSD (Fig. 5a)",
    );
    hdd_claim(
        "p3",
        &first,
        0.50,
        "TPC-H: -50 % vs HDD with 2 % on the SSD (Fig. 6a)",
    );
}

/// The gains over the previous techniques (Hystor, RAF) at small fast tiers.
pub(super) fn claims_vs_previous(tb: &Table, claims: &mut Vec<[String; 4]>) {
    let get = |t: &str, f: &str, p: &str| tb.get(t, f, p);
    let have = |t: &str| tb.have(t);
    let size_list = &tb.size_list;
    let small: Vec<&String> = size_list
        .iter()
        .filter(|s| {
            s.trim_end_matches('%')
                .parse::<f64>()
                .is_ok_and(|p| p <= 8.0)
        })
        .collect();
    // Improvement of OODT over the previous techniques (Hystor, RAF): (max, mean).
    let over_prev = |t: &str| -> Option<(f64, f64)> {
        let mut v = Vec::new();
        for s in &small {
            let o = get(t, s, "oodt")?;
            for p in ["hystor", "raf"] {
                v.push(1.0 - o.mean_us / get(t, s, p)?.mean_us);
            }
        }
        if v.is_empty() {
            return None;
        }
        let max = v.iter().cloned().fold(f64::MIN, f64::max);
        Some((max, v.iter().sum::<f64>() / v.len() as f64))
    };
    for (t, paper_max, paper_avg, label) in [
        ("postmark", 0.164, 0.07, "Postmark: OODT up to 16.4 % and 7 % on average less time than the previous techniques (Hystor, RAF), small SSDs (Fig. 4a)"),
        ("oltp", 0.20, f64::NAN, "TPC-C: up to 20 % less than the previous techniques (Fig. 5a)"),
        ("p3", 0.13, 0.03, "TPC-H: up to 13 %, 3 % on average less than the previous techniques (Fig. 6a)"),
        ("iozone", 0.09, 0.05, "IOzone: up to 9 %, 5 % on average less than the previous techniques (Fig. 7b)"),
    ] {
        if !have(t) {
            claims.push([label.into(), "trace absent or left out".into(), "n/a".into(), String::new()]);
            continue;
        }
        if let Some((mx, avg)) = over_prev(t) {
            let v = if mx >= paper_max / 2.0 && (paper_avg.is_nan() || avg > 0.0) {
                "yes"
            } else if mx > 0.005 {
                "partly"
            } else {
                "**no**"
            };
            claims.push([
                label.into(),
                format!("{t}, sizes {}: up to {}, mean {} (positive = OODT faster)", small.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("/"), pct(mx), pct(avg)),
                v.into(),
                if v == "yes" { String::new() } else { why_prev(t) },
            ]);
        }
    }
}

/// Fig. 2: OODT's cost function against frequency only (Postmark).
pub(super) fn claim_cost_function(tb: &Table, claims: &mut Vec<[String; 4]>) {
    let get = |t: &str, f: &str, p: &str| tb.get(t, f, p);
    let have = |t: &str| tb.have(t);
    let size_list = &tb.size_list;
    // Fig. 2: OODT's cost function against frequency only (Postmark).
    if have("postmark") {
        let v: Vec<(String, f64)> = size_list
            .iter()
            .filter_map(|s| {
                Some((
                    s.clone(),
                    get("postmark", s, "oodt")?.mean_us / get("postmark", s, "frequency")?.mean_us,
                ))
            })
            .collect();
        let best = v.iter().map(|x| x.1).fold(f64::MAX, f64::min);
        let verdict = if best <= 0.95 {
            "yes"
        } else if best < 0.995 {
            "direction only"
        } else {
            "**no**"
        };
        claims.push([
            "Fig. 2: OODT's cost function up to 10 % faster than frequency-only (Postmark)".into(),
            format!(
                "OODT / frequency: {}",
                v.iter()
                    .map(|(s, x)| format!("{s} {x:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            verdict.into(),
            if verdict == "yes" {
                String::new()
            } else {
                why_prev("postmark")
            },
        ]);
    }
}

/// Hystor: the worst at the smallest size, better than OODT at the largest.
pub(super) fn claim_hystor(tb: &Table, claims: &mut Vec<[String; 4]>) {
    let get = |t: &str, f: &str, p: &str| tb.get(t, f, p);
    let have = |t: &str| tb.have(t);
    let first = tb.first.clone();
    let last = tb.last.clone();
    // Hystor: worst at the smallest size, better than OODT at the largest.
    if have("postmark") {
        let worst_small = ["oodt", "raf"].iter().all(|p| {
            matches!((get("postmark", &first, "hystor"), get("postmark", &first, p)), (Some(h), Some(o)) if h.mean_us >= o.mean_us)
        });
        let beats_large = matches!((get("postmark", &last, "hystor"), get("postmark", &last, "oodt")), (Some(h), Some(o)) if h.mean_us < o.mean_us);
        let h = |s: &str| {
            get("postmark", s, "hystor")
                .zip(get("postmark", s, "oodt"))
                .map_or(f64::NAN, |(h, o)| h.mean_us / o.mean_us)
        };
        let v = match (worst_small, beats_large) {
            (true, true) => "yes",
            (false, false) => "**no**",
            _ => "partly",
        };
        claims.push([
            "Postmark: Hystor the worst at 2 %, better than OODT at 16 % (Fig. 4a)".into(),
            format!("Hystor / OODT: {first} {:.3}, {last} {:.3}; Hystor the slowest at {first}: {}", h(&first), h(&last), if worst_small { "yes" } else { "no" }),
            v.into(),
            if v == "yes" { String::new() } else { "our Hystor-like policy has no metadata tags to use and does not move a hot block's neighbours (the paper's reason for Hystor's win at 16 %)".into() },
        ]);
    }
}

/// Convergence of the policies at large fast tiers.
pub(super) fn claim_convergence(tb: &Table, claims: &mut Vec<[String; 4]>) {
    let get = |t: &str, f: &str, p: &str| tb.get(t, f, p);
    let first = tb.first.clone();
    let last = tb.last.clone();
    let traces = &tb.traces;
    {
        let spread = |t: &str, s: &str| {
            let v: Vec<f64> = POLICIES
                .iter()
                .filter_map(|p| get(t, s, p).map(|r| r.mean_us))
                .collect();
            let (mn, mx) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            if v.is_empty() {
                f64::NAN
            } else {
                mx / mn - 1.0
            }
        };
        let mut figs = Vec::new();
        let mut agree = 0;
        let mut n = 0;
        for w in traces.iter().filter(|w| w.name != "msr") {
            let (a1, a2) = (spread(w.name, &first), spread(w.name, &last));
            figs.push(format!(
                "{} {:.1} % -> {:.1} %",
                w.name,
                a1 * 100.0,
                a2 * 100.0
            ));
            n += 1;
            if a2 <= a1 {
                agree += 1;
            }
        }
        if n > 0 && first != last {
            let v = if agree == n {
                "yes"
            } else if agree > 0 {
                "partly"
            } else {
                "**no**"
            };
            claims.push([
                "With a large fast tier all techniques perform almost the same (4.3.1)".into(),
                format!("spread of the four policies' means, {first} -> {last}: {}", figs.join("; ")),
                v.into(),
                if v == "yes" { String::new() } else { "where the spread grows, the policies differ in how many blocks they move (migration cost grows with the fast tier), not in what they place".into() },
            ]);
        }
    }
}

/// The fast tier's residency (Postmark) and the memory per data block (5.1).
pub(super) fn claims_residency_and_metadata(tb: &Table, claims: &mut Vec<[String; 4]>) {
    let get = |t: &str, f: &str, p: &str| tb.get(t, f, p);
    let near4 = tb.near4.clone();
    let all = &tb.all;
    if let Some(o) = get("postmark", &near4, "oodt") {
        claims.push([
            "Postmark: the gain needs only 4 % of data blocks migrated to the SSD".into(),
            format!("{near4}: {:.1} % of the footprint resident at the end, {} migrations ({:.1} per footprint block), {:.1} % of block accesses served by the fast tier", o.block_share * 100.0, o.migrations, o.migrations as f64 / o.footprint_blocks.max(1) as f64, o.access_share * 100.0),
            "n/a (no gain to explain)".into(),
            "the 4 % residency holds by construction; our Postmark trace reuses little, so most migrated blocks are not hit again".into(),
        ]);
    }
    if let Some(o) = all.iter().find(|r| r.policy == "oodt") {
        let b = all
            .iter()
            .find(|r| r.policy == "frequency")
            .map_or(f64::NAN, |r| r.meta_bytes);
        let v = if o.meta_bytes <= 18.5 {
            "yes"
        } else {
            "**no**"
        };
        claims.push([
            "5.1: 18 bytes of memory per data block (6 mapping + 12 statistics; 0.43 % at 4 KiB)"
                .into(),
            format!(
                "{:.2} B per block ({:.2} % at 4 KiB); the baselines {:.2} B",
                o.meta_bytes,
                o.meta_bytes / 4096.0 * 100.0,
                b
            ),
            v.into(),
            if v == "yes" {
                "(ours is smaller: 4 B mapping entry, two f32 statistics, a bit per fast slot)"
                    .into()
            } else {
                String::new()
            },
        ]);
    }
}

/// The claims no shared trace can test.
pub(super) fn claims_not_measured(claims: &mut Vec<[String; 4]>) {
    claims.push([
        "Fig. 10b / 3.2.3: metadata weight 0.1 (optimum ~0.15 on ext2)".into(),
        "not measured".into(),
        "n/a".into(),
        "none of the shared traces tags metadata requests (the blkparse sample has no RWBS 'M'), so the metadata term is always zero".into(),
    ]);
    claims.push([
        "Webserver (Filebench): -41 % vs HDD at 16 %, up to 30 % (16 % average) better than previous techniques (Fig. 8c)".into(),
        "not measured".into(),
        "n/a".into(),
        "no webserver trace among the shared traces".into(),
    ]);
}
