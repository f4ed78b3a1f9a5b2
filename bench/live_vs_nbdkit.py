#!/usr/bin/env python3
"""Benchmark the live tiercache NBD server against `nbdkit memory` and the uncached device.

All runs use fio's nbd engine over a Unix socket, 4 KiB blocks, iodepth 32, one
connection, and are measured in one invocation (interleaved, median of --repeat):

1. all-hit random reads: tiercache with every line of the data set cached
   vs `nbdkit memory` holding the same data (target >= 0.9x);
2. write-back random writes into a cache that holds the data set vs
   `nbdkit memory` (target >= 0.8x);
3. emulated HDD (`serve --emulate-hdd`, the core's HDD model applied as delay):
   zipfian (theta 1.2) random reads with the cache at ~10 % of the data set,
   vs the same emulated device served without cache (`serve --no-cache`).

Usage: bench/live_vs_nbdkit.py [--bin target/release/tiercache] [--runtime 15]
       [--repeat 3] [--size-mib 256] [--hdd-runtime 20] [--out results.json]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20


def sh(*args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw).stdout


def wait_socket(path, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early: {proc.args}")
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{path} never accepted connections")


class Proc:
    """A server child process, stopped by PID with SIGTERM."""

    def __init__(self, args, sock, log):
        if os.path.exists(sock):
            os.unlink(sock)
        self.p = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.sock = sock
        wait_socket(sock, self.p)

    @property
    def uri(self):
        return f"nbd+unix:///?socket={self.sock}"

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def fio(uri, name, rw, runtime, size, extra=()):
    out = sh(
        "fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", "--bs=4k",
        "--iodepth=32", f"--size={size}", "--time_based", f"--runtime={runtime}",
        "--ramp_time=2", "--randrepeat=0", "--output-format=json", *extra)
    j = json.loads(out[out.index("{"):])["jobs"][0]
    side = j["read"] if rw.endswith("read") else j["write"]
    return side["iops"], side["lat_ns"]["mean"] / 1000.0


def fill(uri, path):
    sh("nbdcopy", "--connections=4", path, uri)


def stats(tc, cache):
    return json.loads(sh(tc, "stats", "--json", "--cache", cache))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/tiercache")
    ap.add_argument("--runtime", type=int, default=15)
    ap.add_argument("--hdd-runtime", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--hdd-size-mib", type=int, default=256)
    ap.add_argument("--out")
    ap.add_argument("--dirty-target", help="format's --dirty-target for the write-back cache "
                    "(share of lines that may stay dirty; default: format's default)")
    ap.add_argument("--threads", help="serve --threads for tiercache (default: serve's default)")
    ap.add_argument("--workloads", default="read,write,hdd",
                    help="comma-separated subset of read,write,hdd to run (default: all)")
    a = ap.parse_args()
    wl = set(a.workloads.split(","))
    if not wl or wl - {"read", "write", "hdd"}:
        sys.exit(f"--workloads: expected a subset of read,write,hdd, got {a.workloads!r}")
    tc = os.path.abspath(a.bin)
    for t in ("fio", "nbdkit", "nbdcopy"):
        if shutil.which(t) is None:
            sys.exit(f"{t} is not installed (scripts/setup.sh installs it)")
    size = a.size_mib * MIB
    d = tempfile.mkdtemp(prefix="tiercache-bench-")
    log = open(os.path.join(d, "servers.log"), "w")
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()), "argv": sys.argv,
           "loadavg_before": os.getloadavg(), "nproc": os.cpu_count()}
    try:
        data = os.path.join(d, "data.img")
        with open(data, "wb") as f:
            f.write(os.urandom(size))
        # nbdkit memory, same data.
        nk = Proc(["nbdkit", "-f", "-U", os.path.join(d, "nbdkit.sock"), "memory", f"{size}"],
                  os.path.join(d, "nbdkit.sock"), log)
        fill(nk.uri, data)
        # tiercache with a cache that holds the whole data set (write-back).
        backing = os.path.join(d, "backing.img")
        with open(backing, "wb") as f:
            f.truncate(size)
        cache = os.path.join(d, "cache.img")
        sh(tc, "format", "--cache", cache, "--backing", backing, "--size", f"{size + 64 * MIB}",
           "--write-policy", "write-back",
           *(["--dirty-target", a.dirty_target] if a.dirty_target else []))
        threads = ["--threads", a.threads] if a.threads else []
        tcs = Proc([tc, "serve", "--cache", cache, "--listen", f"unix:{d}/tc.sock", *threads], f"{d}/tc.sock", log)
        fill(tcs.uri, data)
        sh("nbdcopy", "--connections=4", tcs.uri, "null:")  # every line read once: all cached
        st0 = stats(tc, cache)
        rr = {"tiercache": [], "nbdkit": []}
        rw = {"tiercache": [], "nbdkit": []}
        for i in range(a.repeat if "read" in wl else 0):
            for name, uri in (("tiercache", tcs.uri), ("nbdkit", nk.uri)):
                rr[name].append(fio(uri, f"randread-{name}", "randread", a.runtime, size))
                print(f"  randread  {name:9} run {i}: {rr[name][-1][0]:10.0f} IOPS", flush=True)
        st1 = stats(tc, cache)
        for i in range(a.repeat if "write" in wl else 0):
            for name, uri in (("tiercache", tcs.uri), ("nbdkit", nk.uri)):
                rw[name].append(fio(uri, f"randwrite-{name}", "randwrite", a.runtime, size))
                print(f"  randwrite {name:9} run {i}: {rw[name][-1][0]:10.0f} IOPS", flush=True)
        st2 = stats(tc, cache)
        tcs.stop()
        nk.stop()
        read_hits = st1["read_hits"] - st0["read_hits"]
        read_miss = st1["read_misses"] - st0["read_misses"]
        res["all_hit_randread"] = {
            "tiercache_iops": [x[0] for x in rr["tiercache"]], "nbdkit_iops": [x[0] for x in rr["nbdkit"]],
            "tiercache_mean_lat_us": [x[1] for x in rr["tiercache"]], "nbdkit_mean_lat_us": [x[1] for x in rr["nbdkit"]],
            "hit_ratio_during_runs": read_hits / max(1, read_hits + read_miss),
        }
        res["writeback_randwrite"] = {
            "tiercache_iops": [x[0] for x in rw["tiercache"]], "nbdkit_iops": [x[0] for x in rw["nbdkit"]],
            "tiercache_mean_lat_us": [x[1] for x in rw["tiercache"]], "nbdkit_mean_lat_us": [x[1] for x in rw["nbdkit"]],
            "dirty_lines_after": st2["dirty_lines"], "write_hits": st2["write_hits"] - st1["write_hits"],
            "write_misses": st2["write_misses"] - st1["write_misses"],
            "metadata_commits": st2["live"]["commits"] - st1["live"]["commits"],
        }
        if "hdd" in wl:
            # Emulated HDD, zipf 1.2, cache ~10 % of the data set.
            hsize = a.hdd_size_mib * MIB
            hb = os.path.join(d, "hdd.img")
            with open(hb, "wb") as f:
                f.write(os.urandom(hsize))
            hc = os.path.join(d, "hddcache.img")
            # The metadata regions take ~5 MiB; size the data region at 10 % of the data set.
            sh(tc, "format", "--cache", hc, "--backing", hb, "--size", f"{hsize // 10 + 5 * MIB + 256 * 1024}")
            zipf = ["--random_distribution=zipf:1.2"]
            hz = {"uncached": [], "tiercache": []}
            hit = []
            for i in range(a.repeat):
                p = Proc([tc, "serve", "--cache", hc, "--no-cache", "--emulate-hdd", "--listen", f"unix:{d}/raw.sock"],
                         f"{d}/raw.sock", log)
                hz["uncached"].append(fio(p.uri, "zipf-uncached", "randread", a.hdd_runtime, hsize, zipf))
                p.stop()
                p = Proc([tc, "serve", "--cache", hc, "--emulate-hdd", "--listen", f"unix:{d}/hdd.sock"],
                         f"{d}/hdd.sock", log)
                s0 = stats(tc, hc)
                hz["tiercache"].append(fio(p.uri, "zipf-cached", "randread", a.hdd_runtime, hsize, zipf))
                s1 = stats(tc, hc)
                p.stop()
                h = s1["read_hits"] - s0["read_hits"]
                m = s1["read_misses"] - s0["read_misses"]
                hit.append(h / max(1, h + m))
                print(f"  zipf run {i}: uncached {hz['uncached'][-1][0]:8.0f} IOPS, tiercache "
                      f"{hz['tiercache'][-1][0]:8.0f} IOPS (hit ratio {hit[-1]:.3f}; run {i} starts "
                      f"{'cold' if i == 0 else 'warm from the previous run'})", flush=True)
            res["hdd_zipf"] = {
                "cache_fraction": s1["slots"] * s1["policy"]["line_size"] / hsize,
                "uncached_iops": [x[0] for x in hz["uncached"]], "tiercache_iops": [x[0] for x in hz["tiercache"]],
                "uncached_mean_lat_us": [x[1] for x in hz["uncached"]],
                "tiercache_mean_lat_us": [x[1] for x in hz["tiercache"]],
                "hit_ratio": hit,
            }
    finally:
        log.close()
        res["loadavg_after"] = os.getloadavg()
        shutil.rmtree(d, ignore_errors=True)

    med = statistics.median
    res["ratios"] = {}
    print()
    print(f"date {res['date']}, {res['nproc']} CPUs, load average before {res['loadavg_before'][0]:.2f}, "
          f"after {res['loadavg_after'][0]:.2f}")
    print(f"{'workload':38} {'tiercache IOPS':>15} {'baseline IOPS':>15} {'ratio':>7}  target")
    if "read" in wl:
        r1 = med(res["all_hit_randread"]["tiercache_iops"]) / med(res["all_hit_randread"]["nbdkit_iops"])
        res["ratios"]["all_hit_randread_vs_nbdkit"] = r1
        print(f"{'all-hit 4K randread QD32 vs nbdkit':38} {med(res['all_hit_randread']['tiercache_iops']):15.0f} "
              f"{med(res['all_hit_randread']['nbdkit_iops']):15.0f} {r1:7.2f}  >= 0.9 {'OK' if r1 >= 0.9 else 'MISSED'}")
    if "write" in wl:
        r2 = med(res["writeback_randwrite"]["tiercache_iops"]) / med(res["writeback_randwrite"]["nbdkit_iops"])
        res["ratios"]["writeback_randwrite_vs_nbdkit"] = r2
        print(f"{'write-back 4K randwrite QD32 vs nbdkit':38} {med(res['writeback_randwrite']['tiercache_iops']):15.0f} "
              f"{med(res['writeback_randwrite']['nbdkit_iops']):15.0f} {r2:7.2f}  >= 0.8 {'OK' if r2 >= 0.8 else 'MISSED'}")
    if "hdd" in wl:
        r3 = med(res["hdd_zipf"]["tiercache_iops"]) / med(res["hdd_zipf"]["uncached_iops"])
        res["ratios"]["hdd_zipf_speedup"] = r3
        print(f"{'emulated HDD zipf1.2 4K randread QD32':38} {med(res['hdd_zipf']['tiercache_iops']):15.0f} "
              f"{med(res['hdd_zipf']['uncached_iops']):15.0f} {r3:7.2f}  speedup over uncached "
              f"(cache {res['hdd_zipf']['cache_fraction'] * 100:.1f} % of data, hit ratio "
              f"{med(res['hdd_zipf']['hit_ratio']):.3f})")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
