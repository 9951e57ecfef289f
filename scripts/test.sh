#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: install dependencies, build, run every test
# (unit tests without root, integration tests with real BPF as root).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --with-test-tools
./scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 "$@"
