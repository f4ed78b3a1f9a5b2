"""Named sweep specs: valid configurations, and the ARC paper's Table IV."""

from __future__ import annotations

import pytest

import tiercache
from tiercache import specs
from tiercache.sweeps import configurations
from conftest import SHARED, shared_trace


def test_spec_names():
    assert {"arc-hit-ratios", "azor-associativity", "azor-2lbs"} <= set(specs.names())
    with pytest.raises(KeyError, match="available"):
        specs.get("nope")


@pytest.mark.parametrize("name", specs.names())
def test_every_spec_configuration_is_accepted(name, msr_trace):
    """Each configuration of each spec runs (on a small synthetic trace)."""
    path, _ = msr_trace
    for cfg in configurations(specs.get(name).grid):
        cfg = {**cfg, "no_timing": True, "format": "msr"}
        if isinstance(cfg["cache_size"], int):
            cfg["line_size"] = "512B"
        r = tiercache.simulate(path, **cfg)
        assert r["requests"] == 4000


def test_arc_table_iv(cache_dir):
    """LRU and ARC hit ratios on OLTP within 0.1 percentage point of the ARC paper's Table IV."""
    shared_trace("arc/OLTP.lis.zst")
    df, table = specs.run("arc-hit-ratios", traces_dir=SHARED, workers=2, cache_dir=cache_dir, progress=False)
    assert len(table) == 10
    assert table["published_pct"].notna().all()
    assert (table["difference_pct"].abs() <= 0.1).all(), table
    fig = specs.get("arc-hit-ratios").figure(df)
    assert fig.panels[0].y_label == "Hit ratio (%)"
    assert fig.panels[0].labels == ["lru", "arc"]
