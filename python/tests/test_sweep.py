"""sweep: identical numbers to simulate and the CLI, caching, resume, Ray."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import tiercache
from conftest import run_cli
from tiercache.sweeps import configurations

GRID = {"cache_size": ["5%", "20%"], "eviction": ["lru", "arc"], "format": "msr"}


def test_configurations_cross_product_in_key_order():
    assert configurations({"a": [1, 2], "b": ["x", "y"], "c": 0}) == [
        {"a": 1, "b": "x", "c": 0},
        {"a": 1, "b": "y", "c": 0},
        {"a": 2, "b": "x", "c": 0},
        {"a": 2, "b": "y", "c": 0},
    ]


def test_numpy_values_are_options(msr_trace, cache_dir):
    np = pytest.importorskip("numpy")
    path, _ = msr_trace
    df = tiercache.sweep(path, {"cache_size": np.array(["64lines", "128lines"]), "format": "msr", "no_timing": True}, workers=1, cache_dir=cache_dir, progress=False)
    assert df["cache_lines"].tolist() == [64, 128]


def test_sweep_rows_equal_simulate_and_cli(msr_trace, cli, cache_dir):
    path, _ = msr_trace
    df = tiercache.sweep(path, GRID, workers=2, cache_dir=cache_dir, progress=False)
    assert len(df) == 4
    assert list(df.columns[:4]) == ["trace", "cache_size", "eviction_given", "format"]
    # the CLI's own sweep over the same grid
    cli_rows = json.loads(
        run_cli(cli, "sim", "--trace", str(path), "--format", "msr", "--cache-size", "5%,20%", "--eviction", "lru,arc", "--json", "--out", str(cache_dir.parent / "cli-sweep")).stdout
    )
    for (_, row), cli_row in zip(df.iterrows(), cli_rows):
        ref = tiercache.simulate(path, cache_size=row["cache_size"], eviction=row["eviction"], format="msr")
        assert ref == cli_row
        for k, v in ref.items():
            if k == "baseline":
                for bk, bv in v.items():
                    assert row[f"baseline_{bk}"] == bv
            elif k == "eviction":
                assert row["eviction"] == v == row["eviction_given"]
            elif k == "trace":
                assert row["trace"] == v
            elif v is None:
                assert pd.isna(row[k])
            else:
                assert row[k] == v, k


def test_repeated_sweep_costs_nothing(msr_trace, cache_dir):
    path, _ = msr_trace
    a = tiercache.sweep(path, GRID, workers=2, cache_dir=cache_dir, progress=False)
    assert a.attrs["runs_executed"] == 4
    files = sorted(cache_dir.glob("*.parquet"))
    assert len(files) == 4
    mtimes = [f.stat().st_mtime_ns for f in files]
    b = tiercache.sweep(path, GRID, workers=2, cache_dir=cache_dir, progress=False)
    assert b.attrs == {"runs_executed": 0, "runs_cached": 4}
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    pd.testing.assert_frame_equal(a, b)


def test_cache_key_depends_on_trace_content(tmp_path, msr_trace, cache_dir):
    from conftest import make_msr

    path, _ = msr_trace
    other = tmp_path / "other.csv"
    make_msr(other, n=4000, seed=8)
    grid = {"cache_size": "5%", "format": "msr", "no_timing": True}
    tiercache.sweep(path, grid, workers=1, cache_dir=cache_dir, progress=False)
    d = tiercache.sweep(other, grid, workers=1, cache_dir=cache_dir, progress=False)
    assert d.attrs["runs_executed"] == 1  # a different trace is not a cache hit
    assert d.loc[0, "hit_ratio"] == tiercache.simulate(other, **grid)["hit_ratio"]


def test_interrupted_sweep_resumes(big_msr_trace, cache_dir):
    """Ctrl-C after two finished runs; the next call runs only the rest and
    gives the same frame as an uncached sweep."""
    grid = {"cache_size": ["2%", "5%", "10%"], "eviction": ["lru", "arc"], "format": "msr"}
    seen = []

    def interrupt_after_two(row):
        seen.append(row)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tiercache.sweep(big_msr_trace, grid, workers=1, cache_dir=cache_dir, progress=False, on_result=interrupt_after_two)
    done = {f.name: f.stat().st_mtime_ns for f in cache_dir.glob("*.parquet")}
    assert len(done) == 2
    resumed = tiercache.sweep(big_msr_trace, grid, workers=2, cache_dir=cache_dir, progress=False)
    assert resumed.attrs == {"runs_executed": 4, "runs_cached": 2}
    assert {f.name: f.stat().st_mtime_ns for f in cache_dir.glob("*.parquet") if f.name in done} == done
    fresh = tiercache.sweep(big_msr_trace, grid, workers=2, cache_dir=False, progress=False)
    pd.testing.assert_frame_equal(resumed, fresh, check_like=False)
    # the rows the interrupted sweep produced are those of the full one
    for row in seen:
        r = resumed[(resumed.cache_size == row["cache_size"]) & (resumed.eviction == row["eviction"])]
        assert r["hit_ratio"].item() == row["result"]["hit_ratio"]


def test_sweep_writes_results_parquet(msr_trace, tmp_path, cache_dir):
    path, _ = msr_trace
    out = tmp_path / "results.parquet"
    df = tiercache.sweep(path, GRID, workers=2, cache_dir=cache_dir, out=out, progress=False)
    back = pd.read_parquet(out)
    pd.testing.assert_frame_equal(back, df, check_like=False, check_dtype=False)


def test_sweep_bad_option_raises(msr_trace, cache_dir):
    path, _ = msr_trace
    with pytest.raises(tiercache.OptionError, match="eviction"):
        tiercache.sweep(path, {"cache_size": "5%", "eviction": ["lru", "lfu"], "format": "msr"}, workers=1, cache_dir=cache_dir, progress=False)


def test_ray_sweep_equals_local(msr_trace, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'tiercache[ray]'): the Ray path is not tested")
    path, _ = msr_trace
    local = tiercache.sweep(path, GRID, workers=2, cache_dir=tmp_path / "local", progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        on_ray = tiercache.sweep(path, GRID, cache_dir=tmp_path / "ray", progress=False)
        assert on_ray.attrs["runs_executed"] == 4
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(on_ray, local)


def test_a_plain_script_sweeps_twice(msr_trace, tmp_path):
    """Two sweeps in a script without an ``if __name__ == "__main__"`` guard,
    with the progress bar on (its monitor thread outlives the first sweep):
    the second must run like the first (it used to end in BrokenProcessPool)."""
    import subprocess
    import sys
    import textwrap

    path, _ = msr_trace
    script = tmp_path / "two_sweeps.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import tiercache
            grid = {{"cache_size": ["5%", "20%"], "format": "msr"}}
            a = tiercache.sweep({str(path)!r}, grid, workers=2, cache_dir=False)
            b = tiercache.sweep({str(path)!r}, grid, workers=2, cache_dir=False)
            assert a["hit_ratio"].tolist() == b["hit_ratio"].tolist()
            print("two sweeps", len(a), len(b))
            """
        )
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "two sweeps 2 2" in r.stdout
    assert "Error" not in r.stderr, r.stderr
