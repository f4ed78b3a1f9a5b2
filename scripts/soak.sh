#!/usr/bin/env bash
# Soak of the four live designs (not in CI): for each design, N kill -9
# points under a pipelined writer (8 requests in flight, writes with and
# without FUA, FLUSH), each followed by a restart and a check of every block
# against the client's ledger: every acknowledged-and-flushed (or FUA)
# write must be there, nothing may read as garbage or as an older version
# than the last flush. After the last round a load without a crash, then
# detach (the backing file alone must hold the newest data) or SIGTERM.
# The harness is crates/apps/cli/tests/common/crash.rs.
#
# Usage: scripts/soak.sh [ROUNDS] [SEED] [DESIGNS]   (kill -9 rounds)
#        scripts/soak.sh power [CASES] [SEED]        (in-process power losses)
#   ROUNDS   kill -9 rounds per design (default 1000)
#   SEED     seed (default: from the clock); a failure names it, replay with
#            TIERCACHE_CRASH_SEED=SEED TIERCACHE_CRASH_ROUNDS=N cargo test ...
#   DESIGNS  comma-separated subset of cache,log-structured,tier,tica (default all)
# Prints per design: rounds, blocks verified, failures, and the distribution
# of restart-to-ready times (spawn, recovery, first stats answer). Logs go
# to target/soak/DESIGN.log.
#
# Power-loss mode (in process, no kill -9): scripts/soak.sh power [CASES] [SEED]
#   runs the deterministic simulations of tiercache_fuzz::dst for the
#   tiered volume, log-structured and three-level caches with CASES cases
#   each (default 10000; each case 400 seeded steps with power losses that
#   drop, keep in order or tear per 512-byte sector the unflushed writes,
#   injected EIO, and a check of every sector after each recovery), plus
#   the tiered volume's threaded power-loss rounds (CASES/100 rounds), the
#   fault matrix, and the SSD cache's fault tests (live_faults: its ENOSPC,
#   removal and slow cells with crash/restart). Logs go to
#   target/soak/power-*.log.
set -euo pipefail
if [ "${1:-}" = "power" ]; then
  cases="${2:-10000}"
  seed="${3:-$(date +%s)}"
  case "$cases" in
    ''|*[!0-9]*|0) echo "CASES must be a positive integer, got '$cases'" >&2; exit 2 ;;
  esac
  cd "$(dirname "$0")/.."
  mkdir -p target/soak
  echo "power-loss soak: $cases cases per simulation, seed $seed, $(date -u +%FT%TZ)"
  failed=0
  # package, test target, and a test-name filter (- for all of the target)
  for spec in "tiercache-oodt-live dst -" "tiercache-flashtier-live dst -" "tiercache-tica-live dst -" "tiercache-oodt-live power_loss -" "tiercache-cli system live_faults::"; do
    read -r pkg bin filter <<<"$spec"
    [ "$filter" = - ] && filter=""
    log="target/soak/power-$pkg-$bin${filter:+-${filter%::}}.log"
    start=$(date +%s)
    set +e
    TIERCACHE_DST_CASES="$cases" TIERCACHE_DST_SEED="$seed" \
      TIERVOL_POWER_ROUNDS=$(( cases / 100 > 30 ? cases / 100 : 30 )) TIERVOL_POWER_SEED="$seed" \
      cargo test -q -p "$pkg" --test "$bin" -- $filter --nocapture >"$log" 2>&1
    status=$?
    set -e
    secs=$(( $(date +%s) - start ))
    if [ "$status" -eq 0 ]; then
      echo "$pkg $bin${filter:+ ${filter%::}}: passed [$secs s]"
      grep -hE '^dst |power losses:|^fault matrix \|' "$log" | sed 's/^/  /'
    else
      failed=1
      echo "$pkg $bin${filter:+ ${filter%::}}: FAILED after $secs s (seed $seed); see $log:" >&2
      grep -E 'FAILED at|panicked' "$log" | head -5 >&2
    fi
  done
  [ "$failed" -eq 0 ] || { echo "power-loss soak FAILED (seed $seed)" >&2; exit 1; }
  echo "power-loss soak passed: $cases cases per simulation, seed $seed"
  exit 0
fi
rounds="${1:-1000}"
seed="${2:-$(date +%s)}"
designs="${3:-cache,log-structured,tier,tica}"
cd "$(dirname "$0")/.."
case "$rounds" in
  ''|*[!0-9]*|0) echo "ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2 ;;
esac
declare -A test_of=(
  [cache]="live_crash::kill9_write_back_4k_lines_full_lru"
  [log-structured]="live_ls_crash::kill9_log_structured_write_back"
  [tier]="live_tier_crash::kill9_during_migrations_oodt"
  [tica]="live_tica_crash::kill9_tica_adaptive"
)
mkdir -p target/soak
echo "soak: $rounds kill -9 rounds per design ($designs), seed $seed, $(date -u +%FT%TZ)"
failed=0
IFS=, read -ra list <<<"$designs"
for d in "${list[@]}"; do
  spec="${test_of[$d]:-}"
  if [ -z "$spec" ]; then
    echo "unknown design '$d' (allowed: cache, log-structured, tier, tica)" >&2
    exit 2
  fi
  name="$spec"
  log="target/soak/$d.log"
  start=$(date +%s)
  set +e
  TIERCACHE_CRASH_ROUNDS="$rounds" TIERCACHE_CRASH_SEED="$seed" \
    cargo test -q -p tiercache-cli --test system -- --exact "$name" --nocapture \
    >"$log" 2>&1
  status=$?
  set -e
  secs=$(( $(date +%s) - start ))
  if [ "$status" -eq 0 ]; then
    echo "$d: $(grep -h '\] soak:' "$log" | sed 's/^\[[^]]*\] soak: //') [$secs s]"
  else
    failed=1
    echo "$d: FAILED after $secs s (seed $seed); see $log:" >&2
    grep -E 'panicked|seed [0-9]+:' "$log" | head -5 >&2
  fi
done
if [ "$failed" -ne 0 ]; then
  echo "soak FAILED (seed $seed)" >&2
  exit 1
fi
echo "soak passed: $rounds rounds per design, seed $seed"
