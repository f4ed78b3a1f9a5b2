"""Figures: labels with units, one line per hue value, the plotted numbers; the CLI entry points."""

from __future__ import annotations

import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from tiercache import plot  # noqa: E402


def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "trace": ["t"] * 6,
            "cache_size": ["1%", "5%", "10%"] * 2,
            "eviction": ["lru"] * 3 + ["arc"] * 3,
            "hit_ratio": [0.1, 0.3, 0.5, 0.2, 0.35, 0.55],
            "mean_response_us": [900.0, 700.0, 500.0, 850.0, 650.0, 480.0],
            "ssd_writes": [2097152, 4194304, 6291456, 2097152, 4194304, 6291456],
        }
    )


def test_curves_labels_units_and_values():
    ax = plot.curves(frame(), x="cache_size", y="hit_ratio", hue="eviction")
    assert ax.get_ylabel() == "Hit ratio (%)"
    assert ax.get_xlabel() == "Cache size (% of the trace footprint)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lru", "arc"]
    assert ax.get_legend().get_title().get_text() == "Eviction"
    lru, arc = ax.get_lines()
    assert list(lru.get_xdata()) == [1.0, 5.0, 10.0]
    assert list(lru.get_ydata()) == pytest.approx([10.0, 30.0, 50.0])
    assert list(arc.get_ydata()) == pytest.approx([20.0, 35.0, 55.0])


def test_ssd_writes_in_gib():
    ax = plot.ssd_writes(frame(), hue="eviction")
    assert ax.get_ylabel() == "SSD writes (GiB)"
    # 2097152 blocks of 512 bytes = 1 GiB
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([1.0, 2.0, 3.0])


def test_response_time_label():
    assert plot.response_time(frame()).get_ylabel() == "Mean response time (µs)"


def test_categorical_sizes_keep_their_order():
    df = frame().assign(cache_size=["1GiB", "4GiB", "16GiB"] * 2)
    ax = plot.curves(df, y="hit_ratio")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1GiB", "4GiB", "16GiB"]


def test_unknown_column_is_named():
    with pytest.raises(KeyError, match="hit_rate"):
        plot.curves(frame(), y="hit_rate")


def test_python_entry_point_writes_svg(tmp_path):
    res = tmp_path / "results.parquet"
    frame().to_parquet(res)
    fig = tmp_path / "fig.svg"
    r = subprocess.run(
        [sys.executable, "-m", "tiercache.plot", str(res), "--x", "cache_size", "--y", "hit_ratio", "--hue", "eviction", "-o", str(fig)],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr
    svg = fig.read_text()
    assert "<svg" in svg and "Hit ratio (%)" in svg


def test_rust_cli_plot_subcommand(tmp_path, cli):
    h = subprocess.run([cli, "--help"], capture_output=True, text=True).stdout
    if " plot " not in h:
        pytest.skip("this tiercache build has no plot subcommand yet (rebuild the CLI)")
    res = tmp_path / "results.parquet"
    frame().to_parquet(res)
    fig = tmp_path / "fig.svg"
    env = dict(os.environ, PYTHON=sys.executable)
    r = subprocess.run([cli, "plot", str(res), "--x", "cache_size", "--y", "mean_response_us", "--hue", "eviction", "-o", str(fig)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "Mean response time (µs)" in fig.read_text()


def sweep_frame(timed: bool) -> pd.DataFrame:
    sizes = [1 << 20, 8 << 20, 64 << 20, 512 << 20]
    rows = []
    for ev in ("lru", "arc"):
        for i, s in enumerate(sizes):
            rows.append(
                {
                    "trace": "t",
                    "cache_size_bytes": s,
                    "eviction": ev,
                    "write_policy": "write-back",
                    "assoc": "full",
                    "admission": "always",
                    "line_size": 4096,
                    "hit_ratio": 0.1 * (i + 1),
                    "mean_response_us": 100.0 - i if timed else None,
                }
            )
    return pd.DataFrame(rows)


def test_sweep_figure_follows_the_plot_rules():
    """The rules of crates/apps/cli/src/plot.rs, for matplotlib."""
    fig = plot.sweep_figure(sweep_frame(timed=False))
    (ax,) = fig.axes  # no empty response-time panel without timing
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lru", "arc"]
    assert "write-back" in fig._suptitle.get_text()
    colours = {matplotlib.colors.to_hex(line.get_color()).upper() for line in ax.get_lines()}
    assert colours <= set(plot.PALETTE) and "#F0E442" not in plot.PALETTE
    fig2 = plot.sweep_figure(sweep_frame(timed=True))
    assert len(fig2.axes) == 2
    assert all(a.get_xscale() == "log" for a in fig2.axes)


def test_size_sweeps_default_to_a_log_axis():
    assert plot.curves(frame(), x="cache_size").get_xscale() == "log"
    assert plot.curves(frame(), x="cache_size", logx=False).get_xscale() == "linear"


def test_no_legend_for_a_single_series():
    df = frame()[frame()["eviction"] == "lru"]
    assert plot.curves(df, hue="eviction").get_legend() is None
