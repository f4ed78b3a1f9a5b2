#!/usr/bin/env bash
# Install everything tiercache needs on a fresh Debian machine and build it.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

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

echo "setup: building tiercache (release)"
cargo build --release --quiet --bin tiercache
echo "setup: building and installing the Python package tiercache (pip install .)"
$PY -m pip install -q --disable-pip-version-check .
echo "setup: done. The binary is target/release/tiercache"
