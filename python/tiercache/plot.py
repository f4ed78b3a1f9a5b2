"""Figures of sweep results (matplotlib), with units, labels and legends.

:func:`curves` draws one line per ``hue`` value of ``y`` against ``x``;
:func:`hit_ratio`, :func:`response_time`, :func:`write_amplification` and
:func:`ssd_writes` are its usual cases. ``python -m tiercache.plot``,
``tiercache-plot`` and ``tiercache plot`` draw a results file from the
command line with the same code; :func:`sweep_figure` draws a sweep as
``tiercache sim --out`` does.

One set of rules for every figure, shared with the CLI's SVG
(crates/apps/cli/src/plot.rs, which stays in Rust so that ``sim --out`` needs
no Python): a logarithmic x axis for size sweeps (miss-ratio curves are read
on a log axis), legend labels with only what varies across the series, no
empty panel (no response-time panel without response times), and the
Okabe-Ito colour-blind-safe palette without its yellow (:data:`PALETTE`).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Any

__all__ = [
    "curves",
    "sweep_figure",
    "hit_ratio",
    "response_time",
    "write_amplification",
    "ssd_writes",
    "label",
    "PALETTE",
    "main",
]

#: Okabe-Ito without yellow (#F0E442, near-invisible on white); the CLI's SVG
#: uses the same colours in the same order.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000")

#: Size columns: swept on a logarithmic x axis by default.
SIZE_COLUMNS = ("cache_size", "cache_size_bytes", "cache_lines", "fast_tier_size", "fast_tier_bytes", "dram_size", "dram_bytes", "ssd_bytes")

#: Configuration columns a sweep's series are told apart by (those that vary).
SERIES_COLUMNS = ("mode", "assoc", "eviction", "write_policy", "admission", "line_size", "policy", "tier_policy", "tica_policy", "trace")


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
    ax=None,
    title: str | None = None,
    logx: bool | None = None,
    marker: str = "o",
):
    """Plot ``y`` against ``x``, one line per value of ``hue`` (and of ``style``,
    drawn with distinct line styles, e.g. ``style="trace"``).

    Rows with the same (x, hue, style) are averaged. ``logx`` (default: when
    ``x`` is a size column, :data:`SIZE_COLUMNS`) draws a logarithmic x axis. ``x`` may be a
    configuration column (``cache_size`` given as ``"5%"`` is placed at 5 on a
    "% of the trace footprint" axis; sizes with units are placed in the order
    they appear) or a numeric result column. Returns the matplotlib Axes.
    """
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for col in (x, y, hue, style):
        if col is not None and col not in df.columns:
            raise KeyError(f"column '{col}' is not in the results (columns: {', '.join(map(str, df.columns))})")
    scale = AXES[y].scale if y in AXES else 1.0
    xs_all = list(dict.fromkeys(df[x].tolist()))
    numeric, suffix = _x_values(xs_all)
    if numeric is None:
        pos = {v: i for i, v in enumerate(xs_all)}
        ax.set_xticks(range(len(xs_all)), [str(v) for v in xs_all])
    else:
        pos = dict(zip(xs_all, numeric))
        if x in AXES:
            pos = {k: v * AXES[x].scale for k, v in pos.items()}
    groups: list[tuple[Any, Any]] = []
    keys = [c for c in (hue, style) if c is not None]
    if keys:
        for k in dict.fromkeys(map(tuple, df[keys].itertuples(index=False, name=None))):
            groups.append(k)
    else:
        groups.append(())
    linestyles = ["-", "--", ":", "-."]
    styles = list(dict.fromkeys(df[style])) if style else []
    for i, g in enumerate(groups):
        sel = df
        for c, v in zip(keys, g):
            sel = sel[sel[c] == v]
        means = sel.groupby(x, sort=False)[y].mean()
        pts = sorted((pos[k], v * scale) for k, v in means.items() if v == v)
        if not pts:
            continue
        name = ", ".join(str(v) for v in g) if g else label(y)
        ls = linestyles[styles.index(g[-1]) % len(linestyles)] if style else "-"
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker=marker,
            linestyle=ls,
            label=name,
            color=PALETTE[i % len(PALETTE)],
        )
    xl = label(x)
    if suffix and (x == "cache_size" or suffix != "(lines)"):
        xl = f"{NAMES.get(x, xl)} {suffix}"
    ax.set_xlabel(xl)
    ax.set_ylabel(label(y))
    if logx is None:
        logx = x in SIZE_COLUMNS
    if logx and numeric is not None and min(numeric) > 0:
        ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    if keys and len(groups) > 1:  # a legend names only what varies
        ax.legend(title=" / ".join(label(k) for k in keys))
    if title:
        ax.set_title(title)
    return ax


def _varying(df, columns) -> list[str]:
    return [c for c in columns if c in df.columns and df[c].astype(str).nunique() > 1]


def sweep_figure(df, x: str = "cache_size_bytes", title: str | None = None):
    """A sweep as ``tiercache sim --out`` draws it: hit ratio and, when the
    runs have response times, mean response time against cache size, one line
    per combination of the configuration columns that vary (legend labels
    name only those; constant ones go in the title). Returns the Figure."""
    import matplotlib.pyplot as plt

    hue = _varying(df, SERIES_COLUMNS)
    timed = "mean_response_us" in df.columns and df["mean_response_us"].notna().any()
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(11 if timed else 6, 4.4), layout="constrained", squeeze=False)
    data = df
    key = None
    if hue:
        key = "_series"
        data = df.assign(_series=df[hue].astype(str).agg(", ".join, axis=1))
    panels = ["hit_ratio"] + (["mean_response_us"] if timed else [])
    for ax, y in zip(axes[0], panels):
        curves(data, x=x, y=y, hue=key, ax=ax, logx=True)
        if key and ax.get_legend() is not None:
            ax.get_legend().set_title(" / ".join(label(c) for c in hue))
    constant = [c for c in SERIES_COLUMNS if c in df.columns and c not in hue and c != "trace" and len(df)]
    parts = [f"{label(c).lower()} {df[c].iloc[0]}" for c in constant]
    head = title or "tiercache sweep"
    fig.suptitle(f"{head} ({', '.join(parts)})" if parts else head)
    return fig


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


def main(argv: list[str] | None = None) -> int:
    """``tiercache plot RESULTS --x COL --y COL [--hue COL] -o FIG``."""
    p = argparse.ArgumentParser(
        prog="tiercache plot",
        description="Plot sweep results (Parquet from tiercache.sweep(out=...), or CSV/JSON) as a figure.",
    )
    p.add_argument("results", help="results file: .parquet, .csv or .json")
    p.add_argument("--x", default="cache_size", help="x column [default: cache_size]")
    p.add_argument("--y", default="hit_ratio", help="y column [default: hit_ratio]")
    p.add_argument("--hue", default=None, help="one line per value of this column")
    p.add_argument("--style", default=None, help="line style per value of this column (e.g. trace)")
    p.add_argument("--title", default=None)
    p.add_argument("--logx", action=argparse.BooleanOptionalAction, default=None, help="logarithmic x axis [default: for size columns]")
    p.add_argument("-o", "--output", required=True, help="figure file (.svg, .pdf, .png)")
    a = p.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        df = _read_results(a.results)
    except (OSError, ValueError) as e:
        print(f"tiercache plot: error: cannot read results {a.results}: {e}", file=sys.stderr)
        return 1
    try:
        ax = curves(df, x=a.x, y=a.y, hue=a.hue, style=a.style, title=a.title, logx=a.logx)
    except (OSError, KeyError, ValueError) as e:
        print(f"tiercache plot: error: {e}", file=sys.stderr)
        return 1
    ax.figure.savefig(a.output)
    plt.close(ax.figure)
    print(f"wrote {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
