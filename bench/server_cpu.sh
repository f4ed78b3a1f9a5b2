#!/bin/bash
# Server CPU per request: IOPS and the serving process's CPU time per
# request (utime+stime from /proc/PID/stat over the fio run / fio's request
# count) for 4 KiB random requests at QD32 over fio's nbd engine, a 64 MiB
# data set written first. On a 2-CPU machine fio takes about a core, so the
# server's CPU per request is what bounds IOPS; it varies less with other
# load than IOPS do. Results: docs/results.md.
#
# usage: bench/server_cpu.sh TARGET [RUNS]
#   TARGET: log | tica | nbd-mem | nbdkit-mem
#     log         `tiercache serve` of a log-structured cache (128 MiB, default segments)
#     tica        `tiercache serve` of a TICA pair (16 MiB DRAM, 128 MiB SSDs)
#     nbd-mem     the NBD layer alone: `examples/serve --mem` of tiercache-nbd
#     nbdkit-mem  `nbdkit memory`, the peer
#   RUNS: runs, each with a fresh server (default 1)
# environment: TC (tiercache binary, default target/release/tiercache),
#   SERVE (the nbd example, default target/release/examples/serve; build it
#   with `cargo build --release -p tiercache-nbd --example serve`),
#   RW (fio rw, default randwrite), RUNTIME (seconds, default 6),
#   PERF (a file: record a perf profile of the server during the run),
#   FAST_DIR (where the run's files go, cache and backing; default a new directory under
#   $TMPDIR; /dev/shm puts them in RAM like `nbdkit memory`'s data, as
#   bench/live_vs_nbdkit.py does by default).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TC=${TC:-$here/target/release/tiercache}
SERVE=${SERVE:-$here/target/release/examples/serve}
RW=${RW:-randwrite}
RUNTIME=${RUNTIME:-6}
if [ -n "${FAST_DIR:-}" ] && [ ! -d "$FAST_DIR" ]; then
    echo "server_cpu.sh: FAST_DIR=$FAST_DIR is not a directory" >&2; exit 2
fi
target=${1:?usage: bench/server_cpu.sh log|tica|nbd-mem|nbdkit-mem [RUNS]}
runs=${2:-1}
for tool in fio nbdkit python3; do
    command -v $tool >/dev/null || { echo "server_cpu.sh: $tool is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
done

one() {
    local D P
    D=$(mktemp -d "${FAST_DIR:-${TMPDIR:-/tmp}}/server_cpu.XXXXXX")
    P=""
    trap '[ -n "$P" ] && kill $P 2>/dev/null; rm -rf "$D"' RETURN
    case $target in
    log)
        truncate -s 128M "$D/b.img"
        "$TC" -q format --layout log-structured --cache "$D/c.img" --backing "$D/b.img" --size 128MiB >/dev/null
        "$TC" -q serve --cache "$D/c.img" --listen "unix:$D/s.sock" >"$D/log" 2>&1 &
        P=$! ;;
    tica)
        truncate -s 128M "$D/b.img"
        "$TC" -q format --mode tica --ro-ssd "$D/ro.img" --wo-ssd "$D/wo.img" --backing "$D/b.img" \
            --dram-size 16MiB --size 128MiB >/dev/null
        "$TC" -q serve --cache "$D/wo.img" --listen "unix:$D/s.sock" >"$D/log" 2>&1 &
        P=$! ;;
    nbd-mem)
        [ -x "$SERVE" ] || { echo "server_cpu.sh: $SERVE missing: cargo build --release -p tiercache-nbd --example serve" >&2; return 2; }
        "$SERVE" --unix "$D/s.sock" --mem 64M >"$D/log" 2>&1 &
        P=$! ;;
    nbdkit-mem)
        nbdkit -U "$D/s.sock" --pidfile "$D/pid" memory 64M
        for _ in $(seq 50); do [ -s "$D/pid" ] && break; sleep 0.1; done
        P=$(cat "$D/pid") ;;
    *) echo "server_cpu.sh: unknown target $target (log, tica, nbd-mem, nbdkit-mem)" >&2; return 2 ;;
    esac
    for _ in $(seq 100); do [ -S "$D/s.sock" ] && break; sleep 0.1; done
    [ -S "$D/s.sock" ] || { echo "server_cpu.sh: the server did not start:" >&2; cat "$D/log" >&2; return 1; }
    local uri="nbd+unix:///?socket=$D/s.sock"
    fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --size=64M >/dev/null
    [ "$target" = tica ] && nbdcopy --connections=4 "$uri" null:
    local c0 c1
    c0=$(awk '{print $14+$15}' /proc/$P/stat)
    if [ -n "${PERF:-}" ]; then
        (perf record -F 499 -g -p $P -o "$PERF" -- sleep "$RUNTIME" >/dev/null 2>&1 &)
    fi
    fio --name=run --ioengine=nbd --uri="$uri" --rw="$RW" --bs=4k --iodepth=32 --size=64M \
        --time_based --runtime="$RUNTIME" --ramp_time=2 --output-format=json >"$D/fio.json"
    c1=$(awk '{print $14+$15}' /proc/$P/stat)
    python3 - "$D/fio.json" "$c0" "$c1" "$target" "$RW" <<'PY'
import json, os, sys
s = open(sys.argv[1]).read()
job = json.loads(s[s.index("{"):])["jobs"][0]
side = job["write"] if job["write"]["total_ios"] else job["read"]
ticks = os.sysconf("SC_CLK_TCK")
# The CPU counters cover the ramp too: charge it by the ramp's share of requests.
ops = side["total_ios"] * (float(job.get("job_runtime", 0)) + 2000) / max(float(job.get("job_runtime", 1)), 1)
cpu_us = (int(sys.argv[3]) - int(sys.argv[2])) * 1e6 / ticks
print(f"{sys.argv[4]:<11} {sys.argv[5]:<9} {side['iops']:>9,.0f} IOPS  server CPU {cpu_us / max(ops, 1):5.1f} us/request  (load {os.getloadavg()[0]:.1f})")
PY
}

for _ in $(seq "$runs"); do one; done
