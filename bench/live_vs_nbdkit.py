#!/usr/bin/env python3
"""Benchmark the live tiercache designs against `nbdkit memory` and the uncached device.

Every design named by --design (default: all four) is formatted and served as
README.md shows, and measured in the same invocation as `nbdkit memory`
holding the same data (contenders interleaved run by run, median of --repeat).
fio's nbd engine over Unix sockets, 4 KiB blocks, iodepth 32 per connection:

1. all-hit random reads ("read"): the design's fast device holds the whole
   data set (written, then read once; the tiered volume is read until every
   block sits on the fast tier), one connection;
2. random writes into that data set ("write"), one connection;
3. "multi": the same reads and writes with fio numjobs 2 and 4 (one NBD
   connection per job, IOPS summed), against both;
4. "copy": `nbdcopy` (4 connections, multi-conn) of the whole export to
   `null:` and to a second `nbdkit memory`, MiB/s, from the design and from
   nbdkit;
5. "hdd": the emulated HDD (`serve --emulate-hdd`, the core's HDD model
   applied as delay), a 70/30 random read/write mix with zipf 1.2 offsets,
   fast device at ~10 % of the data set, against the same emulated device
   served without cache (`serve --no-cache`, its own copy of the data).
   Every design runs it (the tiered volume emulates its slow tier; TICA's
   DRAM level is then 1 % of the data set).

Where the fast devices live (--fast-dir): by default their files (the SSD
cache, the log-structured layout, the fast tier, TICA's two SSDs) go to a
tmpfs (/dev/shm), RAM like `nbdkit memory`'s, so the ratio measures what
tiercache itself costs per request. With --fast-dir on a disk the page cache
writes the files back to that disk while the runs go on, and the ratio also
measures the disk: on a 2-CPU VM, TICA's writes went from 0.98x on tmpfs to
0.47x on the VM's disk (docs/results.md). The backing files
and the emulated HDD stay in the temporary directory.

Targets printed: reads >= 0.9x nbdkit for the SSD cache (0.8x for the other
designs), writes >= 0.8x.

--design takes full names or the short ones (cache, log, tier, tica) or all;
--quick runs everything once with short runs over a 64 MiB data set (about
two minutes a design), for a check rather than a figure.

Usage: bench/live_vs_nbdkit.py [--design ssd-cache,log-structured,tiered,tica|cache,log,tier,tica|all]
       [--quick]
       [--bin target/release/tiercache] [--runtime 15] [--repeat 3] [--size-mib 256]
       [--workloads read,write,multi,copy,hdd] [--hdd-runtime 20] [--json results.json]
       [--perf DIR] [--fast-dir /dev/shm|DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import Proc, sh  # noqa: E402

MIB = 1 << 20
DESIGNS = ("ssd-cache", "log-structured", "tiered", "tica")
WORKLOADS = ("read", "write", "multi", "copy", "hdd")
HDD_DESIGNS = DESIGNS
ALIASES = {"cache": "ssd-cache", "ssd": "ssd-cache", "log": "log-structured", "ls": "log-structured",
           "tier": "tiered", "tiered-volume": "tiered", "three-level": "tica"}


def export_size(uri):
    return int(sh("nbdinfo", "--size", uri))


def fio(uri, name, rw, runtime, size, jobs=1, extra=()):
    """One fio run; returns (IOPS summed over jobs and directions, mean latency in us)."""
    out = sh(
        "fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", "--bs=4k",
        "--iodepth=32", f"--size={size}", "--time_based", f"--runtime={runtime}",
        "--ramp_time=2", "--randrepeat=0", f"--numjobs={jobs}", "--group_reporting",
        "--output-format=json", *extra)
    j = json.loads(out[out.index("{"):])["jobs"][0]
    sides = [j[s] for s in ("read", "write") if j[s]["total_ios"] > 0 or j[s]["iops"] > 0]
    iops = sum(s["iops"] for s in sides)
    lat = sum(s["lat_ns"]["mean"] * s["iops"] for s in sides) / max(iops, 1e-9) / 1000.0
    return iops, lat


def nbdcopy(src, dst):
    """Copy a whole export with nbdcopy (4 connections); returns MiB/s."""
    size = export_size(src)
    t0 = time.monotonic()
    sh("nbdcopy", "--connections=4", src, dst)
    return size / MIB / (time.monotonic() - t0)


def fill(uri, path):
    sh("nbdcopy", "--connections=4", path, uri)


def stats(tc, cache):
    return json.loads(sh(tc, "stats", "--json", "--cache", cache))


def make_file(path, size, random=False):
    with open(path, "wb") as f:
        if random:
            f.write(os.urandom(size))
        else:
            f.truncate(size)


class Design:
    """How one design is formatted, served, warmed and counted."""

    def __init__(self, name, tc, d, fd, a):
        # d: backing files, sockets; fd: the fast devices' files (--fast-dir).
        self.name, self.tc, self.d, self.fd, self.a = name, tc, d, fd, a

    def format(self, tag, backing, fast_bytes, dram_bytes=None):
        """Format the design over `backing` with `fast_bytes` of fast device (TICA: and
        `dram_bytes` of DRAM, default --tica-dram-mib); returns the path `serve --cache` takes."""
        d, tc, a = self.fd, self.tc, self.a
        dt = ["--dirty-target", a.dirty_target] if a.dirty_target else []
        if self.name == "ssd-cache":
            c = f"{d}/{tag}-cache.img"
            sh(tc, "format", "--cache", c, "--backing", backing, "--size", str(fast_bytes),
               "--write-policy", "write-back", *dt)
        elif self.name == "log-structured":
            c = f"{d}/{tag}-ls.img"
            sh(tc, "format", "--layout", "log-structured", "--cache", c, "--backing", backing,
               "--size", str(fast_bytes), *dt)
        elif self.name == "tiered":
            c = f"{d}/{tag}-fast.img"
            sh(tc, "format", "--mode", "tier", "--tiers", f"{c},{backing}", "--size", str(fast_bytes))
        else:
            c = f"{d}/{tag}-wo.img"
            sh(tc, "format", "--mode", "tica", "--ro-ssd", f"{d}/{tag}-ro.img", "--wo-ssd", c,
               "--backing", backing, "--dram-size", str(dram_bytes or a.tica_dram_mib * MIB),
               "--size", str(fast_bytes))
        return c

    def warm(self, uri, cache, size):
        """Make every block of the data set a fast-device hit (the tiered volume
        migrates in the background: read until every block is on the fast tier)."""
        sh("nbdcopy", "--connections=4", uri, "null:")
        if self.name != "tiered":
            return
        # fast_tier_block_share is of the whole volume (fast + slow tier), so
        # it never reaches 1: warm until a read pass touches the slow tier no more.
        t0 = time.time()
        while True:
            slow0 = stats(self.tc, cache)["tiers"][1]["read_hits"]
            fio(uri, "warm", "randread", 2, size)
            slow = stats(self.tc, cache)["tiers"][1]["read_hits"] - slow0
            if slow == 0:
                return
            if time.time() - t0 > self.a.warm_timeout:
                print(f"  warning: the tiered volume still read {slow} blocks from the slow tier after "
                      f"{self.a.warm_timeout} s of warming", flush=True)
                return

    def counters(self, cache):
        """(fast-device read hits, read misses, extra counters) from `stats --json`."""
        s = stats(self.tc, cache)
        if self.name in ("ssd-cache", "log-structured"):
            extra = {"dirty": s.get("dirty_lines", s.get("dirty_blocks"))}
            return s["read_hits"], s["read_misses"], extra
        if self.name == "tiered":
            t = s["tiers"]
            return t[0]["read_hits"], t[1]["read_hits"], {
                "fast_tier_block_share": s["fast_tier_block_share"],
                "migrations": s["migrations"], "demotions": s["demotions"]}
        h = s["hits"]
        return h["dram"] + h["ro_ssd"] + h["wo_ssd"], s["misses"], {
            "dram_hits": h["dram"], "dirty_pages": s["dirty_pages"], "writebacks": s["writebacks"]}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def interleaved(res, key, runs, repeat, label, unit="IOPS"):
    """Run each contender's closure `repeat` times, interleaved; store IOPS (or MiB/s) and latency."""
    r = res.setdefault(key, {})
    for i in range(repeat):
        for who, run in runs:
            iops, lat = run()
            r.setdefault(f"{who}_iops", []).append(iops)
            r.setdefault(f"{who}_mean_lat_us", []).append(lat)
            print(f"  {label:28} {who:9} run {i}: {iops:10.0f} {unit}", flush=True)


def perf_record(a, design, srv, uri, size, path, rw="randwrite"):
    """One extra (uncounted) `rw` run with `perf record` (call graphs) attached to the server."""
    if shutil.which("perf") is None:
        print("  perf is not installed: no profile", flush=True)
        return
    # DWARF unwinding needs debug info: profile the `profiling` build
    # (cargo build --profile profiling --bin tiercache; --bin target/profiling/tiercache).
    p = subprocess.Popen(["perf", "record", "-F", "499", "--call-graph", "dwarf,16384", "-p", str(srv.pid),
                          "-o", path, "--", "sleep", str(a.runtime + 2)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fio(uri, f"perf-{design}", rw, a.runtime, size)
    p.wait()
    print(f"  perf profile of {design}'s {rw} path: {path}", flush=True)


def bench_hit(a, wl, dz, nk, sink, data, res):
    """Workloads 1-4 for one design, interleaved with nbdkit."""
    size = a.size_mib * MIB
    backing = f"{dz.d}/{dz.name}-backing.img"
    make_file(backing, size)
    cache = dz.format(dz.name, backing, size + 64 * MIB)
    threads = ["--threads", a.threads] if a.threads else []
    sock = f"{dz.d}/{dz.name}.sock"
    srv = Proc([dz.tc, "serve", "--cache", cache, "--listen", f"unix:{sock}", *threads, *a.serve_arg],
               sock, dz.a.log)
    try:
        fill(srv.uri, data)
        dz.warm(srv.uri, cache, size)
        c0 = dz.counters(cache)
        uris = (("tiercache", srv.uri), ("nbdkit", nk.uri))

        def runs(rw, jobs, rt):
            return [(w, lambda u=u, w=w: fio(u, f"{rw}-{w}", rw, rt, size, jobs)) for w, u in uris]

        for rw in ("randread", "randwrite"):
            if rw[4:] in wl:
                interleaved(res, f"{rw}_qd32", runs(rw, 1, a.runtime), a.repeat, f"{rw} QD32")
            for j in a.numjobs if "multi" in wl else ():
                interleaved(res, f"{rw}_qd32_x{j}", runs(rw, j, a.mc_runtime), a.repeat, f"{rw} QD32 x{j} jobs")
            c1 = dz.counters(cache)
            h, m = c1[0] - c0[0], c1[1] - c0[1]
            if rw[4:] in wl or "multi" in wl:
                hr = {"read_hit_ratio": h / max(1, h + m)} if rw == "randread" else {}
                res[f"after_{rw}"] = {**hr, **c1[2]}
            c0 = c1
            if rw == "randread" and "copy" in wl:
                for dst, label in (("null:", "null"), (sink.uri, "nbdkit")):
                    interleaved(res, f"nbdcopy_to_{label}",
                                [(w, lambda u=u, dst=dst: (nbdcopy(u, dst), 0.0)) for w, u in uris],
                                a.repeat, f"nbdcopy -> {label}", "MiB/s")
        if a.perf:
            for rw in a.perf_rw.split(","):
                name = f"{dz.name}.perf.data" if rw == "randwrite" else f"{dz.name}-{rw}.perf.data"
                perf_record(a, dz.name, srv, srv.uri, size, os.path.join(a.perf, name), rw)
    finally:
        srv.stop()


def bench_hdd(a, dz, raw, res):
    """Workload 5 for one design: the emulated HDD, cached vs uncached."""
    hsize = a.hdd_size_mib * MIB
    hb = f"{dz.d}/{dz.name}-hdd.img"
    shutil.copyfile(raw, hb)
    # The SSD cache's metadata regions take ~5 MiB, the tiered volume's under 1 MiB.
    meta = 5 * MIB + 256 * 1024 if dz.name == "ssd-cache" else MIB
    # TICA's fast device is a pair of SSDs (--size each): 5 % each.
    fast = hsize // 20 if dz.name == "tica" else hsize // 10
    hc = dz.format(f"{dz.name}-hdd", hb, fast + meta, dram_bytes=max(MIB, hsize // 100))
    mix = ["--random_distribution=zipf:1.2", "--rwmixread=70"]
    hit = []
    r = res.setdefault("hdd_mixed_zipf", {"uncached_iops": [], "tiercache_iops": [],
                                          "uncached_mean_lat_us": [], "tiercache_mean_lat_us": []})
    for i in range(a.repeat):
        p = Proc([dz.tc, "serve", "--cache", f"{dz.d}/raw.none", "--no-cache", "--backing", raw,
                  "--emulate-hdd", "--listen", f"unix:{dz.d}/raw.sock"], f"{dz.d}/raw.sock", a.log)
        try:
            u = fio(p.uri, "mixed-uncached", "randrw", a.hdd_runtime, hsize, 1, mix)
        finally:
            p.stop()
        p = Proc([dz.tc, "serve", "--cache", hc, "--emulate-hdd", "--listen", f"unix:{dz.d}/hdd.sock"],
                 f"{dz.d}/hdd.sock", a.log)
        try:
            c0 = dz.counters(hc)
            t = fio(p.uri, "mixed-cached", "randrw", a.hdd_runtime, hsize, 1, mix)
            c1 = dz.counters(hc)
        finally:
            p.stop()
        r["uncached_iops"].append(u[0])
        r["uncached_mean_lat_us"].append(u[1])
        r["tiercache_iops"].append(t[0])
        r["tiercache_mean_lat_us"].append(t[1])
        h, m = c1[0] - c0[0], c1[1] - c0[1]
        hit.append(h / max(1, h + m))
        print(f"  mixed zipf run {i}: uncached {u[0]:8.0f} IOPS, tiercache {t[0]:8.0f} IOPS "
              f"(read hit ratio {hit[-1]:.3f}; {'cold' if i == 0 else 'warm from the previous run'})",
              flush=True)
    r["read_hit_ratio"] = hit
    r["fast_fraction"] = (hsize // 10) / hsize


def report(name, r, wl, numjobs):
    """Print one design's table (medians) and store its ratios."""
    ratios = r.setdefault("ratios", {})
    tgt_read = 0.9 if name == "ssd-cache" else 0.8
    print(f"\n== {name}  (load average before {r['loadavg_before'][0]:.2f}, after {r['loadavg_after'][0]:.2f})")
    print(f"{'workload':40} {'tiercache':>12} {'nbdkit':>12} {'ratio':>7}  target")
    rows = [("randread_qd32", "all-hit 4K randread QD32, 1 conn", tgt_read),
            ("randwrite_qd32", "4K randwrite QD32, 1 conn", 0.8)]
    for j in numjobs:
        rows += [(f"randread_qd32_x{j}", f"4K randread QD32, {j} jobs (IOPS)", None),
                 (f"randwrite_qd32_x{j}", f"4K randwrite QD32, {j} jobs (IOPS)", None)]
    rows += [("nbdcopy_to_null", "nbdcopy -> null: (MiB/s)", None),
             ("nbdcopy_to_nbdkit", "nbdcopy -> nbdkit memory (MiB/s)", None)]
    for key, label, tgt in rows:
        if key not in r:
            continue
        t, n = med(r[key]["tiercache_iops"]), med(r[key]["nbdkit_iops"])
        ratios[key] = t / n
        mark = "" if tgt is None else f">= {tgt} {'OK' if t / n >= tgt else 'MISSED'}"
        print(f"{label:40} {t:12.0f} {n:12.0f} {t / n:7.2f}  {mark}")
    for rw in ("randread", "randwrite"):
        if f"after_{rw}" in r:
            print(f"  after the {rw} runs: " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                                     for k, v in r[f"after_{rw}"].items()))
    if "hdd" in wl:
        h = r.get("hdd_mixed_zipf")
        if h is None:
            print(f"{'emulated HDD 70/30 zipf1.2 4K QD32':40} not run")
        else:
            t, u = med(h["tiercache_iops"]), med(h["uncached_iops"])
            ratios["hdd_mixed_zipf_speedup"] = t / u
            print(f"{'':40} {'tiercache':>12} {'uncached':>12} {'ratio':>7}")
            print(f"{'emulated HDD 70/30 zipf1.2 4K QD32':40} {t:12.0f} {u:12.0f} {t / u:7.2f}  speedup over "
                  f"uncached (fast device {h['fast_fraction'] * 100:.0f} % of data, read hit ratio "
                  f"{med(h['read_hit_ratio']):.3f})")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/tiercache")
    ap.add_argument("--design", default=",".join(DESIGNS),
                    help=f"comma-separated subset of {','.join(DESIGNS)} (default: all)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help=f"comma-separated subset of {','.join(WORKLOADS)} (default: all)")
    ap.add_argument("--quick", action="store_true",
                    help="one repeat, 5 s runs (3 s multi-job, 6 s HDD), 64 MiB data sets: a few minutes")
    ap.add_argument("--runtime", type=int, help="seconds per single-connection fio run (default 15; --quick 5)")
    ap.add_argument("--mc-runtime", type=int, help="seconds per multi-job fio run (default: --runtime)")
    ap.add_argument("--hdd-runtime", type=int, help="seconds per emulated-HDD run (default 20; --quick 6)")
    ap.add_argument("--warm-timeout", type=int,
                    help="seconds to wait for the tiered volume to promote the data set")
    ap.add_argument("--repeat", type=int, help="runs per contender (default 3; --quick 1)")
    ap.add_argument("--numjobs", default="2,4", help="fio numjobs for the multi-connection runs")
    ap.add_argument("--size-mib", type=int, help="data set of the all-hit runs (default 256; --quick 64)")
    ap.add_argument("--hdd-size-mib", type=int, help="emulated-HDD data set (default 256; --quick 64)")
    ap.add_argument("--tica-dram-mib", type=int,
                    help="TICA's DRAM level in the all-hit runs (the SSDs hold the rest)")
    ap.add_argument("--fast-dir", help="directory for the fast devices' files (default: /dev/shm when it is a "
                    "tmpfs with room, RAM like nbdkit memory's; else the temporary directory). A directory on a "
                    "disk adds that disk's write-back to every write")
    ap.add_argument("--json", "--out", dest="json", help="write every run and ratio to this JSON file")
    ap.add_argument("--perf", metavar="DIR",
                    help="after each design's runs, one extra write run with `perf record` (DWARF call graphs) "
                    "on the server; DIR gets DESIGN.perf.data")
    ap.add_argument("--perf-rw", default="randwrite",
                    help="fio workloads profiled by --perf, comma-separated (randwrite, randread; "
                    "default randwrite); randread goes to DESIGN-randread.perf.data")
    ap.add_argument("--dirty-target", help="format's --dirty-target for the SSD cache and the "
                    "log-structured layout (default: format's default)")
    ap.add_argument("--threads", help="serve --threads for tiercache (default: serve's default)")
    ap.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for tiercache's `serve` in the all-hit runs (repeatable; "
                    "e.g. --serve-arg=--direct)")
    a = ap.parse_args()
    designs = []
    for x in a.design.split(","):
        x = ALIASES.get(x.strip(), x.strip())
        for n in DESIGNS if x == "all" else [x] if x else []:
            if n not in designs:
                designs.append(n)
    # --quick changes only the defaults: options given explicitly win.
    quick = {"repeat": 1, "runtime": 5, "mc_runtime": 3, "hdd_runtime": 6, "warm_timeout": 30,
             "size_mib": 64, "hdd_size_mib": 64, "tica_dram_mib": 16}
    full = {"repeat": 3, "runtime": 15, "mc_runtime": None, "hdd_runtime": 20, "warm_timeout": 120,
            "size_mib": 256, "hdd_size_mib": 256, "tica_dram_mib": 64}
    for k, v in (quick if a.quick else full).items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    wl = set(a.workloads.split(","))
    if not designs or set(designs) - set(DESIGNS):
        sys.exit(f"--design: expected all or a subset of {','.join(DESIGNS)} "
                 f"(or {','.join(ALIASES)}), got {a.design!r}")
    if not wl or wl - set(WORKLOADS):
        sys.exit(f"--workloads: expected a subset of {','.join(WORKLOADS)}, got {a.workloads!r}")
    try:
        a.numjobs = [int(x) for x in a.numjobs.split(",") if x]
    except ValueError:
        sys.exit(f"--numjobs: expected comma-separated integers, got {a.numjobs!r}")
    a.mc_runtime = a.mc_runtime or a.runtime
    if a.perf:
        os.makedirs(a.perf, exist_ok=True)
        a.perf = os.path.abspath(a.perf)
    return a, designs, wl


def fs_type(path):
    """The filesystem type of the mount holding `path` (from /proc/mounts), or None."""
    path, best, typ = os.path.realpath(path), "", None
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, t = line.split()[:3]
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, typ = mnt, t
    except OSError:
        pass
    return typ


def describe_dir(path):
    t = fs_type(path)
    return f"{path} ({t}{', RAM' if t == 'tmpfs' else ''})" if t else path


def fast_dir(a, size):
    """--fast-dir, or /dev/shm when it is a tmpfs with room for the largest design's fast
    devices (TICA: two SSDs of data set + 64 MiB, plus the emulated-HDD run's), else None
    (the temporary directory)."""
    if a.fast_dir:
        if not os.path.isdir(a.fast_dir):
            sys.exit(f"--fast-dir: {a.fast_dir} is not a directory")
        return a.fast_dir
    need = 2 * (size + 64 * MIB) + a.hdd_size_mib * MIB + 256 * MIB
    if fs_type("/dev/shm") == "tmpfs" and os.access("/dev/shm", os.W_OK):
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= need:
            return "/dev/shm"
    print("note: /dev/shm is not a tmpfs with room: the fast devices go to the temporary directory, "
          "so the ratios include that disk's write-back", flush=True)
    return None


def main():
    a, designs, wl = parse_args()
    tc = os.path.abspath(a.bin)
    if not os.access(tc, os.X_OK):
        sys.exit(f"{tc} is not an executable (cargo build --release -p tiercache-cli)")
    for t in ("fio", "nbdkit", "nbdcopy"):
        if shutil.which(t) is None:
            sys.exit(f"{t} is not installed (scripts/setup.sh installs it)")
    size = a.size_mib * MIB
    d = tempfile.mkdtemp(prefix="tiercache-bench-")
    fd = tempfile.mkdtemp(prefix="tiercache-bench-fast-", dir=fast_dir(a, size))
    a.log = open(os.path.join(d, "servers.log"), "w")
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()), "argv": sys.argv,
           "fast_dir": describe_dir(fd),
           "version": sh(tc, "--version").strip(), "loadavg_before": os.getloadavg(),
           "nproc": os.cpu_count(), "designs": {}}
    try:
        data = os.path.join(d, "data.img")
        make_file(data, size, random=True)
        nk = Proc(["nbdkit", "-f", "-U", f"{d}/nbdkit.sock", "memory", f"{size}"], f"{d}/nbdkit.sock", a.log)
        # The sink takes any export (the tiered volume exports its tiers' sum).
        sink = Proc(["nbdkit", "-f", "-U", f"{d}/sink.sock", "memory", f"{16 * size}"], f"{d}/sink.sock", a.log)
        fill(nk.uri, data)
        raw = None
        if "hdd" in wl and set(designs) & set(HDD_DESIGNS):
            raw = os.path.join(d, "raw-hdd.img")
            make_file(raw, a.hdd_size_mib * MIB, random=True)
        for name in designs:
            print(f"== {name}", flush=True)
            r = res["designs"][name] = {"loadavg_before": os.getloadavg()}
            dz = Design(name, tc, d, fd, a)
            if wl & {"read", "write", "multi", "copy"}:
                bench_hit(a, wl, dz, nk, sink, data, r)
            if raw and name in HDD_DESIGNS:
                bench_hdd(a, dz, raw, r)
            r["loadavg_after"] = os.getloadavg()
            for x in (d, fd):  # free the design's files before the next one
                for f in os.listdir(x):
                    if f.startswith(name):
                        os.unlink(os.path.join(x, f))
        nk.stop()
        sink.stop()
    finally:
        a.log.close()
        res["loadavg_after"] = os.getloadavg()
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(fd, ignore_errors=True)
    print(f"\ndate {res['date']}, {res['version']}, {res['nproc']} CPUs, load average before "
          f"{res['loadavg_before'][0]:.2f}, after {res['loadavg_after'][0]:.2f}; fast devices on {res['fast_dir']}")
    for name, r in res["designs"].items():
        report(name, r, wl, a.numjobs if "multi" in wl else [])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
