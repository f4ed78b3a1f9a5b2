#!/usr/bin/env python3
"""Benchmark compressed cache lines (the Azor thesis's FlaZ direction).

For each data set (random incompressible bytes; a Linux kernel source tree,
the uncompressed tar of /usr/src/linux-source-*.tar.xz; a PostgreSQL data
directory after `pgbench -i`, as a tar of the data directory), it

1. builds an image of the data set (--size-mib, the first bytes of it);
2. measures `tiercache trace compressibility IMAGE --codec C --json`: the
   stored-size distribution, mean ratio, effective capacity factor and the
   codec's speed;
3. runs the live log-structured cache uncompressed and compressed
   (`format --layout log-structured` without and with `--compress C`) at the
   same cache size (--cache-share of the image, default 0.25), in the same
   invocation, interleaved run by run. The backing device is the image
   served by `nbdkit file` behind the delay filter (--miss-ms per read, an
   emulated slow disk), so that a miss costs what a disk read costs. The
   workload is fio's nbd engine, uniform random 4 KiB reads over the whole
   image, --passes times as many as it has blocks (no random map: a
   permutation repeated would be a scan, hit by no cache smaller than the
   data), iodepth --iodepth;
4. reports the hit ratio (from `stats --json`, read hits and misses during
   the run), IOPS, the cache's compression ratio and blocks held, the
   server's CPU time per request (utime+stime from /proc/PID/stat over fio's
   requests), and the ratios of the compressed run to the uncompressed one.

Break-even: compression pays when the misses it saves cost more than the CPU
it adds. Per request: (hit ratio gain) x (miss cost) against (CPU per
request compressed - uncompressed). The script prints the miss cost at
which the two are equal, from the measured numbers.

Skips, with a message, a data set whose source is absent (no linux-source
package; no PostgreSQL binaries: apt-get install linux-source postgresql).

Usage: bench/compression.py [--bin target/release/tiercache] [--measure-bin BIN] [--datasets random,kernel,postgres]
       [--codec lz4] [--size-mib 256] [--cache-share 0.25] [--passes 2] [--iodepth 16]
       [--miss-ms 1] [--repeat 1] [--pgbench-scale 20] [--json results.json] [--quick]
"""

import argparse
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Proc, sh  # noqa: E402

MIB = 1 << 20
DATASETS = ("random", "kernel", "postgres")


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


# ---- data sets -------------------------------------------------------------

def head_of(cmd, path, size):
    """Write the first `size` bytes of `cmd`'s output to `path`, then stop it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    with open(path, "wb") as out:
        left = size
        while left > 0:
            b = proc.stdout.read(min(left, MIB))
            if not b:
                break
            out.write(b)
            left -= len(b)
    proc.kill()
    proc.wait()


def image_random(path, size):
    with open(path, "wb") as f:
        for _ in range(size // MIB):
            f.write(os.urandom(MIB))
    return "random bytes (os.urandom)"


def image_kernel(path, size):
    tars = sorted(glob.glob("/usr/src/linux-source-*.tar.xz"))
    if not tars:
        return None
    head_of(["xz", "-dc", tars[-1]], path, size)
    pad(path)
    return f"Linux kernel source tree: the first {size // MIB} MiB of the tar in {tars[-1]}"


def pg_bin():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not dirs or not shutil.which("pgbench"):
        return None
    return dirs[-1]


def image_postgres(path, size, d, scale, log):
    bindir = pg_bin()
    if bindir is None:
        return None
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        return None
    data = os.path.join(d, "pgdata")
    run_dir = os.path.join(d, "pgrun")
    for p in (data, run_dir):
        os.makedirs(p, exist_ok=True)
        os.chown(p, pw.pw_uid, pw.pw_gid)
    os.chmod(d, 0o755)
    os.chmod(os.path.dirname(d), 0o755)

    def as_pg(*args):
        return sh("runuser", "-u", "postgres", "--", *args)

    as_pg(f"{bindir}/initdb", "-D", data, "--no-sync", "-A", "trust")
    as_pg(f"{bindir}/pg_ctl", "-D", data, "-w", "-l", os.path.join(run_dir, "pg.log"), "-o",
          f"-k {run_dir} -c listen_addresses='' -p 54329 -c fsync=off", "start")
    try:
        as_pg("pgbench", "-h", run_dir, "-p", "54329", "-i", "-s", str(scale), "postgres")
        # Some transactions too, so that the heap has updated tuples and WAL.
        as_pg("pgbench", "-h", run_dir, "-p", "54329", "-t", "2000", "-c", "4", "postgres")
    finally:
        as_pg(f"{bindir}/pg_ctl", "-D", data, "-w", "-m", "fast", "stop")
    head_of(["tar", "cf", "-", "-C", data, "."], path, size)
    shutil.rmtree(data, ignore_errors=True)
    pad(path)
    return f"PostgreSQL data directory after pgbench -i -s {scale} and 2000 x 4 transactions (tar, first {size // MIB} MiB)"


def pad(path):
    """Round the image up to whole MiB (the tail zero)."""
    n = os.path.getsize(path)
    with open(path, "ab") as f:
        f.truncate((n + MIB - 1) // MIB * MIB)


# ---- runs ------------------------------------------------------------------

def fio_passes(uri, size, passes, iodepth):
    """Uniform random 4 KiB reads, `passes` times as many as the image has blocks (no
    random map: fio's loops would repeat one permutation, a scan that no cache smaller
    than the data hits); (IOPS, requests, seconds)."""
    out = sh("fio", "--name=passes", "--ioengine=nbd", f"--uri={uri}", "--rw=randread", "--bs=4k",
             f"--iodepth={iodepth}", f"--size={size}", f"--io_size={passes * size}", "--norandommap",
             "--randrepeat=0", "--output-format=json")
    j = json.loads(out[out.index("{"):])["jobs"][0]["read"]
    return j["iops"], j["total_ios"], j["runtime"] / 1000.0


def stats(tc, cache):
    return json.loads(sh(tc, "stats", "--json", "--cache", cache))


def one_run(a, tc, d, image, codec, tag, log):
    """Format, serve and read one configuration; returns its measurements."""
    size = os.path.getsize(image)
    cache_bytes = int(size * a.cache_share)
    back_sock = f"{d}/back-{tag}.sock"
    back = Proc(["nbdkit", "--foreground", "--unix", back_sock, "--filter=delay", "file", image,
                 f"rdelay={a.miss_ms}ms"], back_sock, log)
    cache = f"{d}/cache-{tag}.img"
    sock = f"{d}/srv-{tag}.sock"
    srv = None
    try:
        extra = ["--compress", codec] if codec != "off" else []
        sh(tc, "format", "--layout", "log-structured", "--cache", cache, "--backing", back.uri,
           "--size", str(cache_bytes), "--write-policy", "write-through", *extra)
        srv = Proc([tc, "serve", "--cache", cache, "--backing", back.uri, "--listen", f"unix:{sock}"],
                   sock, log)
        s0 = stats(tc, cache)
        cpu0 = srv.cpu_seconds()
        iops, reqs, secs = fio_passes(srv.uri, size, a.passes, a.iodepth)
        cpu1 = srv.cpu_seconds()
        s1 = stats(tc, cache)
    finally:
        if srv:
            srv.stop()
        back.stop()
        for p in (cache,):
            if os.path.exists(p):
                os.unlink(p)
    h = s1["read_hits"] - s0["read_hits"]
    m = s1["read_misses"] - s0["read_misses"]
    comp = s1.get("compression", {})
    return {
        "codec": codec, "cache_bytes": cache_bytes, "iops": iops, "requests": reqs, "seconds": secs,
        "read_hits": h, "read_misses": m, "hit_ratio": h / max(1, h + m),
        "cpu_seconds": cpu1 - cpu0, "cpu_us_per_request": (cpu1 - cpu0) * 1e6 / max(1, reqs),
        "slots": s1.get("slots"), "mapped_blocks": s1.get("mapped_blocks"),
        "stored_ratio": comp.get("ratio", 1.0),
    }


def median_run(runs):
    runs = sorted(runs, key=lambda r: r["iops"])
    return runs[len(runs) // 2]


def bench_dataset(a, tc, d, name, log):
    mtc = os.path.abspath(a.measure_bin) if a.measure_bin else tc
    image = f"{d}/{name}.img"
    size = a.size_mib * MIB
    t0 = time.time()
    if name == "random":
        desc = image_random(image, size)
    elif name == "kernel":
        desc = image_kernel(image, size)
        if desc is None:
            print("skipping kernel: no /usr/src/linux-source-*.tar.xz (apt-get install linux-source)")
            return None
    else:
        desc = image_postgres(image, size, f"{d}/pg", a.pgbench_scale, log)
        if desc is None:
            print("skipping postgres: PostgreSQL (initdb, pg_ctl, pgbench) or the postgres user is absent "
                  "(apt-get install postgresql)")
            return None
    print(f"\n== {name}: {desc}; image {os.path.getsize(image) // MIB} MiB, built in {time.time() - t0:.0f} s",
          flush=True)
    comp = json.loads(sh(mtc, "trace", "compressibility", image, "--codec", a.codec, "--json"))
    print(f"  compressibility ({a.codec}): mean {comp['mean_units']:.2f} units of 512 B, ratio {comp['ratio']:.2f}, "
          f"raw {comp['raw_share'] * 100:.1f} %, effective capacity {comp['capacity_factor']:.2f}x; "
          f"compress {comp['compress_mb_s']:.0f} MB/s ({comp['compress_us_per_block']:.1f} us/block), "
          f"decompress {comp['decompress_mb_s']:.0f} MB/s ({comp['decompress_us_per_block']:.1f} us/block)",
          flush=True)
    runs = {"off": [], a.codec: []}
    load0 = loadavg()
    for i in range(a.repeat):
        for codec in ("off", a.codec):
            r = one_run(a, tc, d, image, codec, f"{name}-{codec.replace(':', '')}-{i}", log)
            runs[codec].append(r)
            print(f"  run {i} {codec:7}: {r['iops']:8.0f} IOPS, hit ratio {r['hit_ratio']:.3f}, "
                  f"{r['mapped_blocks']} blocks held, CPU {r['cpu_us_per_request']:.1f} us/request",
                  flush=True)
    load1 = loadavg()
    os.unlink(image)
    off, on = median_run(runs["off"]), median_run(runs[a.codec])
    gain = on["hit_ratio"] - off["hit_ratio"]
    extra_cpu = on["cpu_us_per_request"] - off["cpu_us_per_request"]
    # Misses saved per request x miss cost = CPU added per request.
    # Negative: the CPU per request fell (fewer misses to serve): it pays at any miss cost.
    breakeven_us = extra_cpu / gain if gain > 0 else None
    res = {
        "dataset": name, "description": desc, "codec": a.codec, "compressibility": comp,
        "runs": runs, "off": off, "on": on, "loadavg_before": load0, "loadavg_after": load1,
        "ratios": {
            "capacity": on["mapped_blocks"] / max(1, off["mapped_blocks"]),
            "hit_ratio": on["hit_ratio"] / max(1e-9, off["hit_ratio"]),
            "iops": on["iops"] / max(1e-9, off["iops"]),
            "cpu_per_request": on["cpu_us_per_request"] / max(1e-9, off["cpu_us_per_request"]),
        },
        "hit_ratio_gain": gain, "extra_cpu_us_per_request": extra_cpu,
        "breakeven_miss_cost_us": breakeven_us,
    }
    print(f"  {'':28} {'off':>10} {a.codec:>10} {'ratio':>7}")
    for label, k, fmt in (("blocks held", "mapped_blocks", "{:10.0f}"), ("hit ratio", "hit_ratio", "{:10.3f}"),
                          ("IOPS", "iops", "{:10.0f}"), ("CPU us/request", "cpu_us_per_request", "{:10.1f}")):
        x, y = off[k], on[k]
        print(f"  {label:28} {fmt.format(x)} {fmt.format(y)} {y / max(x, 1e-9):7.2f}")
    if breakeven_us is None:
        be = "never (no hit ratio gain)"
    elif breakeven_us <= 0:
        be = "none: compression pays at any miss cost (the CPU per request fell with the misses)"
    else:
        be = f"{breakeven_us:.1f} us"
    print(f"  break-even miss cost: {be} (hit ratio +{gain:.3f}, CPU +{extra_cpu:.1f} us/request); "
          f"load average {load0[0]:.2f} -> {load1[0]:.2f}", flush=True)
    return res


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/tiercache", help="the tiercache that formats and serves")
    ap.add_argument("--measure-bin", help="the tiercache that runs `trace compressibility` (default: --bin; "
                    "its codec speeds are only meaningful from a release build)")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--codec", default="lz4", help="format --compress: lz4, zstd, zstd:LEVEL")
    ap.add_argument("--size-mib", type=int, help="image size (default 256; --quick 64)")
    ap.add_argument("--cache-share", type=float, default=0.25, help="cache size over image size")
    ap.add_argument("--passes", type=int, default=2, help="random read passes over the image")
    ap.add_argument("--iodepth", type=int, default=16)
    ap.add_argument("--miss-ms", type=float, default=1.0, help="delay of each backing read (nbdkit delay filter)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration (median)")
    ap.add_argument("--pgbench-scale", type=int, default=20)
    ap.add_argument("--json", "--out", dest="json", help="write every run and ratio to this JSON file")
    ap.add_argument("--quick", action="store_true", help="64 MiB images, pgbench scale 5")
    a = ap.parse_args()
    if a.size_mib is None:
        a.size_mib = 64 if a.quick else 256
    if a.quick:
        a.pgbench_scale = min(a.pgbench_scale, 5)
    a.datasets = [x.strip() for x in a.datasets.split(",") if x.strip()]
    if not a.datasets or set(a.datasets) - set(DATASETS):
        sys.exit(f"--datasets: expected a subset of {','.join(DATASETS)}")
    if not 0.0 < a.cache_share < 1.0:
        sys.exit("--cache-share: expected a share between 0 and 1 (the cache must be smaller than the data)")
    return a


def main():
    a = parse_args()
    tc = os.path.abspath(a.bin)
    if not os.path.exists(tc):
        sys.exit(f"{tc} not found: cargo build --release -p tiercache-cli")
    for tool in ("fio", "nbdkit"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (scripts/setup.sh installs it)")
    print(f"tiercache compression benchmark: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} CPUs, load average {loadavg()}", flush=True)
    print(f"codec {a.codec}, images {a.size_mib} MiB, cache {a.cache_share:.2f} of the image, {a.passes} passes of "
          f"random 4 KiB reads at iodepth {a.iodepth}, backing reads delayed {a.miss_ms} ms", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="tc-compress-", dir="/tmp") as d:
        with open(f"{d}/servers.log", "ab") as log:
            for name in a.datasets:
                try:
                    r = bench_dataset(a, tc, d, name, log)
                except RuntimeError as e:
                    print(f"  {name} failed: {e}", flush=True)
                    r = None
                if r:
                    results.append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=2)
        print(f"\nwrote {a.json}")


if __name__ == "__main__":
    main()
