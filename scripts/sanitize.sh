#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Sanitizer runs of leakwatch's own code (issue #8), each in its own build
# tree (build-asan, build-tsan):
#   scripts/sanitize.sh asan         ASan+UBSan: every unit test, then the
#                                    integration tests that tolerate ASan's
#                                    slower timing (LW_ASAN_INTEGRATION below)
#   scripts/sanitize.sh asan --all   ASan+UBSan: every unit and integration test
#   scripts/sanitize.sh tsan         TSan: every unit test but two single-
#                                    threaded ones (at the end, below)
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
# The files holding those suites: the short run builds only them (with the
# harness), not the whole integration binary.
LW_ASAN_INTEGRATION_FILES='top_test.cc;daemon_test.cc;fault_test.cc'
# Unit tests in gtest shards (GTEST_TOTAL_SHARDS/GTEST_SHARD_INDEX), run
# side by side, one per core (LW_SANITIZE_JOBS, default nproc): under TSan
# they take 220 s of one core on 2 cores' CI. Four shards per core, taken
# in turn: gtest deals tests round-robin, and a few tests of 15-70 s under
# a sanitizer left one shard of two at 85-95 s beside 20-30 s. Each shard's
# output goes to a log, printed whole when the shard fails.
jobs=${LW_SANITIZE_JOBS:-$(nproc)}
case "$jobs" in ''|*[!0-9]*|0) echo "sanitize.sh: LW_SANITIZE_JOBS must be a positive number" >&2; exit 2 ;; esac
run_sharded() {
  local bin=$1 logs=$2 filter=${3:-*} i n failed=0 shards=$((4 * jobs))
  rm -rf "$logs"
  mkdir -p "$logs"
  for ((i = 0; i < shards; i++)); do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    (
      if GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$bin" --gtest_brief=1 --gtest_filter="$filter" \
          >"$logs/shard$i.log" 2>&1; then echo 0; else echo 1; fi >"$logs/shard$i.rc"
    ) &
  done
  wait
  local tests=0
  for ((i = 0; i < shards; i++)); do
    if [ "$(cat "$logs/shard$i.rc" 2>/dev/null)" = 0 ]; then
      n=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$logs/shard$i.log")
      tests=$((tests + ${n:-0}))
    else
      failed=1
      echo "sanitize.sh: shard $i of $shards of $bin FAILED; its log ($logs/shard$i.log):" >&2
      cat "$logs/shard$i.log" >&2
    fi
  done
  echo "sanitize.sh: $bin: $tests tests ran in $shards shards, $jobs at a time"
  return $failed
}
case "$mode" in
  asan)
    build=${ASAN_BUILD_DIR:-build-asan}
    files="$LW_ASAN_INTEGRATION_FILES"
    [ "$all" = "--all" ] && files=''
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DLEAKWATCH_SANITIZE=address,undefined \
      -DLEAKWATCH_BUILD_BENCH=OFF -DLEAKWATCH_WERROR=OFF "-DLEAKWATCH_INTEGRATION_TEST_FILES=$files" >/dev/null
    cmake --build "$build" -j"$(nproc)" --target lw_unit_tests lw_integration_tests leakwatch lw_targets >/dev/null
    # detect_leaks: leakwatch must not leak either. halt_on_error: one report fails the run.
    # tests/sanitizers/asan.supp: defects outside leakwatch, each explained there.
    export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1:suppressions=$PWD/tests/sanitizers/asan.supp
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    run_sharded "$build/tests/lw_unit_tests" "$build/unit-logs"
    filter="$LW_ASAN_INTEGRATION"
    [ "$all" = "--all" ] && filter='*'
    if [ "$(id -u)" -ne 0 ]; then
      echo "sanitize.sh: integration tests skipped: not root (they load BPF)" >&2
    else
      # Every suite of the short run is in the binary (a suite moved to a
      # file left out of the build would otherwise be skipped in silence).
      listed=$("$build/tests/lw_integration_tests" --gtest_list_tests --gtest_filter="$filter")
      if [ "$all" != "--all" ]; then
        IFS=: read -ra suites <<<"$LW_ASAN_INTEGRATION"
        for suite in "${suites[@]}"; do
          grep -qx "${suite%.\*}\." <<<"$listed" ||
            { echo "sanitize.sh: suite ${suite%.\*} is not in the ASan build (LW_ASAN_INTEGRATION_FILES)" >&2; exit 1; }
        done
      fi
      "$build/tests/lw_integration_tests" --gtest_brief=1 --gtest_filter="$filter"
    fi
    ;;
  tsan)
    build=${TSAN_BUILD_DIR:-build-tsan}
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DLEAKWATCH_SANITIZE=thread \
      -DLEAKWATCH_BUILD_BENCH=OFF -DLEAKWATCH_WERROR=OFF >/dev/null
    cmake --build "$build" -j"$(nproc)" --target lw_unit_tests >/dev/null
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp
    # Left out of the TSan run: single-threaded tests of arithmetic on big
    # inputs, in which TSan has no concurrent access to check and which it
    # slows 15-fold (137 s and 45 s of CI's 250). The ASan run has them.
    run_sharded "$build/tests/lw_unit_tests" "$build/unit-logs" \
      '-Sampling.ThinnedHeapStaysUnbiasedAcrossTwoSwitches:Pprof.HundredThousandSites'
    ;;
  *)
    echo "usage: sanitize.sh asan|tsan [--all]" >&2
    exit 2
    ;;
esac
