//! The SVG a sweep writes: hit ratio and mean response time against cache size,
//! one line per policy combination.

use anyhow::{Context, Result};
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use tiercache_sim::units::SizeSpec;
use tiercache_sim::SimReport;

/// One point of a series: cache size (MiB), hit ratio (%), mean response (µs).
type Point = (f64, f64, Option<f64>);

fn series_label(r: &SimReport) -> String {
    format!(
        "{} {} {} {} {} B",
        r.assoc, r.eviction, r.write_policy, r.admission, r.line_size
    )
}

/// Draw the sweep as two panels in one SVG file.
pub fn sweep_svg(path: &Path, trace: &Path, reports: &[(SizeSpec, SimReport)]) -> Result<()> {
    let mut series: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for (_, r) in reports {
        let mib = r.cache_size_bytes as f64 / (1u64 << 20) as f64;
        series.entry(series_label(r)).or_default().push((
            mib,
            r.hit_ratio * 100.0,
            r.mean_response_us,
        ));
    }
    for v in series.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let xmax = series
        .values()
        .flatten()
        .map(|p| p.0)
        .fold(0.0f64, f64::max)
        * 1.05;
    let ymax_t = series
        .values()
        .flatten()
        .filter_map(|p| p.2)
        .fold(0.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, (1100, 480)).into_drawing_area();
    root.fill(&WHITE).context("drawing")?;
    let title = format!(
        "tiercache sweep: {}",
        trace
            .file_name()
            .map_or("trace".into(), |n| n.to_string_lossy().to_string())
    );
    let root = root.titled(&title, ("sans-serif", 18)).context("drawing")?;
    let (left, right) = root.split_horizontally(550);
    let draw = |area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
                ylabel: &str,
                ymax: f64,
                pick: &dyn Fn(&Point) -> Option<f64>|
     -> Result<()> {
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax.max(1e-9), 0.0..ymax.max(1e-9))
            .context("chart")?;
        chart
            .configure_mesh()
            .x_desc("cache size (MiB)")
            .y_desc(ylabel)
            .draw()
            .context("mesh")?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let data: Vec<(f64, f64)> = pts
                .iter()
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
    draw(&left, "hit ratio (%)", 100.0, &|p| Some(p.1))?;
    if ymax_t > 0.0 {
        draw(&right, "mean response time (µs)", ymax_t, &|p| p.2)?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
