#!/usr/bin/env python3
"""Sweep scaling and Python-path overhead of tiercache.

1. Wall time of one sweep grid with 1 and with 2 local worker processes
   (and on Ray with 2 CPUs when Ray is installed), caching off.
2. Per-run cost of the same configuration through `tiercache.simulate` (in
   process), through `tiercache.sweep` (one worker process), and through the
   CLI (`tiercache sim --json`, a new process per run).

    python3 bench/sweep_scaling.py [--trace PATH] [--repeat N] [--ray]

Prints a Markdown report (the source of the Python sweeps section of docs/results.md).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tiercache

ROOT = Path(__file__).resolve().parents[1]


def wall(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (the pool's workers)."""
    import resource

    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def load() -> str:
    try:
        return "%.1f" % os.getloadavg()[0]
    except OSError:
        return "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", default=str(ROOT.parent / "shared" / "traces" / "arc" / "OLTP.lis.zst"))
    p.add_argument("--cli", default=str(ROOT / "target" / "release" / "tiercache"))
    p.add_argument("--repeat", type=int, default=3, help="repetitions of each measurement (the median is reported)")
    p.add_argument("--ray", action="store_true", help="also time the sweep on a local Ray instance (num_cpus=2)")
    a = p.parse_args()
    if not os.path.exists(a.trace):
        print(f"trace {a.trace} not found (pass --trace)", file=sys.stderr)
        return 1
    grid = {"cache_size": ["1000lines", "2000lines", "5000lines", "10000lines"], "line_size": "512B", "eviction": ["lru", "arc"]}
    n_runs = 8
    one = {"cache_size": "2000lines", "line_size": "512B", "eviction": "arc"}

    def med(f):
        return statistics.median(wall(f) for _ in range(a.repeat))

    # warm the page cache and the trace hash memo
    tiercache.simulate(a.trace, **one)
    load_before = load()
    c0 = cpu_seconds()
    t1 = med(lambda: tiercache.sweep(a.trace, grid, workers=1, cache_dir=False, progress=False))
    c1 = (cpu_seconds() - c0) / a.repeat
    c0 = cpu_seconds()
    t2 = med(lambda: tiercache.sweep(a.trace, grid, workers=2, cache_dir=False, progress=False))
    c2 = (cpu_seconds() - c0) / a.repeat
    tray = None
    if a.ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        tiercache.sweep(a.trace, grid, cache_dir=False, progress=False)  # warm the workers
        tray = med(lambda: tiercache.sweep(a.trace, grid, cache_dir=False, progress=False))
        ray.shutdown()

    t_sim = med(lambda: tiercache.simulate(a.trace, **one))
    t_sweep1 = med(lambda: tiercache.sweep(a.trace, [one], workers=1, cache_dir=False, progress=False))
    t_cli = None
    if os.path.exists(a.cli):
        cmd = [a.cli, "sim", "--trace", a.trace, "--cache-size", "2000lines", "--line-size", "512B", "--eviction", "arc", "--json"]
        t_cli = med(lambda: subprocess.run(cmd, check=True, capture_output=True))

    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    print("# Python sweeps: scaling and overhead\n")
    print(f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; tiercache {tiercache.__version__}; "
          f"Python {platform.python_version()}; {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}).")
    print(f"Command: `python3 bench/sweep_scaling.py --repeat {a.repeat}{' --ray' if a.ray else ''}`; trace `{a.trace}`; "
          f"medians of {a.repeat} runs; 1-minute load average {load_before} before, {load()} after "
          f"(the machine is shared: a load above the CPU count means the sweep got less than 2 CPUs).\n")
    print(f"## Sweep wall time ({n_runs} runs: cache sizes 1000-10000 lines of 512 B x LRU/ARC, timing model on, cache off)\n")
    print("| executor | wall time | speedup | CPU time (all processes) | CPU time / wall time |")
    print("|---|---:|---:|---:|---:|")
    print(f"| 1 local process | {t1:.2f} s | 1.00x | {c1:.2f} s | {c1 / t1:.2f} |")
    print(f"| 2 local processes | {t2:.2f} s | {t1 / t2:.2f}x | {c2:.2f} s | {c2 / t2:.2f} |")
    if tray is not None:
        print(f"| Ray, num_cpus=2 | {tray:.2f} s | {t1 / tray:.2f}x | - | - |")
    print("\n## One run (ARC, 2000 lines of 512 B)\n")
    print("| path | wall time | overhead vs simulate |")
    print("|---|---:|---:|")
    print(f"| `tiercache.simulate` (in process) | {ms(t_sim)} | - |")
    print(f"| `tiercache.sweep`, 1 worker process, no cache | {ms(t_sweep1)} | {ms(t_sweep1 - t_sim)} |")
    if t_cli is not None:
        print(f"| CLI `tiercache sim --json` (new process) | {ms(t_cli)} | {ms(t_cli - t_sim)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
