#!/usr/bin/env bash
# Run the tests of tiercache, on a fresh machine too. Two tiers:
#   fast    unit and in-process tests: the default `cargo test --workspace`.
#   system  the test targets that run real programs (the tiercache binary,
#           fio, qemu, nbd tools, mkfs, loop devices and mounts, python3) or
#           replay the whole shared traces (minutes of CPU), marked `test = false` in their crate's Cargo.toml so that plain
#           `cargo test` skips them (`cargo test --workspace --test NAME`
#           runs one); scripts/system_tests.py runs them, several at a time.
# Usage: ./scripts/test.sh [all|fast|system]
#   all (default)  setup, formatting, lints, both tiers (each timed), Python
#                  tests; the tests run the tiercache binary that `cargo test`
#                  builds (target/debug/tiercache) and a Python package built
#                  with the same profile, so no release build is made
#   fast           the fast tier only (the edit-compile-test loop)
#   system         the system tier only
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
what=${1:-all}

fast_tier() {
  local t0=$SECONDS
  echo "== fast tier: cargo test --workspace"
  cargo test --workspace
  fast_s=$((SECONDS - t0))
  echo "== fast tier: passed in ${fast_s} s"
}

system_tier() {
  local t0=$SECONDS
  $PY scripts/system_tests.py run
  system_s=$((SECONDS - t0))
}

case $what in
  fast) fast_tier; exit ;;
  system) system_tier; exit ;;
  all) ;;
  *) echo "usage: $0 [all|fast|system]" >&2; exit 2 ;;
esac

t0=$SECONDS
./scripts/setup.sh --for-tests
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The system tier's targets (`test = false`: --all-targets leaves them out).
# shellcheck disable=SC2046 # the output is a list of cargo arguments
cargo clippy --quiet $($PY scripts/system_tests.py args) -- -D warnings
fast_tier
system_tier
echo "== python package: pip install . with the profile the tests use"
# The tests' build of the workspace is done by now (the test profile is the
# dev profile): the extension only adds PyO3 and its own crate, where a
# release build would compile it all again, with link-time optimization.
# (Not `--profile test`: `cargo rustc` would build a test harness.)
MATURIN_PEP517_ARGS="--profile dev" $PY -m pip install -q --disable-pip-version-check .
echo "== python tests"
# The CLI they compare against: the one both tiers ran (the test profile's).
TIERCACHE_BIN="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/tiercache" \
  $PY -m pytest -q python/tests
echo "== all tests passed in $((SECONDS - t0)) s (fast tier ${fast_s} s, system tier ${system_s} s)"
