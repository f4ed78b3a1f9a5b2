"""Figures: labels with units, one line per hue value, the plotted numbers,
the SVG of the one renderer (the same as `tiercache sim --out`); the CLI entry points."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from tiercache import _native, plot


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


def svg_texts(svg: str) -> list[str]:
    return [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


def svg_colours(svg: str) -> set[str]:
    return {c.upper() for c in re.findall(r"#[0-9A-Fa-f]{6}", svg)}


def test_curves_labels_units_and_values():
    fig = plot.curves(frame(), x="cache_size", y="hit_ratio", hue="eviction")
    (p,) = fig.panels
    assert p.y_label == "Hit ratio (%)"
    assert p.x_label == "Cache size (% of the trace footprint)"
    assert p.labels == ["lru", "arc"]
    assert p.legend_title == "Eviction"
    lru, arc = p.series
    assert lru.x == [1.0, 5.0, 10.0]
    assert lru.y == pytest.approx([10.0, 30.0, 50.0])
    assert arc.y == pytest.approx([20.0, 35.0, 55.0])
    texts = svg_texts(fig.svg)
    for t in ("Hit ratio (%)", "Cache size (% of the trace footprint)", "lru", "arc", "Eviction"):
        assert t in texts, (t, texts)


def test_figure_shows_in_notebooks_and_saves_svg(tmp_path):
    fig = plot.curves(frame())
    assert fig._repr_svg_().startswith("<svg")
    out = tmp_path / "f.svg"
    fig.save(out)
    assert out.read_text() == fig.svg
    with pytest.raises(ValueError, match=r"allowed: a name ending in \.svg"):
        fig.save(tmp_path / "f.png")


def test_ssd_writes_in_gib():
    fig = plot.ssd_writes(frame(), hue="eviction")
    assert fig.panels[0].y_label == "SSD writes (GiB)"
    # 2097152 blocks of 512 bytes = 1 GiB
    assert fig.panels[0].series[0].y == pytest.approx([1.0, 2.0, 3.0])


def test_response_time_label():
    assert plot.response_time(frame()).panels[0].y_label == "Mean response time (µs)"


def test_categorical_sizes_keep_their_order():
    df = frame().assign(cache_size=["1GiB", "4GiB", "16GiB"] * 2)
    fig = plot.curves(df, y="hit_ratio")
    assert fig.panels[0].x_ticks == ["1GiB", "4GiB", "16GiB"]
    assert not fig.panels[0].logx
    texts = svg_texts(fig.svg)
    assert [t for t in texts if t.endswith("GiB")] == ["1GiB", "4GiB", "16GiB"]


def test_style_draws_dashes():
    df = pd.concat([frame(), frame().assign(trace="u", hit_ratio=lambda d: d["hit_ratio"] / 2)])
    fig = plot.curves(df, hue="eviction", style="trace")
    assert [s.dash for s in fig.panels[0].series] == ["solid", "solid", "dashed", "dashed"]
    assert "stroke-dasharray" in fig.svg or fig.svg.count("<polyline") + fig.svg.count("<path") > 4


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
    bad = subprocess.run([sys.executable, "-m", "tiercache.plot", str(res), "-o", str(tmp_path / "fig.pdf")], capture_output=True, text=True)
    assert bad.returncode == 2 and "allowed: a name ending in .svg" in bad.stderr
    assert "\ntiercache: error: figure file" in "\n" + bad.stderr, bad.stderr


def test_plot_output_option_is_spelled_as_in_every_command(tmp_path):
    """`-o`/`--out` as `sim`, `reproduce` and `trace convert` take it; the old
    `--output` still works; argument errors carry tiercache's prefix."""
    res = tmp_path / "results.parquet"
    frame().to_parquet(res)
    for flag in ("--out", "--output"):
        fig = tmp_path / f"fig{flag}.svg"
        r = subprocess.run([sys.executable, "-m", "tiercache.plot", str(res), flag, str(fig)], capture_output=True, text=True)
        assert r.returncode == 0 and "<svg" in fig.read_text(), (flag, r.stderr)
    r = subprocess.run([sys.executable, "-m", "tiercache.plot", str(res)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "tiercache: error: the following arguments are required: -o/--out/--output" in r.stderr, r.stderr


def test_rust_cli_plot_subcommand(tmp_path, cli):
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
    """The rules of the one renderer (crates/platform/plot), seen from Python."""
    fig = plot.sweep_figure(sweep_frame(timed=False))
    (p,) = fig.panels  # no empty response-time panel without timing
    assert p.logx
    assert p.labels == ["lru", "arc"]
    assert "write-back" in fig.title and "lru" not in fig.title
    for c in svg_colours(fig.svg):  # the palette, or black, white and greys
        assert c in plot.PALETTE or c[1:3] == c[3:5] == c[5:7], c
    assert "#F0E442" not in plot.PALETTE
    texts = svg_texts(fig.svg)
    assert {"1", "10", "100", "1000"} <= set(texts), texts  # decades of a log axis (MiB)
    fig2 = plot.sweep_figure(sweep_frame(timed=True))
    assert len(fig2.panels) == 2
    assert all(p.logx for p in fig2.panels)


def test_sweep_figure_is_the_cli_figure(msr_trace, cli, tmp_path):
    """`tiercache sim --out` and plot.sweep_figure on the rows of `sim --json` draw the same SVG."""
    path, _ = msr_trace
    args = ["sim", "--trace", str(path), "--cache-size", "64lines,512lines,4096lines", "--eviction", "lru,arc", "--line-size", "512B", "--no-timing"]
    rows = json.loads(subprocess.run([cli, *args, "--json"], capture_output=True, text=True, check=True).stdout)
    subprocess.run([cli, *args, "--out", str(tmp_path / "s")], capture_output=True, text=True, check=True)
    fig = plot.sweep_figure(pd.DataFrame(rows))
    assert fig.svg == (tmp_path / "s.svg").read_text()
    assert fig.title.startswith(f"tiercache sweep: {path.name}")


def test_size_sweeps_default_to_a_log_axis():
    assert plot.curves(frame(), x="cache_size").panels[0].logx
    assert not plot.curves(frame(), x="cache_size", logx=False).panels[0].logx


def test_no_legend_for_a_single_series():
    df = frame()[frame()["eviction"] == "lru"]
    fig = plot.curves(df, hue="eviction")
    assert fig.panels[0].legend_title is None
    assert "lru" not in svg_texts(fig.svg)


def test_palette_is_the_renderers():
    assert plot.PALETTE == tuple(_native.PALETTE)
