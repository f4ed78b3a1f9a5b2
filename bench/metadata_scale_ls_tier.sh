#!/bin/bash
# Metadata memory and start-up time of the log-structured cache and the
# tiered volume on sparse devices of growing nominal size: `format` time and
# peak RSS (/usr/bin/time -v), `serve` start time (until nbdinfo answers) and
# peak RSS (VmHWM), then 64 MiB written and flushed (qemu-io), kill -9, and
# the restart's time and peak RSS. Prints one table row per run, and the
# bound each design states for it (`tiercache_*::memory`): the second table
# of docs/results.md, "Metadata memory and start-up time".
#
# usage: bench/metadata_scale_ls_tier.sh [ROWS...]
#   ROWS: ls:SIZE or tier:SIZE:BLOCK (default: the table's rows)
#     ls:SIZE          a log-structured cache of SIZE (1 MiB segments,
#                      write-back) over a sparse 8 TiB backing file
#     tier:SIZE:BLOCK  a `sum` tiered volume of SIZE in blocks of BLOCK: a
#                      fast tier of SIZE/16 (a file format creates), the rest
#                      a sparse slow tier
# environment: TC (tiercache binary, default target/release/tiercache),
#   DIR (where the sparse files go; default a new directory under $TMPDIR).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
TC=${TC:-$here/target/release/tiercache}
for tool in nbdinfo qemu-io /usr/bin/time; do
    command -v $tool >/dev/null || { echo "metadata_scale_ls_tier.sh: $tool is not installed" >&2; exit 2; }
done
[ -x "$TC" ] || { echo "metadata_scale_ls_tier.sh: $TC missing: cargo build --release --bin tiercache" >&2; exit 2; }
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(ls:64GiB ls:1TiB ls:2TiB ls:16TiB tier:64GiB:64KiB tier:1TiB:64KiB tier:16TiB:64KiB tier:16TiB:128KiB)
D=$(mktemp -d "${DIR:-${TMPDIR:-/tmp}}/metadata_scale.XXXXXX")
P=""
trap '[ -n "$P" ] && kill -9 $P 2>/dev/null; rm -rf "$D"' EXIT

bytes() { numfmt --from=iec-i "${1%B}"; }
mib() { echo $(( $1 / 1048576 )); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# Serve $1 on $D/s.sock; sets P (its pid) and T (seconds until nbdinfo answers).
serve() {
    rm -f "$D/s.sock"
    local t0; t0=$(now)
    "$TC" serve --cache "$1" --listen "unix:$D/s.sock" >>"$D/serve.log" 2>&1 &
    P=$!
    until nbdinfo --size "nbd+unix:///?socket=$D/s.sock" >/dev/null 2>&1; do
        kill -0 $P 2>/dev/null || { echo "serve exited: $(tail -1 "$D/serve.log")" >&2; P=""; return 1; }
        sleep 0.05
    done
    T=$(secs "$t0" "$(now)")
}
hwm() { awk '/VmHWM/ { printf "%d", $2 / 1024 }' "/proc/$1/status"; }

printf '%-6s %-9s %-7s %10s | %8s %8s | %8s %8s | %8s %8s\n' design size block "bound MiB" \
    "fmt s" "fmt MiB" "serve s" "srv MiB" "restart" "rst MiB"
for row in "${rows[@]}"; do
    IFS=: read -r design size block <<<"$row"
    rm -f "$D"/*.img
    case $design in
    ls)
        block=4KiB
        truncate -s 8T "$D/backing.img"
        dev=$D/cache.img
        fmt=(format --layout log-structured --cache "$dev" --backing "$D/backing.img" --size "$size") ;;
    tier)
        total=$(bytes "$size")
        fast=$(( total / 16 ))
        truncate -s $(( total - fast )) "$D/slow.img"
        dev=$D/fast.img
        fmt=(format --mode tier --tiers "$dev,$D/slow.img" --size "$fast" --tier-block "$block") ;;
    *) echo "unknown row $row" >&2; exit 2 ;;
    esac
    # A refusal is a failed format; a warning (say, a sparse file larger than
    # its file system's free space) is not.
    rc=0
    /usr/bin/time -v -o "$D/time" "$TC" -q "${fmt[@]}" >/dev/null 2>"$D/err" || rc=$?
    fs=$(awk -F': ' '/Elapsed/ { n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; printf "%.2f", s }' "$D/time")
    fm=$(awk '/Maximum resident/ { printf "%d", $NF / 1024 }' "$D/time")
    if [ "$rc" -ne 0 ]; then
        printf '%-6s %-9s %-7s %10s | %8s %8s | refused: %s\n' "$design" "$size" "$block" - "$fs" "$fm" \
            "$(grep -m1 '^tiercache: error: ' "$D/err" | sed 's/^tiercache: error: //')"
        continue
    fi
    serve "$dev"; ss=$T; sm=$(hwm $P)
    bound=$("$TC" stats --json --cache "$dev" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata_memory"]["bound_bytes"])')
    qemu-io -f raw -c "write -P 0x5a 0 64M" -c flush "nbd+unix:///?socket=$D/s.sock" >/dev/null
    kill -9 $P; wait $P 2>/dev/null || true
    serve "$dev"; rs=$T
    qemu-io -f raw -c "read -P 0x5a 0 64M" "nbd+unix:///?socket=$D/s.sock" >/dev/null \
        || { echo "data lost after kill -9 ($row)" >&2; exit 1; }
    rm_=$(hwm $P)
    kill $P; wait $P 2>/dev/null || true; P=""
    printf '%-6s %-9s %-7s %10s | %8s %8s | %8s %8s | %8s %8s\n' "$design" "$size" "$block" "$(mib "$bound")" \
        "$fs" "$fm" "$ss" "$sm" "$rs" "$rm_"
done
