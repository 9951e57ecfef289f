#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# check_no_fde.sh ELF FUNCTION: fails if any FDE in ELF's .eh_frame (or
# .debug_frame) covers a byte of FUNCTION, i.e. if the no-CFI region of the
# native-stack tests got described after all.
set -eu
elf=$1 fn=$2
sym=$(readelf -Ws "$elf" | awk -v fn="$fn" '$8 == fn && $4 == "FUNC" { print $2, $3; exit }')
[ -n "$sym" ] || { echo "check_no_fde: $fn not in $elf" >&2; exit 1; }
set -- $sym
start=$((0x$1)) end=$((0x$1 + $2))
[ "$2" -gt 0 ] || { echo "check_no_fde: $fn has no size" >&2; exit 1; }
fdes=0
for range in $(readelf --debug-dump=frames "$elf" | sed -n 's/.* FDE .*pc=\([0-9a-f]*\)\.\.\([0-9a-f]*\).*/\1:\2/p'); do
  fdes=$((fdes + 1))
  lo=$((0x${range%:*})) hi=$((0x${range#*:}))
  if [ "$lo" -lt "$end" ] && [ "$hi" -gt "$start" ]; then
    echo "check_no_fde: an FDE ($range) covers $fn ($1, $2 bytes) in $elf" >&2
    exit 1
  fi
done
[ "$fdes" -gt 0 ] || { echo "check_no_fde: no FDE at all in $elf: readelf output changed?" >&2; exit 1; }
