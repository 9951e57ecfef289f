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
# Test peers (--with-test-tools): a real Prometheus server and promtool, and
# go tool pprof and protoc to check the pprof output; libFuzzer and the
# sanitizer runtimes for clang (scripts/fuzz.sh). For tests/deploy:
# debootstrap (a fresh Debian 12 root for the .deb), systemd-analyze,
# python3-yaml, python3-matplotlib (the dashboard picture), kubectl with its
# embedded kustomize, and Node.js with npm for the Kubernetes schemas.
# Allocator peers (tests/integration/allocator_test.cc): jemalloc to link
# against, tcmalloc and mimalloc to preload, and Debian's redis (jemalloc).
if [ "${1:-}" = "--with-test-tools" ]; then
  apt-get install -y -qq --no-install-recommends prometheus golang-go protobuf-compiler \
    debootstrap systemd python3-yaml python3-matplotlib util-linux libclang-rt-14-dev \
    libjemalloc-dev libgoogle-perftools4 libmimalloc2.0 redis-server redis-tools >/dev/null
  # A kubectl or Node.js from another repository (Google's, NodeSource's)
  # ships the same files as Debian's packages: keep it if there is one.
  command -v kubectl >/dev/null || apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null
  command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  # Kubernetes' JSON schemas from npm's kubernetes-models, into the source
  # tree (git-ignored), at the versions its lockfile pins.
  (cd "$(dirname "$0")/../tests/deploy/k8s-schemas" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
echo "install-deps.sh: dependencies installed"
