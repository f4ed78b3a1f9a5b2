"""Figures of sweep results as SVG, drawn by the same Rust code as
``tiercache sim --out`` (crate ``tiercache-plot``, through ``tiercache._native``).

:func:`curves` draws one line per ``hue`` value of ``y`` against ``x``;
:func:`hit_ratio`, :func:`response_time`, :func:`write_amplification` and
:func:`ssd_writes` are its usual cases; :func:`sweep_figure` draws a sweep
exactly as ``tiercache sim --out`` does. Each returns a :class:`Figure`:
plain data (title, panels, series) that a notebook shows as SVG
(``_repr_svg_``) and :meth:`Figure.save` writes to a ``.svg`` file.
``python -m tiercache.plot``, ``tiercache-plot`` and ``tiercache plot`` draw
a results file from the command line with the same code.

One set of rules for every figure: a logarithmic x axis for size sweeps
(miss-ratio curves are read on a log axis), legend labels with only what
varies across the series (no legend for a single series), no empty panel (no
response-time panel without response times), and the Okabe-Ito
colour-blind-safe palette without its yellow (:data:`PALETTE`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _native

__all__ = [
    "curves",
    "sweep_figure",
    "hit_ratio",
    "response_time",
    "write_amplification",
    "ssd_writes",
    "label",
    "Figure",
    "Panel",
    "Series",
    "PALETTE",
    "main",
]

#: Okabe-Ito without yellow (#F0E442, near-invisible on white): the colours
#: of the series, in order (the renderer's own list).
PALETTE: tuple[str, ...] = tuple(_native.PALETTE)


@dataclass
class Series:
    """One line of a panel: its legend label and points; ``dash`` is solid, dashed or dotted."""

    label: str
    x: list[float]
    y: list[float]
    dash: str = "solid"


@dataclass
class Panel:
    """One chart: axis labels with units, a logarithmic or categorical x axis, the series."""

    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    logx: bool = False
    #: Categorical x axis: labels of the positions 0, 1, 2, ...
    x_ticks: list[str] | None = None
    y_max: float | None = None
    legend_title: str | None = None

    @property
    def labels(self) -> list[str]:
        """Legend labels, in the order of the series (and of the colours)."""
        return [s.label for s in self.series]


@dataclass
class Figure:
    """A figure: a title over panels side by side, drawn as SVG by the renderer
    of ``tiercache sim --out``; a notebook shows it inline."""

    title: str
    panels: list[Panel]

    @classmethod
    def from_json(cls, text: str) -> "Figure":
        """A figure from its JSON (as the renderer describes it)."""
        d = json.loads(text)
        panels = [Panel(**{**p, "series": [Series(**s) for s in p["series"]]}) for p in d["panels"]]
        return cls(title=d.get("title", ""), panels=panels)

    def to_json(self) -> str:
        """The figure as JSON (the renderer's input)."""
        return json.dumps(asdict(self))

    @property
    def svg(self) -> str:
        """The SVG document."""
        return _native.render_svg(self.to_json())

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str | os.PathLike) -> None:
        """Write the SVG to ``path`` (ValueError unless it ends in ``.svg``)."""
        p = os.fspath(path)
        if not p.endswith(".svg"):
            raise ValueError(f"figure file {p}: figures are written as SVG (allowed: a name ending in .svg)")
        with open(p, "w", encoding="utf-8") as f:
            f.write(self.svg)


#: Size columns: swept on a logarithmic x axis by default.
SIZE_COLUMNS = ("cache_size", "cache_size_bytes", "cache_lines", "fast_tier_size", "fast_tier_bytes", "dram_size", "dram_bytes", "ssd_bytes")

#: Configuration columns a sweep's series are told apart by (those that vary).
SERIES_COLUMNS: tuple[str, ...] = tuple(_native.SERIES_FIELDS)


@dataclass(frozen=True)
class Axis:
    """How a column is shown: its label (with unit) and the factor applied to values."""

    label: str
    scale: float = 1.0


_GIB = float(1 << 30)

#: Labels and units of the result columns of ``tiercache sim --json``.
AXES: dict[str, Axis] = {
    "hit_ratio": Axis("Hit ratio (%)", 100.0),
    "read_hit_ratio": Axis("Read hit ratio (%)", 100.0),
    "write_hit_ratio": Axis("Write hit ratio (%)", 100.0),
    "metadata_hit_ratio": Axis("Metadata hit ratio (%)", 100.0),
    "mean_response_us": Axis("Mean response time (µs)"),
    "p50_response_us": Axis("Median response time (µs)"),
    "p99_response_us": Axis("99th percentile response time (µs)"),
    "baseline_mean_response_us": Axis("HDD-only mean response time (µs)"),
    "speedup": Axis("Speedup over the HDD alone (×)"),
    "cwaf": Axis("Cache write amplification (cache bytes written / bytes written)"),
    "ssd_writes": Axis("SSD writes (GiB)", 512 / _GIB),
    "ssd_reads": Axis("SSD reads (GiB)", 512 / _GIB),
    "ssd_write_ops": Axis("SSD write operations"),
    "hdd_ops": Axis("HDD operations"),
    "hdd_read_bytes": Axis("HDD reads (GiB)", 1 / _GIB),
    "hdd_write_bytes": Axis("HDD writes (GiB)", 1 / _GIB),
    "hdd_utilization": Axis("HDD utilisation (%)", 100.0),
    "ssd_utilization": Axis("SSD utilisation (%)", 100.0),
    "cache_size_bytes": Axis("Cache size (GiB)", 1 / _GIB),
    "cache_lines": Axis("Cache size (lines)"),
    "metadata_bytes_per_gib": Axis("Cache metadata (bytes per GiB of cache)"),
    "metadata_bytes": Axis("Cache metadata (MiB)", 1 / float(1 << 20)),
    "evictions": Axis("Evictions"),
    "writebacks": Axis("Write-backs (lines)"),
    "fills": Axis("Fills (lines)"),
    "admission_rejects": Axis("Admission rejects"),
}

#: Names of configuration columns as a reader would say them.
NAMES = {
    "cache_size": "Cache size",
    "line_size": "Line size",
    "assoc": "Associativity",
    "eviction": "Eviction",
    "write_policy": "Write policy",
    "admission": "Admission",
    "trace": "Trace",
    "mode": "Mode",
}


def label(column: str) -> str:
    """Axis label (with unit) of a column."""
    if column in AXES:
        return AXES[column].label
    return NAMES.get(column, column.replace("_", " ").capitalize())


_PCT = re.compile(r"^\s*([0-9.]+)\s*%\s*$")


def _x_values(values) -> tuple[list[float] | None, str | None]:
    """Numeric positions of an x column and an axis label override: percentages
    of the footprint, plain numbers, or None for a categorical axis."""
    vals = list(values)
    if all(isinstance(v, str) and _PCT.match(v) for v in vals):
        return [float(_PCT.match(v).group(1)) for v in vals], "(% of the trace footprint)"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        lines = all(float(v).is_integer() for v in vals)
        return [float(v) for v in vals], "(lines)" if lines else None
    return None, None


def curves(
    df,
    x: str = "cache_size",
    y: str = "hit_ratio",
    hue: str | None = "eviction",
    *,
    style: str | None = None,
    title: str | None = None,
    logx: bool | None = None,
) -> Figure:
    """Plot ``y`` against ``x``, one line per value of ``hue`` (and of ``style``,
    drawn with distinct dashes, e.g. ``style="trace"``).

    Rows with the same (x, hue, style) are averaged. ``logx`` (default: when
    ``x`` is a size column, :data:`SIZE_COLUMNS`) draws a logarithmic x axis. ``x`` may be a
    configuration column (``cache_size`` given as ``"5%"`` is placed at 5 on a
    "% of the trace footprint" axis; sizes with units are placed in the order
    they appear) or a numeric result column. Returns a one-panel :class:`Figure`.
    """
    for col in (x, y, hue, style):
        if col is not None and col not in df.columns:
            raise KeyError(f"column '{col}' is not in the results (columns: {', '.join(map(str, df.columns))})")
    scale = AXES[y].scale if y in AXES else 1.0
    xs_all = list(dict.fromkeys(df[x].tolist()))
    numeric, suffix = _x_values(xs_all)
    ticks = None
    if numeric is None:
        pos = {v: float(i) for i, v in enumerate(xs_all)}
        ticks = [str(v) for v in xs_all]
    else:
        pos = dict(zip(xs_all, numeric))
        if x in AXES:
            pos = {k: v * AXES[x].scale for k, v in pos.items()}
    keys = [c for c in (hue, style) if c is not None]
    groups: list[tuple[Any, ...]] = (
        list(dict.fromkeys(map(tuple, df[keys].itertuples(index=False, name=None)))) if keys else [()]
    )
    dashes = ["solid", "dashed", "dotted"]
    styles = list(dict.fromkeys(df[style])) if style else []
    series = []
    for g in groups:
        sel = df
        for c, v in zip(keys, g):
            sel = sel[sel[c] == v]
        means = sel.groupby(x, sort=False)[y].mean()
        pts = sorted((pos[k], float(v) * scale) for k, v in means.items() if v == v)
        if not pts:
            continue
        name = ", ".join(str(v) for v in g) if g else label(y)
        dash = dashes[styles.index(g[-1]) % len(dashes)] if style else "solid"
        series.append(Series(name, [p[0] for p in pts], [p[1] for p in pts], dash))
    xl = label(x)
    if suffix and (x == "cache_size" or suffix != "(lines)"):
        xl = f"{NAMES.get(x, xl)} {suffix}"
    if logx is None:
        logx = x in SIZE_COLUMNS
    panel = Panel(
        x_label=xl,
        y_label=label(y),
        series=series,
        logx=bool(logx and numeric is not None and min(numeric) > 0),
        x_ticks=ticks,
        legend_title=" / ".join(label(k) for k in keys) if keys and len(series) > 1 else None,
    )
    return Figure(title=title or "", panels=[panel])


def sweep_figure(df, title: str | None = None) -> Figure:
    """A sweep exactly as ``tiercache sim --out`` draws it (the same Rust code):
    hit ratio and, when the runs have response times, mean response time
    against cache size on a log axis, one line per combination of the
    configuration columns that vary (legend labels name only those; constant
    ones go in the title). ``df``: a sweep's DataFrame (rows of ``sim --json``)."""
    if "cache_size_bytes" not in df.columns:
        raise KeyError("column 'cache_size_bytes' is not in the results (a sweep of mode cache has it)")
    return Figure.from_json(_native.sweep_figure_json(df.to_json(orient="records", double_precision=15), title))


def hit_ratio(df, x: str = "cache_size", hue: str | None = "eviction", **kw):
    """Hit ratio (%) against ``x``."""
    return curves(df, x=x, y="hit_ratio", hue=hue, **kw)


def response_time(df, x: str = "cache_size", hue: str | None = "eviction", percentile: str = "mean", **kw):
    """Response time (µs): ``percentile`` is mean, p50 or p99."""
    return curves(df, x=x, y=f"{percentile}_response_us", hue=hue, **kw)


def write_amplification(df, x: str = "cache_size", hue: str | None = "write_policy", **kw):
    """Cache write amplification (TICA eq. 1) against ``x``."""
    return curves(df, x=x, y="cwaf", hue=hue, **kw)


def ssd_writes(df, x: str = "cache_size", hue: str | None = "write_policy", **kw):
    """Data written to the SSD (GiB) against ``x``."""
    return curves(df, x=x, y="ssd_writes", hue=hue, **kw)


def _read_results(path: str):
    import pandas as pd

    if path.endswith(".csv"):
        return pd.read_csv(path)
    if path.endswith(".json"):
        return pd.read_json(path)
    return pd.read_parquet(path)


class _Parser(argparse.ArgumentParser):
    """argparse with the prefix every tiercache error carries."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(2, f"tiercache: error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """``tiercache plot RESULTS --x COL --y COL [--hue COL] -o FIG.svg``."""
    p = _Parser(
        prog="tiercache plot",
        description="Plot sweep results (Parquet from tiercache.sweep(out=...), or CSV/JSON) as an SVG figure.",
    )
    p.add_argument("results", help="results file: .parquet, .csv or .json")
    p.add_argument("--x", default="cache_size", help="x column [default: cache_size]")
    p.add_argument("--y", default="hit_ratio", help="y column [default: hit_ratio]")
    p.add_argument("--hue", default=None, help="one line per value of this column")
    p.add_argument("--style", default=None, help="line dashes per value of this column (e.g. trace)")
    p.add_argument("--title", default=None)
    p.add_argument("--logx", action=argparse.BooleanOptionalAction, default=None, help="logarithmic x axis [default: for size columns]")
    p.add_argument("-o", "--out", "--output", dest="output", required=True,
                   help="figure file (.svg); --output is the old spelling, still accepted")
    a = p.parse_args(argv)
    if not a.output.endswith(".svg"):
        print(f"tiercache: error: figure file {a.output}: figures are written as SVG (allowed: a name ending in .svg)", file=sys.stderr)
        return 2
    try:
        df = _read_results(a.results)
    except (OSError, ValueError) as e:
        print(f"tiercache: error: cannot read results {a.results}: {e}", file=sys.stderr)
        return 1
    try:
        curves(df, x=a.x, y=a.y, hue=a.hue, style=a.style, title=a.title, logx=a.logx).save(a.output)
    except (OSError, KeyError, ValueError) as e:
        print(f"tiercache: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
