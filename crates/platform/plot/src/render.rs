//! Drawing a [`Figure`] with plotters' SVG backend. A logarithmic axis is
//! drawn as log10(x) on a linear axis with ticks at whole decades labelled
//! 10^k, so every panel has the same coordinate type.

use crate::{Dash, Figure, Panel, PlotError, PALETTE};
use plotters::coord::Shift;
use plotters::prelude::*;

/// Width of one panel and height of the figure, in pixels.
const PANEL: (u32, u32) = (560, 460);

fn err(what: &str) -> impl Fn(String) -> PlotError + '_ {
    move |e| PlotError(format!("drawing the figure ({what}): {e}"))
}

fn colour(i: usize) -> RGBColor {
    let hex = PALETTE[i % PALETTE.len()].trim_start_matches('#');
    let byte = |k: usize| u8::from_str_radix(&hex[k..k + 2], 16).unwrap_or(0);
    RGBColor(byte(0), byte(2), byte(4))
}

pub fn svg(fig: &Figure) -> Result<String, PlotError> {
    let n = fig.panels.len().max(1) as u32;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (PANEL.0 * n, PANEL.1)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| err("background")(e.to_string()))?;
        let area = if fig.title.is_empty() {
            root.clone()
        } else {
            root.titled(&fig.title, ("sans-serif", 16))
                .map_err(|e| err("title")(e.to_string()))?
        };
        let areas = area.split_evenly((1, n as usize));
        for (panel, a) in fig.panels.iter().zip(&areas) {
            draw_panel(a, panel)?;
        }
        root.present().map_err(|e| err("output")(e.to_string()))?;
    }
    Ok(buf)
}

/// Points of a series in drawing coordinates (log10 of x on a log axis).
fn points(panel: &Panel, x: &[f64], y: &[f64]) -> Vec<(f64, f64)> {
    x.iter()
        .zip(y)
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!panel.logx || **x > 0.0))
        .map(|(&x, &y)| (if panel.logx { x.log10() } else { x }, y))
        .collect()
}

/// The x range in drawing coordinates: whole decades on a log axis, the
/// categories with half a step either side, else the data with 5 % margins.
fn x_range(panel: &Panel, xs: &[f64]) -> (f64, f64) {
    if let Some(t) = &panel.x_ticks {
        return (-0.5, t.len().max(1) as f64 - 0.5);
    }
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if panel.logx {
        let (lo, hi) = (lo.floor(), (hi + 1e-9).ceil());
        return (lo, if hi > lo { hi } else { lo + 1.0 });
    }
    let pad = if hi > lo { (hi - lo) * 0.05 } else { 1.0 };
    (lo - pad, hi + pad)
}

/// A tick label: 10^k at whole decades on a log axis, the category name on
/// a categorical axis (nothing between), else the number.
fn tick(panel: &Panel, v: f64) -> String {
    let whole = (v - v.round()).abs() < 1e-6;
    if let Some(t) = &panel.x_ticks {
        return match (whole, usize::try_from(v.round() as i64)) {
            (true, Ok(i)) => t.get(i).cloned().unwrap_or_default(),
            _ => String::new(),
        };
    }
    if panel.logx {
        return if whole {
            format!("{}", 10f64.powi(v.round() as i32))
        } else {
            String::new()
        };
    }
    number(v)
}

/// A number with at most six decimals and no trailing zeros (`10`, `0.25`).
fn number(v: f64) -> String {
    format!("{}", (v * 1e6).round() / 1e6)
}

fn draw_panel(area: &DrawingArea<SVGBackend, Shift>, panel: &Panel) -> Result<(), PlotError> {
    let lines: Vec<Vec<(f64, f64)>> = panel
        .series
        .iter()
        .map(|s| points(panel, &s.x, &s.y))
        .collect();
    let xs: Vec<f64> = lines.iter().flatten().map(|p| p.0).collect();
    let (x0, x1) = x_range(panel, &xs);
    let ys = || lines.iter().flatten().map(|p| p.1);
    let y0 = ys().fold(0.0f64, f64::min);
    let y1 = panel
        .y_max
        .unwrap_or_else(|| ys().fold(0.0f64, f64::max) * 1.1);
    let y1 = if y1 > y0 { y1 } else { y0 + 1.0 };
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err("axes")(e.to_string()))?;
    let n_ticks = match &panel.x_ticks {
        Some(t) => t.len() + 1,
        None if panel.logx => (x1 - x0).round() as usize + 1,
        None => 8,
    };
    let fmt = |v: &f64| tick(panel, *v);
    chart
        .configure_mesh()
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .x_labels(n_ticks)
        .x_label_formatter(&fmt)
        .y_label_formatter(&|v| number(*v))
        .draw()
        .map_err(|e| err("axes")(e.to_string()))?;
    let legend = panel.series.len() > 1;
    if legend {
        if let Some(title) = &panel.legend_title {
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(|e| err("legend")(e.to_string()))?
                .label(title.as_str());
        }
    }
    for (i, (s, pts)) in panel.series.iter().zip(&lines).enumerate() {
        draw_series(&mut chart, i, s.dash, &s.label, pts)?;
    }
    if legend {
        let rising = lines.iter().flatten().next().map(|p| p.1) < ys().next_back();
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(if rising {
                SeriesLabelPosition::LowerRight
            } else {
                SeriesLabelPosition::UpperRight
            })
            .draw()
            .map_err(|e| err("legend")(e.to_string()))?;
    }
    Ok(())
}

type Chart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

fn draw_series(
    chart: &mut Chart<'_, '_>,
    i: usize,
    dash: Dash,
    label: &str,
    pts: &[(f64, f64)],
) -> Result<(), PlotError> {
    if pts.is_empty() {
        return Ok(());
    }
    let c = colour(i);
    let style = c.stroke_width(2);
    let e = |e: DrawingAreaErrorKind<_>| err("series")(e.to_string());
    let anno = match dash {
        Dash::Solid => chart
            .draw_series(LineSeries::new(pts.to_vec(), style))
            .map_err(e)?,
        Dash::Dashed => chart
            .draw_series(DashedLineSeries::new(pts.to_vec(), 8, 5, style))
            .map_err(e)?,
        Dash::Dotted => chart
            .draw_series(DashedLineSeries::new(pts.to_vec(), 2, 4, style))
            .map_err(e)?,
    };
    anno.label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    chart
        .draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, c.filled())))
        .map_err(e)?;
    Ok(())
}
