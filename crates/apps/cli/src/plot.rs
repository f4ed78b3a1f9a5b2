//! The SVG a sweep writes: hit ratio (and, when timed, mean response time)
//! against cache size, one line per policy combination.
//!
//! One plotting path, two renderers. The CLI keeps this plotters SVG because
//! `tiercache sim --out` must work without Python; `tiercache.plot` (matplotlib)
//! follows the same rules, and both are tested against them
//! (`sweep_svg_follows_the_plot_rules` in tests/sim_cli.rs,
//! `test_plot.py::test_sweep_figure_follows_the_plot_rules`):
//!
//! 1. the x axis (cache size) is logarithmic: miss-ratio curves are read on a log axis;
//! 2. a legend label shows only the fields that vary across the series
//!    (a field with one value is named once, in the title);
//! 3. no empty panel: without response times (`--no-timing`) only the
//!    hit-ratio panel is drawn;
//! 4. colours come from the Okabe-Ito colour-blind-safe palette, without its
//!    yellow (near-invisible on white).

use anyhow::{Context, Result};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use tiercache_sim::units::SizeSpec;
use tiercache_sim::SimReport;

/// Okabe-Ito without yellow (#F0E442), in the order matplotlib's
/// `tiercache.plot.PALETTE` uses.
pub const PALETTE: [(u8, u8, u8); 7] = [
    (0x00, 0x72, 0xB2), // blue
    (0xE6, 0x9F, 0x00), // orange
    (0x00, 0x9E, 0x73), // bluish green
    (0xD5, 0x5E, 0x00), // vermillion
    (0xCC, 0x79, 0xA7), // reddish purple
    (0x56, 0xB4, 0xE9), // sky blue
    (0x00, 0x00, 0x00), // black
];

/// One point of a series: cache size (MiB), hit ratio (%), mean response (µs).
type Point = (f64, f64, Option<f64>);

/// The configuration fields a series is told apart by: (name, value).
fn series_fields(r: &SimReport) -> [(&'static str, String); 5] {
    [
        ("assoc", r.assoc.clone()),
        ("eviction", r.eviction.clone()),
        ("write", r.write_policy.clone()),
        ("admission", r.admission.clone()),
        ("line", format!("{} B", r.line_size)),
    ]
}

/// Legend labels showing only the fields that vary across `reports`, and the
/// constant fields (for the title).
pub fn labels(reports: &[&SimReport]) -> (Vec<String>, String) {
    let fields: Vec<_> = reports.iter().map(|r| series_fields(r)).collect();
    let n = fields.first().map_or(0, |f| f.len());
    let varies = |i: usize| fields.iter().any(|f| f[i].1 != fields[0][i].1);
    let labels = fields
        .iter()
        .map(|f| {
            let parts: Vec<String> = (0..n)
                .filter(|&i| varies(i))
                .map(|i| f[i].1.clone())
                .collect();
            if parts.is_empty() {
                "hit ratio".to_string()
            } else {
                parts.join(", ")
            }
        })
        .collect();
    let constant = fields.first().map_or(String::new(), |f0| {
        (0..n)
            .filter(|&i| !varies(i))
            .map(|i| format!("{} {}", f0[i].0, f0[i].1))
            .collect::<Vec<_>>()
            .join(", ")
    });
    (labels, constant)
}

/// Draw the sweep in one SVG file: two panels, or one without response times.
pub fn sweep_svg(path: &Path, trace: &Path, reports: &[(SizeSpec, SimReport)]) -> Result<()> {
    let rs: Vec<&SimReport> = reports.iter().map(|(_, r)| r).collect();
    let (names, constant) = labels(&rs);
    let mut series: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for (name, r) in names.into_iter().zip(&rs) {
        let mib = r.cache_size_bytes as f64 / (1u64 << 20) as f64;
        series
            .entry(name)
            .or_default()
            .push((mib, r.hit_ratio * 100.0, r.mean_response_us));
    }
    for v in series.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xs = || series.values().flatten().map(|p| p.0).filter(|x| *x > 0.0);
    let xmin = xs().fold(f64::INFINITY, f64::min);
    let xmax = xs().fold(0.0f64, f64::max);
    let (xmin, xmax) = if xmin.is_finite() {
        // Whole decades, so the tick labels span them.
        (
            10f64.powf(xmin.log10().floor()),
            10f64.powf((xmax * 1.01).log10().ceil()),
        )
    } else {
        (0.1, 10.0)
    };
    let ymax_t = series
        .values()
        .flatten()
        .filter_map(|p| p.2)
        .fold(0.0f64, f64::max)
        * 1.1;
    let timed = ymax_t > 0.0;
    let size = if timed { (1100, 480) } else { (600, 480) };
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).context("drawing")?;
    let mut title = format!(
        "tiercache sweep: {}",
        trace
            .file_name()
            .map_or("trace".into(), |n| n.to_string_lossy().to_string())
    );
    if !constant.is_empty() {
        title.push_str(&format!(" ({constant})"));
    }
    let root = root.titled(&title, ("sans-serif", 16)).context("drawing")?;
    let draw = |area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
                ylabel: &str,
                ymax: f64,
                pick: &dyn Fn(&Point) -> Option<f64>|
     -> Result<()> {
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax.max(1e-9))
            .context("chart")?;
        chart
            .configure_mesh()
            .x_desc("cache size (MiB, log scale)")
            .y_desc(ylabel)
            .x_label_formatter(&|x| format!("{x}"))
            .draw()
            .context("mesh")?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            let color = RGBColor(r, g, b);
            let data: Vec<(f64, f64)> = pts
                .iter()
                .filter(|p| p.0 > 0.0)
                .filter_map(|p| pick(p).map(|y| (p.0, y)))
                .collect();
            if data.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))
                .context("series")?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(
                    data.iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                )
                .context("points")?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .context("legend")?;
        Ok(())
    };
    if timed {
        let (left, right) = root.split_horizontally(550);
        draw(&left, "hit ratio (%)", 100.0, &|p| Some(p.1))?;
        draw(&right, "mean response time (µs)", ymax_t, &|p| p.2)?;
    } else {
        draw(&root, "hit ratio (%)", 100.0, &|p| Some(p.1))?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
