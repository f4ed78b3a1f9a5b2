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
  - tiercache sampled: `--method shards --rate R` for LRU, `--method minisim
    --rate R` for the others.
Each sampled curve's mean absolute error is taken against its own tool's
full curve (the two tools' policies differ in details). Prints a Markdown
table of wall times and errors, and the ratios tiercache / libCacheSim.

    python3 bench/mrc_vs_libcachesim.py [--traces ../shared/traces] [--rate 0.01] [--only OLTP,P3]
"""

from __future__ import annotations

import argparse
import json
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


def lcs_curve(og: Path, policy: str, sizes: list[int], rate: float | None) -> tuple[float, list[float]]:
    """Wall seconds and hit ratios of libCacheSim at each size (sampled at `rate`)."""
    t = time.perf_counter()
    out = []
    # The reader keeps a pointer to the sampler: it must outlive the reader.
    sampler = None if rate is None else lcs.libcachesim_python.Sampler(rate, lcs.SamplerType.SPATIAL_SAMPLER)
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


def tc_curve(trace: Path, policy: str, sizes: list[int], method: str, rate: float | None) -> tuple[float, list[float]]:
    """Wall seconds and hit ratios of one `tiercache mrc` run."""
    cmd = [str(BIN), "mrc", "--trace", str(trace), "--line-size", "512B", "--policy", policy,
           "--method", method, "--json", "--sizes", ",".join(f"{n}lines" for n in sizes)]
    if rate is not None:
        cmd += ["--rate", str(rate)]
    if method == "minisim":
        cmd += ["--jobs", "1"]
    t = time.perf_counter()
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return time.perf_counter() - t, [r["hit_ratio"] for r in rows]


def mae(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


def main() -> int:
    global BIN
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=REPO.parent / "shared" / "traces", type=Path)
    ap.add_argument("--rate", default=0.01, type=float)
    ap.add_argument("--points", default=8, type=int)
    ap.add_argument("--only", default=None, help="comma-separated trace names (OLTP, P3, w106)")
    ap.add_argument("--policies", default="lru,fifo,arc,s3fifo")
    ap.add_argument("--bin", default=BIN, type=Path, help="the tiercache binary [default: target/release/tiercache]")
    args = ap.parse_args()
    BIN = args.bin
    if not BIN.exists():
        sys.exit(f"{BIN} not built (cargo build --release -p tiercache-cli)")
    only = set(args.only.split(",")) if args.only else None
    print(f"rate {args.rate}, {args.points} sizes from 1 % to 50 % of the distinct blocks, "
          f"libcachesim {lcs.__version__}, {BIN}\n")
    print("| trace | policy | tiercache method | full s (tc / lcs) | sampled s (tc / lcs) "
          "| MAE tc | MAE lcs | time ratio (sampled) | MAE ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
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
            sizes = sorted({max(1, round(unique * 0.01 * 50 ** (i / (args.points - 1)))) for i in range(args.points)})
            for policy in args.policies.split(","):
                lf_t, lf = lcs_curve(og, policy, sizes, None)
                ls_t, ls = lcs_curve(og, policy, sizes, args.rate)
                if policy == "lru":
                    tf_t, tf = tc_curve(path, policy, sizes, "exact", None)
                    method = "shards"
                else:
                    tf_t, tf = tc_curve(path, policy, sizes, "minisim", 1.0)
                    method = "minisim"
                ts_t, ts = tc_curve(path, policy, sizes, method, args.rate)
                e_tc, e_lcs = mae(ts, tf), mae(ls, lf)
                print(f"| {name} | {policy} | {method} | {tf_t:.2f} / {lf_t:.2f} | {ts_t:.2f} / {ls_t:.2f} "
                      f"| {e_tc:.4f} | {e_lcs:.4f} | {ts_t / ls_t:.2f} | "
                      f"{(e_tc / e_lcs) if e_lcs > 0 else float('nan'):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
