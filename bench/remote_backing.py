#!/usr/bin/env python3
"""Benchmark tiercache in front of a remote NBD export.

The "remote" is `nbdkit file --filter=delay` (rdelay/wdelay = --delay-ms, a
network-like latency) on a --size-mib file. Three peers run the same fio zipf
workload (nbd engine, 4 KiB, random 70/30 read/write, zipf --zipf offsets,
iodepth 32, one connection), in the same invocation, one after the other:

1. "tiercache": the SSD cache (write-back, a --cache-mib cache file) formatted
   with --backing nbd+unix:// on the remote;
2. "nbdkit-cache": `nbdkit --filter=cache` in front of the same remote (its
   `nbd` plugin), cache-max-size = --cache-mib, cache=writeback;
3. "uncached": fio straight against the remote.

Each peer gets a warm-up run (--warmup seconds, same workload) and then the
measured run (--runtime seconds). Printed: IOPS (read+write), read p99 in ms,
tiercache's hit ratio (from `tiercache stats --json`, over the measured run),
and the IOPS ratios tiercache / peer.

Usage: bench/remote_backing.py [--bin target/release/tiercache] [--size-mib 512]
       [--cache-mib 64] [--delay-ms 2] [--zipf 1.2] [--runtime 20] [--warmup 10]
       [--json results.json]
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


def wait_socket(path, timeout=60):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{path} never accepted connections")


def stop(pid):
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def nbdkit(d, name, args):
    sock, pidf = os.path.join(d, f"{name}.sock"), os.path.join(d, f"{name}.pid")
    for f in (sock, pidf):
        if os.path.exists(f):
            os.unlink(f)
    subprocess.run(["nbdkit", "-U", sock, "-P", pidf] + args, check=True)
    wait_socket(sock)
    return sock, int(open(pidf).read().strip())


def fio(uri, a, d, name, runtime):
    out = os.path.join(d, f"{name}.json")
    subprocess.run(
        ["fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", "--rw=randrw", "--rwmixread=70",
         "--bs=4k", "--iodepth=32", f"--size={a.size_mib}M", f"--random_distribution=zipf:{a.zipf}",
         f"--runtime={runtime}", "--time_based", "--norandommap", "--randrepeat=1",
         "--output-format=json", f"--output={out}"],
        check=True, stdout=subprocess.DEVNULL)
    j = json.load(open(out))["jobs"][0]
    rd, wr = j["read"], j["write"]
    p99 = rd["clat_ns"]["percentile"].get("99.000000", 0) / 1e6
    return {"iops": rd["iops"] + wr["iops"], "read_iops": rd["iops"], "write_iops": wr["iops"],
            "read_p99_ms": p99}


def run(a):
    d = tempfile.mkdtemp(prefix="remote-bench-")
    img = os.path.join(d, "remote.img")
    with open(img, "wb") as f:
        f.truncate(a.size_mib * MIB)
    subprocess.run(["nbdcopy", "--", "[", "nbdkit", "random", f"{a.size_mib}M", "]", img], check=True)
    delay = f"{a.delay_ms}ms"
    rsock, rpid = nbdkit(d, "remote", ["--filter=delay", "file", img, f"rdelay={delay}", f"wdelay={delay}"])
    remote = f"nbd+unix:///?socket={rsock}"
    results = {}
    pids = [rpid]
    try:
        # 1. tiercache
        cache = os.path.join(d, "cache.img")
        subprocess.run([a.bin, "format", "--cache", cache, "--size", f"{a.cache_mib}MiB", "--backing", remote],
                       check=True, stdout=subprocess.DEVNULL)
        tsock = os.path.join(d, "t.sock")
        log = open(os.path.join(d, "serve.log"), "w")
        p = subprocess.Popen([a.bin, "serve", "--cache", cache, "--listen", f"unix:{tsock}"],
                             stdout=log, stderr=log)
        pids.append(p.pid)
        wait_socket(tsock)
        turi = f"nbd+unix:///?socket={tsock}"
        fio(turi, a, d, "tiercache-warm", a.warmup)
        s0 = json.loads(subprocess.run([a.bin, "stats", "--json", "--cache", cache], check=True,
                                       stdout=subprocess.PIPE, text=True).stdout)
        r = fio(turi, a, d, "tiercache", a.runtime)
        s1 = json.loads(subprocess.run([a.bin, "stats", "--json", "--cache", cache], check=True,
                                       stdout=subprocess.PIPE, text=True).stdout)
        hits, misses = s1["hits"] - s0["hits"], s1["misses"] - s0["misses"]
        r["hit_ratio"] = hits / max(1, hits + misses)
        results["tiercache"] = r
        stop(p.pid)
        p.wait()
        # 2. nbdkit --filter=cache on the same remote
        csock, cpid = nbdkit(d, "nbdkit-cache", ["--filter=cache", "nbd", f"socket={rsock}",
                                                 f"cache-max-size={a.cache_mib}M", "cache=writeback"])
        pids.append(cpid)
        curi = f"nbd+unix:///?socket={csock}"
        fio(curi, a, d, "nbdkit-cache-warm", a.warmup)
        results["nbdkit-cache"] = fio(curi, a, d, "nbdkit-cache", a.runtime)
        stop(cpid)
        # 3. the uncached remote
        fio(remote, a, d, "uncached-warm", a.warmup)
        results["uncached"] = fio(remote, a, d, "uncached", a.runtime)
    finally:
        for pid in pids:
            stop(pid)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/tiercache")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--cache-mib", type=int, default=64)
    ap.add_argument("--delay-ms", type=float, default=2)
    ap.add_argument("--zipf", type=float, default=1.2)
    ap.add_argument("--runtime", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a)
    print(f"remote: nbdkit file --filter=delay {a.delay_ms} ms, {a.size_mib} MiB; cache {a.cache_mib} MiB; "
          f"fio randrw 70/30 zipf {a.zipf}, 4k, iodepth 32, {a.runtime} s")
    print(f"{'peer':14} {'IOPS':>9} {'read p99 ms':>12} {'hit ratio':>10}")
    for k, r in res.items():
        hr = f"{r['hit_ratio']:.3f}" if "hit_ratio" in r else "-"
        print(f"{k:14} {r['iops']:9.0f} {r['read_p99_ms']:12.2f} {hr:>10}")
    t = res["tiercache"]["iops"]
    for k in ("nbdkit-cache", "uncached"):
        print(f"tiercache / {k}: {t / max(1e-9, res[k]['iops']):.2f}x IOPS")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": res}, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
