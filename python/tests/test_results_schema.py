"""One result schema: the keys of ``simulate`` (= ``sim --json``), the sweep
CSV header and the DataFrame columns of ``sweep`` are those docs/results.md
lists (its table is parsed here, so the doc cannot drift)."""

from __future__ import annotations

import pytest

import tiercache
from conftest import ROOT, run_cli

GROUPS = {"flash": ["ssd", "ssc", "ssc-v"], "levels": ["tica", "ucache", "srac"]}


def documented(mode: str, output: str) -> set[str]:
    fields = set()
    for line in (ROOT / "docs" / "results.md").read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 6 or not cells[1].startswith("`"):
            continue
        modes = [m for g in cells[2].split(",") for m in GROUPS.get(g.strip(), [g.strip()])]
        outputs = [o.strip() for o in cells[3].split(",")]
        if mode in modes and output in outputs:
            fields.add(cells[1].strip("`"))
    assert len(fields) > 10, "docs/results.md table not found"
    return fields


def test_simulate_keys_are_documented(msr_trace):
    path, _ = msr_trace
    assert set(tiercache.simulate(path, cache_size="5%")) == documented("cache", "json")


def test_sweep_csv_and_dataframe_columns_are_documented(msr_trace, cli, tmp_path, cache_dir):
    path, _ = msr_trace
    run_cli(cli, "sim", "--trace", str(path), "--cache-size", "5%,20%", "--no-timing", "--out", str(tmp_path / "s"))
    header = (tmp_path / "s.csv").read_text().splitlines()[0].split(",")
    assert set(header) == documented("cache", "csv")
    grid = {"cache_size": ["5%", "20%"], "eviction": ["lru", "arc"], "line_size": "4KiB"}
    df = tiercache.sweep(path, grid, workers=1, cache_dir=cache_dir, progress=False)
    given = {c for c in df.columns if c.endswith("_given")}
    assert given == {"eviction_given", "line_size_given"}
    assert set(df.columns) - given == documented("cache", "df")
    # the fields the CSV and the DataFrame share have the same values
    import pandas as pd

    csv = pd.read_csv(tmp_path / "s.csv")
    lru = df[df["eviction"] == "lru"].reset_index(drop=True)
    for col in ("hits", "hdd_ops", "ssd_write_ops", "line_size", "cache_size_bytes"):
        assert lru[col].tolist() == csv[col].tolist(), col


@pytest.mark.parametrize(
    "mode, opts",
    [("tier", {"fast_tier_size": "25%"}), ("tica", {"cache_size": "25%"}), ("ssc", {"cache_size": "64MiB"})],
)
def test_other_modes_keys_are_documented(msr_trace, mode, opts):
    path, _ = msr_trace
    assert set(tiercache.simulate(path, mode=mode, **opts)) == documented(mode, "json")
