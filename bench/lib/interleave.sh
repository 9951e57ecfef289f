# SPDX-License-Identifier: Apache-2.0
# Shared by the bench drivers that interleave their rows (memalign_run.sh,
# new_run.sh, redis_run.sh, syscall_run.sh, torch_run.sh, unwind_depth.sh;
# their process helpers are in common.sh): results of interleaved
# repetitions (bare, A, B, bare, A, B, ...), one "LABEL VALUE" line per run
# in a file, summarized per configuration as the
# median over the repetitions, the ratio of medians against the first
# configuration (the bare row), and the spread (min..max over repetitions,
# and max/min - 1 as a percentage), so noise is shown next to every ratio.
#
#   summarize_runs FILE UNIT HIGHER_IS_BETTER LABEL...
#
# LABELs in table order; the first is the baseline. With HIGHER_IS_BETTER=1
# (throughput) the last column is the loss against the baseline,
# 1 - median/baseline; with 0 (time per call) it is the ratio.
# shellcheck shell=bash

summarize_runs() {
  local file=$1 unit=$2 higher=$3
  shift 3
  awk -v unit="$unit" -v higher="$higher" -v order="$*" '
    function median(arr, n,   i, j, t) {
      for (i = 2; i <= n; i++) {            # insertion sort, n is small
        t = arr[i]
        for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]
        arr[j + 1] = t
      }
      return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    { n[$1]++; v[$1, n[$1]] = $2 }
    END {
      nl = split(order, labels, " ")
      printf "%-28s %14s %9s %9s %14s %14s %8s %5s\n", "configuration", unit " (median)",
        "x bare", (higher ? "loss" : ""), "min", "max", "spread", "runs"
      for (k = 1; k <= nl; k++) {
        l = labels[k]
        if (!(l in n)) { printf "%-28s %14s\n", l, "no runs"; continue }
        delete a
        lo = hi = v[l, 1]
        for (i = 1; i <= n[l]; i++) {
          a[i] = v[l, i]
          if (a[i] < lo) lo = a[i]
          if (a[i] > hi) hi = a[i]
        }
        m = median(a, n[l])
        if (k == 1) base = m
        ratio = base > 0 ? m / base : 0
        extra = higher ? sprintf("%8.1f%%", (1 - ratio) * 100) : ""
        printf "%-28s %14.1f %9.3f %9s %14.1f %14.1f %7.1f%% %5d\n", l, m, ratio, extra,
          lo, hi, (lo > 0 ? (hi / lo - 1) * 100 : 0), n[l]
      }
    }' "$file"
}
