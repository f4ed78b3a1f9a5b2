"""First contact: the docs' Python snippet runs verbatim, every CLI mode is
available from Python, and errors name the option and its allowed values in
Python terms."""

from __future__ import annotations

import json
import re

import pytest

import tiercache

from conftest import ROOT, SHARED, run_cli


DOCS_WITH_PYTHON = ["README.md", "docs/simulator.md"]


def docs_python_blocks() -> list[tuple[str, str]]:
    """(file, code) of every ```python block of the pages that show the package."""
    out = []
    for name in DOCS_WITH_PYTHON:
        path = ROOT / name
        if path.exists():
            out += [(name, c) for c in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)]
    return out


def test_docs_python_snippet_runs_verbatim(monkeypatch, tmp_path):
    """The snippet as written, from the repository root (its paths are relative to it)."""
    blocks = docs_python_blocks()
    assert blocks, f"none of {DOCS_WITH_PYTHON} has a ```python block"
    if not (SHARED / "arc" / "OLTP.lis.zst").exists():
        pytest.skip(f"shared traces absent ({SHARED})")
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TIERCACHE_CACHE_DIR", str(tmp_path / "runs"))
    for name, code in blocks:
        ns: dict = {}
        exec(compile(code, name, "exec"), ns)
        assert ns["r"]["hit_ratio"] > 0.3
        assert len(ns["df"]) == 4
        assert ns["fig"].svg.startswith("<svg")


def test_plot_is_an_attribute_after_import_tiercache():
    assert callable(tiercache.plot.curves)


#: One small configuration of every ``--mode`` of ``tiercache sim``.
EVERY_MODE = [
    ("cache", {"cache_size": "8MiB"}),
    ("ssd", {"cache_size": "8MiB"}),
    ("ssc", {"cache_size": "8MiB"}),
    ("ssc-v", {"cache_size": "8MiB", "write_policy": "write-through"}),
    ("ssd", {"cache_size": "8MiB", "ftl": "page"}),
    ("ssc", {"cache_size": "8MiB", "ftl": "page"}),
    ("ssc-v", {"cache_size": "8MiB", "ftl": "hybrid", "write_policy": "write-through"}),
    # Section 4.3's log/data split on the page-mapped layer.
    ("ssc", {"cache_size": "8MiB", "ftl": "page-log"}),
    ("ssc-v", {"cache_size": "8MiB", "ftl": "page-log", "write_policy": "write-through"}),
    # The live log-structured store's policy, with compressed records.
    ("ssc", {"cache_size": "8MiB", "ftl": "log", "compress": "lz4", "compressibility": "2:0.5,8:0.5"}),
    ("tier", {"fast_tier_size": "8%"}),
    # The planner options `sim --like` reads from a tiered volume.
    ("tier", {"fast_tier_size": "8%", "capacity": "slow", "plan_every": 50, "moves_per_round": 16, "plan_clock": "requests"}),
    ("tica", {"cache_size": "10%", "dram_size": "1%"}),
    ("ucache", {"cache_size": "10%", "dram_size": "1%"}),
    ("srac", {"cache_size": "10%", "dram_size": "1%"}),
]


def test_every_mode_is_tested():
    assert {m for m, _ in EVERY_MODE} == set(tiercache.MODES)


@pytest.mark.parametrize("mode,opts", EVERY_MODE)
def test_every_cli_mode_from_python_is_sim_json(msr_trace, cli, mode, opts, monkeypatch):
    """simulate(mode=M) runs in this process (no tiercache command on PATH)
    and returns exactly what `tiercache sim --mode M --json` prints."""
    path, _ = msr_trace
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("TIERCACHE_BIN", raising=False)
    r = tiercache.simulate(path, mode=mode, **opts)
    assert isinstance(r, dict)
    args = ["sim", "--trace", str(path), "--mode", mode, "--json"]
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    want = json.loads(run_cli(cli, *args).stdout)
    drop = {"elapsed_s", "wall_s"}
    assert {k: v for k, v in r.items() if k not in drop} == {k: v for k, v in want.items() if k not in drop}


#: One small configuration of every design, by its one name.
EVERY_DESIGN = [
    ("azor", {"cache_size": "8MiB"}),
    ("flashtier", {"cache_size": "8MiB"}),
    ("oodt", {"fast_tier_size": "8%"}),
    ("tica", {"cache_size": "10%", "dram_size": "1%"}),
]


def test_every_design_is_tested():
    assert {d for d, _ in EVERY_DESIGN} == set(tiercache.DESIGNS)


@pytest.mark.parametrize("design,opts", EVERY_DESIGN)
def test_simulate_design_is_sim_design(msr_trace, cli, design, opts):
    """simulate(design=D) returns what `tiercache sim --design D --json` prints."""
    path, _ = msr_trace
    r = tiercache.simulate(path, design=design, **opts)
    args = ["sim", "--trace", str(path), "--design", design, "--json"]
    for k, v in opts.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    want = json.loads(run_cli(cli, *args).stdout)
    drop = {"elapsed_s", "wall_s"}
    assert {k: v for k, v in r.items() if k not in drop} == {k: v for k, v in want.items() if k not in drop}


def test_design_and_mode_together_are_refused(msr_trace):
    path, _ = msr_trace
    with pytest.raises(tiercache.OptionError, match=r"option design: give design or mode"):
        tiercache.simulate(path, design="tica", mode="tica", cache_size="10%")
    with pytest.raises(tiercache.OptionError, match=r"option design: unknown design 'nope' \(allowed: azor"):
        tiercache.simulate(path, design="nope", cache_size="10%")


def test_sweep_over_a_mode(msr_trace, cache_dir):
    path, _ = msr_trace
    df = tiercache.sweep([path], {"mode": "tier", "fast_tier_size": ["4%", "8%"]}, cache_dir=cache_dir, workers=1, progress=False)
    assert len(df) == 2


@pytest.mark.parametrize(
    "mode,opts,match",
    [
        ("tier", {"fast_tier_size": "8%", "tier_policy": "nope"}, r"option tier_policy: .*'nope'.*allowed: .*oodt"),
        ("tier", {}, r"option fast_tier_size: required"),
        ("tier", {"fast_tier_size": "8%", "tier_block": "1KiB"}, r"option tier_block: .*allowed: a power of two"),
        ("tier", {"fast_tier_size": "4%,8%"}, r"option fast_tier_size: one value per run"),
        ("tica", {"cache_size": "10%", "tica_policy": "nope"}, r"option tica_policy: .*allowed: ef, wed, adaptive"),
        ("tica", {"cache_size": "10%", "line_size": "3KiB"}, r"option line_size: .*allowed"),
        ("ssc", {"cache_size": "8MiB", "write_policy": "write-hdd-upd"}, r"option write_policy: .*allowed: write-back, write-through"),
        ("ssc", {"cache_size": "8MiB", "line_size": "8KiB"}, r"option line_size: .*allowed: 4KiB"),
        ("ssd", {}, r"option cache_size: required"),
        ("ssd", {"cache_size": "8MiB", "ftl": "bogus"}, r"option ftl: unknown FTL 'bogus' \(allowed: hybrid, page, page-log\)"),
        ("srac", {"cache_size": "10%", "no_timing": True}, r"option no_timing: applies to mode cache, ssd, ssc, ssc-v, tica and tier"),
        ("warp", {}, r"option mode: unknown mode 'warp' \(allowed: cache, ssd"),
    ],
)
def test_mode_errors_name_the_option_and_allowed_values(msr_trace, mode, opts, match):
    path, _ = msr_trace
    with pytest.raises(ValueError, match=match) as e:
        tiercache.simulate(path, mode=mode, **opts)
    assert isinstance(e.value, tiercache.OptionError)
    assert "--" not in str(e.value), "CLI flag spelling in a Python error"


def test_mode_missing_trace_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        tiercache.simulate(tmp_path / "nope.csv", mode="tier", fast_tier_size="8%")


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
