//! `tiercache._native`: the Rust simulator and trace readers seen from
//! Python. The pure-Python package `tiercache` (python/tiercache) wraps these
//! functions with the documented API; results cross the boundary as the same
//! JSON `tiercache sim --json` prints, so both front ends agree field by field.

use std::path::{Path, PathBuf};

use pyo3::create_exception;
use pyo3::exceptions::{PyFileNotFoundError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple};
use std::sync::Mutex;
use tiercache_sim::driver::SimError;
use tiercache_trace::{Location, TraceError as RsTraceError, TraceReader};

mod modes;
mod options;

use options::{BuildError, Parsed, Value};
use tiercache_simulate::modes::MODES;

create_exception!(
    tiercache._native,
    OptionError,
    PyValueError,
    "An unknown option name or value; the message names the option and the allowed values."
);
create_exception!(
    tiercache._native,
    TraceError,
    PyValueError,
    "A trace that cannot be read; for a bad line, `path` and `line` say where."
);

/// A trace error as a Python `TraceError` with `path` and `line` (or `record`) attributes.
pub(crate) fn trace_err(py: Python<'_>, e: &RsTraceError) -> PyErr {
    let err = TraceError::new_err(e.to_string());
    let v = err.value(py);
    let (path, at) = match e {
        RsTraceError::Parse { path, at, .. } | RsTraceError::Read { path, at, .. } => {
            (Some(path.clone()), Some(*at))
        }
        RsTraceError::Io { path, .. }
        | RsTraceError::Detect { path, .. }
        | RsTraceError::Invalid { path, .. } => (Some(path.clone()), None),
        _ => (None, None),
    };
    let _ = v.setattr("path", path.map(|p| p.display().to_string()));
    let (line, record) = match at {
        Some(Location::Line(n)) => (Some(n), None),
        Some(Location::Record(n)) => (None, Some(n)),
        None => (None, None),
    };
    let _ = v.setattr("line", line);
    let _ = v.setattr("record", record);
    if let RsTraceError::UnknownFormat { .. } = e {
        return OptionError::new_err(format!("option format: {e}"));
    }
    err
}

fn build_err(py: Python<'_>, e: BuildError) -> PyErr {
    match e {
        BuildError::Option(m) => OptionError::new_err(m),
        BuildError::Missing(m) => PyFileNotFoundError::new_err(m),
        BuildError::Trace(t) => trace_err(py, &t),
        BuildError::Other(m) => PyRuntimeError::new_err(m),
    }
}

/// Options from a Python dict: names as strings, values bool, int, float or str.
fn extract_options(d: &Bound<'_, PyDict>) -> PyResult<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for (k, v) in d.iter() {
        let name: String = k
            .extract()
            .map_err(|_| OptionError::new_err("option names must be strings"))?;
        let val = if v.is_none() {
            continue;
        } else if v.is_instance_of::<PyBool>() {
            Value::Bool(v.extract()?)
        } else if v.is_instance_of::<PyInt>() {
            Value::Int(v.extract().map_err(|_| {
                OptionError::new_err(format!("option {name}: integer out of range"))
            })?)
        } else if v.is_instance_of::<PyFloat>() {
            Value::Float(v.extract()?)
        } else if v.is_instance_of::<PyString>() {
            Value::Str(v.extract()?)
        } else {
            return Err(OptionError::new_err(format!(
                "option {name}: expected a string, number or bool, got {}",
                v.get_type().name()?
            )));
        };
        out.push((name, val));
    }
    Ok(out)
}

/// Simulate one configuration in any `--mode`; returns the JSON object of
/// `tiercache sim --json`. The GIL is released while the trace is replayed.
#[pyfunction]
#[pyo3(signature = (trace, options))]
fn simulate_json(py: Python<'_>, trace: PathBuf, options: &Bound<'_, PyDict>) -> PyResult<String> {
    let parsed = Parsed::new(extract_options(options)?).map_err(OptionError::new_err)?;
    let mode = parsed.text("mode").unwrap_or_default();
    if mode != "cache" {
        if !MODES.contains(&mode.as_str()) {
            return Err(OptionError::new_err(format!(
                "option mode: unknown mode '{mode}' (allowed: {})",
                MODES.join(", ")
            )));
        }
        return modes::simulate_json(py, trace, &parsed);
    }
    let result = py.allow_threads(move || -> Result<String, BuildError> {
        let run = options::build(&trace, &parsed)?;
        let open = || tiercache_trace::open(&run.trace, run.format, &run.read);
        let rec = open()?;
        let report = tiercache_sim::run(rec, open, &run.sim, &mut |_| {}).map_err(|e| match e {
            SimError::Trace(t) => BuildError::Trace(t),
            SimError::Config(c) => BuildError::Option(format!("configuration: {c}")),
            e => BuildError::Other(e.to_string()),
        })?;
        let mut v = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        v["trace"] = serde_json::Value::String(trace.display().to_string());
        Ok(v.to_string())
    });
    result.map_err(|e| build_err(py, e))
}

/// `tiercache mrc --json`: the rows of the miss-ratio curve, from the same
/// flags (`["--policy", "arc", "--method", "minisim"]`). The GIL is released
/// while the trace is read.
#[pyfunction]
#[pyo3(signature = (trace, flags))]
fn mrc_json(py: Python<'_>, trace: PathBuf, flags: Vec<String>) -> PyResult<String> {
    use clap::{Args, FromArgMatches};
    use tiercache_simulate::mrc::MrcArgs;
    let cmd = MrcArgs::augment_args(clap::Command::new("mrc").no_binary_name(true));
    let mut argv = vec!["--trace".to_string(), trace.display().to_string()];
    argv.extend(flags);
    let m = cmd.try_get_matches_from(&argv).map_err(|e| {
        let t = e.render().to_string();
        OptionError::new_err(
            t.lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
                .to_string(),
        )
    })?;
    let a = MrcArgs::from_arg_matches(&m).map_err(|e| OptionError::new_err(e.to_string()))?;
    if !a.trace.exists() {
        return Err(PyFileNotFoundError::new_err(format!(
            "trace {} does not exist",
            a.trace.display()
        )));
    }
    let r = py.allow_threads(move || tiercache_simulate::mrc::run(&a));
    match r {
        Ok(out) => Ok(serde_json::Value::Array(out.rows).to_string()),
        Err(e) => match e.downcast_ref::<RsTraceError>() {
            Some(t) => Err(trace_err(py, t)),
            None => Err(OptionError::new_err(format!("{e:#}"))),
        },
    }
}

/// The SSD cache configuration (`CacheConfig` JSON) the options give for a
/// cache of `cache_bytes`, from the builder `tiercache sim` and `tiercache
/// format` use: what `tiercache stats --json` reports as `config`.
#[pyfunction]
#[pyo3(signature = (cache_bytes, options))]
fn cache_config_json(
    py: Python<'_>,
    cache_bytes: u64,
    options: &Bound<'_, PyDict>,
) -> PyResult<String> {
    let parsed = Parsed::new(extract_options(options)?).map_err(OptionError::new_err)?;
    options::config_json(&parsed, cache_bytes).map_err(|e| build_err(py, e))
}

/// Statistics of a trace at a line size; returns JSON of `TraceStats`.
#[pyfunction]
#[pyo3(signature = (trace, options, line_size))]
fn trace_stats_json(
    py: Python<'_>,
    trace: PathBuf,
    options: &Bound<'_, PyDict>,
    line_size: String,
) -> PyResult<String> {
    let parsed = Parsed::new(extract_options(options)?).map_err(OptionError::new_err)?;
    let line = options::parse_line(&line_size)
        .map_err(|e| OptionError::new_err(format!("option line_size: {e}")))?;
    let result = py.allow_threads(move || -> Result<String, BuildError> {
        let (format, read) = (
            options::format_of(&parsed)?,
            options::read_options(&parsed)?,
        );
        if !trace.exists() {
            return Err(BuildError::Missing(format!(
                "trace {} does not exist",
                trace.display()
            )));
        }
        let r = tiercache_trace::open(&trace, format, &read)?;
        let st = tiercache_trace::stats::trace_stats(r, line)?;
        Ok(serde_json::to_string(&st).map_err(|e| e.to_string())?)
    });
    result.map_err(|e| build_err(py, e))
}

/// Iterator over the requests of a trace, in batches of tuples
/// `(time_ns, offset, length, kind, class)`.
#[pyclass(module = "tiercache._native")]
struct TraceRequests {
    reader: Mutex<Option<TraceReader>>,
    path: PathBuf,
}

#[pymethods]
impl TraceRequests {
    /// Up to `n` requests; an empty list at the end of the trace.
    fn next_batch<'py>(&mut self, py: Python<'py>, n: usize) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let mut guard = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let Some(reader) = guard.as_mut() else {
            return Ok(Vec::new());
        };
        let mut recs = Vec::with_capacity(n.min(1 << 16));
        let mut err = None;
        py.allow_threads(|| {
            for r in reader.by_ref().take(n) {
                match r {
                    Ok(r) => recs.push(r),
                    Err(e) => {
                        err = Some(e);
                        break;
                    }
                }
            }
        });
        if let Some(e) = err {
            return Err(trace_err(py, &e));
        }
        if recs.is_empty() {
            *guard = None;
        }
        recs.into_iter()
            .map(|r| {
                let kind = format!("{:?}", r.kind).to_lowercase();
                let class = r.class.map(|c| format!("{c:?}").to_lowercase());
                PyTuple::new(
                    py,
                    [
                        r.time_ns.into_pyobject(py)?.into_any(),
                        r.offset.into_pyobject(py)?.into_any(),
                        r.len.into_pyobject(py)?.into_any(),
                        kind.into_pyobject(py)?.into_any(),
                        class.into_pyobject(py)?.into_any(),
                    ],
                )
            })
            .collect()
    }

    /// Format being read (as `--format` spells it).
    fn format(&self) -> Option<String> {
        self.reader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|r| r.format().to_string())
    }

    /// Malformed lines skipped so far (with `skip_bad=True`).
    fn skipped(&self) -> u64 {
        self.reader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |r| r.skipped())
    }

    fn __repr__(&self) -> String {
        format!("<tiercache trace requests of {}>", self.path.display())
    }
}

/// Open a trace for reading request by request.
#[pyfunction]
#[pyo3(signature = (trace, options))]
fn open_trace(
    py: Python<'_>,
    trace: PathBuf,
    options: &Bound<'_, PyDict>,
) -> PyResult<TraceRequests> {
    let parsed = Parsed::new(extract_options(options)?).map_err(OptionError::new_err)?;
    let format = options::format_of(&parsed).map_err(|e| build_err(py, e))?;
    let read = options::read_options(&parsed).map_err(|e| build_err(py, e))?;
    if !Path::new(&trace).exists() {
        return Err(PyFileNotFoundError::new_err(format!(
            "trace {} does not exist",
            trace.display()
        )));
    }
    let reader = tiercache_trace::open(&trace, format, &read).map_err(|e| trace_err(py, &e))?;
    Ok(TraceRequests {
        reader: Mutex::new(Some(reader)),
        path: trace,
    })
}

/// The SVG of a figure given as JSON (`tiercache.plot.Figure.to_json()`),
/// drawn by the renderer of `tiercache sim --out`.
#[pyfunction]
fn render_svg(figure_json: &str) -> PyResult<String> {
    let fig: tiercache_plot::Figure = serde_json::from_str(figure_json)
        .map_err(|e| PyValueError::new_err(format!("figure: {e}")))?;
    fig.svg()
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The figure of a sweep (JSON) from its rows (a JSON array of `sim --json`
/// objects), exactly as `tiercache sim --out` builds it.
#[pyfunction]
#[pyo3(signature = (rows_json, title=None))]
fn sweep_figure_json(rows_json: &str, title: Option<&str>) -> PyResult<String> {
    let rows: Vec<serde_json::Value> = serde_json::from_str(rows_json)
        .map_err(|e| PyValueError::new_err(format!("sweep rows: {e}")))?;
    let fig = tiercache_plot::sweep_figure(&rows, title);
    serde_json::to_string(&fig).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// Names of the options `simulate` accepts, with their CLI defaults (None: no default).
#[pyfunction]
fn option_defaults() -> Vec<(String, Option<String>)> {
    options::OPTIONS
        .iter()
        .map(|(n, _)| (n.to_string(), options::default_of(n)))
        .collect()
}

/// Canonical spelling of an option name (`--line-size` -> `line_size`, `twolbs_window` -> `2lbs_window`).
#[pyfunction]
fn canonical_option(name: &str) -> String {
    options::canonical_name(name)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MODES", MODES.to_vec())?;
    m.add(
        "DESIGNS",
        tiercache_simulate::design::DESIGNS
            .iter()
            .map(|d| d.name)
            .collect::<Vec<_>>(),
    )?;
    m.add("PALETTE", tiercache_plot::PALETTE.to_vec())?;
    m.add(
        "SERIES_FIELDS",
        tiercache_plot::SERIES_FIELDS
            .iter()
            .map(|(f, _)| *f)
            .collect::<Vec<_>>(),
    )?;
    m.add_function(wrap_pyfunction!(render_svg, m)?)?;
    m.add_function(wrap_pyfunction!(sweep_figure_json, m)?)?;
    m.add("OptionError", m.py().get_type::<OptionError>())?;
    m.add("TraceError", m.py().get_type::<TraceError>())?;
    m.add_function(wrap_pyfunction!(simulate_json, m)?)?;
    m.add_function(wrap_pyfunction!(mrc_json, m)?)?;
    m.add_function(wrap_pyfunction!(cache_config_json, m)?)?;
    m.add_function(wrap_pyfunction!(trace_stats_json, m)?)?;
    m.add_function(wrap_pyfunction!(open_trace, m)?)?;
    m.add_function(wrap_pyfunction!(option_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_option, m)?)?;
    m.add_class::<TraceRequests>()?;
    Ok(())
}
