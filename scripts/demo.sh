#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: install, build, start a demo service that
# leaks, attach leakwatch to it while it runs, and show the leak with its
# call stack, up to the LEAK verdict.
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
echo "== leakwatch top -p $demo_pid --interval 3 --top 3 --analysis-window 120"
echo "   --analysis-window 120 is a demo setting: verdicts after 24 s of data instead of"
echo "   the default 2 minutes (window 10 minutes), quicker and less certain."
echo "   The view stops after the first table that says LEAK (at most 60 s)."
started=$SECONDS
# awk ends the view one table after LEAK: leakwatch sees its reader go,
# detaches every probe and exits.
"$BUILD_DIR/leakwatch" top -p "$demo_pid" --interval 3 --top 3 --analysis-window 120 --count 20 |
  awk '{ print; fflush() } / LEAK /{ leak = 1 } leak && /^$/ { exit }'
echo
echo "== $((SECONDS - started)) s after starting leakwatch (attaching included)."
echo "The top site is handle_request -> remember_session: it keeps a 4 KiB session per"
echo "request and never frees it (demo/leaky_service.cc). TREND says 'wait ...' until"
echo "the analysis has enough samples, then LEAK: its live bytes grow steadily and"
echo "what it adds stays. The churn in parse_request does not show: its memory is freed."
echo "Without --analysis-window the verdict takes two minutes (docs/analysis.md):"
echo "  $BUILD_DIR/leakwatch top -p <pid>"
