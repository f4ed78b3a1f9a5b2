#!/usr/bin/env python3
"""Miss-ratio curves of `tiercache mrc` against libCacheSim's sampled simulation, side by side.

For each trace (one 512-byte block per id, as scripts/libcachesim_reference.py
decodes them) and policy (LRU, FIFO, ARC, S3-FIFO), at --points cache sizes
from 1 % to 50 % of the trace's distinct blocks:
  - libCacheSim full: `POLICY(n).process_trace(reader)` on an oracleGeneral
    copy, once per size;
  - libCacheSim sampled: the same on a reader with its spatial sampler at
    --rate, caches of n x rate objects (its miniature simulation);
  - tiercache full: `tiercache mrc --method exact` for LRU (one pass, equal
    to `sim --no-timing`), `--method minisim --rate 1` for the others (sim's
    engine on every line, equal to `sim --no-timing`);
  - tiercache sampled: `--method minisim --rate R` for every policy (the
    same definition as libCacheSim's sampled run: the hit ratio of the
    sampled accesses in caches of n x rate lines), and for LRU also
    `--method shards --rate R` (SHARDS with the FAST'15 paper's adjustment:
    sampled misses over the expected sampled accesses, as libCacheSim's own
    mrcProfiler computes it).
Each sampled curve's mean absolute error (over the sizes, of the hit ratio
of all accesses) is taken against its own tool's full curve (the two tools'
policies differ in details). A sample is one random draw of lines, and on
these traces the error depends much on the draw: each tool draws --seeds
samples (tiercache `--seed S`; libCacheSim's spatial sampler has a fixed
hash, so its trace's ids are XORed with S, the same accesses under other
names), and the table gives the mean and the largest error over the draws.
Prints a Markdown table of wall times (one draw) and errors, and the ratio
of the mean errors tiercache / libCacheSim.

    python3 bench/mrc_vs_libcachesim.py [--traces ../shared/traces] [--rate 0.01] [--seeds 10] [--only OLTP,P3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import numpy as np  # noqa: E402
import libcachesim as lcs  # noqa: E402
from libcachesim_reference import POLICIES, arc_lis_pages, cloudphysics_ids, write_oracle_general  # noqa: E402

BIN = REPO / "target" / "release" / "tiercache"

TRACES = [
    ("OLTP", "arc/OLTP.lis.zst", arc_lis_pages),
    ("P3", "arc/P3.lis.zst", arc_lis_pages),
    ("w106", "cloudphysics/w106.trace.xz", cloudphysics_ids),
]


@contextlib.contextmanager
def quiet_stdout():
    """libCacheSim's C code prints each sampler it makes on stdout: keep it out of the table."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        try:
            yield
        finally:
            os.dup2(saved, 1)
            os.close(saved)


def lcs_curve(og: Path, policy: str, sizes: list[int], rate: float | None) -> tuple[float, list[float]]:
    """Wall seconds and hit ratios of libCacheSim at each size (sampled at `rate`)."""
    t = time.perf_counter()
    out = []
    # The reader keeps a pointer to the sampler: it must outlive the reader.
    sampler = None
    if rate is not None:
        with quiet_stdout():
            sampler = lcs.libcachesim_python.Sampler(rate, lcs.SamplerType.SPATIAL_SAMPLER)
    for n in sizes:
        param = lcs.ReaderInitParam(ignore_obj_size=True)
        if sampler is not None:
            param.sampler = sampler
            n = max(1, round(n * rate))
        reader = lcs.TraceReader(str(og), lcs.TraceType.ORACLE_GENERAL_TRACE, param)
        miss, _ = POLICIES[policy](n).process_trace(reader)
        out.append(1.0 - miss)
        del reader
    return time.perf_counter() - t, out


def tc_curve(trace: Path, policy: str, sizes: list[int], method: str, rate: float | None,
             seed: int = 0) -> tuple[float, list[float]]:
    """Wall seconds and hit ratios of one `tiercache mrc` run."""
    cmd = [str(BIN), "mrc", "--trace", str(trace), "--line-size", "512B", "--policy", policy,
           "--method", method, "--json", "--sizes", ",".join(f"{n}lines" for n in sizes)]
    if rate is not None:
        cmd += ["--rate", str(rate)]
    if seed:
        cmd += ["--seed", str(seed)]
    if method == "minisim":
        cmd += ["--jobs", "1"]
    t = time.perf_counter()
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return time.perf_counter() - t, [r["hit_ratio"] for r in rows]


def mae(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


def seed(i: int) -> int:
    """The i-th draw's seed (0: each tool's default sample)."""
    return 0 if i == 0 else (i * 0x9E3779B97F4A7C15) & ((1 << 63) - 1)


def spread(errors: list[float]) -> str:
    return f"{np.mean(errors):.4f} ({max(errors):.4f})"


def main() -> int:
    global BIN
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=REPO.parent / "shared" / "traces", type=Path)
    ap.add_argument("--rate", default=0.01, type=float)
    ap.add_argument("--seeds", default=10, type=int, help="draws per tool [default: 10]")
    ap.add_argument("--points", default=8, type=int)
    ap.add_argument("--only", default=None, help="comma-separated trace names (OLTP, P3, w106)")
    ap.add_argument("--policies", default="lru,fifo,arc,s3fifo")
    ap.add_argument("--bin", default=BIN, type=Path, help="the tiercache binary [default: target/release/tiercache]")
    args = ap.parse_args()
    BIN = args.bin
    if not BIN.exists():
        sys.exit(f"{BIN} not built (cargo build --release -p tiercache-cli)")
    only = set(args.only.split(",")) if args.only else None
    print(f"rate {args.rate}, {args.points} sizes from 1 % to 50 % of the distinct blocks, {args.seeds} draws, "
          f"libcachesim {lcs.__version__}, {BIN}\n")
    print("MAE: mean over the draws (largest). Times: full curve and one sampled curve, seconds.\n")
    print("| trace | policy | tiercache method | full s (tc / lcs) | sampled s (tc / lcs) "
          "| MAE tc | MAE lcs | MAE ratio (means) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, rel, decode in TRACES:
            if only and name not in only:
                continue
            path = args.traces / rel
            if not path.exists():
                print(f"skip {name}: {path} not present", file=sys.stderr)
                continue
            ids = decode(path)
            unique = int(len(np.unique(ids)))
            og = Path(tmp) / f"{name}.oracleGeneral"
            write_oracle_general(ids, og)
            drawn = []
            for i in range(args.seeds):
                p = Path(tmp) / f"{name}.{i}.oracleGeneral"
                write_oracle_general(ids.astype(np.uint64) ^ np.uint64(seed(i)), p)
                drawn.append(p)
            sizes = sorted({max(1, round(unique * 0.01 * 50 ** (i / (args.points - 1)))) for i in range(args.points)})
            for policy in args.policies.split(","):
                lf_t, lf = lcs_curve(og, policy, sizes, None)
                ls_t, e_lcs = 0.0, []
                for i, p in enumerate(drawn):
                    t, ls = lcs_curve(p, policy, sizes, args.rate)
                    ls_t = t if i == 0 else ls_t
                    e_lcs.append(mae(ls, lf))
                if policy == "lru":
                    tf_t, tf = tc_curve(path, policy, sizes, "exact", None)
                    methods = ["minisim", "shards"]
                else:
                    tf_t, tf = tc_curve(path, policy, sizes, "minisim", 1.0)
                    methods = ["minisim"]
                for method in methods:
                    ts_t, e_tc = 0.0, []
                    for i in range(args.seeds):
                        t, ts = tc_curve(path, policy, sizes, method, args.rate, seed(i))
                        ts_t = t if i == 0 else ts_t
                        e_tc.append(mae(ts, tf))
                    ratio = np.mean(e_tc) / np.mean(e_lcs) if np.mean(e_lcs) > 0 else float("nan")
                    print(f"| {name} | {policy} | {method} | {tf_t:.2f} / {lf_t:.2f} | {ts_t:.2f} / {ls_t:.2f} "
                          f"| {spread(e_tc)} | {spread(e_lcs)} | {ratio:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
