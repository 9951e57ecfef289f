#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer harnesses in fuzz/ (clang, ASan+UBSan) into
# ${FUZZ_BUILD_DIR:-build-fuzz} and runs each for SECONDS (default 60).
# The seed corpora in fuzz/corpus/NAME are read, never written: new inputs
# go to a scratch corpus under the build dir, crashes to its artifacts/.
# Usage: scripts/fuzz.sh [SECONDS] [NAME...]     (NAME: event config elf proc_maps rss unwind http_request python perf_map)
# Long runs: scripts/fuzz.sh 3600
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(event config elf proc_maps rss unwind http_request python perf_map)
build=${FUZZ_BUILD_DIR:-build-fuzz}
cmake -S fuzz -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
# The fuzzers run side by side, one per core (LW_FUZZ_JOBS, default nproc):
# each still gets its SECONDS of a whole core, and CI's 9 x 30 s take 2.5
# minutes on 2 cores instead of 4.5.
jobs=${LW_FUZZ_JOBS:-$(nproc)}
case "$jobs" in ''|*[!0-9]*|0) echo "fuzz.sh: LW_FUZZ_JOBS must be a positive number" >&2; exit 2 ;; esac
run_one() {
  local name=$1
  local scratch="$build/corpus/$name" artifacts="$build/artifacts/$name/"
  mkdir -p "$scratch" "$artifacts"
  # -rss_limit_mb: a leak or a blow-up in the parser fails the run.
  if "$build/fuzz_$name" -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=10 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" \
      "$scratch" "fuzz/corpus/$name" >"$build/fuzz_$name.log" 2>&1; then
    echo 0 >"$build/fuzz_$name.rc"
  else
    echo 1 >"$build/fuzz_$name.rc"
  fi
}
for name in "${names[@]}"; do
  rm -f "$build/fuzz_$name.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "fuzz_$name: ${seconds}s"
  run_one "$name" &
done
wait
status=0
for name in "${names[@]}"; do
  log="$build/fuzz_$name.log"
  if [ "$(cat "$build/fuzz_$name.rc" 2>/dev/null)" = 0 ]; then
    echo "fuzz_$name:"
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed "s/^/  /"
  else
    status=1
    echo "fuzz_$name FAILED; the input is in $build/artifacts/$name/, the log in $log" >&2
    tail -40 "$log" >&2
  fi
done
exit $status
