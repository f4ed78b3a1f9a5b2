"""The papers' experiments as named sweeps.

Each :class:`Spec` names the shared traces it replays, the grid of options,
how to turn the sweep into the paper's table, and how to draw its figure::

    import tiercache.specs as specs
    df, table = specs.run("arc-hit-ratios", traces_dir="../shared/traces")
    specs.get("arc-hit-ratios").figure(df).save("arc.svg")

Available: ``arc-hit-ratios`` (ARC paper, Table IV, OLTP), ``azor-associativity``
(Azor §4.1: direct-mapped against fully associative, by cache size and write
policy, on PostMark) and ``azor-2lbs`` (Azor §4.2: two-level block selection
levels against the base cache). The other reproductions of
``tiercache reproduce`` (OODT, FlashTier Table VII, TICA Figs. 11-14) need
simulation modes this build does not have yet (``mode`` tier, ssd/ssc/ssc-v,
tica/ucache/srac); they will be added here as those modes land.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["Spec", "SPECS", "names", "get", "traces", "run", "ARC_TABLE_IV"]

#: ARC paper (Megiddo and Modha, FAST'03), Table IV: hit ratios (%) on OLTP
#: for cache sizes in 512-byte pages.
ARC_TABLE_IV: dict[int, dict[str, float]] = {
    1000: {"lru": 32.83, "arc": 38.93},
    2000: {"lru": 42.47, "arc": 46.08},
    5000: {"lru": 53.65, "arc": 55.25},
    10000: {"lru": 60.70, "arc": 61.87},
    15000: {"lru": 64.63, "arc": 65.40},
}


@dataclass(frozen=True)
class Spec:
    """A reproduction as a sweep."""

    name: str
    description: str
    #: Trace files relative to the shared traces folder.
    trace_files: tuple[str, ...]
    #: Grid of :func:`tiercache.sweep` (dict of lists) or explicit configurations.
    grid: Any
    #: Figure: (x, y, hue, style) for :func:`tiercache.plot.curves`.
    plot: tuple[str, str, str | None, str | None]
    #: Turns the sweep's DataFrame into the paper's table.
    tabulate: Callable[[Any], Any] = field(default=lambda df: df)

    def traces(self, traces_dir: str | os.PathLike) -> list[str]:
        """Paths of the traces; FileNotFoundError naming the missing ones."""
        paths = [os.path.join(os.fspath(traces_dir), f) for f in self.trace_files]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(f"spec {self.name}: missing traces {', '.join(missing)}")
        return paths

    def table(self, df):
        """The paper's table from the sweep's DataFrame."""
        return self.tabulate(df)

    def figure(self, df):
        """The paper's figure (a :class:`tiercache.plot.Figure`)."""
        from . import plot

        x, y, hue, style = self.plot
        return plot.curves(df, x=x, y=y, hue=hue, style=style, title=self.description)


def _trace_name(df):
    return df["trace"].map(lambda p: Path(p).name.split(".")[0])


def _arc_table(df):
    import pandas as pd

    rows = []
    for (size, ev), g in df.groupby(["cache_size", "eviction"], sort=False):
        pub = ARC_TABLE_IV.get(int(str(size).removesuffix("lines")), {}).get(ev)
        hr = float(g["hit_ratio"].iloc[0]) * 100
        rows.append({"cache_size": size, "eviction": ev, "hit_ratio_pct": round(hr, 2), "published_pct": pub,
                     "difference_pct": None if pub is None else round(hr - pub, 2)})
    return pd.DataFrame(rows)


def _pivot(values: str, columns: list[str]):
    def f(df):
        d = df.assign(trace=_trace_name(df))
        return d.pivot_table(index=["trace", "cache_size"], columns=columns, values=values, sort=False)

    return f


SPECS: dict[str, Spec] = {
    s.name: s
    for s in [
        Spec(
            name="arc-hit-ratios",
            description="ARC paper Table IV: LRU against ARC on OLTP",
            trace_files=("arc/OLTP.lis.zst",),
            grid={
                "cache_size": [f"{n}lines" for n in sorted(ARC_TABLE_IV)],
                "line_size": "512B",
                "eviction": ["lru", "arc"],
                "no_timing": True,
                "no_baseline": True,
            },
            plot=("cache_size", "hit_ratio", "eviction", None),
            tabulate=_arc_table,
        ),
        Spec(
            name="azor-associativity",
            description="Azor §4.1: associativity, cache size and write policy (PostMark)",
            trace_files=("disksim/ssd-postmark-aligned2.trace",),
            grid={
                "cache_size": ["5%", "10%", "25%", "50%"],
                "assoc": ["direct", "full"],
                "write_policy": ["write-through", "write-hdd-upd", "write-hdd-inv"],
            },
            plot=("cache_size", "mean_response_us", "assoc", "write_policy"),
            tabulate=_pivot("mean_response_us", ["assoc", "write_policy"]),
        ),
        Spec(
            name="azor-2lbs",
            description="Azor §4.2: two-level block selection against the base cache",
            trace_files=("disksim/ssd-postmark-aligned2.trace", "samples/blktrace.txt"),
            grid=[
                {"cache_size": size, "assoc": assoc, "write_policy": "write-hdd-upd", "admission": adm,
                 "2lbs_levels": levels}
                for size in ["5%", "10%"]
                for assoc in ["direct", "full"]
                for adm, levels in [("always", "metadata,frequency"), ("2lbs", "metadata"),
                                    ("2lbs", "frequency"), ("2lbs", "both")]
            ],
            plot=("cache_size", "hit_ratio", "2lbs_levels", "assoc"),
            tabulate=_pivot("hit_ratio", ["assoc", "admission", "2lbs_levels"]),
        ),
    ]
}


def names() -> list[str]:
    """Names of the available specs."""
    return list(SPECS)


def get(name: str) -> Spec:
    """The spec of this name (KeyError listing the names otherwise)."""
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"unknown sweep spec '{name}' (available: {', '.join(SPECS)})") from None


def traces(name: str, traces_dir: str | os.PathLike = "../shared/traces") -> list[str]:
    """Trace paths of a spec under ``traces_dir``."""
    return get(name).traces(traces_dir)


def run(name: str, traces_dir: str | os.PathLike = "../shared/traces", **sweep_kwargs):
    """Run a spec's sweep; returns (DataFrame, the paper's table)."""
    from .sweeps import sweep

    s = get(name)
    df = sweep(s.traces(traces_dir), s.grid, **sweep_kwargs)
    return df, s.table(df)
