#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sanitizer runs of leakwatch's own code (issue #8), each in its own build
# tree (build-asan, build-tsan):
#   scripts/sanitize.sh asan         ASan+UBSan: every unit test, then the
#                                    integration tests that tolerate ASan's
#                                    slower timing (LW_ASAN_INTEGRATION below)
#   scripts/sanitize.sh asan --all   ASan+UBSan: every unit and integration test
#   scripts/sanitize.sh tsan         TSan: every unit test
# CI runs `asan` and `tsan` (ctest labels sanitize). Integration tests need root.
# -Werror is off here: GCC 12 reports false maybe-uninitialized warnings in
# its own <regex> and <functional> once sanitizers are on. -O1 -g1 (line
# tables only): stacks in reports keep file:line, and the builds take about
# half the time of -O2 -g, which matters for CI's budget.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: sanitize.sh asan|tsan [--all]}
all=${2:-}
# The integration tests of the short ASan run (docs/testing.md): `top` and
# the daemon on real probes, faults and full maps. Left out: the Prometheus
# test (minutes of wall time, no code the daemon tests do not run), and the
# allocator, CUDA and overhead suites (run in full by `asan --all`), to keep
# CI under its 60-minute budget.
LW_ASAN_INTEGRATION='LeakwatchTop.*:LeakwatchDaemon.*:LeakwatchFault.*:LeakwatchMapsFull.*'
case "$mode" in
  asan)
    build=${ASAN_BUILD_DIR:-build-asan}
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DLEAKWATCH_SANITIZE=address,undefined \
      -DLEAKWATCH_BUILD_BENCH=OFF -DLEAKWATCH_WERROR=OFF >/dev/null
    cmake --build "$build" -j"$(nproc)" --target lw_unit_tests lw_integration_tests leakwatch lw_targets >/dev/null
    # detect_leaks: leakwatch must not leak either. halt_on_error: one report fails the run.
    # tests/sanitizers/asan.supp: defects outside leakwatch, each explained there.
    export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:suppressions=$PWD/tests/sanitizers/asan.supp
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    "$build/tests/lw_unit_tests" --gtest_brief=1
    filter="$LW_ASAN_INTEGRATION"
    [ "$all" = "--all" ] && filter='*'
    if [ "$(id -u)" -ne 0 ]; then
      echo "sanitize.sh: integration tests skipped: not root (they load BPF)" >&2
    else
      "$build/tests/lw_integration_tests" --gtest_brief=1 --gtest_filter="$filter"
    fi
    ;;
  tsan)
    build=${TSAN_BUILD_DIR:-build-tsan}
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DLEAKWATCH_SANITIZE=thread \
      -DLEAKWATCH_BUILD_BENCH=OFF -DLEAKWATCH_WERROR=OFF >/dev/null
    cmake --build "$build" -j"$(nproc)" --target lw_unit_tests >/dev/null
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp
    "$build/tests/lw_unit_tests" --gtest_brief=1
    ;;
  *)
    echo "usage: sanitize.sh asan|tsan [--all]" >&2
    exit 2
    ;;
esac
