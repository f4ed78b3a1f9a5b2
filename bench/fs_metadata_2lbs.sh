#!/usr/bin/env bash
# Metadata-first caching on an unmodified host, end to end.
#
# Runs the same metadata-heavy workload through the live server with Azor's
# two-level block selection (2lbs) in three configurations, REPEAT times each,
# interleaved, and prints the metadata hit ratio and the workload's wall time:
#   on         classifier on (`serve --fs-classify auto`), 2LBS levels 1 and 2
#   on-nometa  classifier on, but 2LBS level 1 (metadata first) off: the core
#              decides as if it knew no classes, while the classifier still
#              labels requests, so the metadata hit ratio can be measured
#   off        classifier off (`--fs-classify off`): no classes at all, so no
#              metadata hit ratio; its time is the plain 2LBS baseline
#
# The setup is a real block device with a real filesystem:
#   tiercache serve (emulated HDD) -> nbdfuse -> losetup -> mkfs.ext4 -> mount
# The workload creates FILES small files in DIRS directories, then does
# ROUNDS rounds of stat + read of every file. Kernel caches are dropped
# between rounds, so metadata reads reach the device. The cache is small
# (CACHE) against the data (about FILES x 16 KiB), so admission matters.
#
#   sudo bench/fs_metadata_2lbs.sh   # defaults: FILES=3000 DIRS=30 ROUNDS=3 CACHE=24MiB REPEAT=2
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${FILES:-3000}
DIRS=${DIRS:-30}
ROUNDS=${ROUNDS:-3}
CACHE=${CACHE:-24MiB}
REPEAT=${REPEAT:-2}
BIN=${BIN:-target/release/tiercache}
for t in nbdfuse losetup mkfs.ext4 fusermount3; do
  command -v "$t" >/dev/null || { echo "skip: $t not installed (run scripts/setup.sh)"; exit 0; }
done
[ -e /dev/fuse ] || { echo "skip: no /dev/fuse"; exit 0; }
[ -x "$BIN" ] || cargo build --release --quiet --bin tiercache

run_one() {  # $1 = on|on-nometa|off ; prints one result line
  local name=$1 mode=auto levels=metadata,frequency dir
  case $name in
    on) ;;
    on-nometa) levels=frequency ;;
    off) mode=off ;;
  esac
  dir=$(mktemp -d /var/tmp/tc-fsmeta.XXXXXX)
  truncate -s 512M "$dir/backing.img"
  "$BIN" format --cache "$dir/cache.img" --backing "$dir/backing.img" --size "$CACHE" \
      --admission 2lbs --2lbs-levels "$levels" --write-policy write-back >/dev/null
  "$BIN" serve --cache "$dir/cache.img" --listen "unix:$dir/nbd.sock" --emulate-hdd \
      --fs-classify "$mode" 2>"$dir/serve.log" &
  local spid=$!
  for _ in $(seq 100); do [ -S "$dir/nbd.sock" ] && break; sleep 0.1; done
  mkdir "$dir/fuse" "$dir/mnt"
  nbdfuse "$dir/fuse" --unix "$dir/nbd.sock" &
  local fpid=$!
  for _ in $(seq 100); do [ -e "$dir/fuse/nbd" ] && break; sleep 0.1; done
  local loop
  loop=$(losetup -f --show "$dir/fuse/nbd")
  mkfs.ext4 -q -F "$loop"
  mount "$loop" "$dir/mnt"
  # Populate.
  for d in $(seq "$DIRS"); do
    mkdir "$dir/mnt/d$d"
    for f in $(seq $((FILES / DIRS))); do
      head -c $((4096 + (f % 4) * 4096)) /dev/urandom > "$dir/mnt/d$d/f$f"
    done
  done
  sync
  local start end
  start=$(date +%s.%N)
  for _ in $(seq "$ROUNDS"); do
    sync; echo 3 > /proc/sys/vm/drop_caches
    find "$dir/mnt" -type f -exec stat -c %s {} + > /dev/null
    find "$dir/mnt" -type f -print0 | xargs -0 cat > /dev/null
  done
  end=$(date +%s.%N)
  local stats
  stats=$("$BIN" stats --cache "$dir/cache.img" --json)
  umount "$dir/mnt"; losetup -d "$loop"; fusermount3 -u "$dir/fuse" 2>/dev/null || true
  kill "$fpid" 2>/dev/null || true; wait "$fpid" 2>/dev/null || true
  kill -TERM "$spid"; wait "$spid" || true
  python3 - "$name" "$start" "$end" <<EOF
import json, sys
s = json.loads('''$stats''')
mode, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
mh, mm = s["metadata_hits"], s["metadata_misses"]
acc = mh + mm
print(f"{mode:9} filesystem={s.get('filesystem')} metadata_hit_ratio={(f'{mh / acc:.3f}' if acc else 'n/a')} metadata_accesses={acc} "
      f"hit_ratio={s['hit_ratio']:.3f} admission_rejects={s['admission_rejects']} workload_s={end - start:.1f}")
EOF
  rm -rf "$dir"
}

echo "tiercache fs-metadata bench: FILES=$FILES DIRS=$DIRS ROUNDS=$ROUNDS CACHE=$CACHE REPEAT=$REPEAT, 2lbs, write-back, emulated HDD"
for _ in $(seq "$REPEAT"); do
  run_one on
  run_one on-nometa
  run_one off
done
