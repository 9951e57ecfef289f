#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: install, build, start a demo service that
# leaks, attach leakwatch to it while it runs, and show the leak with its
# call stack.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}

"$BUILD_DIR/demo/leaky_service" > /tmp/leakwatch-demo.log 2>&1 &
demo_pid=$!
trap 'kill $demo_pid 2>/dev/null || true' EXIT
sleep 1
echo
echo "== demo service running as pid $demo_pid (already started: no restart, no preload)"
echo "== leakwatch top -p $demo_pid --interval 3 --count 4"
"$BUILD_DIR/leakwatch" top -p "$demo_pid" --interval 3 --count 4 --top 4
echo
echo "The top site keeps growing: handle_request -> remember_session leaks 4 KiB per"
echo "request (see demo/leaky_service.cc). The churn in parse_request does not show:"
echo "its memory is freed. TREND says LEAK once the analysis has two minutes of data"
echo "(docs/analysis.md); run: $BUILD_DIR/leakwatch top -p <pid> to watch it turn."
