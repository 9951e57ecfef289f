#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs everything leakwatch needs to build and test on Debian 12, from
# Debian's own packages. Idempotent; run as root.
# Usage: install-deps.sh [--with-test-tools] [--with-bench-tools]
set -euo pipefail
with_test_tools=0 with_bench_tools=0
for arg in "$@"; do
  case $arg in
    --with-test-tools) with_test_tools=1 ;;
    --with-bench-tools) with_bench_tools=1 ;;
    *) echo "usage: install-deps.sh [--with-test-tools] [--with-bench-tools]" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (apt-get)" >&2
  exit 4
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config git ca-certificates \
  clang llvm bpftool libbpf-dev libelf-dev libdw-dev zlib1g-dev libcapstone-dev \
  liblzma-dev libdebuginfod-dev libdebuginfod1 xz-utils \
  nlohmann-json3-dev libgtest-dev libgmock-dev \
  libyaml-cpp-dev libcpp-httplib-dev prometheus-cpp-dev libssl-dev libcrypt-dev \
  binutils procps help2man systemtap-sdt-dev >/dev/null
# systemtap-sdt-dev: <sys/sdt.h>, for the test build's libc10_cuda.so
# stand-in, which carries PyTorch's pytorch:malloc/free USDTs
# (tests/targets/tensor).
# Test peers (--with-test-tools): a real Prometheus server and promtool, and
# go tool pprof and protoc to check the pprof output; libFuzzer and the
# sanitizer runtimes for clang (scripts/fuzz.sh). For tests/deploy:
# debootstrap (a fresh Debian 12 root for the .deb), systemd-analyze and
# systemd-nspawn (systemd-container: the .deb's upgrade under a booted
# systemd), python3-yaml, python3-matplotlib (the dashboard picture),
# kubectl with its embedded kustomize (and Debian's kubectl 1.20 unpacked
# beside another one), and Node.js with npm for the Kubernetes schemas.
# Symbols (tests/integration/symbols_test.cc): Debian's debuginfod server,
# run on loopback, and curl to wait for it.
# Allocator peers (tests/integration/allocator_test.cc): jemalloc to link
# against, tcmalloc and mimalloc to preload, and Debian's redis (jemalloc).
# Python frames (tests/integration/python_test.cc): Debian's interpreter,
# /usr/bin/python3.11 (python3.11-minimal).
# JIT frames (tests/integration/runtimes_test.cc): Node.js (the nodejs below)
# and the JDK (javac, java, jcmd: openjdk-17-jdk-headless).
if [ "$with_test_tools" = 1 ]; then
  apt-get install -y -qq --no-install-recommends prometheus golang-go protobuf-compiler \
    debootstrap systemd systemd-container python3-yaml python3-matplotlib util-linux libclang-rt-14-dev \
    libjemalloc-dev libgoogle-perftools4 libmimalloc2.0 redis-server redis-tools \
    debuginfod curl python3.11-minimal openjdk-17-jdk-headless >/dev/null
  # A kubectl or Node.js from another repository (Google's, NodeSource's)
  # ships the same files as Debian's packages: keep it if there is one.
  command -v kubectl >/dev/null || apt-get install -y -qq --no-install-recommends kubernetes-client >/dev/null
  # deploy/kubernetes must render with Debian 12's kubectl 1.20 (kustomize
  # 2.0.3) too: where the kubectl on PATH is another one, Debian's package is
  # unpacked (not installed: it would clash) into the source tree
  # (git-ignored) for tests/deploy/kubernetes_test.sh.
  if ! dpkg-query -W -f='${Status}' kubernetes-client 2>/dev/null | grep -q 'ok installed'; then
    k8s_legacy="$(cd "$(dirname "$0")/.." && pwd)/tests/deploy/k8s-schemas/kubectl-debian"
    if [ ! -x "$k8s_legacy/usr/bin/kubectl" ]; then
      download=$(mktemp -d)
      chown _apt "$download" 2>/dev/null || true
      (cd "$download" && apt-get download -qq kubernetes-client >/dev/null)
      rm -rf "$k8s_legacy" && dpkg-deb -x "$download"/kubernetes-client_*.deb "$k8s_legacy"
      rm -rf "$download"
    fi
  fi
  command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  # Kubernetes' JSON schemas from npm's kubernetes-models, into the source
  # tree (git-ignored), at the versions its lockfile pins.
  (cd "$(dirname "$0")/../tests/deploy/k8s-schemas" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
# Benchmark peers (--with-bench-tools; never in CI: python3-torch pulls in
# about 1 GB): bench/torch_run.sh's PyTorch, bench/redis_run.sh's redis
# (also a test peer above), bench/run.sh's bpftrace anchor, taskset.
if [ "$with_bench_tools" = 1 ]; then
  apt-get install -y -qq --no-install-recommends python3-torch redis-server redis-tools \
    bpftrace util-linux >/dev/null
fi
echo "install-deps.sh: dependencies installed"
