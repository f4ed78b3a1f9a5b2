#!/usr/bin/env bash
# Install everything tiercache needs on a fresh Debian machine and build it.
# Idempotent: re-running only installs what is missing.
# Usage: ./scripts/setup.sh [--for-tests]
#   --for-tests  skip the release builds of the tiercache binary and of the
#                Python package: the tests build their own, with the test
#                profile the Rust tests use (scripts/test.sh uses this)
set -euo pipefail
cd "$(dirname "$0")/.."
build_cli=1
case ${1:-} in
  "") ;;
  --for-tests) build_cli=0 ;;
  *) echo "usage: $0 [--for-tests]" >&2; exit 2 ;;
esac

# (nbdfuse ships in libnbd-bin on Debian 12.)
APT_PKGS=(fio nbdkit libnbd-bin qemu-utils nbd-server xfsprogs e2fsprogs attr zstd xz-utils bzip2 fuse3 pkg-config postmark postgresql)
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup: installing Rust (rustup)"
  curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  # shellcheck disable=SC1091
  . "$HOME/.cargo/env"
fi

PY=${PYTHON:-python3}
echo "setup: installing Python packages (libcachesim as the peer simulator, plotting and analysis, prometheus_client for the metrics tests)"
$PY -m pip install -q --disable-pip-version-check -r scripts/requirements.txt

if [ $build_cli = 1 ]; then
  echo "setup: building and installing the Python package tiercache (pip install .)"
  $PY -m pip install -q --disable-pip-version-check .
  echo "setup: building tiercache (release)"
  cargo build --release --quiet --bin tiercache
  echo "setup: done. The binary is target/release/tiercache"
else
  echo "setup: done (no release build: the tests build tiercache and the Python package)"
fi
