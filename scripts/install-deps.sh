#!/usr/bin/env bash
# Installs everything leakwatch needs to build and test on Debian 12, from
# Debian's own packages. Idempotent; run as root.
# Usage: install-deps.sh [--with-test-tools]
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
  libyaml-cpp-dev libcpp-httplib-dev prometheus-cpp-dev libssl-dev libcrypt-dev \
  binutils procps >/dev/null
# Test peers (--with-test-tools): a real Prometheus server and promtool,
# go tool pprof and protoc to check the pprof output, and the allocators.
if [ "${1:-}" = "--with-test-tools" ]; then
  apt-get install -y -qq --no-install-recommends prometheus golang-go protobuf-compiler >/dev/null
  # Allocator peers (tests/integration/allocator_test.cc): jemalloc to link
  # against, tcmalloc and mimalloc to preload, and Debian's redis (jemalloc).
  apt-get install -y -qq --no-install-recommends libjemalloc-dev libgoogle-perftools4 \
    libmimalloc2.0 redis-server redis-tools >/dev/null
fi
echo "install-deps.sh: dependencies installed"
