"""tiercache.mrc against the CLI's `tiercache mrc --json` and `simulate`."""

from __future__ import annotations

import json

import pytest

import tiercache
from conftest import make_msr, run_cli


def test_mrc_is_the_cli_rows_as_a_dataframe(tmp_path, cli):
    trace = tmp_path / "t.csv"
    make_msr(trace)
    df = tiercache.mrc(trace, sizes=[16, 64, 256, "4MiB"], line_size="512B")
    rows = json.loads(run_cli(cli, "mrc", "--trace", str(trace), "--sizes", "16lines,64lines,256lines,4MiB",
                             "--line-size", "512B", "--json").stdout)
    assert list(df["cache_lines"]) == [16, 64, 256, 8192]
    for col in ("hit_ratio", "read_hit_ratio", "write_hit_ratio", "hits", "working_set_lines"):
        assert list(df[col]) == [r[col] for r in rows], col
    assert set(df["policy"]) == {"lru"} and set(df["method"]) == {"exact"}


def test_exact_equals_simulate_hits(tmp_path):
    trace = tmp_path / "t.csv"
    make_msr(trace)
    df = tiercache.mrc(trace, sizes=[32, 500], line_size="512B")
    for lines, hits in zip(df["cache_lines"], df["hits"]):
        r = tiercache.simulate(trace, cache_size=f"{lines}lines", line_size="512B", no_timing=True)
        assert r["hits"] == hits


def test_minisim_and_errors(tmp_path):
    trace = tmp_path / "t.csv"
    make_msr(trace)
    df = tiercache.mrc(trace, policy="arc", rate=1, sizes="auto", jobs=1)
    assert set(df["method"]) == {"minisim"} and len(df) > 5
    assert df["hit_ratio"].is_monotonic_increasing or df["hit_ratio"].iloc[-1] >= df["hit_ratio"].iloc[0]
    with pytest.raises(tiercache.OptionError, match="minisim"):
        tiercache.mrc(trace, policy="fifo", method="exact")
    with pytest.raises(FileNotFoundError):
        tiercache.mrc(tmp_path / "missing.csv")
