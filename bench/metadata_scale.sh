#!/bin/bash
# Metadata memory and start-up time of large caches: for the SSD cache and
# TICA on sparse cache files of 64 GiB, 1 TiB and 16 TiB (16 TiB - 1 MiB:
# ext4's largest file), `format` (wall time, peak RSS), `serve` until the
# NBD socket answers (nbdinfo) and its peak RSS with WRITE MiB written
# through it (qemu-io, flushed), then a restart after kill -9 (time until
# the socket answers, peak RSS). Peak RSS is /usr/bin/time's maximum
# resident set size. The SSD cache uses the smallest line size `format`
# accepts under the machine's metadata allowance (half of its RAM); TICA's
# pages are 4 KiB, so a size whose metadata does not fit is reported as
# refused with what it would need. Prints a Markdown table
# (docs/results.md, "Metadata memory and start-up time").
#
# usage: bench/metadata_scale.sh [SIZES...]   (default: 64GiB 1TiB 16TiB)
# environment: TC (tiercache binary, default target/release/tiercache),
#   DIR (where the sparse files go, default a new directory under $TMPDIR),
#   WRITE (MiB written before the kill -9, default 256),
#   DESIGNS (default "cache tica").
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TC=${TC:-$here/target/release/tiercache}
WRITE=${WRITE:-256}
DESIGNS=${DESIGNS:-cache tica}
for tool in nbdinfo qemu-io /usr/bin/time; do
    command -v $tool >/dev/null || { echo "metadata_scale.sh: $tool is not installed" >&2; exit 2; }
done
[ -x "$TC" ] || { echo "metadata_scale.sh: $TC missing: cargo build --release --bin tiercache" >&2; exit 2; }
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(64GiB 1TiB 16TiB)
D=${DIR:-$(mktemp -d "${TMPDIR:-/tmp}/metadata_scale.XXXXXX")}
mkdir -p "$D"
SERVER=""
trap '[ -s "$D/server.pid" ] && kill -9 "$(cat "$D/server.pid")" 2>/dev/null; rm -rf "$D"' EXIT

# File sizes: ext4 refuses a 16 TiB file, so that one is 1 MiB short.
bytes_of() {
    case $1 in
    16TiB) echo $(( (16 << 40) - (1 << 20) )) ;;
    *) python3 -c "import re,sys; n,u=re.fullmatch(r'(\d+)([KMGT]iB)',sys.argv[1]).groups(); print(int(n)<<{'KiB':10,'MiB':20,'GiB':30,'TiB':40}[u])" "$1" ;;
    esac
}

now() { date +%s.%N; }

# Runs "$@" under /usr/bin/time; prints "seconds peak_MiB".
timed() {
    local t0 rc
    t0=$(now)
    /usr/bin/time -f "%M" -o "$D/time.out" "$@" >"$D/cmd.out" 2>&1 && rc=0 || rc=$?
    echo "$(python3 -c "print(f'{$(now) - $t0:.2f}')") $(( $(tail -1 "$D/time.out") / 1024 ))"
    return $rc
}

# Starts `serve` on $1 under /usr/bin/time; waits until the socket answers;
# prints the seconds it took. The server's pid goes to $D/server.pid (this
# runs in a command substitution, a subshell).
start_server() {
    local t0 w
    rm -f "$D/s.sock" "$D/serve.time"
    t0=$(now)
    /usr/bin/time -f "%M" -o "$D/serve.time" "$TC" serve --cache "$1" --listen "unix:$D/s.sock" >>"$D/serve.log" 2>&1 &
    w=$!
    for _ in $(seq 1 6000); do
        pgrep -P $w >"$D/server.pid" || true
        if [ -S "$D/s.sock" ] && nbdinfo --size "nbd+unix:///?socket=$D/s.sock" >/dev/null 2>&1; then
            python3 -c "print(f'{$(now) - $t0:.2f}')"
            return 0
        fi
        kill -0 $w 2>/dev/null || { echo "serve exited: $(tail -3 "$D/serve.log")" >&2; return 1; }
        sleep 0.05
    done
    echo "serve did not answer" >&2
    return 1
}

# kill -9 the server; prints its peak RSS in MiB.
kill_server() {
    SERVER=$(cat "$D/server.pid")
    kill -9 "$SERVER"
    while [ ! -s "$D/serve.time" ] || ! tail -1 "$D/serve.time" | grep -qE '^[0-9]+$'; do sleep 0.05; done
    SERVER=""
    rm -f "$D/server.pid"
    echo $(( $(tail -1 "$D/serve.time") / 1024 ))
}

echo "| design | size | line | format s | format MiB | serve start s | serve MiB (with ${WRITE} MiB written) | restart s | restart MiB |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|"
truncate -s $(( (WRITE + 64) << 20 )) "$D/b.img"
for design in $DESIGNS; do
    for size in "${sizes[@]}"; do
        rm -f "$D"/c.img "$D"/ro.img "$D"/wo.img "$D/serve.log"
        b=$(bytes_of "$size")
        line="" fmt=""
        if [ "$design" = cache ]; then
            for l in 4KiB 8KiB 16KiB 32KiB 64KiB 128KiB 256KiB 512KiB 1MiB; do
                truncate -s "$b" "$D/c.img"
                if fmt=$(timed "$TC" -q format --cache "$D/c.img" --backing "$D/b.img" --line-size "$l"); then
                    line=$l; break
                fi
                grep -q "metadata memory" "$D/cmd.out" || { cat "$D/cmd.out" >&2; exit 1; }
                rm -f "$D/c.img"
            done
            dev="$D/c.img"
        else
            truncate -s "$b" "$D/ro.img" "$D/wo.img"
            if fmt=$(timed "$TC" -q format --mode tica --ro-ssd "$D/ro.img" --wo-ssd "$D/wo.img" \
                --backing "$D/b.img" --dram-size 64MiB); then
                line=4KiB
            else
                grep -q "metadata memory" "$D/cmd.out" || { cat "$D/cmd.out" >&2; exit 1; }
            fi
            dev="$D/wo.img"
        fi
        if [ -z "$line" ]; then
            need=$(grep -oE 'needs [0-9.]+ [KMGTP]iB' "$D/cmd.out" | head -1)
            echo "| $design | $size | 4KiB | refused: $need of metadata | | | | | |"
            continue
        fi
        read -r fs fm <<<"$fmt"
        ss=$(start_server "$dev")
        qemu-io -f raw -c "write -P 0x5a 0 ${WRITE}M" -c flush "nbd+unix:///?socket=$D/s.sock" >/dev/null
        sm=$(kill_server)
        rs=$(start_server "$dev")
        qemu-io -f raw -c "read -P 0x5a 0 1M" "nbd+unix:///?socket=$D/s.sock" | grep -q "read 1048576" \
            || { echo "data written before the kill -9 did not read back" >&2; exit 1; }
        rm_=$(kill_server)
        echo "| $design | $size | $line | $fs | $fm | $ss | $sm | $rs | $rm_ |"
    done
done
