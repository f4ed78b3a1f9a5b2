#!/usr/bin/env python3
"""Simulation speed and memory of `tiercache sim` against libCacheSim, in one invocation.

For each trace and cache size (LRU, fully associative, 512-byte blocks, one
block per request), runs alternately and `--repeat` times each:
  - libcachesim: `LRU(n).process_trace(reader)` on an oracleGeneral copy of the
    trace (its fastest path: C++ loop over a binary trace), single thread;
  - tiercache --no-timing: `tiercache sim --no-timing` on a native copy;
  - tiercache timed: the full timing model (HDD and SSD models, event loop),
    without the HDD-only baseline replay.
Reports the best wall time of each, the ratios, the hit ratios of both (they
must agree) and tiercache's peak resident memory per unique block of the
trace, above the fixed RSS of a one-request run (binary, libraries, buffers).

    python3 bench/sim_vs_libcachesim.py [--traces ../shared/traces] [--repeat 3]
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
from libcachesim_reference import cloudphysics_ids, arc_lis_pages, write_oracle_general  # noqa: E402

BIN = REPO / "target" / "release" / "tiercache"


def run_tiercache(native: Path, n: int, timed: bool) -> tuple[float, float, int]:
    """Wall seconds, hit ratio and peak RSS (bytes) of one tiercache run."""
    cmd = [str(BIN), "sim", "--trace", str(native), "--format", "native", "--cache-size", f"{n}lines",
           "--line-size", "512B", "--eviction", "lru", "--json", "--no-baseline"]
    if not timed:
        cmd.append("--no-timing")
    else:
        cmd += ["--replay", "closed", "--queue-depth", "1"]
    t = time.perf_counter()
    # `time -f %M` reports the child's peak RSS in KiB.
    p = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    rss_kib = int(p.stderr.strip().splitlines()[-1])
    return wall, json.loads(p.stdout)["hit_ratio"], rss_kib * 1024


def run_libcachesim(og: Path, n: int) -> tuple[float, float]:
    t = time.perf_counter()
    reader = lcs.TraceReader(str(og), lcs.TraceType.ORACLE_GENERAL_TRACE, lcs.ReaderInitParam(ignore_obj_size=True))
    miss, _ = lcs.LRU(n).process_trace(reader)
    return time.perf_counter() - t, 1.0 - miss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not BIN.exists():
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "tiercache"], cwd=REPO, check=True)
    cases = [
        ("w106", args.traces / "cloudphysics/w106.trace.xz", cloudphysics_ids, "cloudphysics", [0.01, 0.10]),
        ("OLTP", args.traces / "arc/OLTP.lis.zst", arc_lis_pages, "arc-lis", [1000 / 186880, 0.10]),
    ]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # Fixed cost of the process (binary, libraries, buffers): RSS of a one-request run.
        one = Path(tmp) / "one.tct"
        (Path(tmp) / "one.txt").write_text("1\n")
        subprocess.run([str(BIN), "trace", "convert", str(Path(tmp) / "one.txt"), "--format", "blockid", "-o", str(one)],
                       check=True, capture_output=True)
        _, _, base_rss = run_tiercache(one, 1, timed=True)
        print(f"process baseline RSS: {base_rss / 2**20:.1f} MiB", flush=True)
        for name, path, decode, fmt, fractions in cases:
            if not path.exists():
                print(f"skip {name}: {path} not found (the shared traces are needed)", file=sys.stderr)
                continue
            ids = decode(path)
            unique = int(len(np.unique(ids)))
            og = Path(tmp) / f"{name}.og"
            write_oracle_general(ids, og)
            native = Path(tmp) / f"{name}.tct"
            subprocess.run([str(BIN), "trace", "convert", str(path), "--format", fmt, "-o", str(native)],
                           check=True, capture_output=True)
            for f in fractions:
                n = max(1, int(round(unique * f)))
                best = {"lcs": 1e9, "fast": 1e9, "timed": 1e9}
                rss = 0
                hits = {}
                for _ in range(args.repeat):
                    w, h = run_libcachesim(og, n)
                    best["lcs"], hits["lcs"] = min(best["lcs"], w), h
                    w, h, r = run_tiercache(native, n, timed=False)
                    best["fast"], hits["fast"], rss = min(best["fast"], w), h, max(rss, r)
                    w, h, r = run_tiercache(native, n, timed=True)
                    best["timed"], hits["timed"], rss = min(best["timed"], w), h, max(rss, r)
                row = {
                    "trace": name, "requests": int(len(ids)), "unique_blocks": unique, "cache_blocks": n,
                    "libcachesim_s": round(best["lcs"], 3), "no_timing_s": round(best["fast"], 3),
                    "timed_s": round(best["timed"], 3),
                    "no_timing_speedup": round(best["lcs"] / best["fast"], 2),
                    "timed_speedup": round(best["lcs"] / best["timed"], 2),
                    "hit_libcachesim": round(hits["lcs"], 6), "hit_tiercache": round(hits["fast"], 6),
                    "peak_rss_bytes": rss,
                    "peak_rss_bytes_per_unique_block": round(max(0, rss - base_rss) / unique, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    print(f"{'trace':6} {'cache':>7} {'lcs s':>7} {'fast s':>7} {'timed s':>8} {'fast/lcs':>9} {'timed/lcs':>10} {'B/unique':>9}  hit (lcs = tiercache)")
    for r in rows:
        print(f"{r['trace']:6} {r['cache_blocks']:>7} {r['libcachesim_s']:>7} {r['no_timing_s']:>7} {r['timed_s']:>8} "
              f"{r['no_timing_speedup']:>8}x {r['timed_speedup']:>9}x {r['peak_rss_bytes_per_unique_block']:>9}  "
              f"{r['hit_libcachesim']} = {r['hit_tiercache']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
