"""First contact: the README's Python snippet runs verbatim, every CLI mode is
available from Python, and errors name the option and its allowed values in
Python terms."""

from __future__ import annotations

import json
import re

import pytest

import tiercache

from conftest import ROOT, SHARED, run_cli


def readme_python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_python_snippet_runs_verbatim(monkeypatch, tmp_path):
    """The snippet as written, from the repository root (its paths are relative to it)."""
    blocks = readme_python_blocks()
    assert blocks, "README.md has a ```python block"
    if not (SHARED / "arc" / "OLTP.lis.zst").exists():
        pytest.skip(f"shared traces absent ({SHARED})")
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TIERCACHE_CACHE_DIR", str(tmp_path / "runs"))
    for code in blocks:
        ns: dict = {}
        exec(compile(code, "README.md", "exec"), ns)
        assert ns["r"]["hit_ratio"] > 0.3
        assert len(ns["df"]) == 4


def test_plot_is_an_attribute_after_import_tiercache():
    assert callable(tiercache.plot.curves)


@pytest.mark.parametrize(
    "mode,opts",
    [
        ("tier", {"fast_tier_size": "8%"}),
        ("tica", {"cache_size": "10%", "dram_size": "1%"}),
        ("ssc", {"cache_size": "8MiB"}),
    ],
)
def test_every_cli_mode_from_python(msr_trace, cli, monkeypatch, mode, opts):
    path, _ = msr_trace
    monkeypatch.setenv("TIERCACHE_BIN", cli)
    r = tiercache.simulate(path, mode=mode, **opts)
    args = ["sim", "--trace", str(path), "--mode", mode, "--json"]
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), v]
    want = json.loads(run_cli(cli, *args).stdout)
    if isinstance(want, list):
        want = want[0]
    if isinstance(r, list):
        r = r[0]
    drop = {"elapsed_s", "wall_s"}
    assert {k: v for k, v in r.items() if k not in drop} == {k: v for k, v in want.items() if k not in drop}


def test_sweep_over_a_mode(msr_trace, cli, monkeypatch, cache_dir):
    path, _ = msr_trace
    monkeypatch.setenv("TIERCACHE_BIN", cli)
    df = tiercache.sweep([path], {"mode": "tier", "fast_tier_size": ["4%", "8%"]}, cache_dir=cache_dir, workers=1, progress=False)
    assert len(df) == 2


def test_errors_show_python_values_not_rust_debug(msr_trace):
    path, _ = msr_trace
    with pytest.raises(tiercache.OptionError) as e:
        tiercache.simulate(path, cache_size="1MiB", no_timing="yes")
    assert "'yes'" in str(e.value) and "Str(" not in str(e.value)


def test_string_grid_is_a_clear_type_error(msr_trace):
    path, _ = msr_trace
    with pytest.raises(TypeError, match="grid: expected a dict"):
        tiercache.sweep([path], "cache_size")


def test_mode_of_wrong_type(msr_trace):
    path, _ = msr_trace
    with pytest.raises(TypeError, match="mode.*allowed: cache"):
        tiercache.simulate(path, mode=3)
