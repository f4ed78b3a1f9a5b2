//! azor.md: the thesis's claims beside our figures, the simulated studies'
//! tables, the metadata footprint, and the live part's section.

use super::{live, Args, Row, TraceDef, TRACES};
use std::fmt::Write as _;

/// Why a claim's trace has no simulated figure in this run.
fn absent(a: &Args, t: &str) -> String {
    if a.no_sim {
        "simulated studies skipped (--no-sim)".into()
    } else if a.run.quick {
        format!("trace {t} absent from this run (quick mode runs postmark and msr-hm only)")
    } else {
        format!("trace {t} absent from this run")
    }
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.0} %", x * 100.0)
    } else {
        "-".into()
    }
}

fn find<'a>(rows: &'a [Row], study: &str, trace: &str, f: impl Fn(&Row) -> bool) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.study == study && r.trace == trace && f(r))
        .collect()
}

pub(super) fn report(
    md: &mut String,
    a: &Args,
    rows: &[Row],
    meta: &[(&str, f64, f64)],
    live: Option<&live::LiveResults>,
    notes: &[String],
    secs: f64,
) {
    let traces: Vec<&TraceDef> = TRACES
        .iter()
        .filter(|t| rows.iter().any(|r| r.trace == t.name))
        .collect();
    let _ = writeln!(
        md,
        "# Azor reproduction{}\n",
        if a.run.quick { " (--quick)" } else { "" }
    );
    let _ = writeln!(
        md,
        "Simulated part: the shared traces replayed closed-loop at queue depth 1 through the SSD cache model \
         (LRU, 4 KiB lines unless varied, cache 10 % of the trace's 4 KiB footprint unless varied, default device profile). \
         Speedup = mean response time of the HDD alone / with the cache. Traces: {}. Run time {secs:.0} s.\n",
        traces
            .iter()
            .map(|t| format!("{} ({}, stand-in for {})", t.name, t.rel, t.analog))
            .collect::<Vec<_>>()
            .join("; ")
    );
    claim_speedups(md, a, rows);
    claim_two_level_selection(md, a, rows);
    claim_write_policy(md, rows, &traces);
    claim_associativity(md, rows, &traces);
    claims_metadata_and_line_size(md, rows, &traces, meta);
    study_tables(md, rows, &traces, meta);
    match live {
        Some(l) => l.markdown(md),
        None => {
            let _ = writeln!(md, "## Live part\n\nNot run (see the notes).\n");
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(md, "## Notes\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
        md.push('\n');
    }
}

/// The thesis's speedup claims, then the claims table's head.
fn claim_speedups(md: &mut String, a: &Args, rows: &[Row]) {
    let _ = writeln!(md, "## Thesis claims beside ours\n");
    let _ = writeln!(
        md,
        "| Thesis claim | Our figure | Agrees? | Why not / note |\n|---|---|---|---|"
    );
    let best = |trace: &str| -> f64 {
        find(rows, "size", trace, |r| r.r().assoc == "full")
            .iter()
            .map(|r| r.speedup())
            .fold(f64::NAN, f64::max)
    };
    let claims: [(&str, &str, f64); 4] = [
        ("TPC-H", "p3", 14.02),
        ("SPECsfs2008", "msr-hm", 1.63),
        ("PostMark", "postmark", 1.72),
        ("Hammerora", "oltp", 1.55),
    ];
    for (w, t, x) in claims {
        let ours = best(t);
        let (fig, agree, why) = if ours.is_finite() {
            let ok = (ours - x).abs() / x < 0.3;
            (
                format!("{ours:.2}x ({t}, fully associative, best cache size)"),
                if ok { "yes (within 30 %)" } else { "no" },
                if ok {
                    String::new()
                } else {
                    format!("a trace of another workload ({t}) under a modelled HDD/SSD, not the thesis's 12-disk RAID-0 and X25-E; the gain depends on how much of the run the cache can absorb")
                },
            )
        } else {
            ("not run".into(), "-", absent(a, t))
        };
        let _ = writeln!(
            md,
            "| {w}: SSD caching up to {x}x over the HDD | {fig} | {agree} | {why} |"
        );
    }
}

/// The 2LBS claims: the best gain of a 2LBS level over none.
fn claim_two_level_selection(md: &mut String, a: &Args, rows: &[Row]) {
    let gains2: [(&str, &str, f64); 4] = [
        ("TPC-H", "p3", 0.95),
        ("SPECsfs2008", "msr-hm", 0.16),
        ("PostMark", "postmark", 0.28),
        ("Hammerora", "oltp", 0.34),
    ];
    for (w, t, x) in gains2 {
        let mut best = (f64::NAN, String::new());
        for assoc in ["direct", "full"] {
            let base = find(rows, "2lbs", t, |r| {
                r.twolbs == "none" && r.r().assoc == assoc
            });
            for r in find(rows, "2lbs", t, |r| {
                r.twolbs != "none" && r.r().assoc == assoc
            }) {
                if let Some(b) = base.first() {
                    let g = r.speedup() / b.speedup() - 1.0;
                    if best.0.is_nan() || g > best.0 {
                        best = (g, format!("{assoc}, {}", r.twolbs));
                    }
                }
            }
        }
        let (fig, agree, why) = if best.0.is_finite() {
            let ok = best.0 > 0.0 && (best.0 - x).abs() <= x.max(0.1);
            (
                format!("{} ({t}, {})", pct(best.0), best.1),
                if ok { "partly" } else { "no" },
                "the shared traces carry no filesystem metadata class, so level 1 (metadata first) has nothing to prefer; only level 2 (frequency) acts, and only where conflicts evict hot blocks".to_string(),
            )
        } else {
            ("not run".into(), "-", absent(a, t))
        };
        let _ = writeln!(
            md,
            "| {w}: 2LBS adds up to {} | {fig} | {agree} | {why} |",
            pct(x)
        );
    }
}

/// The write-policy claim: write-hdd-upd against the other write-through policies.
fn claim_write_policy(md: &mut String, rows: &[Row], traces: &[&TraceDef]) {
    let mut wins = Vec::new();
    for t in traces {
        for assoc in ["direct", "full"] {
            let rs = find(rows, "write", t.name, |r| {
                r.r().assoc == assoc
                    && r.r().write_policy != "write-back"
                    && r.r().write_policy != "read-only"
            });
            if let Some(b) = rs.iter().max_by(|x, y| x.speedup().total_cmp(&y.speedup())) {
                // Within 0.5 % of the best counts as a tie, won by write-hdd-upd if it is in it.
                let upd = rs
                    .iter()
                    .find(|r| r.r().write_policy == "write-hdd-upd")
                    .filter(|u| u.speedup() >= b.speedup() * 0.995);
                let w = upd.map_or(b.r().write_policy.clone(), |_| "write-hdd-upd".to_string());
                wins.push(format!("{} {assoc}: {w}", t.name));
            }
        }
    }
    let upd = wins.iter().filter(|w| w.ends_with("write-hdd-upd")).count();
    let _ = writeln!(
        md,
        "| write-hdd-upd is the best write policy (of the write-through family) | best in {upd} of {}: {} | {} | ties are common: on read-heavy traces the three policies differ only on write hits; write-back (not in Azor) is in the table below |",
        wins.len(),
        wins.join("; "),
        if upd * 2 >= wins.len() && !wins.is_empty() { "yes" } else { "no" }
    );
}

/// The associativity claim: the largest FA/DM difference.
fn claim_associativity(md: &mut String, rows: &[Row], traces: &[&TraceDef]) {
    let mut assoc_best = (f64::NAN, String::new());
    for t in traces {
        let dm = find(rows, "assoc", t.name, |r| r.r().assoc == "direct");
        let fa = find(rows, "assoc", t.name, |r| r.r().assoc == "full");
        if let (Some(d), Some(f)) = (dm.first(), fa.first()) {
            let g = f.speedup() / d.speedup() - 1.0;
            if assoc_best.0.is_nan() || g.abs() > assoc_best.0.abs() {
                assoc_best = (g, t.name.to_string());
            }
        }
    }
    let _ = writeln!(
        md,
        "| Associativity changes performance by up to 25 % (FA over DM, SPECsfs2008) | largest FA/DM difference {} ({}) | {} | the thesis's figure is at a cache far smaller than SPECsfs's file set; ours at 10 % of each trace's footprint |",
        pct(assoc_best.0),
        assoc_best.1,
        if assoc_best.0.abs() <= 0.35 && assoc_best.0.abs() >= 0.05 { "yes" } else { "no" }
    );
}

/// The metadata and line-size claims.
fn claims_metadata_and_line_size(
    md: &mut String,
    rows: &[Row],
    traces: &[&TraceDef],
    meta: &[(&str, f64, f64)],
) {
    let (dm4, fa4) = (meta[0].1, meta[0].2);
    let (dm64, fa64) = (meta[meta.len() - 1].1, meta[meta.len() - 1].2);
    let _ = writeln!(
        md,
        "| Metadata: DM 1.28 MB and FA 6.04 MB per GB of SSD (4.7x) at 4 KiB lines | DM {dm4:.2} MB, FA {fa4:.2} MB per GiB ({:.1}x) | {} | our FA table holds the tag, state bits, LRU links as 32-bit indices and a hash chain; the thesis's DM keeps a 64-bit tag per block |",
        fa4 / dm4,
        if (dm4 - 1.28).abs() / 1.28 < 0.5 && (fa4 - 6.04).abs() / 6.04 < 0.5 { "yes (within 50 %)" } else { "no" }
    );
    let _ = writeln!(
        md,
        "| 64 KiB lines cut metadata by up to 1.90x (DM) and 6.87x (FA) | {:.2}x (DM), {:.2}x (FA) | {} | ours falls almost in proportion to the number of lines (per-line state dominates; the per-4 KiB valid/dirty bits are small); the thesis's 1.90x for DM says most of its metadata stays per 4 KiB block |",
        dm4 / dm64,
        fa4 / fa64,
        if (dm4 / dm64) > 1.0 && (fa4 / fa64) > 1.0 { "in direction" } else { "no" }
    );
    let mut degr = 0;
    let mut total = 0;
    for t in traces {
        for assoc in ["direct", "full"] {
            let rs = find(rows, "line", t.name, |r| r.r().assoc == assoc);
            if let (Some(f), Some(l)) = (rs.first(), rs.last()) {
                total += 1;
                if l.speedup() < f.speedup() {
                    degr += 1;
                }
            }
        }
    }
    let _ = writeln!(
        md,
        "| Larger lines always degrade performance | 64 KiB slower than 4 KiB in {degr} of {total} trace/associativity pairs | {} | a trace with sequential runs (PostMark, IOzone) gains from larger lines' prefetch |\n",
        if degr == total { "yes" } else { "partly" }
    );
}

/// One table per study, findings, and the metadata footprint table.
fn study_tables(md: &mut String, rows: &[Row], traces: &[&TraceDef], meta: &[(&str, f64, f64)]) {
    let _ = writeln!(md, "## Simulated studies (speedup x / hit ratio %)\n");
    for (s, title) in [
        ("assoc", "Associativity, cache 10 %, write-hdd-upd"),
        (
            "size",
            "Cache size (% of the 4 KiB footprint), write-hdd-upd",
        ),
        ("line", "Line size, cache 10 %, write-hdd-upd"),
        ("write", "Write policy, cache 10 %"),
        ("2lbs", "2LBS levels, cache 10 %, write-hdd-upd"),
    ] {
        let _ = writeln!(md, "### {title} (azor-{s}.csv, azor-{s}.svg)\n");
        let _ = writeln!(
            md,
            "| trace | configuration | speedup | hit % | HDD ops |\n|---|---|---|---|---|"
        );
        for r in rows.iter().filter(|r| r.study == s) {
            let x = r.r();
            let conf = match s {
                "size" => format!("{} % {}", r.size_pct, x.assoc),
                "line" => format!("{} KiB {}", x.line_size / 1024, x.assoc),
                "write" => format!("{} {}", x.write_policy, x.assoc),
                "2lbs" => format!("2LBS {} {}", r.twolbs, x.assoc),
                _ => x.assoc.clone(),
            };
            let _ = writeln!(
                md,
                "| {} | {conf} | {:.2} | {:.1} | {} |",
                r.trace,
                r.speedup(),
                x.hit_ratio * 100.0,
                x.hdd_ops
            );
        }
        md.push('\n');
    }
    for t in traces {
        let full = find(rows, "assoc", t.name, |r| r.r().assoc == "full");
        for r in find(rows, "assoc", t.name, |r| r.r().assoc.ends_with("-way")) {
            if let Some(f) = full.first() {
                if r.r().hdd_ops > 3 * f.r().hdd_ops.max(1) {
                    let _ = writeln!(
                        md,
                        "Finding: on {} the {} cache sends {} HDD requests against {} for the fully associative one at a similar hit ratio: \
                         the set-associative model issues its misses line by line where the direct-mapped and fully associative ones \
                         coalesce a request's contiguous misses, so its speedup here understates the associativity.\n",
                        t.name,
                        r.r().assoc,
                        r.r().hdd_ops,
                        f.r().hdd_ops
                    );
                }
            }
        }
    }
    let _ = writeln!(
        md,
        "### Metadata footprint per GiB of cache (azor-metadata.csv)\n"
    );
    let _ = writeln!(md, "| line | direct-mapped MB/GiB | fully associative MB/GiB | thesis DM / FA at 4 KiB |\n|---|---|---|---|");
    for (l, dm, fa) in meta {
        let _ = writeln!(
            md,
            "| {l} | {dm:.3} | {fa:.3} | {} |",
            if *l == "4KiB" { "1.28 / 6.04" } else { "" }
        );
    }
    md.push('\n');
}
