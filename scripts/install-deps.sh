#!/usr/bin/env bash
# Installs everything leakwatch needs to build and test on Debian 12, from
# Debian's own packages. Idempotent; run as root.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (apt-get)" >&2
  exit 4
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config git ca-certificates \
  clang llvm bpftool libbpf-dev libelf-dev libdw-dev zlib1g-dev \
  nlohmann-json3-dev libgtest-dev libgmock-dev \
  binutils procps >/dev/null
echo "install-deps.sh: dependencies installed"
