#!/usr/bin/env bash
# Run every test of tiercache: formatting, lints, Rust unit/property/integration
# tests (including the ones that drive real clients such as fio, qemu-img and
# nbdinfo, and the libCacheSim exactness checks), on a fresh machine too.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== python tests"
${PYTHON:-python3} -m pytest -q python/tests
echo "== all tests passed"
