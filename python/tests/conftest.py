"""Shared fixtures: small synthetic traces (generated, so tests never need the
shared ones), the CLI binary, and the shared traces folder when present."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("TIERCACHE_TRACES", ROOT.parent / "shared" / "traces"))


def make_msr(path: Path, n: int = 4000, seed: int = 7, bad_line: int | None = None) -> list[tuple]:
    """Write an MSR Cambridge CSV trace with a skewed working set; return the
    requests as (time_ns since the first, offset, length, kind)."""
    rng = random.Random(seed)
    t0 = 128166385295514663
    t = t0
    recs = []
    lines = []
    for i in range(n):
        t += rng.randint(500, 20000)  # 100 ns ticks: 50 µs to 2 ms apart
        hot = rng.random() < 0.7
        block = rng.randint(0, 255) if hot else rng.randint(0, 20000)
        off = block * 4096 + rng.choice([0, 0, 512, 1024])
        size = rng.choice([512, 4096, 4096, 8192, 16384])
        kind = "Read" if rng.random() < 0.65 else "Write"
        lines.append(f"{t},hm,0,{kind},{off},{size},{rng.randint(100, 3000)}")
        recs.append(((t - t0) * 100, off, size, kind.lower()))
    if bad_line is not None:
        lines[bad_line - 1] = "this,is,not,a,trace,line"
    path.write_text("\n".join(lines) + "\n")
    first = recs[0][0]  # readers put the first request at time 0
    return [(t - first, *rest) for t, *rest in recs]


@pytest.fixture(scope="session")
def msr_trace(tmp_path_factory) -> tuple[Path, list[tuple]]:
    p = tmp_path_factory.mktemp("traces") / "synthetic-msr.csv"
    recs = make_msr(p)
    return p, recs


@pytest.fixture(scope="session")
def big_msr_trace(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("traces") / "synthetic-big-msr.csv"
    make_msr(p, n=30000, seed=11)
    return p


@pytest.fixture(scope="session")
def cli() -> str:
    """The tiercache binary (TIERCACHE_BIN, target/release or on PATH)."""
    cand = [os.environ.get("TIERCACHE_BIN"), str(ROOT / "target" / "release" / "tiercache"), shutil.which("tiercache")]
    for c in cand:
        if c and os.path.exists(c):
            return c
    pytest.skip("tiercache CLI binary not built (cargo build --release -p tiercache-cli)")


def run_cli(cli: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([cli, *args], capture_output=True, text=True, check=True)


@pytest.fixture
def cache_dir(tmp_path) -> Path:
    return tmp_path / "runs"


def shared_trace(rel: str) -> Path:
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"shared trace {p} not present (set TIERCACHE_TRACES to the traces folder)")
    return p
