#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer harnesses in fuzz/ (clang, ASan+UBSan) into
# ${FUZZ_BUILD_DIR:-build-fuzz} and runs each for SECONDS (default 60).
# The seed corpora in fuzz/corpus/NAME are read, never written: new inputs
# go to a scratch corpus under the build dir, crashes to its artifacts/.
# Usage: scripts/fuzz.sh [SECONDS] [NAME...]     (NAME: event config elf proc_maps rss unwind http_request python)
# Long runs: scripts/fuzz.sh 3600
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(event config elf proc_maps rss unwind http_request python)
build=${FUZZ_BUILD_DIR:-build-fuzz}
cmake -S fuzz -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
status=0
for name in "${names[@]}"; do
  scratch="$build/corpus/$name"
  artifacts="$build/artifacts/$name/"
  mkdir -p "$scratch" "$artifacts"
  log="$build/fuzz_$name.log"
  echo "fuzz_$name: ${seconds}s"
  # -rss_limit_mb: a leak or a blow-up in the parser fails the run.
  if "$build/fuzz_$name" -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=10 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" \
      "$scratch" "fuzz/corpus/$name" >"$log" 2>&1; then
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | sed "s/^/  /"
  else
    status=1
    echo "fuzz_$name FAILED; the input is in $artifacts, the log in $log" >&2
    tail -40 "$log" >&2
  fi
done
exit $status
