//! The figure of a sweep, from the rows of `tiercache sim --json` (or of the
//! Python DataFrame, which has the same field names): hit ratio and, when the
//! runs have response times, mean response time against cache size, one line
//! per combination of the configuration fields that vary.

use crate::{Figure, Panel, Series};
use serde_json::Value;

/// Configuration fields a sweep's series are told apart by, with their names
/// as a reader says them.
pub const SERIES_FIELDS: [(&str, &str); 10] = [
    ("mode", "mode"),
    ("assoc", "associativity"),
    ("eviction", "eviction"),
    ("write_policy", "write policy"),
    ("admission", "admission"),
    ("line_size", "line size"),
    ("policy", "policy"),
    ("tier_policy", "tier policy"),
    ("tica_policy", "TICA policy"),
    ("trace", "trace"),
];

const MIB: f64 = (1u64 << 20) as f64;

/// A field's value as shown in a label or the title.
fn shown(field: &str, v: &Value) -> String {
    match v {
        Value::String(s) if field == "trace" => std::path::Path::new(s)
            .file_name()
            .map_or(s.clone(), |n| n.to_string_lossy().into_owned()),
        Value::String(s) => s.clone(),
        Value::Number(n) if field == "line_size" => format!("{n} B"),
        Value::Null => "-".to_string(),
        v => v.to_string(),
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
}

/// One run: cache size (MiB), hit ratio (%), mean response time (µs).
type Point = (f64, f64, Option<f64>);

/// A series: its legend label and its runs, by cache size.
type Line = (String, Vec<Point>);

/// The runs grouped by the values of the `varying` fields, in the order of first appearance.
fn lines(rows: &[&Value], varying: &[(&str, &str)]) -> Vec<Line> {
    let mut series: Vec<Line> = Vec::new();
    for r in rows {
        let label = varying
            .iter()
            .map(|(f, _)| shown(f, &r[*f]))
            .collect::<Vec<_>>()
            .join(", ");
        let pt = (
            r["cache_size_bytes"].as_f64().unwrap_or(0.0) / MIB,
            r["hit_ratio"].as_f64().unwrap_or(f64::NAN) * 100.0,
            r["mean_response_us"].as_f64(),
        );
        match series.iter_mut().find(|(l, _)| *l == label) {
            Some((_, pts)) => pts.push(pt),
            None => series.push((label, vec![pt])),
        }
    }
    for (_, pts) in &mut series {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// A panel of `y_label` against cache size, `pick` choosing the y of a run.
fn panel(
    lines: &[Line],
    y_label: &str,
    y_max: Option<f64>,
    legend_title: Option<String>,
    pick: fn(&Point) -> Option<f64>,
) -> Panel {
    let series = lines
        .iter()
        .map(|(label, pts)| {
            let kept: Vec<(f64, f64)> = pts.iter().filter_map(|p| Some((p.0, pick(p)?))).collect();
            Series {
                label: if label.is_empty() {
                    "hit ratio".into()
                } else {
                    label.clone()
                },
                x: kept.iter().map(|p| p.0).collect(),
                y: kept.iter().map(|p| p.1).collect(),
                ..Series::default()
            }
        })
        .collect();
    Panel {
        x_label: "Cache size (MiB, log scale)".into(),
        y_label: y_label.into(),
        logx: true,
        x_ticks: None,
        y_max,
        legend_title,
        series,
    }
}

/// The sweep's figure. `title` replaces the default head
/// ("tiercache sweep: TRACE", or "tiercache sweep" over several traces);
/// the fields with one value follow it in parentheses.
pub fn sweep_figure(rows: &[Value], title: Option<&str>) -> Figure {
    let rows: Vec<&Value> = rows
        .iter()
        .filter(|r| r["cache_size_bytes"].as_f64().is_some())
        .collect();
    let present: Vec<(&str, &str)> = SERIES_FIELDS
        .iter()
        .copied()
        .filter(|(f, _)| rows.iter().any(|r| !r[*f].is_null()))
        .collect();
    let values = |f: &str| -> Vec<String> { rows.iter().map(|r| shown(f, &r[f])).collect() };
    let (varying, constant): (Vec<_>, Vec<_>) = present
        .iter()
        .partition(|(f, _)| values(f).iter().any(|v| *v != values(f)[0]));
    let series = lines(&rows, &varying);
    let head = match (title, constant.iter().any(|(f, _)| *f == "trace")) {
        (Some(t), _) => t.to_string(),
        (None, true) => format!("tiercache sweep: {}", shown("trace", &rows[0]["trace"])),
        (None, false) => "tiercache sweep".to_string(),
    };
    let fixed: Vec<String> = constant
        .iter()
        .filter(|(f, _)| *f != "trace")
        .map(|(f, name)| format!("{name} {}", shown(f, &rows[0][*f])))
        .collect();
    let names: Vec<&str> = varying.iter().map(|(_, n)| *n).collect();
    let legend = (!names.is_empty()).then(|| capitalised(&names.join(" / ")));
    let mut panels = vec![panel(
        &series,
        "Hit ratio (%)",
        Some(100.0),
        legend.clone(),
        |p| Some(p.1),
    )];
    if series.iter().flat_map(|(_, p)| p).any(|p| p.2.is_some()) {
        panels.push(panel(
            &series,
            "Mean response time (µs)",
            None,
            legend,
            |p| p.2,
        ));
    }
    Figure {
        title: if fixed.is_empty() {
            head
        } else {
            format!("{head} ({})", fixed.join(", "))
        },
        panels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rows(timed: bool) -> Vec<Value> {
        let mut out = Vec::new();
        for ev in ["lru", "arc"] {
            for (i, mib) in [1u64, 8, 64, 512].into_iter().enumerate() {
                out.push(json!({
                    "trace": "/x/t.csv", "cache_size_bytes": mib << 20, "eviction": ev,
                    "write_policy": "write-back", "assoc": "full", "admission": "always",
                    "line_size": 4096, "hit_ratio": 0.1 * (i + 1) as f64,
                    "mean_response_us": if timed { json!(100.0 - i as f64) } else { Value::Null },
                }));
            }
        }
        out
    }

    #[test]
    fn legend_names_only_what_varies_and_the_title_the_rest() {
        let f = sweep_figure(&rows(false), None);
        let labels: Vec<_> = f.panels[0]
            .series
            .iter()
            .map(|s| s.label.as_str())
            .collect();
        assert_eq!(labels, ["lru", "arc"]);
        assert_eq!(f.panels[0].legend_title.as_deref(), Some("Eviction"));
        assert!(
            f.title.starts_with("tiercache sweep: t.csv ("),
            "{}",
            f.title
        );
        assert!(
            f.title.contains("write policy write-back") && f.title.contains("line size 4096 B")
        );
        assert!(!f.title.contains("lru"));
    }

    #[test]
    fn no_empty_panel_and_a_log_axis() {
        let untimed = sweep_figure(&rows(false), None);
        assert_eq!(untimed.panels.len(), 1);
        let timed = sweep_figure(&rows(true), Some("mine"));
        assert_eq!(timed.panels.len(), 2);
        assert!(timed.panels.iter().all(|p| p.logx));
        assert_eq!(timed.panels[1].series[0].y, [100.0, 99.0, 98.0, 97.0]);
        assert!(timed.title.starts_with("mine ("));
        assert_eq!(timed.panels[0].series[0].x, [1.0, 8.0, 64.0, 512.0]);
    }

    /// The texts of an SVG document, trimmed.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|s| Some(s.split_once('>')?.1.split('<').next()?.trim().to_string()))
            .collect()
    }

    #[test]
    fn the_svg_uses_the_palette_and_decade_ticks() {
        let svg = sweep_figure(&rows(false), None).svg().unwrap();
        for c in svg
            .split('#')
            .skip(1)
            .map(|s| s[..6.min(s.len())].to_uppercase())
        {
            let grey = c.len() == 6 && c[0..2] == c[2..4] && c[2..4] == c[4..6];
            assert!(
                grey || crate::PALETTE.contains(&format!("#{c}").as_str()),
                "colour #{c}"
            );
        }
        let texts = texts(&svg);
        for t in ["1", "10", "100", "1000", "lru", "arc", "Eviction"] {
            assert!(texts.iter().any(|x| x == t), "{t} missing from {texts:?}");
        }
        assert!(!svg.contains("Mean response time"));
    }

    #[test]
    fn categorical_and_dashed_panels_draw() {
        let f = Figure {
            title: String::new(),
            panels: vec![Panel {
                x_label: "Cache size".into(),
                y_label: "Hit ratio (%)".into(),
                x_ticks: Some(vec!["1GiB".into(), "4GiB".into()]),
                series: vec![Series {
                    label: "a".into(),
                    x: vec![0.0, 1.0],
                    y: vec![1.0, 2.0],
                    dash: crate::Dash::Dashed,
                }],
                ..Panel::default()
            }],
        };
        let svg = f.svg().unwrap();
        let ticks: Vec<String> = texts(&svg)
            .into_iter()
            .filter(|t| t.ends_with("GiB"))
            .collect();
        assert_eq!(ticks, ["1GiB", "4GiB"]);
        assert!(svg.contains("stroke-dasharray") || svg.matches("<line").count() > 2);
        assert!(f.save(std::path::Path::new("/tmp/x.png")).is_err());
    }
}
