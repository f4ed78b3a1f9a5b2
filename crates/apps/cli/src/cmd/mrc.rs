//! `tiercache mrc`: miss-ratio curves of a trace (the work is
//! `tiercache_simulate::mrc`'s, shared with Python); prints the table or
//! JSON rows and draws the figure through the plot crate.

use anyhow::{Context, Result};
use serde_json::Value;
use tiercache_plot::{Dash, Figure, Panel, Series};
pub use tiercache_simulate::mrc::MrcArgs;

pub fn run(a: MrcArgs) -> Result<()> {
    let out = tiercache_simulate::mrc::run(&a)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out.rows)?);
    } else {
        print!("{}", out.text);
    }
    if let Some(path) = &a.out {
        figure(&out.rows)
            .save(path)
            .with_context(|| format!("writing the figure {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Hit ratio (all, reads, writes) against cache size in MiB, log x.
pub fn figure(rows: &[Value]) -> Figure {
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap_or(0.0);
    let x: Vec<f64> = rows
        .iter()
        .map(|r| f(r, "cache_size_bytes") / (1024.0 * 1024.0))
        .collect();
    let mut series = Vec::new();
    for (key, label, dash, count) in [
        ("hit_ratio", "all", Dash::Solid, "block_accesses"),
        ("read_hit_ratio", "reads", Dash::Dashed, "read_accesses"),
        ("write_hit_ratio", "writes", Dash::Dotted, "write_accesses"),
    ] {
        if rows.first().is_some_and(|r| f(r, count) > 0.0) {
            series.push(Series {
                label: label.into(),
                x: x.clone(),
                y: rows.iter().map(|r| f(r, key) * 100.0).collect(),
                dash,
            });
        }
    }
    let first = rows.first();
    let s = |k: &str| first.and_then(|r| r[k].as_str()).unwrap_or("").to_string();
    Figure {
        title: format!(
            "{} {} ({})",
            s("trace").rsplit('/').next().unwrap_or(""),
            s("policy"),
            s("method")
        ),
        panels: vec![Panel {
            x_label: "cache size (MiB)".into(),
            y_label: "hit ratio (%)".into(),
            logx: true,
            x_ticks: None,
            y_max: Some(100.0),
            legend_title: Some("accesses".into()),
            series,
        }],
    }
}
