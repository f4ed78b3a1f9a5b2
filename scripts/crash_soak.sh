#!/usr/bin/env bash
# Crash soak of the live server: many kill -9 rounds under a write-back load
# with a cache much smaller than the data, each followed by a restart and a
# full check of every block against the client's ledger (see
# crates/apps/cli/tests/system/live_crash.rs for what is checked).
#
# Usage: scripts/crash_soak.sh [ROUNDS_PER_CONFIG] [SEED]
#   ROUNDS_PER_CONFIG  kill -9 rounds per cache configuration (default 100;
#                      there are 5 configurations)
#   SEED               first seed (default: from the clock); printed, and a
#                      failure names it, so a failing run can be replayed with
#                      TIERCACHE_CRASH_SEED=SEED TIERCACHE_CRASH_ROUNDS=N cargo test ...
set -euo pipefail
rounds="${1:-100}"
seed="${2:-$(date +%s)}"
cd "$(dirname "$0")/.."
case "$rounds" in
  ''|*[!0-9]*) echo "ROUNDS_PER_CONFIG must be a positive integer, got '$rounds'" >&2; exit 2 ;;
esac
echo "crash soak: $rounds kill -9 rounds per configuration, seed $seed"
cargo build -p tiercache-cli --tests --quiet
set +e
TIERCACHE_CRASH_ROUNDS="$rounds" TIERCACHE_CRASH_SEED="$seed" \
  cargo test -p tiercache-cli --test system -- live_crash:: --nocapture --test-threads=1 2>&1 \
  | grep -E '^\[|^test |panicked|seed|test result' 
status="${PIPESTATUS[0]}"
set -e
if [ "$status" -ne 0 ]; then
  echo "crash soak FAILED (seed $seed, $rounds rounds per configuration)" >&2
  exit "$status"
fi
echo "crash soak passed: 4 configurations x $rounds rounds, seed $seed"
