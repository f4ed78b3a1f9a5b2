#!/usr/bin/env python3
"""What the live observers cost: fio IOPS and the server's CPU time per
request of the SSD cache with the what-if estimates off (`set --what-if
off`), on (the default), and on with the request recorder (`serve --record`),
same invocation otherwise.

Each run formats a fresh SSD cache (64 MiB, in front of a 256 MiB backing
file), serves it in the run's configuration, and runs fio
through the nbd engine: 4 KiB random reads and writes (50/50) at queue
depth 32 over 192 MiB for RUNTIME seconds, after a one-pass write of the
data set. Runs rotate through the configurations so drifting machine load
hits them alike.
Prints a Markdown table (median of the runs) for docs/benchmarks.md.

usage: bench/observer_cost.py [--runs N] [--runtime S] [--dir DIR]
environment: TC (tiercache binary, default target/release/tiercache)
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Proc, sh  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TC = os.environ.get("TC", os.path.join(HERE, "target/release/tiercache"))
DATA = "192M"


def fio(uri, runtime, extra):
    out = sh(
        "fio", "--name=rec", "--ioengine=nbd", f"--uri={uri}", "--output-format=json",
        "--bs=4k", f"--size={DATA}", "--iodepth=32", "--randseed=3",
        "--norandommap", *extra, *(["--time_based", f"--runtime={runtime}"] if runtime else []),
    )
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return job["read"]["iops"] + job["write"]["iops"], job["read"]["total_ios"] + job["write"]["total_ios"]


MODES = ("what-if off", "what-if on", "what-if on, --record")


def one(d, mode, runtime):
    record = mode == MODES[2]
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    cache, backing, sock = f"{d}/c.img", f"{d}/b.img", f"{d}/s.sock"
    with open(backing, "wb") as f:
        f.truncate(256 << 20)
    sh(TC, "-q", "format", "--cache", cache, "--backing", backing, "--size", "64MiB")
    args = [TC, "-q", "serve", "--cache", cache, "--listen", f"unix:{sock}"]
    if record:
        args += ["--record", f"{d}/run.trace"]
    with open(f"{d}/serve.log", "w") as log:
        p = Proc(args, sock, log)
        try:
            if mode == MODES[0]:
                sh(TC, "-q", "set", "--cache", cache, "--what-if", "off")
            fio(p.uri, 0, ["--rw=write", "--bs=1M"])
            cpu0 = p.cpu_seconds()
            iops, ios = fio(p.uri, runtime, ["--rw=randrw"])
            cpu = p.cpu_seconds() - cpu0
        finally:
            p.stop()
    size = os.path.getsize(f"{d}/run.trace") if record else 0
    return iops, cpu / ios * 1e6, size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--dir", help="where the files go (default: a new directory under $TMPDIR)")
    a = ap.parse_args()
    for tool in ("fio",):
        if not shutil.which(tool):
            sys.exit(f"observer_cost.py: {tool} is not installed (scripts/setup.sh installs it)")
    d = tempfile.mkdtemp(dir=a.dir, prefix="observer_cost.")
    res = {m: [] for m in MODES}
    try:
        for _ in range(a.runs):
            for mode in MODES:
                r = one(d, mode, a.runtime)
                res[mode].append(r)
                print(f"{mode}: {r[0]:.0f} IOPS, {r[1]:.1f} µs CPU/request"
                      + (f", trace {r[2]} bytes" if r[2] else ""), file=sys.stderr)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    base = med[MODES[0]]
    print("| serve | IOPS (median of %d) | server CPU per request |" % a.runs)
    print("|---|---|---|")
    for m in MODES:
        iops, cpu = med[m]
        if m == MODES[0]:
            print(f"| {m} | {iops:.0f} | {cpu:.1f} µs |")
        else:
            print(f"| {m} | {iops:.0f} ({(iops / base[0] - 1) * 100:+.1f} %) | {cpu:.1f} µs ({cpu - base[1]:+.2f} µs) |")


if __name__ == "__main__":
    main()
