#!/usr/bin/env python3
"""Benchmark a cache in front of a remote NBD export: misses pay the network.

The "remote" is `nbdkit memory` (--size-mib) behind `--filter=delay`
(rdelay = wdelay = --delay-ms, a network-like latency). fio reads 4 KiB
blocks at random with a zipf (--zipf) distribution over the whole export
(nbd engine, one connection), against three contenders, each warmed up once
(--warmup seconds at queue depth 16) and then measured at every queue depth
of --qd (--runtime seconds each):

1. "export": fio straight against the delayed export;
2. "nbdkit-cache": `nbdkit --filter=cache` (its `nbd` plugin on the export,
   cache-max-size = --cache-mib, cache=writeback, cache-on-read=true);
3. "tiercache": the SSD cache (a --cache-mib cache file, write-back)
   formatted with --backing nbd+unix:// on the export, served with
   `--io-engine` each of --engines.

Printed as a Markdown table: IOPS, p50 and p99 completion latency, and for
tiercache its hit ratio over the measured run (from `tiercache stats
--json`) and the ideal IOPS a cache with its hit ratio could reach at that
queue depth: the lower of
  QD / (hit ratio x hit latency + miss ratio x export latency)
(hit latency: tiercache's p50 at that queue depth, as hits are most
requests; export latency: the export's mean latency at queue depth 1) and
  export IOPS at that queue depth / miss ratio
(the misses cannot go faster than the export serves one connection).

Usage: bench/remote_backing.py [--bin target/release/tiercache] [--size-mib 512]
       [--cache-mib 64] [--delay-ms 4] [--zipf 1.1] [--qd 1,16,64]
       [--runtime 15] [--warmup 20] [--engines auto] [--json results.json]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Proc, sh  # noqa: E402


def nbdkit(d, name, args):
    """An nbdkit on a Unix socket in `d` (it forks; stopped by its pid file)."""
    sock, pidf = os.path.join(d, f"{name}.sock"), os.path.join(d, f"{name}.pid")
    for f in (sock, pidf):
        if os.path.exists(f):
            os.unlink(f)
    sh("nbdkit", "-U", sock, "-P", pidf, *args)  # returns once it listens
    return sock, int(open(pidf).read().strip())


def kill(pid):
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        pass


def fio(uri, a, d, name, qd, runtime):
    out = os.path.join(d, f"{name}.json")
    sh("fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", "--rw=randread", "--bs=4k",
       f"--iodepth={qd}", f"--size={a.size_mib}M", f"--random_distribution=zipf:{a.zipf}",
       f"--runtime={runtime}", "--time_based", "--norandommap", "--randrepeat=0",
       "--output-format=json", f"--output={out}")
    rd = json.load(open(out))["jobs"][0]["read"]
    pct = rd["clat_ns"]["percentile"]
    return {"iops": rd["iops"], "mean_ms": rd["clat_ns"]["mean"] / 1e6,
            "p50_ms": pct.get("50.000000", 0) / 1e6, "p99_ms": pct.get("99.000000", 0) / 1e6}


def measure(uri, a, d, name, stats=None):
    """Warm up, then one measured run per queue depth: {qd: result}."""
    fio(uri, a, d, f"{name}-warm", 16, a.warmup)
    res = {}
    for qd in a.qd:
        s0 = stats() if stats else None
        r = fio(uri, a, d, f"{name}-qd{qd}", qd, a.runtime)
        if stats:
            s1 = stats()
            hits, misses = s1["hits"] - s0["hits"], s1["misses"] - s0["misses"]
            r["hit_ratio"] = hits / max(1, hits + misses)
        res[qd] = r
    return res


def run(a):
    d = tempfile.mkdtemp(prefix="remote-bench-")
    delay = f"{a.delay_ms}ms"
    rsock, rpid = nbdkit(d, "export", ["--filter=delay", "memory", f"{a.size_mib}M",
                                       f"rdelay={delay}", f"wdelay={delay}"])
    export = f"nbd+unix:///?socket={rsock}"
    results = {}
    try:
        results["export"] = measure(export, a, d, "export")
        csock, cpid = nbdkit(d, "nbdkit-cache", ["--filter=cache", "nbd", f"socket={rsock}",
                                                 f"cache-max-size={a.cache_mib}M", "cache=writeback",
                                                 "cache-on-read=true"])
        try:
            results["nbdkit-cache"] = measure(f"nbd+unix:///?socket={csock}", a, d, "nbdkit-cache")
        finally:
            kill(cpid)
        for engine in a.engines:
            cache = os.path.join(d, f"cache-{engine}.img")
            sh(a.bin, "format", "--cache", cache, "--size", f"{a.cache_mib}MiB", "--backing", export)
            log = open(os.path.join(d, f"serve-{engine}.log"), "w")
            t = Proc([a.bin, "serve", "--cache", cache, "--listen", f"unix:{os.path.join(d, 't.sock')}",
                      "--io-engine", engine], os.path.join(d, "t.sock"), log)
            try:
                def stats():
                    return json.loads(sh(a.bin, "stats", "--json", "--cache", cache))
                results[f"tiercache {engine}"] = measure(t.uri, a, d, f"tiercache-{engine}", stats)
            finally:
                t.stop()
    finally:
        kill(rpid)
    shutil.rmtree(d, ignore_errors=True)
    return results


def ideal(qd, r, export):
    """The ideal IOPS of a cache with result `r` at `qd` (see the module docs)."""
    h = r["hit_ratio"]
    export_ms = export[min(export)]["mean_ms"]  # at the lowest queue depth measured
    by_latency = qd / ((h * r["p50_ms"] + (1 - h) * export_ms) / 1e3)
    by_export = export[qd]["iops"] / max(1e-9, 1 - h)
    return min(by_latency, by_export)


def table(res):
    lines = ["| contender | QD | IOPS | p50 ms | p99 ms | hit ratio | ideal IOPS | IOPS / ideal |",
             "|---|---|---|---|---|---|---|---|"]
    for name, by_qd in res.items():
        for qd, r in by_qd.items():
            if "hit_ratio" in r:
                i = ideal(qd, r, res["export"])
                extra = f"{r['hit_ratio'] * 100:.0f} % | {i:,.0f} | {r['iops'] / i:.2f}"
            else:
                extra = "— | — | —"
            lines.append(f"| {name} | {qd} | {r['iops']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {extra} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/tiercache")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--cache-mib", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=4)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--qd", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64])
    ap.add_argument("--runtime", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--engines", type=lambda s: s.split(","), default=["auto"])
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a)
    print(f"export: nbdkit memory {a.size_mib} MiB --filter=delay {a.delay_ms} ms; caches {a.cache_mib} MiB; "
          f"fio randread 4k zipf {a.zipf}, one connection, warm-up {a.warmup} s, {a.runtime} s per queue depth; "
          f"load average {os.getloadavg()[0]:.2f}")
    print()
    print(table(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": res}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
