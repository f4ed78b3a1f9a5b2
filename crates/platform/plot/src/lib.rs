//! The one figure renderer of tiercache: line charts of results as SVG.
//!
//! A [`Figure`] is a title and side-by-side [`Panel`]s of [`Series`]; it is
//! plain data (serde), so the CLI (`tiercache sim --out`) and the Python
//! package (`tiercache.plot`, through `tiercache._native`) describe their
//! figures the same way and draw them with the same code ([`Figure::svg`]).
//! [`sweep_figure`] builds the figure of a sweep from the rows of
//! `tiercache sim --json`, for both.
//!
//! Every figure follows the same rules:
//!
//! 1. size sweeps use a logarithmic x axis (miss-ratio curves are read on a
//!    log axis): [`Panel::logx`];
//! 2. a legend label shows only what varies across the series (a field with
//!    one value is named once, in the title), and a single series has no legend;
//! 3. no empty panel: a sweep without response times (`--no-timing`) has
//!    only its hit-ratio panel;
//! 4. colours come from the Okabe-Ito colour-blind-safe palette without its
//!    yellow (near-invisible on white): [`PALETTE`].

mod render;
mod sweep;

use serde::{Deserialize, Serialize};

pub use sweep::{sweep_figure, SERIES_FIELDS};

/// Okabe-Ito without yellow (#F0E442): series colours, in order.
pub const PALETTE: [&str; 7] = [
    "#0072B2", // blue
    "#E69F00", // orange
    "#009E73", // bluish green
    "#D55E00", // vermillion
    "#CC79A7", // reddish purple
    "#56B4E9", // sky blue
    "#000000", // black
];

/// How a series' line is drawn (series told apart by a second field, such as
/// the trace, get distinct dashes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dash {
    #[default]
    Solid,
    Dashed,
    Dotted,
}

/// One line: points (x, y) in data units, drawn with markers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// X values (positions on a categorical axis).
    pub x: Vec<f64>,
    /// Y values, one per x.
    pub y: Vec<f64>,
    /// Line style.
    #[serde(default)]
    pub dash: Dash,
}

/// One chart: axes with labels (and units) and its series.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Panel {
    /// X axis label, with its unit.
    pub x_label: String,
    /// Y axis label, with its unit.
    pub y_label: String,
    /// Logarithmic x axis (whole decades); points at x <= 0 are left out.
    #[serde(default)]
    pub logx: bool,
    /// Categorical x axis: tick labels of the positions 0, 1, 2, ...
    #[serde(default)]
    pub x_ticks: Option<Vec<String>>,
    /// Top of the y axis [default: 10 % above the largest value].
    #[serde(default)]
    pub y_max: Option<f64>,
    /// Title of the legend (what the series labels are values of).
    #[serde(default)]
    pub legend_title: Option<String>,
    /// The lines, coloured from [`PALETTE`] in order.
    pub series: Vec<Series>,
}

/// A figure: a title over panels side by side.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Title over the panels (empty: none).
    #[serde(default)]
    pub title: String,
    /// The charts, left to right.
    pub panels: Vec<Panel>,
}

/// A figure that cannot be drawn.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotError(pub String);

impl std::fmt::Display for PlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PlotError {}

impl Figure {
    /// The figure as an SVG document.
    pub fn svg(&self) -> Result<String, PlotError> {
        render::svg(self)
    }

    /// Write the SVG document to `path` (which must end in `.svg`).
    pub fn save(&self, path: &std::path::Path) -> Result<(), PlotError> {
        if path.extension().and_then(|e| e.to_str()) != Some("svg") {
            return Err(PlotError(format!(
                "{}: figures are written as SVG (allowed: a file name ending in .svg)",
                path.display()
            )));
        }
        let svg = self.svg()?;
        std::fs::write(path, svg).map_err(|e| PlotError(format!("writing {}: {e}", path.display())))
    }
}
