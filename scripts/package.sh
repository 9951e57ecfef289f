#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the Debian package ${BUILD_DIR:-build}/leakwatch_<version>_amd64.deb
# (binary, systemd unit, default config, dashboard, rules, docs) with CPack.
# Arguments go to scripts/build.sh (e.g. -DLEAKWATCH_BUILD_TESTS=OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/build.sh "$@"
(cd "$BUILD_DIR" && cpack -G DEB >/dev/null)
ls "$BUILD_DIR"/leakwatch_*.deb
